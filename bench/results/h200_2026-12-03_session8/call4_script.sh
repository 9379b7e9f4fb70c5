# issue 25, session 8, call 4: the HF static-cache generate traced at the defaults and with the
# compiled boundary's recorded call replaced by a plain call (bare), 161 rounds each. r.tgz.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced,bare > $R/cg.log 2>&1; tail -2 $R/cg.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs; tar czf $OUT/r.tgz -C $OUT r
