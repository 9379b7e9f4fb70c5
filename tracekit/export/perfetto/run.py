"""The export's entry points: `export(analysis, out)` writes the trace of a `RunAnalysis`;
`export_run(run_dir, out)` / `write_perfetto` (the CLI's) analyse each rank from the events
the export reads for it (one read a rank) and write it.

Ranks are written one after the other (one rank's events in memory at a time), or by worker
processes, one rank each, appended in rank order; the run's metadata comes last.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING

from tracekit.errors import InputError, StoreError
from tracekit.export.perfetto.inputs import (
    NO_PHASES,
    ExportStats,
    RankAnalyser,
    RankWork,
    RunContext,
)
from tracekit.export.perfetto.rank import RankExport
from tracekit.export.perfetto.writer import Writer
from tracekit.store import reader

if TYPE_CHECKING:
    from tracekit.analyzers.run_analysis import RankAnalysis, RunAnalysis


def write_perfetto(
    run_dir: Path, out_path: Path, *, flows: bool = False, jobs: int | None = None
) -> Path:
    """Write `run_dir` as a native Perfetto trace at `out_path`; return the path."""
    return export_run(run_dir, out_path, flows=flows, jobs=jobs).path


# Below this many events, ranks are written in this process (starting workers costs ~1 s).
PARALLEL_MIN_EVENTS = 400_000
# Nor with fewer CPUs: a rank takes about 1 s a 500k events, so on 2 CPUs the workers' start
# and the copy of their files cost more than they save (docs/BENCHMARKS.md, "Outputs").
PARALLEL_MIN_CPUS = 4


def export_run(
    run_dir: Path, out_path: Path, *, flows: bool = False, jobs: int | None = None
) -> ExportStats:
    """`write_perfetto`, returning what was written: rank by rank, the rank's events read
    once, its analysis built from them (`analyze_rank`, the analysis's own; its recorded
    cycles left out, which the trace does not show), the rank written, its events and
    analysis dropped before the next. The same bytes as `export(analyze(run_dir), ...)`.

    A run the analysis refuses as a whole (no phases anywhere, no cycle anywhere, a rank whose
    rows it cannot read) is still exported: each rank's own analysis where it has one (the
    phases of a run without cycles), a note for each rank without.
    """
    from tracekit.analyzers.allreduce import load_impl_table
    from tracekit.analyzers.rules import load_rules

    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    analyser = RankAnalyser(load_rules(None), load_impl_table(None))
    return _export(run_dir, {}, out_path, flows=flows, jobs=jobs, analyser=analyser)


def export(
    analysis: RunAnalysis, out_path: Path, *, flows: bool = False, jobs: int | None = None
) -> ExportStats:
    """Write the run `analysis` describes as a native Perfetto trace at `out_path`.

    Its phases, cycles and their breakdown come from `analysis`; each rank's events, counters
    and process names are read from the store, one rank at a time. Ranks are independent
    packet sequences, so with `jobs` > 1 (default: one per CPU for runs of at least
    PARALLEL_MIN_EVENTS events on PARALLEL_MIN_CPUS CPUs or more) worker processes write ranks
    to temporary files, which are then appended in rank order; each worker holds one rank.
    """
    run_dir = Path(analysis.run_dir)
    _check_run_dir(run_dir)
    ranks = {r.rank: r for r in analysis.ranks}
    return _export(run_dir, ranks, out_path, flows=flows, jobs=jobs)


def _check_run_dir(run_dir: Path) -> None:
    if not run_dir.is_dir():
        msg = f"{run_dir}: not a run directory; give the directory `tracekit launch`, `tracekit demo` or `tracekit ingest -o` wrote"
        raise InputError(msg)
    if not any(reader.has_table(run_dir, t) for t in ("events", "phases", "cycles")):
        msg = (
            f"{run_dir}: no `events`, `phases` or `cycles` table in the store; "
            "create it with `tracekit ingest TRACES -o RUN_DIR` or `tracekit merge RUN_DIR`"
        )
        raise StoreError(msg)


def _tables(run_dir: Path) -> dict[str, bool]:
    return {
        t: reader.has_table(run_dir, t)
        for t in ("events", "phases", "cycles", "counters", "manifests")
    }


def _all_ranks(run_dir: Path, tables: dict[str, bool]) -> list[int]:
    return sorted({r for t, present in tables.items() if present for r in reader.ranks(run_dir, t)})


def _jobs(run_dir: Path, tables: dict[str, bool], n_ranks: int, jobs: int | None) -> int:
    if jobs is None:
        jobs = 1
        if n_ranks > 1 and tables["events"] and (os.cpu_count() or 1) >= PARALLEL_MIN_CPUS:
            n_events = sum(pq_rows(f) for _, f in reader.table_files(run_dir, "events"))
            if n_events >= PARALLEL_MIN_EVENTS:
                jobs = min(n_ranks, os.cpu_count() or 1)
    return max(1, min(jobs, n_ranks or 1))


def _export(
    run_dir: Path,
    ranks: dict[int, RankAnalysis],
    out_path: Path,
    *,
    flows: bool,
    jobs: int | None,
    analyser: RankAnalyser | None = None,
) -> ExportStats:
    """The trace of `run_dir` with the ranks' analyses `ranks` (a rank without one: the
    NO_PHASES note), or each rank analysed as it is written (`analyser`)."""
    out_path = Path(out_path)
    _keep_freed_memory()
    tables = _tables(run_dir)
    all_ranks = _all_ranks(run_dir, tables)
    stats = ExportStats(path=out_path, ranks=all_ranks)
    jobs = _jobs(run_dir, tables, len(all_ranks), jobs)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    parts: list[Path] = []
    work = [
        RankWork(run_dir, r, ranks.get(r), NO_PHASES, flows, tables, analyser) for r in all_ranks
    ]
    try:
        with tmp.open("wb") as f:
            if jobs == 1:
                context = RunContext.load(run_dir, tables)
                writer = Writer.on(f)
                for w in work:
                    RankExport(writer, context, w, stats=stats).write()
            else:
                parts = [tmp.with_name(f"{tmp.name}.rank{w.rank}") for w in work]
                _parallel(work, parts, jobs, f, stats)
            # last: the run's metadata, with the notes of every rank
            Writer.on(f).metadata(run_dir, tables, stats)
        tmp.replace(out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        for part in parts:
            part.unlink(missing_ok=True)
        raise
    return stats


def _parallel(
    work: list[RankWork], parts: list[Path], jobs: int, f: IO[bytes], stats: ExportStats
) -> None:
    """Each rank written by a worker process into its part, the parts appended in order."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_rank_to_file, w, part) for w, part in zip(work, parts)]
        for fut, part in zip(futures, parts):
            stats.merge(fut.result())
            with part.open("rb") as pf:
                shutil.copyfileobj(pf, f, 1 << 22)
            part.unlink()


