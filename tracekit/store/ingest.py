"""`tracekit ingest`: Kineto traces (files or directories) -> the run directory's `events` and
`manifests` tables, one hive partition a rank.

Each file is parsed in its own worker process (a bounded pool), which writes its rank's Parquet
files itself, batch by batch, into a staging directory; the parent only checks ranks and moves
finished files into place. Peak memory is a few files' worth, whatever the number of ranks.
Bad files are reported (one line each) after the good ones are written.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import IngestError, InputError, RankError, TracekitError
from tracekit.store.kineto.raw import ReadBuffer
from tracekit.store.layout import RunLayout
from tracekit.store.ranks import RankSource
from tracekit.store.schema import EVENTS_DICT_COLUMNS, TABLES
from tracekit.store.writer import conform, with_metadata

TRACE_SUFFIXES = (".json", ".json.gz")
EVENTS_PART = "part-0.parquet"
MANIFESTS_PART = "part-kineto.parquet"
STAGING = ".ingest-staging"

ProgressCallback = Callable[[int, int], None]


@dataclass(frozen=True)
class IngestedFile:
    """One trace file written into the store."""

    path: Path
    rank: int
    rank_source: RankSource
    events: int
    salvaged: bool


@dataclass
class IngestResult:
    run_dir: Path
    files: list[IngestedFile] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def ranks(self) -> list[int]:
        return sorted(f.rank for f in self.files)

    @property
    def events(self) -> int:
        return sum(f.events for f in self.files)


@dataclass(frozen=True)
class _Task:
    index: int
    path: Path
    staging: Path
    override: int | None


@dataclass
class _Outcome:
    index: int
    path: Path
    rank: int | None = None
    rank_source: RankSource | None = None
    events: int = 0
    salvaged: bool = False
    warnings: list[str] = field(default_factory=list)
    error: TracekitError | None = None
    events_file: Path | None = None
    manifests_file: Path | None = None


def find_traces(paths: Iterable[Path]) -> list[Path]:
    """Expand directories into their trace files (recursively, sorted); check files exist."""
    out: list[Path] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                f for f in p.rglob("*") if f.is_file() and f.name.endswith(TRACE_SUFFIXES)
            )
            if not found:
                msg = f"{p}: no trace files (`*.json`, `*.json.gz`) in this directory; pass Kineto traces"
                raise InputError(msg)
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            msg = f"{p}: no such file or directory; pass Kineto trace files or directories"
            raise InputError(msg)
    seen: set[Path] = set()
    unique = []
    for p in out:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def ingest(
    paths: Sequence[Path] | Path,
    run_dir: Path,
    *,
    rank_overrides: dict[Path, int] | None = None,
    jobs: int | None = None,
    progress: ProgressCallback | None = None,
) -> IngestResult:
    """Read Kineto JSON(.gz) files or directories into `run_dir`'s `events` and `manifests`.

    Raises `IngestError` (an `InputError`) after writing the usable files when some inputs are
    unusable (empty, not JSON, not a trace, no rank, two files claiming one rank).
    """
    if isinstance(paths, (str, Path)):
        paths = [Path(paths)]
    files = find_traces(paths)
    overrides = {Path(k).resolve(): v for k, v in (rank_overrides or {}).items()}
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    staging = layout.store / f"{STAGING}-{os.getpid()}"
    staging.mkdir(parents=True, exist_ok=True)
    tasks = [_Task(i, f, staging, overrides.get(f.resolve())) for i, f in enumerate(files)]
    result = IngestResult(run_dir=run_dir)
    try:
        outcomes = _run(tasks, jobs=jobs, progress=progress)
        failures = _commit(outcomes, layout, result)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if failures:
        suffix = (
            f" (ingested the other {len(result.files)} file(s) into {run_dir})"
            if result.files
            else ""
        )
        error: TracekitError
        if len(failures) == 1:
            # One bad input: raise it as what it is (TraceFormatError, RankError, ...).
            error = type(failures[0])(f"{failures[0]}{suffix}")
        else:
            message = f"{len(failures)} inputs could not be ingested: " + "; ".join(result.errors)
            error = IngestError(message + suffix, result)
        error.result = result  # type: ignore[attr-defined]
        raise error
    return result


def _run(
    tasks: list[_Task], *, jobs: int | None, progress: ProgressCallback | None
) -> list[_Outcome]:
    total = len(tasks)
    from tracekit.distributed import current_engine

    if (engine := current_engine()) is not None:  # one task a file on Dask
        done = engine.map(_ingest_one, tasks)
        if progress:
            progress(total, total)
        return done
    workers = min(jobs or _cores(), total)
    outcomes: list[_Outcome] = []
    if workers <= 1:
        buffer = ReadBuffer()
        for task in tasks:
            outcomes.append(_ingest_one(task, buffer))
            if progress:
                progress(len(outcomes), total)
        return outcomes
    import multiprocessing
    import sys

    # fork starts workers at once and needs no `if __name__ == "__main__"` guard in callers'
    # scripts; workers use only msgspec/numpy/pyarrow. Where polars is loaded (its thread pool
    # may deadlock a forked child and it warns), spawn instead.
    method = "spawn" if "polars" in sys.modules or sys.platform != "linux" else "fork"
    ctx = multiprocessing.get_context(method)
    if method == "fork":  # the workers' imports, once here rather than in each worker
        import tracekit.store.kineto
        import tracekit.store.manifest_rows
        import tracekit.store.ranks  # noqa: F401

        # Out of the collector's sight, so a worker's collections do not touch (and copy) every
        # object inherited from here.
        gc.freeze()
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=ctx, initializer=_start_worker
    ) as pool:
        futures = [pool.submit(_ingest_one, t) for t in tasks]
        for fut in as_completed(futures):
            outcomes.append(fut.result())
            if progress:
                progress(len(outcomes), total)
    if method == "fork":
        gc.unfreeze()
    outcomes.sort(key=lambda o: o.index)
    return outcomes


def _cores() -> int:
    """The cores this process may run on (its affinity: a container's share, not the host's)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def _commit(
    outcomes: list[_Outcome], layout: RunLayout, result: IngestResult
) -> list[TracekitError]:
    by_rank: dict[int, list[_Outcome]] = {}
    failures: list[TracekitError] = []
    for o in outcomes:
        result.warnings.extend(o.warnings)
        if o.error is not None:
            failures.append(o.error)
        elif o.rank is not None:
            by_rank.setdefault(o.rank, []).append(o)
    for rank in sorted(by_rank):
        group = by_rank[rank]
        if len(group) > 1:
            names = " and ".join(str(o.path) for o in group)
            failures.append(
                RankError(
                    f"{names} both claim rank {rank}; ingest them into separate run "
                    "directories or pass one file with `--rank N`"
                )
            )
            continue
        o = group[0]
        if (
            o.events_file is None or o.manifests_file is None or o.rank_source is None
        ):  # pragma: no cover - worker bug
            continue
        _place(o.events_file, layout.partition_dir("events", rank) / EVENTS_PART)
        _place(o.manifests_file, layout.partition_dir("manifests", rank) / MANIFESTS_PART)
        result.files.append(IngestedFile(o.path, rank, o.rank_source, o.events, o.salvaged))
    result.errors.extend(str(f) for f in failures)
    return failures


