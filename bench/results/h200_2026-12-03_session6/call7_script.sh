# counts at the defaults: HF static-cache (reduce-overhead) calls recorded / replays flagged against the program's own; demo --compile light and full
source .wt/dev1.sh  # the set-up of device_script.sh || exit 9
python3 bench/compiled_gpu.py --out $OUT/cg --hf-rounds 21 --kinds traced > $OUT/cg.log 2>&1; tail -3 $OUT/cg.log
python3 bench/compiled_report.py $OUT/cg > $OUT/report.json 2> $OUT/report.err; tail -5 $OUT/report.err
python3 - $OUT/report.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["hf"]["runs"]: print("HF", json.dumps(r)[:1500])
for r in d["demo"]: print("DEMO", json.dumps(r)[:1500])
PY
cd $OUT && rm -rf cg/runs && tar czf results.tgz cg && rm -rf cg && ls -la
