"""Benchmark: `tracekit merge` of an 8-rank light-mode raw run (raw/ -> the Parquet store).

The raw run is synthetic, written once with the collector's own writer (packed rows of
`tracekit.store.raw.schema.row_dtype`, `records.encode_rows`, `ipc.StreamWriter`: the bytes a
recorder's flushes write), shaped like the demo's speculative decoding: per cycle one cycle-target
call, `draft`, `verify` (accept_len read) holding 4 `allreduce` calls (depth 1) and
`draft_extend`; every 50th step is a prefill (a cycle call without `draft`: not a cycle, the
cycle rule's `require`). Then `python -m tracekit merge RUN` runs in a fresh child process
`--repeat` times (each one rewrites the store); wall time and the child's peak RSS are printed
with their medians. Not a test; figures go to docs/BENCHMARKS.md ("Merge").

    python bench/merge_scale.py [--ranks 8] [--cycles 20000] [--repeat 5] [--dir DIR]
        [--code ROOT ...]   # merge with the tracekit of these checkouts, alternated
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
from typing import Any

ROWS_PER_CYCLE = 8  # cycle, draft, verify, 4 x allreduce, draft_extend
PREFILL_EVERY = 50
BATCH = 8192  # rows a flush
BASE = 1_790_857_026_000_000_000
CYCLE_NS = 2_000_000
SITES = [
    {"code": 0, "kind": "cycle", "phase": "cycle", "target": "demo:Decoder.step"},
    {"code": 1, "kind": "phase", "phase": "draft", "target": "demo:Decoder.draft"},
    {"code": 2, "kind": "phase", "phase": "verify", "target": "demo:Decoder.verify"},
    {"code": 3, "kind": "phase", "phase": "allreduce", "target": "demo:Group.all_reduce"},
    {"code": 4, "kind": "phase", "phase": "draft_extend", "target": "demo:Decoder.extend"},
]
CYCLE_RULE = {
    "targets": ["demo:Decoder.step"],
    "starts_with": None,
    "require": "draft",
    "delta_phases": {},
    "cycle_delta": None,
}


def _rows(cycles: int, rank: int) -> Any:
    """The rank's packed rows, in call-end order as the recorder appends them."""
    import numpy as np

    from tracekit.store.raw.schema import row_dtype

    n = cycles * ROWS_PER_CYCLE
    rows = np.zeros(n, dtype=row_dtype())
    c = np.repeat(np.arange(cycles, dtype=np.int64), ROWS_PER_CYCLE)
    j = np.tile(np.arange(ROWS_PER_CYCLE), cycles)
    t0 = BASE + c * CYCLE_NS + rank * 1_000
    prefill = (c % PREFILL_EVERY) == 0
    # (code, depth, parent, start offset us, end offset us) of each row of a cycle, in end order
    shape = [(1, 0, -1, 10, 400), (3, 1, 2, 500, 520), (3, 1, 2, 600, 620), (3, 1, 2, 700, 720)]
    shape += [
        (3, 1, 2, 800, 820),
        (2, 0, -1, 410, 1400),
        (4, 0, -1, 1410, 1800),
        (0, 0, -1, 0, 1900),
    ]
    for k, (code, depth, parent, s, e) in enumerate(shape):
        at = j == k
        rows["code"][at] = code
        rows["depth"][at] = depth
        rows["parent"][at] = parent
        rows["start_ns"][at] = t0[at] + s * 1_000
        rows["end_ns"][at] = t0[at] + e * 1_000
    rows["code"][prefill & (j == 0)] = 2  # a prefill step: no draft, a verify-like call
    rows["cycle"] = c
    rows["tid"] = 7
    rows["seq"] = np.arange(n)
    rows["seq"][j == ROWS_PER_CYCLE - 1] *= -1  # cycle rows carry -seq (schema.py)
    rows["accept_len"] = np.nan
    rows["accept_len"][j == 5] = 1.0 + (c[j == 5] % 4)
    rows["ok"] = True
    return rows


def generate(run_dir: Path, ranks: int, cycles: int) -> int:
    """Write RUN_DIR/run.json and raw/pid-*/ for `ranks` ranks; the records written."""
    from tracekit.store.raw.ipc import StreamWriter
    from tracekit.store.raw.records import encode_rows
    from tracekit.store.raw.schema import raw_schema

    raw = run_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    run = {"adapter": "bench", "mode": "light", "cycle_rule": CYCLE_RULE}
    (run_dir / "run.json").write_text(json.dumps(run))
    total = 0
    for rank in range(ranks):
        pid = 40_000 + rank
        d = raw / f"pid-{pid}"
        d.mkdir(exist_ok=True)
        rows = _rows(cycles, rank)
        w = StreamWriter(d / "records.arrow", raw_schema())
        for lo in range(0, len(rows), BATCH):
            w.write(encode_rows(rows[lo : lo + BATCH], {}))
        w.close()
        (d / "sites.json").write_text(json.dumps({"sites": SITES}))
        info = {
            "pid": pid,
            "rank_info": {"dist_rank": rank, "dist_world_size": ranks},
            "finished": True,
            "records": len(rows),
            "via": "bench",
        }
        (d / "process.json").write_text(json.dumps(info))
        manifest = {"process": {"host": "bench", "pid": str(pid)}, "env": {"RANK": str(rank)}}
        (d / "manifest.json").write_text(json.dumps(manifest))
        total += len(rows)
    return total


def merge_once(run_dir: Path, code: Path) -> tuple[float, float]:
    """One `python -m tracekit merge RUN_DIR` with `code`'s tracekit: (wall s, peak RSS MB)."""
    env = dict(os.environ, PYTHONPATH=str(code))
    t = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "merge", str(run_dir)],
        cwd=code,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"merge with {code} failed:\n{err[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, help="keep the raw run here (reused when present)")
    ap.add_argument("--code", type=Path, action="append", help="checkout root (default: this)")
    args = ap.parse_args()
    codes = [c.resolve() for c in (args.code or [Path(__file__).resolve().parents[1]])]
    run_dir = args.dir or Path(tempfile.mkdtemp(prefix="tk-merge-")) / "run"
    if not (run_dir / "raw").is_dir():
        t = time.perf_counter()
        n = generate(run_dir, args.ranks, args.cycles)
        print(f"wrote {n:,} records ({args.ranks} ranks) in {time.perf_counter() - t:.1f} s")
    size = sum(f.stat().st_size for f in (run_dir / "raw").rglob("*") if f.is_file())
    print(f"raw run {run_dir}: {size / 1e6:.1f} MB; load average {os.getloadavg()}")
    got: dict[Path, list[tuple[float, float]]] = {c: [] for c in codes}
    for i in range(args.repeat):
        for code in codes if i % 2 == 0 else codes[::-1]:  # alternated, ABBA
            wall, rss = merge_once(run_dir, code)
            got[code].append((wall, rss))
            print(f"  {code}: {wall:.2f} s, {rss:.0f} MB peak RSS", flush=True)
    for code, runs in got.items():
        walls = [w for w, _ in runs]
        rss = [r for _, r in runs]
        print(
            f"{code}: median {statistics.median(walls):.2f} s (min {min(walls):.2f}, "
            f"max {max(walls):.2f}), peak RSS median {statistics.median(rss):.0f} MB, "
            f"n={len(runs)}"
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
