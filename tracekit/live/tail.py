"""Follow a run's raw records as the processes flush them (`tracekit top`, `--metrics-port`).

Every process appends Arrow IPC record batches to its current segment
(`raw/pid-<pid>/records[.N].arrow`, tracekit/store/raw/files.py), one `os.write` a batch. The tail
keeps a byte offset per segment and reads only what was appended since its last poll, one IPC
message at a time: a batch still being written (or cut by a crash) is left for the next poll.
A closed segment ends with the end-of-stream marker; then the tail goes on with the next one.
Segments deleted by retention before the tail read them are counted (`skipped`), never fatal.

Reads with pyarrow, in the launcher's process or `tracekit top`'s, never in the server. The
rows come out decoded as merge decodes them (tracekit/store/raw/records.py: complete rows, sites
resolved).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.store.raw.files import PROCESS_FILE, SITES_FILE, list_segments, read_json
from tracekit.store.raw.records import complete, decoded, valid_sites
from tracekit.store.raw.schema import EOS as _EOS

READ_CHUNK = 64 << 20  # at most this much of a segment a poll


@dataclass
class SegmentTail:
    index: int
    path: Path
    offset: int = 0
    schema: pa.Schema | None = None
    done: bool = False  # its end-of-stream marker was read
    damaged: str | None = None

    def read_new(self) -> list[pa.RecordBatch]:
        """The complete record batches appended since the last call."""
        if self.done or self.damaged:
            return []
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size <= self.offset:
            return []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(min(size - self.offset, READ_CHUNK))
        reader = pa.BufferReader(pa.py_buffer(data))
        out: list[pa.RecordBatch] = []
        pos = 0
        while pos + 8 <= len(data):
            if data[pos : pos + 8] == _EOS:
                self.done = True
                pos += 8
                break
            try:
                msg = pa.ipc.read_message(reader)
            except (pa.ArrowInvalid, OSError, EOFError):
                break  # the rest is not complete yet (or never will be: the next poll says)
            end = reader.tell()
            if end <= pos:
                break
            try:
                if msg.type == "schema":
                    self.schema = pa.ipc.read_schema(msg)
                elif msg.type == "record batch" and self.schema is not None:
                    out.append(pa.ipc.read_record_batch(msg, self.schema))
            except (pa.ArrowInvalid, OSError) as exc:
                self.damaged = f"{self.path}: {exc}"
                break
            pos = end
            reader.seek(pos)
        self.offset += pos
        return out


@dataclass
class ProcessTail:
    """The records of one process, followed across its segments."""

    pid: int
    dir: Path
    segment: SegmentTail | None = None
    sites: list[dict[str, Any]] = field(default_factory=list)  # sites.json's site table
    info: dict[str, Any] = field(default_factory=dict)  # process.json
    records: int = 0
    skipped: int = 0  # segments deleted by retention before they were read

    @property
    def rank(self) -> int | None:
        ri = self.info.get("rank_info")
        if isinstance(ri, dict):
            for key in ("dist_rank", "env_rank"):
                v = ri.get(key)
                if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                    return v
        return None

    def dropped_records(self) -> int:
        d = self.info.get("dropped")
        n = d.get("records", 0) if isinstance(d, dict) else 0
        return n if isinstance(n, int) else 0

    def refresh_info(self) -> None:
        data, _why = read_json(self.dir / PROCESS_FILE)
        if data:  # a missing or half-written file keeps what was read before
            self.info = data

    def _load_sites(self) -> None:
        data, _why = read_json(self.dir / SITES_FILE)
        sites = valid_sites(data)
        if sites is not None:
            self.sites = sites

    def decode(self, batch: pa.RecordBatch) -> list[dict[str, Any]]:
        """The batch's complete rows, decoded with the process's site table (kind, phase,
        parent name, target); a code not in it is read again first (sites.json is rewritten
        before the first batch that uses a new code), one still unknown reads `code<N>`."""
        rows = complete(batch)
        known = {int(s["code"]) for s in self.sites}
        if not set(rows.column("code").drop_null().to_pylist()) <= known:
            self._load_sites()
        out: list[dict[str, Any]] = decoded(rows, self.sites).to_dicts()  # live follows rows
        return out

    def poll(self) -> list[pa.RecordBatch]:
        """New batches, across as many segments as were closed since the last poll."""
        out: list[pa.RecordBatch] = []
        while True:
            segs = list_segments(self.dir)
            cur = self.segment
            if cur is None:
                if not segs:
                    return out
                self.segment = cur = SegmentTail(*segs[0])
                self.skipped += segs[0][0]  # segments before it were gone at the first look
            out.extend(cur.read_new())
            if not (cur.done or not cur.path.exists()):
                return out  # still growing (or damaged: merge says so)
            later = [s for s in segs if s[0] > cur.index]
            if not later:
                return out
            self.skipped += later[0][0] - cur.index - 1
            self.segment = SegmentTail(*later[0])


class RunTail:
    """Every process of a run directory's `raw/`, polled together."""

    def __init__(self, raw: Path) -> None:
        self.raw = raw
        self.procs: dict[int, ProcessTail] = {}

    def poll(self) -> list[tuple[ProcessTail, pa.RecordBatch]]:
        """New batches of every process, with the process they came from."""
        try:
            names = os.listdir(self.raw)
        except OSError:
            return []
        for name in names:
            if name.startswith("pid-") and name[4:].isdigit():
                pid = int(name[4:])
                if pid not in self.procs:
                    self.procs[pid] = ProcessTail(pid, self.raw / name)
        out: list[tuple[ProcessTail, pa.RecordBatch]] = []
        for pid in sorted(self.procs):
            p = self.procs[pid]
            p.refresh_info()
            for batch in p.poll():
                p.records += batch.num_rows
                out.append((p, batch))
        return out
