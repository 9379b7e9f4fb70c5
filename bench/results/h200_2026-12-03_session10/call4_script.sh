# issue 25, session 10, call 4 (main with the native path for rules that read an argument): HF
# assisted generation A/B, the HF decode call per call (traced), the HF generate A/B, verify extend A/B.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/ca --only hf --hf-rounds 121 --kinds assisted > $R/ca.log 2>&1; tail -1 $R/ca.log; echo "t=$(( $(date +%s)-T0 ))"
mkdir -p $R/cax; tar xzf $R/ca/runs.tar.gz -C $R/cax 2>/dev/null; grep -h '"hot_path"\|"records"' $R/cax/runs/*/raw/pid-*/process.json; rm -rf $R/cax $R/ca/runs.tar.gz; tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/cs --only hf --hf-rounds 81 --kinds step > $R/cs.log 2>&1; tail -1 $R/cs.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cs/runs $R/cs/runs.tar.gz; tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced > $R/cg.log 2>&1; tail -1 $R/cg.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs $R/cg/runs.tar.gz; tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light" $R/gcx.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
