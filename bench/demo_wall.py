"""Wall time of the default `tracekit demo` (the issue's goal: at most 90 s on 2 cores).

Runs `tracekit demo` with its defaults (8 CPU ranks, full mode) `--repeat` times into a scratch
directory, and the bare server (`python -m tracekit.demo`, same cycles, no tracekit) as the
reference; prints median wall seconds, the server's own start-up and step figures, and the load
average, since the development machine is shared. Usage: `python bench/demo_wall.py [--repeat 3]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--extra", nargs=argparse.REMAINDER, default=[], help="more `tracekit demo` options"
    )
    a = ap.parse_args()
    py = sys.executable
    demo_walls, bare_walls, results = [], [], []
    with tempfile.TemporaryDirectory(prefix="demo-wall-") as tmp:
        for i in range(a.repeat):
            load = os.getloadavg()[0]
            wall = timed([py, "-m", "tracekit", "demo", "--out", tmp, "--name", f"r{i}", *a.extra])
            result = json.loads((Path(tmp) / f"r{i}" / "demo_result.json").read_text())
            demo_walls.append(wall)
            results.append(result)
            bare_json = Path(tmp) / f"bare{i}.json"
            bare = timed([py, "-m", "tracekit.demo", "-q", "--cycles", str(result["cycles"]),
                          "--result", str(bare_json)])  # fmt: skip
            bare_walls.append(bare)
            b = json.loads(bare_json.read_text())
            print(
                f"run {i}: tracekit demo {wall:5.1f} s (server start-up {result['startup_s']:.1f} s, "
                f"step p50 {result['step_ms_p50']:.0f} ms) | bare server {bare:5.1f} s "
                f"(start-up {b['startup_s']:.1f} s, step p50 {b['step_ms_p50']:.0f} ms) | "
                f"load {load:.1f}",
                flush=True,
            )
    r = results[0]
    print(
        f"\ntracekit demo defaults ({r['ranks']} ranks, {r['device']}, {r['cycles']} cycles, "
        f"accept_len_mean {r['accept_len_mean']:.2f}): median wall {statistics.median(demo_walls):.1f} s "
        f"(max {max(demo_walls):.1f} s); bare server {statistics.median(bare_walls):.1f} s; "
        f"{os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
