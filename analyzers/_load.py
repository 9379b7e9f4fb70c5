"""Reading one rank's rows from the store, only the columns an analyzer needs."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.store.reader import has_table, ranks, scan_table

GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")
GRAPH_LAUNCH = r"^(?:cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)(?:_v\d+|_ptsz|_spt)*$"


def run_ranks(run_dir: Path) -> list[int]:
    """Ranks that have events or collector phase records."""
    out: set[int] = set()
    for table in ("events", "phases"):
        if has_table(run_dir, table):
            out.update(ranks(run_dir, table))
    return sorted(out)


def scan_events(run_dir: Path, rank: int) -> pl.LazyFrame | None:
    if not has_table(run_dir, "events") or rank not in ranks(run_dir, "events"):
        return None
    return scan_table(run_dir, "events", rank=rank)


def read_rank_table(run_dir: Path, table: str, rank: int) -> pl.DataFrame | None:
    if not has_table(run_dir, table) or rank not in ranks(run_dir, table):
        return None
    return scan_table(run_dir, table, rank=rank).collect()


def annotation_rows(events: pl.LazyFrame) -> pl.DataFrame:
    """Complete CPU ranges that may be phases: `user_annotation` rows (record_function)."""
    return (
        events.filter((pl.col("cat") == "user_annotation") & (pl.col("ph") == "X"))
        .select(
            pl.col("name").cast(pl.String),
            "pid",
            "tid",
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        )
        .collect()
    )
