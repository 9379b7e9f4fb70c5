# issue 25, session 8, call 1 (1268f3d): the capture query left out where no capture nor CUDA event
# can be; sync_exit with/without it, HF static-cache (defaults) with its recorded counts, HF
# assisted, the demo's baseline and verify graph A/B at the defaults. Results packed in r.tgz.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/sync_exit.py --kinds after_sync,after_sync_counted,after_sync_noquery,after_sync,after_sync_counted,after_sync_noquery --steps 320 --out $R/sync_exit.json > /dev/null 2>$R/sync_exit.err; tail -2 $R/sync_exit.err; cut -c1-1800 $R/sync_exit.json; echo "t=$(( $(date +%s)-T0 ))"
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced > $R/cg.log 2>&1; tail -2 $R/cg.log
python3 -m tracekit merge $R/cg/runs/hf-traced-0 > $R/cg_merge.log 2>&1; tail -3 $R/cg_merge.log
python3 -m tracekit summary --json $R/cg/runs/hf-traced-0 > $R/cg_summary.json 2>$R/cg_summary.err; head -c 600 $R/cg_summary.json; echo; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs
tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/cg3 --only hf --hf-rounds 81 --kinds assisted > $R/cg3.log 2>&1; tail -2 $R/cg3.log; rm -rf $R/cg3/runs; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gc --budget-s 200 --ab-cycles 1040 --paths baseline,graph --skip micro,ab,abtorch,abnoev,abnoflush,abbare,abpy,sampling,abprof > $R/gc.log 2>&1; grep -h "light" $R/gc.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/gc/runs $R/gc/*/raw 2>/dev/null
tar czf $OUT/r.tgz -C $OUT r
