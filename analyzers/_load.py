"""Reading one rank's rows from the store, only the columns an analyzer needs.

`read_rank` reads a rank's inputs once (`RankInputs`; its events by `read_events`, which a caller
that needs more columns, the Perfetto export, calls itself and hands over);
analyzers/run_analysis.py's `analyze_rank` hands them to the phase, interval and cycle code and
drops them when the rank is done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import polars as pl
import pyarrow.parquet as pq

from tracekit.store.reader import check_schema_version, has_table, ranks, scan_table, table_files

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
EVENT_COLUMNS = (
    "cat",
    "name",
    "ph",
    "start_ns",
    "dur_ns",
    "pid",
    "tid",
    "correlation",
    "graph_launched",
)
KEPT_CATS = (*GPU_CATS, *RUNTIME_CATS, "user_annotation", "cpu_op")


@dataclass(frozen=True)
class RankInputs:
    """What the analysis of one rank reads from the store.

    `events`: its events table (EVENT_COLUMNS, rows of KEPT_CATS, file order), None without
    one; `phases` / `cycles`: the collector's tables (merge), None without them."""

    run_dir: Path
    rank: int
    events: pl.DataFrame | None
    phases: pl.DataFrame | None
    cycles: pl.DataFrame | None


def run_ranks(run_dir: Path) -> list[int]:
    """Ranks that have events or collector phase records."""
    out: set[int] = set()
    for table in ("events", "phases"):
        if has_table(run_dir, table):
            out.update(ranks(run_dir, table))
    return sorted(out)


def read_rank(run_dir: Path, rank: int, events: pl.DataFrame | None = None) -> RankInputs:
    """The rank's inputs. `events`: its events table as a caller read it already (at least
    EVENT_COLUMNS, all rows in file order, e.g. by `read_events`), so that the files are not
    read again."""
    run_dir = Path(run_dir)
    frame = read_events(run_dir, rank) if events is None else events.select(EVENT_COLUMNS)
    if frame is not None:
        frame = frame.filter(pl.col("cat").is_in(KEPT_CATS))
    return RankInputs(
        run_dir,
        rank,
        frame,
        _read_table(run_dir, "phases", rank),
        _read_table(run_dir, "cycles", rank),
    )


def read_events(
    run_dir: Path, rank: int, columns: tuple[str, ...] = EVENT_COLUMNS
) -> pl.DataFrame | None:
    """`columns` of the rank's events (all rows, file order); None without any.

    Read by pyarrow and handed to polars (dictionary columns become Categorical): the same
    frame as `scan_table(...).select(columns)`, in about half the CPU time of polars' own
    Parquet reader here. The Perfetto export reads its columns and these with it, once."""
    run_dir = Path(run_dir)
    if not has_table(run_dir, "events") or rank not in ranks(run_dir, "events"):
        return None
    frames = []
    for r, f in table_files(run_dir, "events"):
        if r != rank:
            continue
        check_schema_version(f)
        present = set(pq.read_schema(f).names)
        table = pq.read_table(f, columns=[c for c in columns if c in present])
        frames.append(cast("pl.DataFrame", pl.from_arrow(table)))
    if not frames:
        return scan_table(run_dir, "events", rank=rank).select(columns).collect()
    merged = frames[0] if len(frames) == 1 else pl.concat(frames, how="diagonal_relaxed")
    return merged.select(columns)


def _read_table(run_dir: Path, table: str, rank: int) -> pl.DataFrame | None:
    if not has_table(run_dir, table) or rank not in ranks(run_dir, table):
        return None
    return scan_table(run_dir, table, rank=rank).collect()


def hides_allreduce(run_dir: Path, rank: int) -> bool:
    """The rank's collector ran an `allreduce` target inside a torch.compile'd call (merge's
    manifests row `compiled` / `hidden_allreduce`, tracekit/store/merge_checks.py)."""
    table = _read_table(Path(run_dir), "manifests", rank)
    if table is None or "section" not in table.columns:
        return False
    hit = table.filter((pl.col("section") == "compiled") & (pl.col("key") == "hidden_allreduce"))
    return hit.height > 0


def annotation_rows(events: pl.DataFrame) -> pl.DataFrame:
    """Complete CPU ranges that may be phases: `user_annotation` rows (record_function)."""
    return events.filter((pl.col("cat") == "user_annotation") & (pl.col("ph") == "X")).select(
        pl.col("name").cast(pl.String),
        "pid",
        "tid",
        "start_ns",
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
    )
