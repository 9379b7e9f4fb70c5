# issue 25, session 11, call 5 (the final code: a 4,096-row flush batch): the flush at 4,096 rows,
# verify extend's and baseline/graph's A/B with their crossings and flush counts
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/flush_gil.py --rows 4096 --flushes 30 --json > $R/flush_gil_4096.json; python3 -c "
import json; d=json.load(open('$R/flush_gil_4096.json'))
for k, v in d.items(): print(4096, k, {a: round(b,1) for a,b in v.items() if not isinstance(b, list)})"
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light\|diff_step" $R/gcx.log | tail -3 | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gcb --budget-s 200 --ab-cycles 1040 --paths baseline,graph --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcb.log 2>&1; grep -h "light\|diff_step" $R/gcb.log | tail -6 | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
python3 -c "
import json
for f in ('$R/gcx/gpu_collector.json', '$R/gcb/gpu_collector.json'):
    for r in json.load(open(f))['runs']:
        for p in r['processes']:
            if p['records']: print(r['name'], r['cycles'], p['records'], p['flushes'], p['flush_cost'])"
tar czf $OUT/r.tgz -C $OUT r
