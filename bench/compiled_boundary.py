"""What one call through tracekit's compiled boundary costs on the CPU (issue 22 / 25).

A `torch.compile`d module whose `forward` is a mapped phase (`decode`, cycles start with it),
as transformers' static-cache generate is recorded, but with a trivial body (`x + 1` on 4
floats, backend `eager`), so that the call's fixed costs are what is measured: Dynamo's own
frame and guards, tracekit's boundary wrapper, the native `PhaseCall`, the flush. Three
programs, each a fresh process, `--runs` times alternated:

- `alone`: no tracekit;
- `traced`: under `tracekit launch` (defaults: the flush thread writes every 1,000 rows);
- `traced, no flush`: the same with the recorder's batch raised past the run (`--no-flush`, a
  bench-only knob on a private attribute), so the flush's share shows.

In each process, blocks of `--calls` calls alternate recording on and off in ABBA order (alone:
the same blocks, nothing switched); a block's figure is this thread's CPU time a call (a
loaded machine's lost time slices do not inflate it); medians over blocks. The figure that
counts is on minus off in the same process.

    python bench/compiled_boundary.py [--runs 3] [--blocks 40] [--calls 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

MODULE = """
import torch


class Net(torch.nn.Module):
    def forward(self, x):
        return x + 1
"""
PHASES = """
[adapter]
name = "boundary-bench"

[[phase]]
name = "decode"
targets = ["tkbound:Net.forward"]

[cycle]
starts_with = "decode"
"""
PROGRAM = """
import json, os, statistics, sys, time
import torch
torch.set_num_threads(1)
import tkbound
runtime = sys.modules.get("tracekit.collectors.runtime")
rt = runtime.current() if runtime is not None else None
rec = rt.recorder if rt is not None else None
if rec is not None and os.environ.get("BOUNDARY_NO_FLUSH"):
    rec._flush_n, rec._flush_bytes = 10**8, 10**12  # bench-only: no flush during the blocks
blocks, calls = int(sys.argv[1]), int(sys.argv[2])
net = torch.compile(tkbound.Net(), backend="eager")
x = torch.zeros(4)
for _ in range(500):
    net(x)
res = {True: [], False: []}
for b in range(blocks):
    on = b % 4 in (0, 3)
    if rec is not None:
        rec.set_recording(on)
    t0 = time.thread_time_ns()
    for _ in range(calls):
        net(x)
    res[on].append((time.thread_time_ns() - t0) / calls / 1e3)
print(json.dumps({"on_us": statistics.median(res[True][1:]),
                  "off_us": statistics.median(res[False])}))
"""


def _one(kind: str, work: Path, blocks: int, calls: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(work)}
    prog = [sys.executable, str(work / "prog.py"), str(blocks), str(calls)]
    if kind != "alone":
        launch = [sys.executable, "-m", "tracekit", "launch", "--phases", str(work / "p.toml")]
        launch += ["--no-merge", "--no-nvml", "--out", str(work / "runs"), "--"]
        prog = launch + prog
        if kind == "traced, no flush":
            env["BOUNDARY_NO_FLUSH"] = "1"
    out = subprocess.run(prog, env=env, capture_output=True, text=True, check=True, cwd=work)
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("{"))
    row: dict[str, Any] = json.loads(line)
    row["kind"] = kind
    row["on_minus_off_us"] = row["on_us"] - row["off_us"]
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--blocks", type=int, default=40)
    p.add_argument("--calls", type=int, default=2000)
    args = p.parse_args(argv)
    kinds = ["alone", "traced", "traced, no flush"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "tkbound.py").write_text(MODULE)
        (work / "p.toml").write_text(PHASES)
        (work / "prog.py").write_text(PROGRAM)
        for i in range(args.runs):
            for kind in kinds if i % 2 == 0 else kinds[::-1]:
                rows.append(_one(kind, work, args.blocks, args.calls))
                print(json.dumps(rows[-1]), flush=True)
    summary = {
        kind: {
            key: statistics.median(r[key] for r in rows if r["kind"] == kind)
            for key in ("on_us", "off_us", "on_minus_off_us")
        }
        for kind in kinds
    }
    print(json.dumps({"median_of_runs": summary, "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
