import os, sys, tempfile, time, types, statistics
from pathlib import Path
sys.path[:0] = [os.environ.get("ROOT", "/work/main")]
import numpy as np
import tracekit; print(tracekit.__path__, file=sys.stderr)
import torch  # noqa
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.wrappers import install

mode = sys.argv[1]; calls = int(sys.argv[2]) if len(sys.argv) > 2 else 400
rec = Recorder(RecorderConfig(raw_dir=Path(tempfile.mkdtemp()), flush_records=10**8, flush_seconds=1e6, gpu_sample=10**6))
mod = types.ModuleType("tk_cold_time")
class Decoder:
    def step(self): return 0
mod.Decoder = Decoder
install(mod, Site(target=Target.parse(f"{mod.__name__}:Decoder.step"), phase="decode", cycle=True), rec)
dec = Decoder()
for _ in range(3): dec.step()
big = np.ones((256 << 20) // 8)   # 256 MB
pages = big[:: 4096 // 8]
lines = big[: (64 << 20) // 8]
def thrash():
    if mode == "cache": lines[::8] += 1.0
    elif mode == "tlb": pages[:] += 1.0
    elif mode == "both": lines[::8] += 1.0; pages[:] += 1.0
    elif mode == "sleep": time.sleep(0.002)
pc = time.perf_counter_ns
res = {True: [], False: []}
for blk in range(calls // 4):
    for on in ((True, False, False, True) if blk % 2 else (False, True, True, False)):
        rec.set_recording(on)
        thrash()
        t0 = pc(); dec.step(); t1 = pc()
        res[on].append(t1 - t0)
# empty unwrapped call cold
class E:
    def step(self): return 0
e = E(); emp = []
for _ in range(calls // 2):
    thrash(); t0 = pc(); e.step(); t1 = pc(); emp.append(t1 - t0)
med = lambda v: statistics.median(v) / 1000
print(f"{mode}: on {med(res[True]):.2f} off {med(res[False]):.2f} diff {med(res[True]) - med(res[False]):.2f} µs; empty call {med(emp):.2f}; rows {rec.records}")
rec.close()
