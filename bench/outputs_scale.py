"""Outputs at scale: Perfetto export of ~4M events, and the HTML report of a 1,000-cycle 8-rank run.

Prints the figures of docs/BENCHMARKS.md "Outputs". Synthetic run directories (tests/outputs_synth.py:
per cycle and rank `tracekit/cycle`, draft and verify annotations, `aten::mm` ops, one
`cudaLaunchKernel` a kernel, kernels on stream 7 with one overlapping pair a cycle, an NCCL
allreduce, NVML counters) are written to a temporary directory first; only the export and
the report are timed, each the median of --repeat runs.

    python bench/outputs_scale.py [--events 4000000] [--repeat 3] [--jobs N] [--skip-report]
        [--store DIR] [--code CHECKOUT]

`--store DIR` writes the synthetic store there once and reuses it later (the process's peak RSS
is then the export's: printed after it). `--code CHECKOUT` imports tracekit from another checkout
(e.g. `git worktree add --detach /tmp/before COMMIT`), for before/after runs in alternating
fresh processes on one store:

    for i in 1 2 3; do for c in /tmp/before .; do
      python bench/outputs_scale.py --store /tmp/big --skip-report --repeat 2 --jobs 1 --code $c
    done; done
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _use_checkout(code: Path) -> None:
    """Import tracekit from `code`, its analyzers/ and collectors/ as the installed package maps
    them (pyproject.toml's package-dir)."""
    import importlib.util

    sys.path.insert(0, str(code))
    import tracekit

    for sub in ("analyzers", "collectors"):
        spec = importlib.util.spec_from_file_location(
            f"tracekit.{sub}",
            code / sub / "__init__.py",
            submodule_search_locations=[str(code / sub)],
        )
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    print(f"tracekit from {Path(tracekit.__file__).parent}")


_code = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--code"), None)
_use_checkout(Path(_code).resolve() if _code else REPO)

from tracekit.export.perfetto import write_perfetto  # noqa: E402
from tracekit.report.html import write_report  # noqa: E402
from tracekit.store import reader  # noqa: E402

TARGET_EVENTS_PER_S = 1_000_000
TARGET_REPORT_MB = 5.0
TARGET_REPORT_S = 10.0


def median_time(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def pq_rows(run: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for _, f in reader.table_files(run, "events"))


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--events", type=int, default=4_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--jobs", type=int, default=None, help="export worker processes (default: auto)"
    )
    ap.add_argument("--skip-report", action="store_true", help="time the Perfetto export only")
    ap.add_argument("--store", type=Path, help="the export's store: written once, then reused")
    ap.add_argument("--code", type=Path, help="checkout to import tracekit from (default: this)")
    args = ap.parse_args()
    cpus = os.cpu_count()
    print(f"machine: {cpus} CPUs, Python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="tk-bench-") as tmp:
        root = Path(tmp)
        # -- Perfetto export -------------------------------------------------------------------
        ranks, nd, nv = 8, 10, 30
        per_cycle = 3 + 3 * nd + 2 * nv
        cycles = -(-args.events // (ranks * per_cycle))
        run = args.store or root / "big"
        t = time.perf_counter()
        if not reader.has_table(run, "events"):
            sys.path.insert(0, str(REPO))
            from tests.outputs_synth import make_run

            make_run(run, ranks=ranks, cycles=cycles, draft_kernels=nd, verify_kernels=nv)
        n = pq_rows(run)
        print(
            f"{n:,} events ({ranks} ranks x {cycles:,} cycles) in {run}, {time.perf_counter() - t:.1f} s"
        )
        out = root / "big.pftrace"
        rows = []
        for jobs in sorted({1, args.jobs or min(ranks, cpus or 1)}):
            stats = {}
            cpu: list[float] = []

            def run_export(jobs: int = jobs, stats: dict = stats, cpu: list = cpu) -> None:
                c = time.process_time()
                stats["s"] = write_perfetto(run, out, jobs=jobs)
                cpu.append(time.process_time() - c)

            load0 = os.getloadavg()[0]
            dt = median_time(run_export, args.repeat)
            size = out.stat().st_size
            rows.append((jobs, dt, n / dt, size, stats["s"]))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"jobs {jobs}: CPU of this process (workers not counted) "
                f"{', '.join(f'{c:.2f}' for c in cpu)} s, median {statistics.median(cpu):.2f} s "
                f"({n / statistics.median(cpu):,.0f} events per CPU s); peak RSS so far "
                f"{rss:.0f} MB; SHA-256 {hashlib.sha256(out.read_bytes()).hexdigest()[:12]}; "
                f"load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
                flush=True,
            )
        print()
        print(
            "| export | events | jobs | seconds (median) | events/s | file MB | bytes/event | target |"
        )
        print("|---|---|---|---|---|---|---|---|")
        for jobs, dt, rate, size, _s in rows:
            ok = "met" if rate >= TARGET_EVENTS_PER_S else "NOT met"
            print(
                f"| perfetto | {n:,} | {jobs} | {dt:.2f} | {rate:,.0f} | {size / 1e6:.1f} | {size / n:.1f} | >= 1M/s: {ok} |"
            )
        last = rows[0][4]
        if hasattr(last, "kernel_lanes"):  # (older checkouts return a path)
            print(f"(kernel lanes: {last.kernel_lanes}, counter samples: {last.counters})")
        if args.skip_report:
            return

        # -- HTML report ---------------------------------------------------------------------------
        spec, base = root / "spec", root / "base"
        from tests.outputs_synth import make_run

        make_run(spec, ranks=8, cycles=1000, graph=True)
        make_run(base, ranks=8, cycles=1000, baseline=True)
        print()
        print("| report | ranks x cycles | seconds (median) | MB | target |")
        print("|---|---|---|---|---|")
        for label, kwargs in (
            ("plain", {}),
            ("--baseline", {"baseline": base}),
            ("--cdn", {"cdn": True}),
        ):
            html = root / f"report-{label.strip('-')}.html"
            dt = median_time(
                lambda html=html, kwargs=kwargs: write_report(spec, html, **kwargs), args.repeat
            )
            mb = html.stat().st_size / 1e6
            ok = "met" if mb < TARGET_REPORT_MB and dt < TARGET_REPORT_S else "NOT met"
            print(f"| {label} | 8 x 1,000 | {dt:.2f} | {mb:.2f} | < 5 MB, < 10 s: {ok} |")


if __name__ == "__main__":
    main()
