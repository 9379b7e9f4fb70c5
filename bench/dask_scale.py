"""Benchmark: the per-rank analysis (`summary`) of 64 ranks x 2,000 cycles, locally and on a
Dask LocalCluster, with the wall time and the peak RSS of each worker.

The run is synthetic light-mode collector output (tests/outputs_synth.make_run, events off:
per rank and cycle a draft and a verify phase call), written once into --dir. Not a test;
figures go to docs/BENCHMARKS.md ("Analysis on Dask").

    python bench/dask_scale.py [--ranks 64] [--cycles 2000] [--workers 2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args()

    from tests.outputs_synth import make_run
    from tracekit.analyzers.run_analysis import analyze
    from tracekit.analyzers.summary import summary_from
    from tracekit.distributed import start, use_engine

    base = args.dir or Path(tempfile.mkdtemp(prefix="tk-dask-"))
    run = base / f"r{args.ranks}x{args.cycles}"
    if not run.exists():
        t = time.perf_counter()
        make_run(run, ranks=args.ranks, cycles=args.cycles, events=False, counters=False)
        print(f"generated {run} in {time.perf_counter() - t:.1f} s")

    eng = start(workers=args.workers, processes=True, memory_limit=None)
    try:
        t = time.perf_counter()
        with use_engine(eng):
            on_dask = summary_from(analyze(run))
        dask_s = time.perf_counter() - t
        rss = eng.client.run(_peak_rss_mb)
    finally:
        eng.close()
    t = time.perf_counter()
    local = summary_from(analyze(run))
    local_s = time.perf_counter() - t
    assert local == on_dask, "local and Dask summaries differ"
    print(
        f"{args.ranks} ranks x {args.cycles} cycles: local {local_s:.2f} s "
        f"(peak RSS {_peak_rss_mb():.0f} MB); Dask LocalCluster {args.workers} workers "
        f"{dask_s:.2f} s, peak RSS per worker " + ", ".join(f"{v:.0f} MB" for v in rss.values())
    )


if __name__ == "__main__":
    main()
