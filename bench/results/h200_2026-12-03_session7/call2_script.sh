# issue 25, session 7, call 2: the demo's in-process A/B at the defaults (ab8) on 4 paths, and
# without events (abnoev) and without events or flush (abbare) on baseline and graph, 1040
# cycles (31 groups); per-step thread CPU and GC beside the wall time; host_costs after the change
source .wt/dev1.sh || exit 9
python3 bench/host_costs.py --out $OUT/host_costs.json > /dev/null 2>$OUT/host_costs.err
python3 bench/gpu_collector.py --out $OUT/gc1 --budget-s 280 --ab-cycles 1040 --paths baseline,graph,extend,compiled --skip micro,ab,abtorch,abnoev,abnoflush,abbare,abpy,sampling,abprof > $OUT/gc1.log 2>&1
python3 bench/gpu_collector.py --out $OUT/gc2 --budget-s 200 --ab-cycles 1040 --paths baseline,graph --skip micro,ab,abtorch,abnoflush,ab8,abpy,sampling,abprof > $OUT/gc2.log 2>&1
grep -h "ab8\|abnoev\|abbare" $OUT/gc1.log $OUT/gc2.log | grep "light" | cut -c1-250
cat $OUT/host_costs.json | cut -c1-1500
