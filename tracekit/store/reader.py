"""Read store tables as polars LazyFrames, with the `rank` column from the partition path."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from tracekit.errors import SchemaError, StoreError
from tracekit.store.layout import RunLayout
from tracekit.store.schema import META_SCHEMA_VERSION, SCHEMA_VERSION, TABLES

if TYPE_CHECKING:
    import polars as pl


def table_files(run_dir: Path, table: str) -> list[tuple[int, Path]]:
    """(rank, file) for every Parquet part of `table`, sorted by rank then name."""
    base = RunLayout(Path(run_dir)).table_dir(table)
    out: list[tuple[int, Path]] = []
    if not base.is_dir():
        return out
    for part_dir in base.glob("rank=*"):
        try:
            rank = int(part_dir.name.split("=", 1)[1])
        except ValueError:
            continue
        out.extend((rank, f) for f in sorted(part_dir.glob("*.parquet")))
    out.sort(key=lambda rf: (rf[0], rf[1].name))
    return out


def check_schema_version(path: Path) -> None:
    """Refuse a file written by a newer store schema than this tracekit reads."""
    try:
        meta = pq.read_schema(path).metadata or {}
    except Exception as exc:  # pyarrow raises several types for damaged files
        msg = f"{path}: not a readable Parquet file ({exc}); re-run `tracekit merge` or `tracekit ingest`"
        raise StoreError(msg) from exc
    raw = meta.get(META_SCHEMA_VERSION.encode())
    version = int(raw) if raw else 0
    if version > SCHEMA_VERSION:
        msg = (
            f"{path}: written by store schema version {version}, this tracekit reads up to "
            f"{SCHEMA_VERSION}; upgrade tracekit (`pip install -U tracekit-spec`)"
        )
        raise SchemaError(msg)


def check_store(run_dir: Path) -> None:
    """The store reads: every Parquet part's footer (StoreError, or SchemaError for a newer
    schema, naming the first part that does not), and every rank whose records merge wrote
    (manifests `process.records` > 0) has its `phases` and `cycles` parts. The analysis
    commands check this before computing anything, so a damaged store gives one line and
    exit 2 from each of them, and no page is written from it. A run with `raw/` and no table
    has not been merged: that is said too."""
    layout = RunLayout(Path(run_dir))
    if layout.raw.is_dir() and not any(table_files(run_dir, t) for t in TABLES):
        msg = (
            f"{run_dir}: not merged yet (raw/ holds the collector's records, the store has "
            f"none); run `tracekit merge {run_dir}` first"
        )
        raise StoreError(msg)
    for table in TABLES:
        for _rank, f in table_files(run_dir, table):
            check_schema_version(f)
    merged: list[int] = []
    for rank, f in table_files(run_dir, "manifests"):
        try:
            t = pq.read_table(f, columns=["section", "key", "value"]).to_pydict()
        except Exception as exc:  # pyarrow raises several types for damaged files
            msg = f"{f}: not a readable Parquet file ({exc}); re-run `tracekit merge`"
            raise StoreError(msg) from exc
        rows = zip(t["section"], t["key"], t["value"], strict=True)
        if any(s == "process" and k == "records" and v not in ("", "0") for s, k, v in rows):
            merged.append(rank)
    for table in ("phases", "cycles"):
        have = {r for r, _ in table_files(run_dir, table)}
        gone = sorted(set(merged) - have)
        if gone:
            where = RunLayout(Path(run_dir)).table_dir(table)
            msg = (
                f"{where}: no part for rank(s) {gone}, whose records merge wrote (the store "
                f"is incomplete); re-run `tracekit merge {run_dir}`"
            )
            raise StoreError(msg)


def has_table(run_dir: Path, table: str) -> bool:
    return bool(table_files(run_dir, table))


def ranks(run_dir: Path, table: str = "events") -> list[int]:
    return sorted({r for r, _ in table_files(run_dir, table)})


def scan_table(run_dir: Path, table: str, *, rank: int | None = None) -> pl.LazyFrame:
    """Lazily scan `table` (all ranks, or one), adding an int32 `rank` column.

    Raises StoreError when the run directory has no such table.
    """
    import polars as pl

    if table not in TABLES:
        msg = f"unknown table `{table}`; tables are {sorted(TABLES)}"
        raise StoreError(msg)
    files = [(r, f) for r, f in table_files(run_dir, table) if rank is None or r == rank]
    if not files:
        where = f" for rank {rank}" if rank is not None else ""
        msg = (
            f"{run_dir}: no `{table}` table{where} in the store; "
            "create it with `tracekit ingest TRACES -o RUN_DIR` or `tracekit merge RUN_DIR`"
        )
        raise StoreError(msg)
    frames = []
    for r, f in files:
        check_schema_version(f)
        frames.append(pl.scan_parquet(f).with_columns(pl.lit(r, dtype=pl.Int32).alias("rank")))
    return pl.concat(frames, how="diagonal_relaxed")


def read_table(run_dir: Path, table: str, *, rank: int | None = None) -> pl.DataFrame:
    return scan_table(run_dir, table, rank=rank).collect()
