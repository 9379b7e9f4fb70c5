# issue 25, session 10, call 5 (same code as call 4): the demo's verify extend A/B twice on one machine start (its spread)
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
for i in 1 2; do
python3 bench/gpu_collector.py --out $R/gcx$i --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx$i.log 2>&1; grep -h "light" $R/gcx$i.log | tail -1 | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
done
