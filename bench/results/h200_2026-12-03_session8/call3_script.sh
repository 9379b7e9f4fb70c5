# issue 25, session 8, call 3 (main after 05f8e33 + replay count / boundary on _hot): where the HF
# static-cache generate's cost is (traced, no CUDA event after the first cycle, the program's thread
# profiled by recording state), and verify extend with and without CUDA events. Packed in r.tgz.
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R; T0=$(date +%s)
python3 bench/compiled_gpu.py --out $R/cg --only hf --hf-rounds 161 --kinds traced > $R/cg.log 2>&1; tail -1 $R/cg.log; echo "t=$(( $(date +%s)-T0 ))"
python3 bench/compiled_gpu.py --out $R/cgn --only hf --hf-rounds 121 --kinds noevents > $R/cgn.log 2>&1; tail -1 $R/cgn.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cg/runs $R/cgn/runs; tar czf $OUT/r.tgz -C $OUT r
python3 bench/compiled_gpu.py --out $R/cgp --only hf --hf-rounds 121 --kinds profile > $R/cgp.log 2>&1; tail -1 $R/cgp.log; echo "t=$(( $(date +%s)-T0 ))"
rm -rf $R/cgp/runs; tar czf $OUT/r.tgz -C $OUT r
python3 bench/gpu_collector.py --out $R/gcx --budget-s 200 --ab-cycles 2080 --paths extend --skip micro,ab,abtorch,abnoflush,abbare,abpy,sampling,abprof > $R/gcx.log 2>&1; grep -h "light" $R/gcx.log | cut -c1-250; echo "t=$(( $(date +%s)-T0 ))"
tar czf $OUT/r.tgz -C $OUT r
