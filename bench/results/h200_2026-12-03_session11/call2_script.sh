# issue 25, session 11, call 2: HF assisted's crossings with its argument rules read in C
# (assistedx), its generate A/B (assisted), verify extend's crossings on a second machine start
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/cs --only hf --hf-rounds 61 --kinds assistedx > $R/cs.log 2>&1; tail -1 $R/cs.log; python3 -c "
import json,sys; sys.path.insert(0,'bench'); import compiled_report as c
for s in json.load(open('$R/cs/steps.json')):
    r = s.get('result')
    x = c.hf_crossings(r) if r else None
    print(s['name'], s['rc'], x and {k: (v if not isinstance(v, dict) or 'median_us' not in v else [round(v['median_us'],2), round(v['median_lo_us'],2), round(v['median_hi_us'],2), round(v['mean_us'],2), round(v['off_median_us'],2)]) for k, v in x.items()})"; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cs/runs; tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/ca --only hf --hf-rounds 121 --kinds assisted > $R/ca.log 2>&1; tail -1 $R/ca.log; python3 -c "
import json,sys; sys.path.insert(0,'bench'); import compiled_report as c
for s in json.load(open('$R/ca/steps.json')):
    r = s.get('result')
    print(s['name'], s['rc'], json.dumps(c.hf_ab(r) if r else None)[:600])"; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/ca/runs; tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light\|diff_step" $R/gcx.log | tail -3 | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
