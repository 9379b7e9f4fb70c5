# issue 25, session 9, call 2: the HF decode call timed on the host with recording switched
# inside the generates every 8 calls (traced, bare boundary, bare without the replay count),
# the HF generate A/B and verify extend at the defaults on the flush's batched system calls.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/cs --only hf --hf-rounds 81 --kinds step,stepbare,stepnorep > $R/cs.log 2>&1; tail -2 $R/cs.log; echo "t=$(( $(date +%s)-T0 ))"
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced > $R/cg.log 2>&1; tail -1 $R/cg.log; echo "t=$(( $(date +%s)-T0 ))"
python3 bench/gpu_collector.py --out $R/gc --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,ab8noflush,abpy,sampling,abprof > $R/gc.log 2>&1; tail -2 $R/gc.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs $R/gc/runs; mv $R/cs/runs.tar.gz $R/cs_runs.tar.gz 2>/dev/null; rm -rf $R/cs/runs; tar czf $OUT/r.tgz -C $OUT r
