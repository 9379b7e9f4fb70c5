# issue 25, session 8, call 2 (05f8e33: the capture query counted, the hot attributes in a C struct):
# sync_exit (query / counted / noquery), HF static-cache (161), the demo's baseline and verify graph
# (1040 cycles) and verify extend (2080) A/B at the defaults, HF assisted (121). Packed in r.tgz.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/sync_exit.py --kinds after_sync,after_sync_counted,after_sync_noquery,after_sync_counted,after_sync,after_sync_noquery --steps 320 --out $R/sync_exit.json > /dev/null 2>$R/sync_exit.err; tail -2 $R/sync_exit.err; python3 -c "
import json; d=json.load(open('$R/sync_exit.json'))
for k,v in d.items(): print(k, round(v['diff_us'],2), [round(v['lo_us'],2), round(v['hi_us'],2)])"; echo "t=$(( $(date +%s)-T0 ))"
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced > $R/cg.log 2>&1; tail -1 $R/cg.log; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gc --budget-s 200 --ab-cycles 1040 --paths baseline,graph --skip micro,ab,abtorch,abnoev,abnoflush,abbare,abpy,sampling,abprof > $R/gc.log 2>&1; grep -h "light" $R/gc.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light" $R/gcx.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/cg3 --only hf --hf-rounds 121 --kinds assisted > $R/cg3.log 2>&1; tail -1 $R/cg3.log; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
