# session 6 device call: HF assisted generation at the defaults (one cycle in 8, C bookkeeping, flush fix) and the static-cache generate again
# set-up (was .wt/dev1.sh; .whl/ held the wheels of msgspec, nvtx and perfetto for cp312)
setup() {
# device set-up: the carried wheels into /tmp/site (once), tracekit installed in place (builds the C extensions)
if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.done || return 1
fi
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/pipe.log 2>&1 || { tail -20 /tmp/pipe.log; return 1; }
python3 -c "import tracekit.collectors.recording._native as n, torch; print('native ok', n.driver_error(), torch.__version__, torch.cuda.get_device_name())" || return 1
}
setup || exit 9
T0=$(date +%s)
python3 bench/compiled_gpu.py --out $OUT/cg --only hf --hf-rounds 81 --kinds traced,assisted,assisted1 > $OUT/cg.log 2>&1; tail -4 $OUT/cg.log
echo "hf done at $(( $(date +%s) - T0 )) s"
cd $OUT && rm -rf cg/runs cg/runs.tar.gz && tar czf results.tgz cg *.log && rm -rf cg && ls -la
