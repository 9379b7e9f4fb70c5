# issue 25, session 7, call 3 (after native cycle targets, 9ae72db): host_costs, sync_exit, the demo's
# in-process A/B at the defaults (ab8) on 4 paths and without events or flush (abbare) on baseline and
# graph, 1040 cycles (31 groups)
source .wt/dev1.sh || exit 9
python3 bench/host_costs.py --out $OUT/host_costs.json > /dev/null 2>$OUT/host_costs.err
python3 bench/sync_exit.py --out $OUT/sync_exit.json > /dev/null 2>$OUT/sync_exit.err; tail -2 $OUT/sync_exit.err
python3 bench/gpu_collector.py --out $OUT/gc1 --budget-s 270 --ab-cycles 1040 --paths baseline,graph,extend,compiled --skip micro,ab,abtorch,abnoev,abnoflush,abbare,abpy,sampling,abprof > $OUT/gc1.log 2>&1
python3 bench/gpu_collector.py --out $OUT/gc2 --budget-s 80 --ab-cycles 1040 --paths baseline,graph --skip micro,ab,abtorch,abnoev,abnoflush,ab8,abpy,sampling,abprof > $OUT/gc2.log 2>&1
grep -h "light" $OUT/gc1.log $OUT/gc2.log | cut -c1-250
cut -c1-1200 $OUT/sync_exit.json; cut -c1-900 $OUT/host_costs.json
