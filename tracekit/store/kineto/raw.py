"""Read one Kineto Chrome-JSON trace (`.json` / `.json.gz`) and split it into its top-level keys
and its raw `traceEvents` (msgspec: a validating scan, no per-event objects). Damaged files (a
rank killed mid-write) are salvaged: the events before the cut are kept and a warning says how
many.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from tracekit.errors import TraceFormatError

_DEC_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_DEC_RAWLIST = msgspec.json.Decoder(list[msgspec.Raw])
_DEC_ANY = msgspec.json.Decoder()


@dataclass
class RawTrace:
    """A trace split into its top-level keys and its raw `traceEvents`.

    `events` is the raw JSON array of an intact file, or the list of raw events kept from a
    damaged one (`salvaged`). `native` is the (start, end) of the `traceEvents` array when the
    columnar scanner split the file (`native.split`; `events` is then empty and the array is
    validated as it is read).
    """

    path: Path
    meta: dict[str, msgspec.Raw]
    events: msgspec.Raw | list[msgspec.Raw]
    data: bytes | memoryview
    warnings: list[str] = field(default_factory=list)
    salvaged: bool = False
    native: tuple[int, int] | None = None


class ReadBuffer:
    """One buffer for the files a process reads in turn: a file's bytes land in pages already
    mapped, not in fresh ones the kernel must zero (about 23,000 page faults a 93 MB rank).
    A view it returned is overwritten by the next read."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def read(self, path: Path) -> memoryview | None:
        """The file's bytes (a view), or None where it grew while read."""
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if len(self._buf) < size + 1:
                self._buf = bytearray(size + 1)  # views of the old one keep it alive
            view = memoryview(self._buf)
            n = fh.readinto(view[: size + 1])
        return None if n > size else view[:n]


def read_bytes(path: Path) -> tuple[bytes, str | None]:
    """The file's bytes, gunzipped when gzip. Returns (data, warning-or-None).

    A truncated or corrupt gzip stream keeps what was decompressed before the damage.
    """
    raw = path.read_bytes()
    if raw[:2] != b"\x1f\x8b":
        return raw, None
    dec = zlib.decompressobj(wbits=31)
    chunks: list[bytes] = []
    step = 1 << 24
    try:
        for i in range(0, len(raw), step):
            saved = dec.copy()
            try:
                chunks.append(dec.decompress(raw[i : i + step]))
            except zlib.error:
                # Redo this piece in small steps: keep what decompresses before the damage.
                dec = saved
                for j in range(i, min(i + step, len(raw)), 4096):
                    chunks.append(dec.decompress(raw[j : j + 4096]))
            if dec.eof:
                break
        chunks.append(dec.flush())
    except zlib.error as exc:
        return b"".join(chunks), f"damaged gzip stream ({exc})"
    if not dec.eof:
        return b"".join(chunks), "truncated gzip stream"
    return b"".join(chunks), None


_BYTE_POS = re.compile(r"byte (\d+)")


def split_trace(path: Path, data: bytes, gz_warning: str | None = None) -> RawTrace:
    """Split a trace into top-level raw values and raw events; salvage a damaged one."""
    if gz_warning and not data.strip():
        msg = f"{path}: {gz_warning} before any data; copy or export the trace again"
        raise TraceFormatError(msg)
    if not data[:65536].strip() and not data.strip():
        msg = f"{path}: empty file; pass a Kineto trace (`.json` or `.json.gz`) written by torch.profiler"
        raise TraceFormatError(msg)
    try:
        meta = _DEC_TOP.decode(data)
    except msgspec.DecodeError as exc:
        return _salvage(path, data, exc, gz_warning)
    except msgspec.ValidationError:
        msg = f"{path}: JSON but not a Kineto trace (the top level is not an object with `traceEvents`); pass a torch.profiler trace"
        raise TraceFormatError(msg) from None
    raw_events = meta.pop("traceEvents", None)
    if raw_events is None:
        msg = f"{path}: JSON but not a Kineto trace (no `traceEvents` array); pass a torch.profiler trace"
        raise TraceFormatError(msg)
    if memoryview(raw_events)[:1].tobytes() != b"[":
        msg = f"{path}: `traceEvents` is not an array; pass a torch.profiler trace"
        raise TraceFormatError(msg)
    trace = RawTrace(path, meta, raw_events, data)
    if gz_warning:
        # The JSON parsed although the gzip stream was damaged after its end: keep it, say so.
        trace.warnings.append(f"{path}: {gz_warning} after a complete trace; all events kept")
    return trace


def _salvage(path: Path, data: bytes, exc: Exception, gz_warning: str | None) -> RawTrace:
    """Keep the events before the damage of a truncated or corrupt trace."""
    head = data[:4096].lstrip()
    key = data.find(b'"traceEvents"')
    if not head.startswith(b"{") or key < 0:
        what = "not JSON" if not head.startswith((b"{", b"[")) else "JSON but not a Kineto trace"
        msg = f"{path}: {what} ({_short(exc)}); pass a Kineto trace (`.json` or `.json.gz`) written by torch.profiler"
        raise TraceFormatError(msg) from None
    # Top-level keys written before traceEvents (deviceProperties, distributedInfo, ...).
    meta: dict[str, msgspec.Raw] = {}
    prefix = data[:key].rstrip().rstrip(b",")
    try:
        meta = _DEC_TOP.decode(prefix + b"}")
    except (msgspec.DecodeError, msgspec.ValidationError):
        meta = {}
    open_ = data.find(b"[", key)
    m = _BYTE_POS.search(str(exc))
    limit = int(m.group(1)) if m else len(data)
    events: list[msgspec.Raw] = []
    if open_ >= 0:
        events = _last_complete_prefix(data, open_, limit)
    # Top-level keys written after traceEvents (a complete file's tail) are lost with the cut.
    if not events:
        msg = f"{path}: damaged trace with no complete event ({gz_warning or _short(exc)}); re-export the trace"
        raise TraceFormatError(msg)
    why = gz_warning or f"damaged JSON ({_short(exc)})"
    warning = f"{path}: {why}; salvaged {len(events)} events written before the damage"
    return RawTrace(path, meta, events, data, warnings=[warning], salvaged=True)


def _last_complete_prefix(data: bytes, open_: int, limit: int) -> list[msgspec.Raw]:
    """The longest decodable `[ev, ev, ...` prefix of the array starting at `open_`."""
    end = min(limit, len(data))
    body = data[open_:end]
    # Try cutting after each '}' from the end; inner braces of args fail fast and we move on.
    pos = len(body)
    for _ in range(4096):
        pos = body.rfind(b"}", 0, pos)
        if pos < 0:
            return []
        try:
            return _DEC_RAWLIST.decode(body[: pos + 1] + b"]")
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return []


def _short(exc: Exception) -> str:
    return str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__


def meta_value(trace: RawTrace, key: str) -> Any:
    """Decode one top-level value (None when absent or undecodable)."""
    raw = trace.meta.get(key)
    if raw is None:
        return None
    try:
        return _DEC_ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def base_time_ns(trace: RawTrace) -> int | None:
    """`baseTimeNanoseconds` (torch >= 2.4: `ts` is relative to it), else None (absolute µs)."""
    value = meta_value(trace, "baseTimeNanoseconds")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if not 0 <= value < 2**63:  # not a time since the epoch in int64 ns (or NaN)
        return None
    return int(value)
