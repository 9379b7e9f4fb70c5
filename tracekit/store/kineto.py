"""Decode one Kineto Chrome-JSON trace (`.json` / `.json.gz`) into Arrow batches of `events`.

Fast path: msgspec decodes the top level into raw slices, the `traceEvents` array into raw event
slices (a scan, no objects), then batches of events into typed structs. Timestamps become exact
int64 nanoseconds (see `exact_ns`). Damaged files (a rank killed mid-write) are salvaged: the
events before the cut are kept and a warning says how many.

Imports only msgspec, numpy and pyarrow, so ingest workers start quickly.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.errors import TraceFormatError

EMPTY = msgspec.Raw()

# Event phases kept in the `events` table: complete events, instants, counters. Flows (s/f/t)
# duplicate `args.correlation`; metadata (M) names processes and threads.
KEEP_PH = frozenset({"X", "i", "I", "C"})

GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
# Categories whose rows run on a device stream (pid = device, tid = stream).
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"})
# Categories whose args are fully covered by typed columns: their `args` column stays null.
ARGS_COVERED_CATS = frozenset({"cuda_runtime", "cuda_driver"})

BATCH_EVENTS = 131_072
# Events whose fields are read together, while their structs are still in the CPU cache.
CHUNK_EVENTS = 4096


class Event(msgspec.Struct, gc=False):
    """One trace event as written by Kineto (only the keys tracekit reads)."""

    ph: str = ""
    cat: str | None = None
    name: str = ""
    ts: int | float | None = None
    dur: int | float | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    args: msgspec.Raw = EMPTY


class LooseEvent(msgspec.Struct, gc=False):
    """The same, accepting any JSON type (slow path for odd producers)."""

    ph: Any = ""
    cat: Any = None
    name: Any = ""
    ts: Any = None
    dur: Any = None
    pid: Any = None
    tid: Any = None
    args: msgspec.Raw = EMPTY


class Args(msgspec.Struct, gc=False):
    """The args tracekit keeps as typed columns (as kineto writes them)."""

    stream: int | None = None
    correlation: int | None = None
    external_id: int | None = msgspec.field(name="External id", default=None)
    device: int | None = None
    cbid: int | None = None
    collective: str | None = msgspec.field(name="Collective name", default=None)
    dtype: str | None = None
    msg_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    group_size: int | None = msgspec.field(name="Group size", default=None)
    pg_name: str | None = msgspec.field(name="Process Group Name", default=None)
    bytes: int | None = None


class LooseArgs(msgspec.Struct, gc=False):
    """The same, accepting any JSON type (other producers: string stream ids, float ids)."""

    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(name="External id", default=None)
    device: Any = None
    cbid: Any = None
    collective: Any = msgspec.field(name="Collective name", default=None)
    dtype: Any = None
    msg_nelems: Any = msgspec.field(name="In msg nelems", default=None)
    group_size: Any = msgspec.field(name="Group size", default=None)
    pg_name: Any = msgspec.field(name="Process Group Name", default=None)
    bytes: Any = None


class _MiniArgs(msgspec.Struct, gc=False):
    correlation: Any = None


_DEC_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_DEC_RAWLIST = msgspec.json.Decoder(list[msgspec.Raw])
_DEC_EVENTS = msgspec.json.Decoder(list[Event])
_DEC_LOOSE = msgspec.json.Decoder(list[LooseEvent])
_DEC_LOOSE_ONE = msgspec.json.Decoder(LooseEvent)
_DEC_ARGS_LINES = msgspec.json.Decoder(Args)
_DEC_LOOSE_ARGS_LINES = msgspec.json.Decoder(LooseArgs)
_DEC_MINIARGS = msgspec.json.Decoder(_MiniArgs)
_DEC_ANY = msgspec.json.Decoder()
_ENC = msgspec.json.Encoder()
_EMPTY_OBJ = msgspec.Raw(b"{}")


@dataclass
class RawTrace:
    """A trace split into its top-level keys and its raw `traceEvents`.

    `events` is the raw JSON array of an intact file, or the list of raw events kept from a
    damaged one (`salvaged`).
    """

    path: Path
    meta: dict[str, msgspec.Raw]
    events: msgspec.Raw | list[msgspec.Raw]
    data: bytes
    warnings: list[str] = field(default_factory=list)
    salvaged: bool = False


# ---------------------------------------------------------------------------------------------
# Reading bytes and splitting the JSON


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


def load(path: Path) -> RawTrace:
    """Read and split one trace file (raises TraceFormatError for unusable input)."""
    data, gz_warning = read_bytes(path)
    return split_trace(path, data, gz_warning)


# ---------------------------------------------------------------------------------------------
# Metadata helpers


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


def graph_launch_correlations(events: list[Any]) -> set[int]:
    """Correlation ids of cudaGraphLaunch / cuGraphLaunch / hipGraphLaunch calls."""
    out: set[int] = set()
    for ev in events:
        name = ev.name
        if type(name) is str and name.startswith(GRAPH_LAUNCH_PREFIXES) and len(ev.args):
            try:
                corr = _to_int(_DEC_MINIARGS.decode(ev.args).correlation)
            except (msgspec.DecodeError, msgspec.ValidationError):
                continue
            if corr is not None:
                out.add(corr)
    return out


# ---------------------------------------------------------------------------------------------
# Events -> Arrow


@dataclass
class BatchStats:
    """Counts gathered while converting (reported in the manifest)."""

    events: int = 0
    skipped: int = 0  # kept phases without a usable ts
    negative_dur: int = 0
    devices: dict[int, int] = field(default_factory=dict)


_MAX_US = 9.0e15  # |µs| beyond this overflows int64 nanoseconds


def exact_ns(values: Sequence[Any], *, relative: bool) -> tuple[np.ndarray, np.ndarray]:
    """Microsecond JSON numbers -> exact int64 ns. Returns (ns, valid mask).

    Kineto writes `ts`/`dur` with exactly three decimals, so the true value is k/1000 µs for an
    integer k. The double a JSON parser gives is the correctly rounded k/1000; below 2^43 µs
    (relative times, durations) neighbouring k map to different doubles, so k is the candidate
    among round(x*1000)+{-1,0,1} whose k/1000 reproduces x exactly. Integers (old absolute-µs
    traces) are multiplied exactly. Old traces with fractional absolute µs (about 1.7e15) keep
    only the float's precision (about 0.25 µs).
    """
    n = len(values)
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):  # mixed types, ints past int64
        arr = pa.array([_as_float(v) for v in values], type=pa.float64())
    if pa.types.is_null(arr.type):
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=bool)
    if pa.types.is_integer(arr.type):
        valid = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        ints = arr.fill_null(0).to_numpy().astype(np.int64)
        valid &= np.abs(ints) < _MAX_US
        return np.where(valid, ints, 0) * 1000, valid
    if not pa.types.is_floating(arr.type):
        arr = pa.array([_as_float(v) for v in values], type=pa.float64())
    x = arr.fill_null(np.nan).to_numpy(zero_copy_only=False).astype(np.float64)
    valid = np.isfinite(x) & (np.abs(x) < _MAX_US)  # beyond int64 ns: not a time
    x = np.where(valid, x, 0.0)
    k = np.rint(x * 1000.0)
    small = np.abs(x) < 2.0**43
    if relative or small.all():
        for delta in (0.0, -1.0, 1.0):
            cand = k + delta
            ok = (cand / 1000.0) == x
            k = np.where(ok, cand, k)
            if ok.all():
                break
        out = k.astype(np.int64)
    else:
        # Absolute µs: whole numbers are exact, fractions keep the float's precision.
        whole = x == np.floor(x)
        out = np.where(whole, x.astype(np.int64) * 1000, k.astype(np.int64))
    return out, valid


def _as_float(v: Any) -> float | None:
    """A JSON number as a float (None for other types and ints too large to be a time)."""
    t = type(v)
    if t is float:
        return float(v)
    if t is int:
        return float(v) if abs(v) < 2**63 else None
    return None


_I64 = 2**63


def _to_int(v: Any) -> int | None:
    """An int64 from an int, a float holding a whole number, or a string of digits."""
    t = type(v)
    out: int | None = None
    if t is int:
        out = int(v)
    elif t is str:
        s = v.strip()
        if 0 < len(s) <= 20 and s.lstrip("-").isdecimal():
            try:
                out = int(s)
            except ValueError:  # "--5"
                return None
    elif t is float and v == v and abs(v) < 2**62 and v == int(v):
        out = int(v)
    return out if out is not None and -_I64 <= out < _I64 else None


_INT64 = pa.int64()


def _int_array(values: Sequence[Any], type_: pa.DataType = _INT64) -> pa.Array:
    """Ints (None -> null); strings of digits are parsed, anything else becomes null."""
    try:
        arr = pa.array(values)
        if pa.types.is_integer(arr.type) or pa.types.is_null(arr.type):
            return arr.cast(type_)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        pass
    ints = [None if v is None else _to_int(v) for v in values]
    if type_ == pa.int32():
        ints = [v if v is None or -(2**31) <= v < 2**31 else None for v in ints]
    return pa.array(ints, type=type_)


def _few_ints(values: Sequence[Any]) -> pa.Array:
    """pid/tid: few distinct values, almost all ints (kineto writes "Spans", "" for a few)."""
    uniq = dict.fromkeys(values)
    if all(type(k) is int and -_I64 <= k < _I64 for k in uniq):
        return pa.array(values, type=pa.int64())
    conv = {k: _to_int(k) for k in uniq}
    return pa.array(list(map(conv.__getitem__, values)), type=pa.int64())


def _str_array(values: Sequence[Any]) -> pa.Array:
    try:
        arr = pa.array(values)
        if pa.types.is_string(arr.type) or pa.types.is_null(arr.type):
            return arr.cast(pa.string())
    except (pa.ArrowException, OverflowError, TypeError, ValueError):
        pass  # mixed types, ints beyond int64: converted one by one below
    return pa.array(
        [v if (v is None or type(v) is str) else str(v) for v in values], type=pa.string()
    )


def _dict_array(values: Sequence[Any]) -> pa.DictionaryArray:
    """Dictionary-encode strings (first-seen order, None -> null), by Arrow when all are str."""
    try:
        return pa.array(values, type=pa.string()).dictionary_encode()
    except (pa.ArrowException, TypeError, ValueError, UnicodeError):
        return _dict_array_py(values)


def _dict_array_py(values: Sequence[Any]) -> pa.DictionaryArray:
    """The same in Python, for values that are not all strings."""
    uniq = dict.fromkeys(values)
    uniq.pop(None, None)
    pos: dict[Any, int] = {k: i for i, k in enumerate(uniq)}
    pos[None] = -1
    idx = np.array(list(map(pos.__getitem__, values)), dtype=np.int32)
    dictionary = pa.array([k if type(k) is str else str(k) for k in uniq], type=pa.string())
    indices = pa.array(idx, mask=idx < 0) if (idx < 0).any() else pa.array(idx)
    return pa.DictionaryArray.from_arrays(indices, dictionary)


def decode_events(trace: RawTrace) -> list[Any]:
    """All events as structs (typed fast path; any JSON types on the slow path)."""
    if isinstance(trace.events, list):
        blob: Any = b"[" + b",".join(trace.events) + b"]"
    else:
        blob = trace.events
    try:
        return _DEC_EVENTS.decode(blob)
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    try:
        evs = _DEC_LOOSE.decode(blob)
    except (msgspec.ValidationError, msgspec.DecodeError):
        # Some elements are not objects (a number, null, a list) or hold bytes that are not
        # UTF-8: keep the events that decode.
        evs = []
        for raw in _DEC_RAWLIST.decode(blob):
            try:
                evs.append(_DEC_LOOSE_ONE.decode(raw))
            except (msgspec.ValidationError, msgspec.DecodeError):
                continue
    for e in evs:  # names and phases of other JSON types: strings, as the fast path has them
        if type(e.ph) is not str:
            e.ph = ""
        if e.cat is not None and type(e.cat) is not str:
            e.cat = str(e.cat)
        if type(e.name) is not str:
            e.name = "" if e.name is None else str(e.name)
        if type(e.pid) not in (int, float, str):
            e.pid = None  # a list or an object: no usable pid
        if type(e.tid) not in (int, float, str):
            e.tid = None
    return evs


def iter_batches(
    trace: RawTrace,
    *,
    stats: BatchStats,
    batch_events: int = BATCH_EVENTS,
) -> Iterator[pa.Table]:
    """Yield `events` tables (schema columns, before `conform`) batch by batch.

    Decoded events are released as their fields are read, so memory holds the file's bytes,
    the structs not yet converted, and one batch of field lists and Arrow columns.
    """
    base = base_time_ns(trace)
    relative = base is not None
    offset = base if base is not None else 0
    events = decode_events(trace)
    graph_corrs = graph_launch_correlations(events) if b"GraphLaunch" in trace.data else set()
    for start in range(0, len(events), batch_events):
        end = min(start + batch_events, len(events))
        fields = _gather(events, start, end)
        if not fields.ph:
            continue
        table = _convert(
            fields, offset=offset, relative=relative, graph_corrs=graph_corrs, stats=stats
        )
        del fields
        if table.num_rows:
            yield table


@dataclass
class _Fields:
    """The kept events (phases in KEEP_PH) of one batch, one list a field."""

    ph: list[str] = field(default_factory=list)
    cat: list[Any] = field(default_factory=list)
    name: list[Any] = field(default_factory=list)
    ts: list[Any] = field(default_factory=list)
    dur: list[Any] = field(default_factory=list)
    pid: list[Any] = field(default_factory=list)
    tid: list[Any] = field(default_factory=list)
    args: list[msgspec.Raw] = field(default_factory=list)

    def extend(self, evs: list[Any]) -> None:
        self.ph += [e.ph for e in evs]
        self.cat += [e.cat for e in evs]
        self.name += [e.name for e in evs]
        self.ts += [e.ts for e in evs]
        self.dur += [e.dur for e in evs]
        self.pid += [e.pid for e in evs]
        self.tid += [e.tid for e in evs]
        self.args += [e.args for e in evs]

    def take(self, keep: np.ndarray) -> _Fields:
        idx = keep.tolist()
        return _Fields(
            *(
                [values[i] for i in idx]
                for values in (
                    self.ph,
                    self.cat,
                    self.name,
                    self.ts,
                    self.dur,
                    self.pid,
                    self.tid,
                    self.args,
                )
            )
        )


def _gather(events: list[Any], start: int, end: int) -> _Fields:
    """The fields of the kept events in `events[start:end]`, read CHUNK_EVENTS at a time (all
    fields of a chunk while its structs are in cache); the structs are released as read."""
    fields = _Fields()
    for lo in range(start, end, CHUNK_EVENTS):
        hi = min(lo + CHUNK_EVENTS, end)
        evs = [e for e in events[lo:hi] if e.ph in KEEP_PH]
        events[lo:hi] = repeat(None, hi - lo)
        fields.extend(evs)
    return fields


def _convert(
    f: _Fields, *, offset: int, relative: bool, graph_corrs: set[int], stats: BatchStats
) -> pa.Table:
    ts_ns, ts_ok = exact_ns(f.ts, relative=relative)
    if offset:
        ts_ok &= ts_ns + np.int64(offset) >= ts_ns  # past int64 with the base time: not a time
    if not ts_ok.all():
        keep = np.flatnonzero(ts_ok)
        stats.skipped += len(f.ts) - len(keep)
        f = f.take(keep)
        ts_ns = ts_ns[keep]
    n = len(f.ts)
    dur_ns, dur_ok = exact_ns(f.dur, relative=True)
    dur_ns = np.where(dur_ok, dur_ns, 0)
    neg = dur_ns < 0
    if neg.any():
        stats.negative_dur += int(neg.sum())
        dur_ns = np.where(neg, 0, dur_ns)
    start_ns = ts_ns + offset

    ph = _dict_array(f.ph)  # strs: decode_events makes them so
    cat = _dict_array(f.cat)
    name = _dict_array(f.name)
    pid = _few_ints(f.pid)
    tid = _few_ints(f.tid)

    # All args objects, newline-separated, in one buffer: decoded by msgspec as JSON lines and
    # reused, sliced by offsets, as the `args` text column (each entry keeps its trailing "\n").
    raws = f.args
    del f
    lengths = np.fromiter(map(len, raws), dtype=np.int64, count=n)
    has_args = lengths > 0
    if not has_args.all():
        for i in np.flatnonzero(~has_args).tolist():
            raws[i] = _EMPTY_OBJ
        lengths = np.where(has_args, lengths, 2)
    text = _ENC.encode_lines(raws)  # each raw verbatim + "\n", in one buffer
    del raws
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths + 1, out=offsets[1:])
    arg_values, typed = _args_fields(text, offsets)

    # Device rows: an `args.stream`, or a device category (pid = device, tid = stream).
    cat_codes = cat.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    cat_dict = cat.dictionary.to_pylist()
    gpu_codes = [i for i, c in enumerate(cat_dict) if c in GPU_CATS]
    ph_x = [i for i, p in enumerate(ph.dictionary.to_pylist()) if p == "X"]
    dev_cat = np.isin(cat_codes, gpu_codes) & np.isin(
        ph.indices.to_numpy(zero_copy_only=False), ph_x
    )

    def ai(field_: str, type_: pa.DataType = _INT64) -> pa.Array:
        values = arg_values[field_]
        if typed:
            # msgspec checked every value is an int or None: no inference needed. A 64-bit
            # value outside int32 (cbid, group_size) becomes null rather than failing.
            try:
                return pa.array(values, type=type_)
            except (pa.ArrowInvalid, OverflowError):
                pass
        return _int_array(values, type_)

    def astr(field_: str) -> pa.Array:
        values = arg_values[field_]
        return pa.array(values, type=pa.string()) if typed else _str_array(values)

    stream_arg = ai("stream")
    stream = pc.if_else(pa.array(dev_cat), pc.coalesce(stream_arg, tid), stream_arg)
    is_gpu = pc.is_valid(stream)
    device_arg = ai("device")
    device = pc.if_else(is_gpu, pc.coalesce(device_arg, pid), pa.nulls(n, pa.int64()))
    correlation = ai("correlation")
    in_graph = pc.fill_null(
        pc.is_in(correlation, pa.array(sorted(graph_corrs), type=pa.int64())), False
    )
    graph = pc.if_else(is_gpu, in_graph, pa.nulls(n, pa.bool_()))
    kernels = pc.equal(cat, "kernel") if "kernel" in cat_dict else None
    if kernels is not None:
        counts = pc.value_counts(pc.filter(device, pc.fill_null(kernels, False)))
        for item in counts.to_pylist():
            if item["values"] is not None:
                stats.devices[item["values"]] = (
                    stats.devices.get(item["values"], 0) + item["counts"]
                )

    if offsets[n] < 2**31:
        args_all = pa.StringArray.from_buffers(
            n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(text)
        )
    else:
        args_all = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))
    covered = np.isin(cat_codes, [i for i, c in enumerate(cat_dict) if c in ARGS_COVERED_CATS])
    args_json = pc.if_else(pa.array(has_args & ~covered), args_all, pa.nulls(n, args_all.type))

    values: list[float | None] = [None] * n
    ph_codes = ph.indices.to_numpy(zero_copy_only=False)
    c_codes = [i for i, p in enumerate(ph.dictionary.to_pylist()) if p == "C"]
    if c_codes:
        for i in np.flatnonzero(np.isin(ph_codes, c_codes) & has_args).tolist():
            values[i] = _counter_value(text[offsets[i] : offsets[i + 1]])

    stats.events += n
    columns: dict[str, pa.Array] = {
        "cat": cat,
        "name": name,
        "ph": ph,
        "start_ns": pa.array(start_ns, type=pa.int64()),
        "dur_ns": pa.array(dur_ns, type=pa.int64()),
        "pid": pid,
        "tid": tid,
        "device": device.cast(pa.int32(), safe=False),
        "stream": stream,
        "correlation": correlation,
        "external_id": ai("external_id"),
        "cbid": ai("cbid", pa.int32()),
        "graph_launched": graph,
        "collective": astr("collective"),
        "dtype": astr("dtype"),
        "msg_nelems": ai("msg_nelems"),
        "group_size": ai("group_size", pa.int32()),
        "pg_name": astr("pg_name"),
        "bytes": ai("bytes"),
        "value": pa.array(values, type=pa.float64()),
        "args": args_json,
    }
    return pa.table(columns)


def _args_fields(text: bytes, offsets: np.ndarray) -> tuple[dict[str, list[Any]], bool]:
    """The args lines' fields, one list a field, and whether they are typed (`Args`).

    A line with a value of another type makes the batch take `LooseArgs` (any JSON type); a
    line that is not valid JSON leaves all args of the batch empty.
    """
    n = len(offsets) - 1
    try:
        return _typed_args_fields(text, offsets), True
    except msgspec.ValidationError:
        try:
            return _arg_lists(_DEC_LOOSE_ARGS_LINES.decode_lines(text)), False
        except (msgspec.DecodeError, msgspec.ValidationError):
            return _arg_lists([LooseArgs()] * n), False
    except msgspec.DecodeError:
        return _arg_lists([LooseArgs()] * n), False


def _typed_args_fields(text: bytes, offsets: np.ndarray) -> dict[str, list[Any]]:
    """The args lines decoded as `Args` CHUNK_EVENTS lines at a time, each chunk's fields read
    while its structs are in cache. A line is one JSON value, so a chunk decodes (or fails) as
    it does within the whole buffer, and the first failing chunk holds the first bad line."""
    view = memoryview(text)
    cuts = offsets.tolist()
    n = len(cuts) - 1
    out = _arg_lists([])
    for lo in range(0, n, CHUNK_EVENTS):
        hi = min(lo + CHUNK_EVENTS, n)
        args = _DEC_ARGS_LINES.decode_lines(view[cuts[lo] : cuts[hi]])
        for key, values in _arg_lists(args).items():
            out[key] += values
    return out


def _arg_lists(args: list[Any]) -> dict[str, list[Any]]:
    """Each field of the decoded args as a list (one comprehension a field: the fastest way)."""
    return {
        "stream": [a.stream for a in args],
        "correlation": [a.correlation for a in args],
        "external_id": [a.external_id for a in args],
        "device": [a.device for a in args],
        "cbid": [a.cbid for a in args],
        "collective": [a.collective for a in args],
        "dtype": [a.dtype for a in args],
        "msg_nelems": [a.msg_nelems for a in args],
        "group_size": [a.group_size for a in args],
        "pg_name": [a.pg_name for a in args],
        "bytes": [a.bytes for a in args],
    }


def _counter_value(raw: bytes) -> float | None:
    try:
        obj = _DEC_ANY.decode(raw)
    except msgspec.DecodeError:
        return None
    if isinstance(obj, dict):
        for v in obj.values():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
    return None
