"""The columnar reader: the C scanner `_kscan` turns the `traceEvents` bytes into column buffers
(codes, numbers, the args text) batch by batch, with no Python object per event; numpy and
Arrow build the batch from them, and `columns.assemble` finishes it as for the msgspec reader.

The scanner validates what it reads and declines (`Declined`) any input where the msgspec reader
(`fallback.py`) might give a different table; that reader then reads the whole file. Setting
`TRACEKIT_KINETO_NATIVE=0` (or an extension that did not build) leaves only that reader.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa

from tracekit.store.kineto.columns import (
    BatchStats,
    Columns,
    _to_int,
    assemble,
    durations,
    start_times,
)
from tracekit.store.kineto.raw import RawTrace, base_time_ns

_kscan: ModuleType | None
try:
    from tracekit.store.kineto import _kscan  # type: ignore[attr-defined,no-redef]
except ImportError:  # not built (no compiler at install): the msgspec reader alone
    _kscan = None


# Events of the file a batch (a Parquet row group of the kept ones): the batch's columns, Arrow
# arrays and Parquet pages are the worker's memory beside the file's bytes.
BATCH_EVENTS = 32_768


class Declined(Exception):
    """The scanner left this file to the msgspec reader."""


def enabled() -> bool:
    return _kscan is not None and os.environ.get("TRACEKIT_KINETO_NATIVE", "1") != "0"


def split(path: Path, data: bytes | memoryview) -> RawTrace | None:
    """The trace's top-level keys (validated) and the span of its `traceEvents` array (checked
    as it is read), or None where `raw.split_trace` must decide (odd or damaged input)."""
    if not enabled() or _kscan is None:
        return None
    spans = _kscan.top(data)
    if spans is None:
        return None
    meta: dict[str, msgspec.Raw] = {}
    events: tuple[int, int] | None = None
    for key, start, end in spans:
        if key in meta or (key == "traceEvents" and events is not None):
            return None  # a duplicate key: the last one wins there
        if key == "traceEvents":
            events = (start, end)
        else:
            meta[key] = msgspec.Raw(bytes(data[start:end]))
    if events is None or data[events[0] : events[0] + 1] != b"[":
        return None
    return RawTrace(path, meta, msgspec.Raw(), data, native=events)


class _MiniArgs(msgspec.Struct, gc=False):
    correlation: Any = None


_DEC_MINIARGS = msgspec.json.Decoder(_MiniArgs)


def _graph_correlations(data: bytes | memoryview, spans: list[tuple[int, int]]) -> set[int]:
    """As `fallback.graph_launch_correlations`, from the args spans of the graph launches."""
    out: set[int] = set()
    view = memoryview(data)
    for start, end in spans:
        try:
            corr = _to_int(_DEC_MINIARGS.decode(view[start:end]).correlation)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        if corr is not None:
            out.add(corr)
    return out


def iter_batches(trace: RawTrace, *, stats: BatchStats, batch_events: int) -> Iterator[pa.Table]:
    """Yield `events` tables batch by batch (the same batches as the msgspec reader's).

    Raises `Declined` (possibly after some batches) where the msgspec reader must read the file.
    """
    if _kscan is None or trace.native is None:
        raise Declined
    start, end = trace.native
    data = trace.data
    base = base_time_ns(trace)
    offset = base if base is not None else 0
    graph: set[int] = set()
    if _kscan.has(data, b"GraphLaunch"):
        res = _kscan.scan(data, start + 1, end, 1 << 62, True)
        if res is None:
            raise Declined
        graph = _graph_correlations(data, res[4])
    pos = start + 1
    while True:
        res = _kscan.scan(data, pos, end, batch_events, False)
        if res is None:
            raise Declined
        pos, done, _, cols, _ = res
        if cols["n"]:
            table = _convert(
                cols, offset=offset, relative=base is not None, graph=graph, stats=stats
            )
            if table.num_rows:
                yield table
        if done:
            break
    if pos != end:
        raise Declined  # the array ended elsewhere than where `top` delimited it


def _numbers(kind: bytes, ints: bytes, floats: bytes) -> Any:
    """JSON numbers as the msgspec reader's `pa.array(values)` sees them: ints alone stay int64
    (nulls masked), a float among them makes every value a float (null -> NaN, not a time)."""
    k = np.frombuffer(kind, dtype=np.uint8)
    i = np.frombuffer(ints, dtype=np.int64)
    if (k == 2).any():
        x = np.where(k == 1, i.astype(np.float64), np.frombuffer(floats, dtype=np.float64))
        return np.where(k == 0, np.nan, x)
    if (k == 1).any():
        return pa.array(i, mask=k == 0, type=pa.int64())
    return pa.nulls(len(k))


def _dict(codes: np.ndarray, values: list[str], *, dropped: bool) -> pa.DictionaryArray:
    """Codes (-1 = null) into `values`, in first-seen order (as `dictionary_encode`): the
    scanner's order, renumbered when rows were `dropped`."""
    valid = codes >= 0
    present = codes[valid] if dropped else codes[:0]
    if len(present):
        uniq, first = np.unique(present, return_index=True)
        order = uniq[np.argsort(first)]
    else:
        order = np.zeros(0, dtype=np.int32)
    if dropped and (len(order) != len(values) or (order != np.arange(len(order))).any()):
        remap = np.full(len(values), -1, dtype=np.int32)
        remap[order] = np.arange(len(order), dtype=np.int32)
        codes = np.where(valid, remap[np.where(valid, codes, 0)], -1).astype(np.int32)
        values = [values[j] for j in order.tolist()]
    indices = pa.array(codes, mask=~valid) if not valid.all() else pa.array(codes)
    return pa.DictionaryArray.from_arrays(indices, pa.array(values, type=pa.string()))


def _ids(kind: bytes, raw: bytes, strings: list[str], keep: np.ndarray | None) -> pa.Array:
    """pid/tid: ints as written; strings as `_to_int` reads them (digits), else null."""
    k = np.frombuffer(kind, dtype=np.uint8)
    v = np.frombuffer(raw, dtype=np.int64)
    if keep is not None:
        k, v = k[keep], v[keep]
    valid = k != 0
    if strings and (k == 3).any():
        conv = [_to_int(s) for s in strings]
        table = np.array([c if c is not None else 0 for c in conv], dtype=np.int64)
        ok = np.array([c is not None for c in conv], dtype=bool)
        is_str = k == 3
        idx = np.where(is_str, v, 0)
        v = np.where(is_str, table[idx], v)
        valid = valid & (~is_str | ok[idx])
    return pa.array(v, mask=~valid, type=pa.int64())


_INT_ARGS = (
    ("stream", pa.int64()),
    ("correlation", pa.int64()),
    ("external_id", pa.int64()),
    ("device", pa.int64()),
    ("cbid", pa.int32()),
    ("msg_nelems", pa.int64()),
    ("group_size", pa.int32()),
    ("bytes", pa.int64()),
)
_STR_ARGS = ("collective", "dtype", "pg_name")


def _convert(
    cols: dict[str, Any], *, offset: int, relative: bool, graph: set[int], stats: BatchStats
) -> pa.Table:
    n = cols["n"]
    ts = _numbers(cols["ts_kind"], cols["ts_i"], cols["ts_f"])
    start_ns, ts_ok = start_times(ts, offset=offset, relative=relative, stats=stats)
    keep: np.ndarray | None = None
    if not ts_ok.all():  # rows without a usable ts are dropped before anything else
        keep = np.flatnonzero(ts_ok)
        start_ns = start_ns[keep]

    def rows(a: np.ndarray) -> np.ndarray:
        return a if keep is None else a[keep]

    dur = _numbers(cols["dur_kind"], cols["dur_i"], cols["dur_f"])
    if keep is not None:
        dur = dur[keep] if isinstance(dur, np.ndarray) else dur.take(pa.array(keep))
    dur_ns = durations(dur, stats=stats)

    def codes(name: str) -> np.ndarray:
        return rows(np.frombuffer(cols[name], dtype=np.int32))

    ph = _dict(codes("ph"), cols["ph_values"], dropped=keep is not None)
    cat = _dict(codes("cat"), cols["cat_values"], dropped=keep is not None)
    name = _dict(codes("name"), cols["name_values"], dropped=keep is not None)
    pid = _ids(cols["pid_kind"], cols["pid"], cols["pid_values"], keep)
    tid = _ids(cols["tid_kind"], cols["tid"], cols["tid_values"], keep)
    args: dict[str, pa.Array] = {}
    int_args = cols["int_args"]
    for j, (key, type_) in enumerate(_INT_ARGS):
        values = rows(np.frombuffer(int_args[2 * j], dtype=np.int64))
        ok = rows(np.frombuffer(int_args[2 * j + 1], dtype=np.uint8)).astype(bool)
        if type_ == pa.int32():
            values = values.astype(np.int32)  # out-of-range values are null already
        args[key] = pa.array(values, mask=~ok, type=type_)
    str_args = cols["str_args"]
    for j, key in enumerate(_STR_ARGS):
        c = rows(np.frombuffer(str_args[2 * j], dtype=np.int32))
        valid = c >= 0
        if not valid.any():
            args[key] = pa.nulls(len(c), pa.string())
            continue
        dictionary = pa.array(str_args[2 * j + 1], type=pa.string())
        indices = pa.array(np.where(valid, c, 0), mask=~valid, type=pa.int32())
        args[key] = dictionary.take(indices)
    offsets = np.frombuffer(cols["offsets"], dtype=np.int64)
    if offsets[n] < 2**31:
        args_all: pa.Array = pa.StringArray.from_buffers(
            n, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(cols["text"])
        )
    else:
        args_all = pa.LargeStringArray.from_buffers(
            n, pa.py_buffer(offsets), pa.py_buffer(cols["text"])
        )
    has_args = np.frombuffer(cols["has_args"], dtype=np.uint8).astype(bool)
    if keep is not None:
        args_all = args_all.take(pa.array(keep))
        has_args = has_args[keep]
    columns = Columns(ph, cat, name, start_ns, dur_ns, pid, tid, args, args_all, has_args)
    return assemble(columns, graph_corrs=graph, stats=stats)
