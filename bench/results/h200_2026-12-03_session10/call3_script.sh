# issue 25, session 10, call 3 (same code): the demo's verify extend A/B again (2,080 cycles), HF assisted generation A/B
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light" $R/gcx.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/ca --only hf --hf-rounds 121 --kinds assisted > $R/ca.log 2>&1; tail -1 $R/ca.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/ca/runs; tar czf $OUT/r.tgz -C $OUT r
