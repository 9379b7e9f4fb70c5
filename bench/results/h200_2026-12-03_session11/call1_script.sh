# issue 25, session 11, call 1: the demo's A/B with each step's top-level calls' crossings timed
# (diff_step_boundary_ms: extend 2,080 cycles; baseline and graph 1,040), HF assisted with its
# wrapped calls' crossings timed (assistedx, --crossings 8)
source .wt/dev1.sh || exit 9
python3 -c "import sys; print(sys.version)"
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light\|diff_step" $R/gcx.log | tail -4 | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/cs --only hf --hf-rounds 61 --kinds assistedx > $R/cs.log 2>&1; tail -1 $R/cs.log; python3 -c "
import json,sys; sys.path.insert(0,'bench'); import compiled_report as c
for s in json.load(open('$R/cs/steps.json')):
    r = s.get('result')
    print(s['name'], s['rc'], json.dumps(c.hf_crossings(r) if r else s.get('stderr_tail','')[-500:])[:1500])"; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cs/runs; tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gcb --budget-s 200 --ab-cycles 1040 --paths baseline,graph --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcb.log 2>&1; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
