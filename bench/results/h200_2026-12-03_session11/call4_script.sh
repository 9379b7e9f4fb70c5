# issue 25, session 11, call 4: what a flush takes from a thread busy in Python or in torch operations (H200 host)
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R
for rows in 1000 2000 8000; do python3 bench/flush_gil.py --rows $rows --flushes 30 --json > $R/flush_gil_$rows.json; python3 -c "
import json; d=json.load(open('$R/flush_gil_$rows.json'))
for k, v in d.items(): print($rows, k, {a: round(b,1) for a,b in v.items() if not isinstance(b, list)})"; done
tar czf $OUT/r.tgz -C $OUT r