def _place(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dst)


_WORKER_BUFFER: ReadBuffer | None = None


def _start_worker() -> None:
    """Pool worker start: one read buffer for the files this worker reads in turn."""
    global _WORKER_BUFFER
    _WORKER_BUFFER = ReadBuffer()


def _ingest_one(task: _Task, buffer: ReadBuffer | None = None) -> _Outcome:
    """Worker: parse one file, write its events and manifests into the staging directory."""
    from tracekit.store.kineto import (
        BatchStats,
        iter_batches,
        load,
        meta_value,
    )
    from tracekit.store.manifest_rows import manifest_rows
    from tracekit.store.ranks import detect_rank

    out = _Outcome(task.index, task.path)
    events_file = task.staging / f"{task.index}.events.parquet"
    schema = with_metadata(TABLES["events"])
    writer: pq.ParquetWriter | None = None

    def open_writer() -> pq.ParquetWriter:
        # Dictionary-encode only the repetitive columns; hashing every `args` text is wasted.
        return pq.ParquetWriter(
            events_file, schema, compression="zstd", use_dictionary=list(EVENTS_DICT_COLUMNS)
        )

    def restart() -> None:  # the columnar reader declined after some batches: start over
        nonlocal writer
        if writer is not None:
            writer.close()
        writer = open_writer()

    collecting = gc.isenabled()
    gc.disable()  # a file's parse makes few cycles; collections would only walk its objects
    try:
        trace = load(task.path, buffer or _WORKER_BUFFER)
        writer = open_writer()
        stats = BatchStats()
        for batch in iter_batches(trace, stats=stats, restart=restart):
            writer.write_table(conform("events", batch).replace_schema_metadata(schema.metadata))
        writer.close()
        writer = None
        # after the events: a file the columnar reader declined may have been salvaged since
        out.warnings.extend(trace.warnings)
        out.salvaged = trace.salvaged
        rank, source = detect_rank(task.path, meta_value(trace, "distributedInfo"), task.override)
        out.rank, out.rank_source = rank, source
        out.events = stats.events
        if stats.negative_dur:
            out.warnings.append(
                f"{task.path}: {stats.negative_dur} events had a negative duration; clamped to 0"
            )
        rows = manifest_rows(trace, rank=rank, rank_source=source, stats=stats)
        del trace
        mtable = pa.table(
            {
                "section": [r[0] for r in rows],
                "key": [r[1] for r in rows],
                "value": [r[2] for r in rows],
            }
        )
        mtable = conform("manifests", mtable)
        mtable = mtable.replace_schema_metadata(with_metadata(mtable.schema).metadata)
        manifests_file = task.staging / f"{task.index}.manifests.parquet"
        pq.write_table(mtable, manifests_file, compression="zstd")
        out.events_file, out.manifests_file = events_file, manifests_file
    except TracekitError as exc:
        out.error = exc
    except OSError as exc:
        out.error = InputError(
            f"{task.path}: cannot read ({exc.strerror or exc}); check the path and permissions"
        )
    finally:
        if writer is not None:
            writer.close()
        if collecting:
            gc.enable()
    return out
