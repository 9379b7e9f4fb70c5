"""Rotation and retention of a process's record stream (`tracekit launch --keep/--keep-hours`).

Runs inside the server, so it imports only the standard library and the raw format
(tracekit/store/raw/files.py names the segments and lists them). A process's records are a
sequence of segments in `raw/pid-<pid>/`: `records.arrow` (segment 0, the only one of a short
run), then `records.1.arrow`, `records.2.arrow`, ... Each segment is a complete Arrow IPC
stream (schema, batches, the end-of-stream marker once closed); only the last one grows.

Rotation: the recorder closes its segment and opens the next at a flush once the segment holds
`segment_bytes`, or has been open `segment_seconds` (when set). Retention, checked at every
flush: the oldest closed segments are deleted while the closed ones plus one segment to come
exceed `keep_bytes` (so the records of a process never take more than `keep_bytes` on disk,
plus the one batch that crossed the rotation size), and any closed segment whose last write is
older than `keep_seconds`. What was deleted is counted in `process.json` (`dropped`), so merge
says what is missing and the live metrics count it as lost.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.store.raw.accepts import accepts_name
from tracekit.store.raw.files import segment_name

DEFAULT_SEGMENT_BYTES = 256 << 20  # without --keep: segments this big, none deleted
MIN_SEGMENT_BYTES = 64 << 10
SEGMENTS_PER_KEEP = 8  # --keep 2GB: 256 MB segments, deleted one at a time
SEGMENTS_PER_KEEP_AGE = 24  # --keep-hours 24: a segment an hour
MIN_SEGMENT_SECONDS = 1.0


@dataclass(frozen=True)
class RetentionPolicy:
    """When a segment is closed and which closed segments are deleted (0: never)."""

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_seconds: float = 0.0
    keep_bytes: int = 0
    keep_seconds: float = 0.0

    @classmethod
    def from_keep(
        cls,
        keep_bytes: int = 0,
        keep_seconds: float = 0.0,
        *,
        segment_bytes: int = 0,
        segment_seconds: float = 0.0,
    ) -> RetentionPolicy:
        """Segment sizes derived from the budget unless given: an eighth of `keep_bytes`
        (at least 64 KiB, at most 256 MiB), a 24th of `keep_seconds` (at least 1 s)."""
        if segment_bytes <= 0:
            segment_bytes = DEFAULT_SEGMENT_BYTES
            if keep_bytes > 0:
                segment_bytes = max(
                    MIN_SEGMENT_BYTES, min(segment_bytes, keep_bytes // SEGMENTS_PER_KEEP)
                )
        if segment_seconds <= 0 and keep_seconds > 0:
            segment_seconds = max(MIN_SEGMENT_SECONDS, keep_seconds / SEGMENTS_PER_KEEP_AGE)
        return cls(
            segment_bytes=segment_bytes,
            segment_seconds=max(0.0, segment_seconds),
            keep_bytes=max(0, keep_bytes),
            keep_seconds=max(0.0, keep_seconds),
        )


@dataclass
class Segment:
    index: int
    path: Path
    opened_ns: int
    bytes: int = 0
    records: int = 0
    last_write_ns: int = 0
    first_ns: int | None = None  # earliest record start
    last_ns: int | None = None  # latest record end
    first_cycle: int | None = None
    last_cycle: int | None = None

    def add(
        self, nbytes: int, records: int, span: tuple[int, int, int, int] | None, now: int
    ) -> None:
        """`span`: (first start ns, last end ns, lowest cycle, highest cycle) of the batch."""
        self.bytes += nbytes
        self.records += records
        self.last_write_ns = now
        if span is not None:
            s, e, c0, c1 = span
            self.first_ns = s if self.first_ns is None else min(self.first_ns, s)
            self.last_ns = e if self.last_ns is None else max(self.last_ns, e)
            self.first_cycle = c0 if self.first_cycle is None else min(self.first_cycle, c0)
            self.last_cycle = c1 if self.last_cycle is None else max(self.last_cycle, c1)


@dataclass
class Dropped:
    """The segments retention deleted so far (process.json `dropped`)."""

    segments: int = 0
    records: int = 0
    bytes: int = 0
    first_index: int | None = None
    last_index: int | None = None
    until_ns: int | None = None  # the latest record end in what was dropped
    last_cycle: int | None = None  # the highest raw cycle number in what was dropped
    reasons: dict[str, int] = field(default_factory=dict)  # "keep" / "keep-hours" -> segments

    def add(self, seg: Segment, reason: str) -> None:
        self.segments += 1
        self.records += seg.records
        self.bytes += seg.bytes
        if self.first_index is None:
            self.first_index = seg.index
        self.last_index = seg.index
        if seg.last_ns is not None:
            self.until_ns = max(self.until_ns or 0, seg.last_ns)
        if seg.last_cycle is not None:
            self.last_cycle = max(
                self.last_cycle if self.last_cycle is not None else -1, seg.last_cycle
            )
        self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def to_json(self) -> dict[str, Any]:
        return {
            "segments": self.segments,
            "records": self.records,
            "bytes": self.bytes,
            "first_index": self.first_index,
            "last_index": self.last_index,
            "until_ns": self.until_ns,
            "last_cycle": self.last_cycle,
            "reasons": dict(self.reasons),
        }


class SegmentLog:
    """The closed segments of one process (oldest first, bounded by retention) and the open one."""

    def __init__(self, policy: RetentionPolicy) -> None:
        self.policy = policy
        self.closed: deque[Segment] = deque()
        self.closed_bytes = 0
        self.current: Segment | None = None
        self.dropped = Dropped()

    def open(self, pid_dir: Path, now_ns: int) -> Segment:
        index = 0 if self.current is None else self.current.index + 1
        self.current = Segment(index, pid_dir / segment_name(index), opened_ns=now_ns)
        return self.current

    def should_rotate(self, now_ns: int) -> bool:
        seg = self.current
        if seg is None or seg.records == 0:
            return False
        p = self.policy
        if p.segment_bytes > 0 and seg.bytes >= p.segment_bytes:
            return True
        return p.segment_seconds > 0 and now_ns - seg.opened_ns >= p.segment_seconds * 1e9

    def close_current(self) -> None:
        seg = self.current
        if seg is not None:
            self.closed.append(seg)
            self.closed_bytes += seg.bytes

    def enforce(self, now_ns: int) -> list[Segment]:
        """Delete the closed segments retention no longer keeps; return them."""
        p = self.policy
        gone: list[Segment] = []
        while self.closed:
            oldest = self.closed[0]
            reason = ""
            if p.keep_bytes > 0 and self.closed_bytes + p.segment_bytes > p.keep_bytes:
                reason = "keep"
            elif p.keep_seconds > 0 and now_ns - oldest.last_write_ns > p.keep_seconds * 1e9:
                reason = "keep-hours"
            if not reason:
                break
            self.closed.popleft()
            self.closed_bytes -= oldest.bytes
            for path in (oldest.path, oldest.path.with_name(accepts_name(oldest.index))):
                try:
                    path.unlink()  # the segment's records and its acceptance readings
                except FileNotFoundError:
                    pass
            self.dropped.add(oldest, reason)
            gone.append(oldest)
        return gone

    def to_json(self) -> dict[str, Any]:
        cur = self.current
        return {
            "current": cur.index if cur is not None else None,
            "kept": len(self.closed) + (cur is not None),
            "segment_bytes": self.policy.segment_bytes,
            "segment_seconds": self.policy.segment_seconds,
            "keep_bytes": self.policy.keep_bytes,
            "keep_seconds": self.policy.keep_seconds,
        }
