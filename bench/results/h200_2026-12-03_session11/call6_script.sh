# issue 25, session 11, call 6: verify extend's A/B with each call's inside timed (the recorder's
# effect on the program's own work: draft and draft_extend launch only, verify waits once)
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/gpu_collector.py --out $R/gcx --budget-s 150 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light\|diff_step" $R/gcx.log | tail -3 | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
python3 -c "
import json; d=json.load(open('$R/gcx/gpu_collector.json'))['ab8']['extend']
print('p50', d['step_ms_p50'])
for k, v in d.items():
    if k.startswith(('diff_inside', 'diff_boundary')) and v: print(k, {a: round(b, 2) for a, b in v.items()})"
tar czf $OUT/r.tgz -C $OUT r
