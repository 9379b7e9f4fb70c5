# issue 25, session 10, call 2: the HF generate A/B and the demo's baseline and graph A/B (same code as call 1)
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced > $R/cg.log 2>&1; tail -1 $R/cg.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs $R/cs/runs; tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gc --budget-s 200 --ab-cycles 1040 --paths baseline,graph --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gc.log 2>&1; grep -h "light" $R/gc.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs $R/cs/runs; tar czf $OUT/r.tgz -C $OUT r
