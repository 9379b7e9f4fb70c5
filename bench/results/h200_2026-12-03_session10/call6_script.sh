# issue 25, session 10, call 6: verify extend A/B with the nested all_reduce calls timed from their caller (diff_step_comm_ms)
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/gpu_collector.py --out $R/gcx --budget-s 150 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light" $R/gcx.log | tail -1 | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
python3 -c "
import json; d=json.load(open('$R/gcx/gpu_collector.json'))['ab8']['extend']
print('comm', d.get('comm_calls'), {k: round(v,2) for k,v in (d.get('diff_step_comm_ms') or {}).items()})
print('wall', {k: round(v,1) for k,v in (d.get('diff_step_ms') or {}).items()})"
tar czf $OUT/r.tgz -C $OUT r
