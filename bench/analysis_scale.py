"""Benchmark: `summary` + `breakdown` of 8 ranks x 1,000 cycles x 500 kernels (4M kernels).

Generates the store straight into Parquet (no JSON), then runs the analysis in a fresh child
process (so peak RSS is the analysis's own) several times and prints wall time and peak RSS.
Not a test; figures go to docs/BENCHMARKS.md ("Analysis").

Per rank and cycle (2 ms apart): draft = one cudaGraphLaunch replaying 100 kernels; verify =
350 eager launches, 21 of them NCCL allreduce kernels, each under a `tracekit/allreduce`
sub-range; draft_extend = 50 eager launches. Kernels last 2 µs, 1 µs apart.

    python bench/analysis_scale.py [--ranks 8] [--cycles 1000] [--repeat 3] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNELS = 500
DRAFT, VERIFY = 100, 350  # draft_extend gets the rest
AR_EVERY = VERIFY // 20  # every 17th verify kernel is an allreduce -> 21 a cycle
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CYCLE_NS = 2_000_000
US = 1000
BASE = 1_790_857_026_000_000_000


def generate_rank(run_dir: Path, rank: int, cycles: int) -> int:
    import polars as pl

    from tracekit.store.writer import write_partition

    n = cycles * KERNELS
    i = pl.int_range(n, dtype=pl.Int64, eager=True)
    k = pl.DataFrame({"i": i}).with_columns(
        (pl.col("i") // KERNELS).alias("c"), (pl.col("i") % KERNELS).alias("j")
    )
    t = pl.lit(BASE) + pl.col("c") * CYCLE_NS
    is_ar = (
        (pl.col("j") >= DRAFT)
        & (pl.col("j") < DRAFT + VERIFY)
        & ((pl.col("j") - DRAFT) % AR_EVERY == 0)
    )
    corr = (
        pl.when(pl.col("j") < DRAFT)
        .then(pl.col("c") * 1000)
        .otherwise(pl.col("c") * 1000 + pl.col("j"))
    )
    kernels = k.select(
        pl.lit("kernel").alias("cat"),
        pl.when(is_ar)
        .then(pl.lit(NCCL))
        .otherwise(pl.format("gemm_{}", pl.col("j") % 7))
        .alias("name"),
        pl.lit("X").alias("ph"),
        (t + 20 * US + pl.col("j") * 3 * US).alias("start_ns"),
        pl.lit(2 * US, dtype=pl.Int64).alias("dur_ns"),
        pl.lit(0, dtype=pl.Int64).alias("pid"),
        pl.when(is_ar).then(20).otherwise(7).cast(pl.Int64).alias("tid"),
        pl.lit(0, dtype=pl.Int32).alias("device"),
        pl.when(is_ar).then(20).otherwise(7).cast(pl.Int64).alias("stream"),
        corr.alias("correlation"),
        (pl.col("j") < DRAFT).alias("graph_launched"),
    )
    cpu = {"ph": "X", "pid": 4242 + rank, "tid": 4242 + rank}
    launches = k.filter(pl.col("j") >= DRAFT - 1).select(
        pl.lit("cuda_runtime").alias("cat"),
        pl.when(pl.col("j") == DRAFT - 1)
        .then(pl.lit("cudaGraphLaunch"))
        .otherwise(pl.lit("cudaLaunchKernel"))
        .alias("name"),
        pl.lit("X").alias("ph"),
        pl.when(pl.col("j") == DRAFT - 1)
        .then(t + 5 * US)
        .when(pl.col("j") < DRAFT + VERIFY)
        .then(t + 300 * US + (pl.col("j") - DRAFT) * 2 * US)
        .otherwise(t + 1400 * US + (pl.col("j") - DRAFT - VERIFY) * 2 * US)
        .alias("start_ns"),
        pl.lit(1 * US, dtype=pl.Int64).alias("dur_ns"),
        pl.lit(cpu["pid"], dtype=pl.Int64).alias("pid"),
        pl.lit(cpu["tid"], dtype=pl.Int64).alias("tid"),
        pl.when(pl.col("j") == DRAFT - 1)
        .then(pl.col("c") * 1000)
        .otherwise(pl.col("c") * 1000 + pl.col("j"))
        .alias("correlation"),
    )
    c = pl.DataFrame({"c": pl.int_range(cycles, dtype=pl.Int64, eager=True)})
    tc = pl.lit(BASE) + pl.col("c") * CYCLE_NS

    def ann(name: str, start: pl.Expr, end: pl.Expr, frame: pl.DataFrame = c) -> pl.DataFrame:
        return frame.select(
            pl.lit("user_annotation").alias("cat"),
            pl.lit(name).alias("name"),
            pl.lit("X").alias("ph"),
            start.alias("start_ns"),
            (end - start).alias("dur_ns"),
            pl.lit(cpu["pid"], dtype=pl.Int64).alias("pid"),
            pl.lit(cpu["tid"], dtype=pl.Int64).alias("tid"),
        )

    ar = (
        k.filter(is_ar)
        .select("c", "j")
        .with_columns(
            (
                pl.lit(BASE) + pl.col("c") * CYCLE_NS + 300 * US + (pl.col("j") - DRAFT) * 2 * US
            ).alias("l")
        )
    )
    annotations = [
        ann("tracekit/cycle", tc, tc + CYCLE_NS - 10 * US),
        ann("tracekit/draft", tc, tc + 290 * US),
        ann("tracekit/verify", tc + 295 * US, tc + 1390 * US),
        ann("tracekit/draft_extend", tc + 1395 * US, tc + 1700 * US),
        ann("tracekit/allreduce", pl.col("l") - 200, pl.col("l") + 1500, ar),
    ]
    events = pl.concat([kernels, launches, *annotations], how="diagonal_relaxed").sort("start_ns")
    write_partition(run_dir, "events", rank, events.to_arrow())
    return events.height


def measure(run_dir: Path) -> dict[str, float]:
    """Run summary + breakdown in this process (called in a child)."""
    t0 = time.perf_counter()
    from tracekit.analyzers.run_analysis import analyze
    from tracekit.analyzers.summary import summary_from
    from tracekit.cli.breakdown import grouped

    a = analyze(run_dir)
    s = summary_from(a)
    rows = grouped(a, None)
    wall = time.perf_counter() - t0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    rss_mb = usage.ru_maxrss / 1024
    cpu = usage.ru_utime + usage.ru_stime
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "rss_mb": rss_mb,
        "instances": rows.height,
        "cycles": s.cycles,
        "cycle_ms_p50": s.cycle_ms_p50,
    }


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", type=Path)
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return
    base = args.dir or Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    run_dir = base / "run"
    if not (run_dir / "store").exists():
        t0 = time.perf_counter()
        rows = sum(generate_rank(run_dir, r, args.cycles) for r in range(args.ranks))
        print(
            f"generated {rows:,} events ({args.ranks * args.cycles * KERNELS:,} kernels) in "
            f"{time.perf_counter() - t0:.1f} s -> {run_dir}"
        )
    results = []
    for _ in range(args.repeat):
        out = subprocess.run(
            [sys.executable, __file__, "--measure", str(run_dir)],
            check=True,
            capture_output=True,
            text=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    walls = [r["wall_s"] for r in results]
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    rss = [r["rss_mb"] for r in results]
    cpu = [r["cpu_s"] for r in results]
    print(
        f"summary + breakdown, {args.ranks} ranks x {args.cycles} cycles x {KERNELS} kernels: "
        f"wall median {statistics.median(walls):.2f} s (runs: {', '.join(f'{w:.2f}' for w in walls)}), "
        f"CPU (user+sys, incl. imports) median {statistics.median(cpu):.2f} s, "
        f"peak RSS median {statistics.median(rss):.0f} MB; {results[0]['instances']} phase "
        f"instances, cycle p50 {results[0]['cycle_ms_p50']:.3f} ms; load average {load}"
    )


if __name__ == "__main__":
    main()
