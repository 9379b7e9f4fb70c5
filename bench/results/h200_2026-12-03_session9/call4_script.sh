# issue 25, session 9, call 4: where the recorded compiled call's ~10 us go: the HF decode call
# timed with recording switched every 8 calls, traced / bare (Python calls compiled) / bare called
# from C / recorded by the Python enter and exit, one machine start.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/cs --only hf --hf-rounds 81 --kinds step,stepbare,stepbarec,stepgeneric > $R/cs.log 2>&1; tail -1 $R/cs.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cs/runs; tar czf $OUT/r.tgz -C $OUT r
