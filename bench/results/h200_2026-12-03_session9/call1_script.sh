# issue 25, session 9, call 1: is the flush the cost? verify extend at the defaults and with no
# flush while the cycles run (2,080 cycles each); the HF static-cache generate traced and noflush.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/gpu_collector.py --out $R/gc --budget-s 330 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoev,abnoflush,abbare,abpy,sampling,abprof > $R/gc.log 2>&1; tail -4 $R/gc.log; echo "t=$(( $(date +%s)-T0 ))"
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced,noflush > $R/cg.log 2>&1; tail -2 $R/cg.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs $R/gc/runs; tar czf $OUT/r.tgz -C $OUT r
