# issue 25, session 10, call 1 (main at 0468c24+: fewer cache lines a cold recorded call touches,
# the boundary's marker in C): the HF decode call timed with recording switched every 8 calls
# (traced, bare), a recorded call after a device wait, the demo's A/B at the defaults (extend
# 2,080 cycles; baseline and graph 1,040), the HF generate A/B.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/cs --only hf --hf-rounds 81 --kinds step,stepbare > $R/cs.log 2>&1; tail -1 $R/cs.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cs/runs; tar czf $OUT/r.tgz -C $OUT r
python3 bench/sync_exit.py --kinds after_sync_counted,after_sync_counted --steps 320 --out $R/sync_exit.json > /dev/null 2>$R/sync_exit.err; python3 -c "
import json; d=json.load(open('$R/sync_exit.json'))
for k,v in d.items(): print(k, round(v['diff_us'],2), [round(v['lo_us'],2), round(v['hi_us'],2)])"; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light" $R/gcx.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
