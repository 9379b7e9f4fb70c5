# issue 25, session 7, call 4 (9ae72db + sync_exit --kinds): a recorded call right after a device wait,
# with and without the capture query; the HF static-cache generate at the defaults (161 rounds) and
# assisted generation (81 rounds)
source .wt/dev1.sh || exit 9
python3 bench/sync_exit.py --kinds after_sync,after_sync_noquery,host,host_noquery,after_sync,after_sync_noquery --steps 320 --out $OUT/sync_exit.json > /dev/null 2>$OUT/sync_exit.err; tail -2 $OUT/sync_exit.err; cut -c1-2000 $OUT/sync_exit.json
python3 bench/compiled_gpu.py --out $OUT/cg --only hf --hf-rounds 161 --kinds traced > $OUT/cg.log 2>&1; tail -2 $OUT/cg.log
python3 bench/compiled_gpu.py --out $OUT/cg3 --only hf --hf-rounds 81 --kinds assisted > $OUT/cg3.log 2>&1; tail -2 $OUT/cg3.log
cd $OUT && rm -rf cg*/runs cg*/runs.tar.gz && ls cg cg3
cd - > /dev/null
python3 bench/gpu_collector.py --out $OUT/gcx --budget-s 130 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,abpy,sampling,abprof > $OUT/gcx.log 2>&1
grep -h "light" $OUT/gcx.log | cut -c1-250