_MALLOC_TUNED = False


def _keep_freed_memory() -> None:
    """Let glibc keep freed memory for reuse instead of returning it to the OS at once.

    The encoder's numpy temporaries are a few MB each; with glibc's defaults they are unmapped
    (or trimmed off the heap) when freed and faulted in again for the next chunk. Where page
    faults are slow (VMs) that doubled the cost of the numpy work. glibc raises these limits
    by itself after large frees, up to the same 32 MB mmap threshold; setting them up front
    also keeps up to 512 MB freed in the heap (never beyond what the export used at its peak).
    Process-wide, set once; a no-op off glibc.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED or not sys.platform.startswith("linux"):
        return
    _MALLOC_TUNED = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (glibc's upper bound for it)
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def pq_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    reader.check_schema_version(path)  # a damaged or newer file: StoreError / SchemaError
    return int(pq.ParquetFile(path).metadata.num_rows)


def _rank_to_file(work: RankWork, part: Path) -> ExportStats:
    """Worker: one rank's packets into `part`."""
    _keep_freed_memory()
    stats = ExportStats(path=part, ranks=[work.rank])
    context = RunContext.load(work.run_dir, work.tables)
    with part.open("wb") as f:
        RankExport(Writer.on(f), context, work, stats=stats).write()
    return stats
