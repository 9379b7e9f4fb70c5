"""HF-shaped compiled boundary call, cold (4 MB written between calls). argv: on|off [kind]
kind: boundary (compiled.py's call) | native (PhaseCall alone)"""
import os, sys, tempfile, types
from itertools import starmap
from pathlib import Path
sys.path[:0] = [os.environ.get("ROOT", "/work/main")]
import numpy as np
import torch  # noqa
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors import compiled as cm

on = sys.argv[1] == "on"; kind = sys.argv[2] if len(sys.argv) > 2 else "boundary"
calls = int(os.environ.get("N", "200"))
buf = np.ones(4 << 20 >> 3)
rec = Recorder(RecorderConfig(raw_dir=Path(tempfile.mkdtemp()), flush_records=10**8, flush_seconds=1e6, gpu_sample=8))
mod = types.ModuleType("tk_cold_b")
def forward(x, y=None): return x
mod.forward = forward
site = Site(target=Target.parse("tk_cold_b:forward"), phase="decode", starts_cycle=True)
b = cm.Boundary("tk_cold_b:forward", None); b.site = site
call = cm._boundary_call(forward, b, rec)
for _ in range(20): call(1, y=2)
rec.set_recording(on)
one = ((1,),)
for _ in range(calls):
    buf[::8] += 1.0
    next(starmap(call, one))  # --toggle-collect=starmap_next: the call and nothing else
print(f"{calls} calls on={on}: {rec.records} rows", file=sys.stderr)
rec.close()
