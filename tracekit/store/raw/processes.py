"""The processes of a run's `raw/`: each `pid-<pid>/` directory read whole (its state, its
manifest, its records across all segments, its Kineto trace), damage named, never raised.

A damaged record segment (cut, emptied, overwritten, or missing between two that are there)
keeps its complete batches and every segment after it is read too; each is described by a
`SegmentDamage` (the file, why, the raw cycles on either side of what was lost) that merge
turns into one warning (tracekit/store/merge_damage.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.store.raw.accepts import attach_accepts
from tracekit.store.raw.files import (
    KINETO_FILE,
    MANIFEST_FILE,
    PROCESS_FILE,
    RECORDS_FILE,
    list_segments,
    process_dirs,
    read_json,
    segment_name,
)
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import empty_records, read_records
from tracekit.store.raw.schema import raw_schema
from tracekit.store.raw.threads import thread_map

if TYPE_CHECKING:
    import polars as pl


@dataclass
class SegmentDamage:
    """One record segment that could not be read whole (or is missing)."""

    path: Path
    why: str  # "missing", "empty file", "cut after its last complete batch", the reader's error
    rows: int = 0  # records read from it (its complete batches)
    last: bool = False  # the process's newest segment (a cut there is a partial process)
    before: int | None = None  # the highest raw cycle read before the loss (this file included)
    after: int | None = None  # the lowest raw cycle read after it (later segments)


@dataclass
class ProcessData:
    pid: int
    dir: Path
    info: dict[str, Any]
    manifest: dict[str, dict[str, str]]
    records: pl.DataFrame  # its decoded records (raw/records.py `decoded`), with `pid`
    complete: bool  # record stream ended with its end-of-stream marker
    read_error: str | None = None
    damaged: str | None = None  # why none of its records could be read, naming the file
    rank: int | None = None
    rank_source: str = ""
    kineto: Path | None = None
    segments: int = 0  # record segments read (collectors/segments.py)
    damage: list[SegmentDamage] = field(default_factory=list)  # oldest first
    rows_read: int = 0  # rows of its segments, before rows missing a key value are left out
    manifest_error: str | None = None  # why manifest.json could not be read ("missing" if gone)
    info_error: str | None = None  # why process.json could not be read ("missing" if gone)

    @property
    def n_records(self) -> int:
        return int(self.records.height)


def _expected_indexes(info: dict[str, Any], present: list[int]) -> list[int]:
    """The segment indexes a process should have on disk: from the first one retention kept
    (process.json `dropped`) to the newest it wrote (`segments.current`), or those present."""
    dropped = info.get("dropped")
    last_dropped = dropped.get("last_index") if isinstance(dropped, dict) else None
    first = last_dropped + 1 if type(last_dropped) is int and last_dropped >= 0 else 0
    segs = info.get("segments")
    current = segs.get("current") if isinstance(segs, dict) else None
    newest = max(present, default=-1)
    if type(current) is int and 0 <= current < 1 << 20:
        newest = max(newest, current)
    if newest < 0 and _written(info):
        newest = first  # records were written, and no segment is there
    return list(range(min([first, *present]), newest + 1))


def _written(info: dict[str, Any]) -> int:
    n = info.get("records")
    return n if type(n) is int and n > 0 else 0


def _cycle_bounds(table: Any) -> tuple[int | None, int | None]:
    import pyarrow.compute as pc

    if table is None or not table.num_rows or "cycle" not in table.column_names:
        return None, None
    col = table.column("cycle")
    try:
        col = pc.filter(col, pc.greater_equal(col, 0))
        lo, hi = pc.min(col).as_py(), pc.max(col).as_py()
    except Exception:  # a column of another type: the record check names the file
        return None, None
    return lo, hi


def _read_segments(
    d: Path, info: dict[str, Any]
) -> tuple[Any, bool, str | None, Path | None, list[SegmentDamage]]:
    """The records of a process's segments, oldest first: (table, the last one ended cleanly,
    the first error with its file, the file named in it, each damaged or missing segment). A
    damaged segment keeps its complete batches and the others are read too."""
    import pyarrow as pa

    on_disk = dict(list_segments(d))
    indexes = _expected_indexes(info, list(on_disk))
    tables: list[Any] = []
    damage: list[SegmentDamage] = []
    bounds: list[tuple[int | None, int | None]] = []
    complete, err, where = False, None, None
    for n, index in enumerate(indexes):
        path = on_disk.get(index, d / segment_name(index))
        last = n == len(indexes) - 1
        seg_err: str | None = "missing"
        table: Any = None
        if index not in on_disk:
            complete = False
        else:
            table, complete, seg_err = read_stream(path, raw_schema())
        rows = table.num_rows if table is not None else 0
        if seg_err and err is None:
            err, where = seg_err, path
        if seg_err or (not complete and not last):
            why = seg_err or "cut after its last complete batch (no end-of-stream marker)"
            damage.append(SegmentDamage(path, why, rows=rows, last=last))
        bounds.append(_cycle_bounds(table))
        if table is not None and table.num_rows:
            tables.append(table)
    _place_damage(damage, indexes, bounds, d)
    if not tables:
        return None, complete, err, where, damage
    if len(tables) == 1:
        return tables[0], complete, err, where, damage
    try:
        return pa.concat_tables(tables), complete, err, where, damage
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        return tables[-1], complete, err or str(exc), where or d / RECORDS_FILE, damage


def _place_damage(
    damage: list[SegmentDamage],
    indexes: list[int],
    bounds: list[tuple[int | None, int | None]],
    d: Path,
) -> None:
    """Each damage's raw cycles on either side: the highest read up to it, the lowest after."""
    for dmg in damage:
        i = next(n for n, ix in enumerate(indexes) if d / segment_name(ix) == dmg.path)
        highs = [hi for _lo, hi in bounds[: i + 1] if hi is not None]
        lows = [lo for lo, _hi in bounds[i + 1 :] if lo is not None]
        dmg.before = max(highs) if highs else None
        dmg.after = min(lows) if lows else None


