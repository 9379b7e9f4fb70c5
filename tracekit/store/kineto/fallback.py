"""The general reader (and the fallback of the native one): msgspec decodes the raw `traceEvents`
into typed structs (any JSON types on a slow path), whose fields are read 4,096 events at a time
into lists and converted to Arrow. Takes every input `split_trace` accepts.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from tracekit.store.kineto.columns import (
    ARG_INT32_FIELDS,
    ARG_STR_FIELDS,
    GRAPH_LAUNCH_PREFIXES,
    KEEP_PH,
    BatchStats,
    Columns,
    _dict_array,
    _few_ints,
    _int_array,
    _str_array,
    _to_int,
    assemble,
    durations,
    start_times,
)
from tracekit.store.kineto.raw import _DEC_RAWLIST, RawTrace, base_time_ns

EMPTY = msgspec.Raw()

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


_DEC_EVENTS = msgspec.json.Decoder(list[Event])
_DEC_LOOSE = msgspec.json.Decoder(list[LooseEvent])
_DEC_LOOSE_ONE = msgspec.json.Decoder(LooseEvent)
_DEC_ARGS_LINES = msgspec.json.Decoder(Args)
_DEC_LOOSE_ARGS_LINES = msgspec.json.Decoder(LooseArgs)
_DEC_MINIARGS = msgspec.json.Decoder(_MiniArgs)
_ENC = msgspec.json.Encoder()
_EMPTY_OBJ = msgspec.Raw(b"{}")


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


def decode_events(trace: RawTrace) -> list[Any]:
    """All events as structs (typed fast path; any JSON types on the slow path)."""
    if trace.native is not None:  # split by the columnar scanner: the array's span
        blob: Any = memoryview(trace.data)[trace.native[0] : trace.native[1]]
    elif isinstance(trace.events, list):
        blob = b"[" + b",".join(trace.events) + b"]"
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
    start_ns, ts_ok = start_times(f.ts, offset=offset, relative=relative, stats=stats)
    if not ts_ok.all():
        keep = np.flatnonzero(ts_ok)
        f = f.take(keep)
        start_ns = start_ns[keep]
    n = len(f.ts)
    dur_ns = durations(f.dur, stats=stats)
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
    args = {k: _arg_array(v, k, typed) for k, v in arg_values.items()}
    if offsets[n] < 2**31:
        args_all = pa.StringArray.from_buffers(
            n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(text)
        )
    else:
        args_all = pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text))
    args_all = _valid_utf8(args_all)
    columns = Columns(ph, cat, name, start_ns, dur_ns, pid, tid, args, args_all, has_args)
    return assemble(columns, graph_corrs=graph_corrs, stats=stats)


def _valid_utf8(args_all: pa.Array) -> pa.Array:
    """The args text as written, unless it is not UTF-8 (a raw value is copied unchecked):
    then each invalid byte becomes U+FFFD, so the Parquet string column stays readable."""
    try:
        args_all.validate(full=True)
    except pa.ArrowInvalid:
        raw = args_all.cast(
            pa.large_binary() if pa.types.is_large_string(args_all.type) else pa.binary()
        )
        return pa.array([b.decode("utf-8", "replace") for b in raw.to_pylist()], type=args_all.type)
    return args_all


def _arg_array(values: list[Any], key: str, typed: bool) -> pa.Array:
    if key in ARG_STR_FIELDS:
        return pa.array(values, type=pa.string()) if typed else _str_array(values)
    type_ = pa.int32() if key in ARG_INT32_FIELDS else pa.int64()
    if typed:
        # msgspec checked every value is an int or None: no inference needed. A 64-bit value
        # outside int32 (cbid, group_size) becomes null rather than failing.
        try:
            return pa.array(values, type=type_)
        except (pa.ArrowInvalid, OverflowError):
            pass
    return _int_array(values, type_)


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
