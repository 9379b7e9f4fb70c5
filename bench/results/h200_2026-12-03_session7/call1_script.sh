# issue 25, session 7, call 1: where the host time goes on the H200 machine (bench/host_costs.py)
setup() {
if [ ! -f /tmp/site/.done ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && touch /tmp/site/.done || return 1
fi
export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . >/tmp/pipe.log 2>&1 || { tail -20 /tmp/pipe.log; return 1; }
python3 -c "import tracekit.collectors.recording._native as n, torch; print('native ok', n.driver_error(), torch.__version__, torch.cuda.get_device_name())" || return 1
}
setup || exit 9
nproc; cat /proc/cpuinfo | grep "model name" | head -1
for i in 1 2; do python3 bench/host_costs.py --out $OUT/host_costs_$i.json > /dev/null 2>$OUT/host_costs_$i.err; done
python3 bench/host_costs.py --no-torch --out $OUT/host_costs_notorch.json > /dev/null 2>$OUT/host_costs_nt.err
python3 bench/host_costs.py --device cpu --out $OUT/host_costs_cpu.json > /dev/null 2>$OUT/host_costs_cpu.err
cat $OUT/*.json; tail -3 $OUT/*.err
