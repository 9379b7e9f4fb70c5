"""The processes of a run's `raw/`: each `pid-<pid>/` directory read whole (its state, its
manifest, its records across all segments, its Kineto trace), damage named, never raised."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.store.raw.accepts import attach_accepts
from tracekit.store.raw.files import (
    KINETO_FILE,
    MANIFEST_FILE,
    PROCESS_FILE,
    list_segments,
    process_dirs,
    read_json,
)
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import read_records
from tracekit.store.raw.schema import raw_schema


@dataclass
class ProcessData:
    pid: int
    dir: Path
    info: dict[str, Any]
    manifest: dict[str, dict[str, str]]
    records: list[dict[str, Any]]
    complete: bool  # record stream ended with its end-of-stream marker
    read_error: str | None = None
    damaged: str | None = None  # why none of its records could be read, naming the file
    rank: int | None = None
    rank_source: str = ""
    kineto: Path | None = None
    segments: int = 0  # record segments read (collectors/segments.py)

    @property
    def n_records(self) -> int:
        return len(self.records)


def _read_segments(
    segments: list[tuple[int, Path]],
) -> tuple[Any, bool, str | None, Path | None]:
    """The records of a process's segments, oldest first: (table, the last one ended cleanly,
    the first error with its file, the file named in it). A damaged segment keeps its complete
    batches and the others are read too."""
    import pyarrow as pa

    tables: list[Any] = []
    complete, err, where = False, None, None
    for _index, path in segments:
        table, complete, seg_err = read_stream(path, raw_schema())
        if seg_err and err is None:
            err, where = seg_err, path
        if table is not None and table.num_rows:
            tables.append(table)
    if not tables:
        return None, complete, err, where
    if len(tables) == 1:
        return tables[0], complete, err, where
    try:
        return pa.concat_tables(tables), complete, err, where
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        return tables[-1], complete, err or str(exc), where or segments[-1][1]


def _read_process(pid: int, d: Path) -> ProcessData:
    """One process directory: its state, manifest, records (all segments) and Kineto trace."""
    info, info_error = read_json(d / PROCESS_FILE)
    manifest = read_json(d / MANIFEST_FILE)[0]
    records: list[dict[str, Any]] = []
    damaged = None
    segments = list_segments(d)
    table, complete, err, rec_path = _read_segments(segments)
    if table is not None and table.num_rows:
        records, damaged = read_records(d, table)
        attach_accepts(records, d)
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
        records=records,
        complete=complete,
        read_error=err,
        damaged=damaged,
        kineto=kineto if kineto.exists() else None,
        segments=len(segments),
    )
    if info_error:
        proc.damaged = proc.damaged or f"{d / PROCESS_FILE}: {info_error}"
        proc.info = {}
    return proc


def read_processes(raw: Path) -> list[ProcessData]:
    """Every recorded process under `raw` (RUN_DIR/raw), in the order of their directories."""
    return [_read_process(pid, d) for pid, d in process_dirs(raw)]
