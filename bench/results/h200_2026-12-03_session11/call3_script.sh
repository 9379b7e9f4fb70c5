# issue 25, session 11, call 3: what a flush takes from a thread busy in Python on the H200 host
source .wt/dev1.sh || exit 9
R=$OUT/r; mkdir -p $R
nproc; uptime
for rows in 2000 200 2000; do python3 bench/flush_gil.py --rows $rows --flushes 30 --json > $R/flush_gil_$rows.json; python3 -c "
import json; d=json.load(open('$R/flush_gil_$rows.json')); print($rows, {k: round(v,1) for k,v in d['parts'].items()}, {k: v if isinstance(v, list) else round(v,1) for k,v in d['stall'].items()})"; done
python3 -c "
import time
def loop(dur_s, gap_us=20):
    gaps=0; last=time.perf_counter_ns(); end=last+dur_s*1e9
    while True:
        now=time.perf_counter_ns()
        if now-last>gap_us*1e3: gaps+=now-last
        last=now
        if now>end: break
    return gaps/1e3
print('control, no flush, 40 ms loops: lost us', [round(loop(0.04)) for _ in range(10)])"
tar czf $OUT/r.tgz -C $OUT r