def _read_process(pid: int, d: Path) -> ProcessData:
    """One process directory: its state, manifest, records (all segments) and Kineto trace."""
    info, info_error = read_json(d / PROCESS_FILE)
    manifest, manifest_error = read_json(d / MANIFEST_FILE)
    import polars as pl

    records = None
    damaged = None
    table, complete, err, rec_path, damage = _read_segments(d, info)
    if table is not None and table.num_rows:
        records, damaged = read_records(d, table)
        if records is not None:
            records = attach_accepts(records, d).with_columns(pl.lit(pid, pl.Int64).alias("pid"))
    elif err:
        damaged = f"{rec_path}: {err}"
    kineto = d / KINETO_FILE
    proc = ProcessData(
        pid=pid,
        dir=d,
        info=info,
        manifest={
            str(k): {str(kk): vv for kk, vv in v.items()}
            for k, v in manifest.items()
            if isinstance(v, dict)
        },
        records=records if records is not None else empty_records(),
        complete=complete,
        read_error=err,
        damaged=damaged,
        kineto=kineto if kineto.exists() else None,
        segments=len(list_segments(d)),
        damage=damage,
        rows_read=table.num_rows if table is not None else 0,
        manifest_error=manifest_error
        or (None if (d / MANIFEST_FILE).exists() or not info else "missing"),
    )
    if info_error:
        proc.damaged = proc.damaged or f"{d / PROCESS_FILE}: {info_error}"
        proc.info = {}
    elif not info and not (d / PROCESS_FILE).exists():
        proc.info_error = f"{d / PROCESS_FILE}: missing"
    return proc


def read_processes(raw: Path, threads: int | None = None) -> list[ProcessData]:
    """Every recorded process under `raw` (RUN_DIR/raw), in the order of their directories,
    read on up to `threads` threads (default: one a core; store/raw/threads.py)."""
    return thread_map(lambda item: _read_process(*item), process_dirs(raw), threads)
