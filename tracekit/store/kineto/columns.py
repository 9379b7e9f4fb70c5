"""Column helpers shared by both readers: exact nanoseconds from JSON microseconds, JSON values to
Arrow arrays with tracekit's rules, and the final assembly of an `events` batch (device rows,
graph launches, the args text column, counter values).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Event phases kept in the `events` table: complete events, instants, counters. Flows (s/f/t)
# duplicate `args.correlation`; metadata (M) names processes and threads.
KEEP_PH = frozenset({"X", "i", "I", "C"})

GRAPH_LAUNCH_PREFIXES = ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")
# Categories whose rows run on a device stream (pid = device, tid = stream).
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cuda_sync"})
# Categories whose args are fully covered by typed columns: their `args` column stays null.
ARGS_COVERED_CATS = frozenset({"cuda_runtime", "cuda_driver"})


_DEC_ANY = msgspec.json.Decoder()


@dataclass
class BatchStats:
    """Counts gathered while converting (reported in the manifest)."""

    events: int = 0
    skipped: int = 0  # kept phases without a usable ts
    negative_dur: int = 0
    devices: dict[int, int] = field(default_factory=dict)


_MAX_US = 9.0e15  # |µs| beyond this overflows int64 nanoseconds


def exact_ns(
    values: Sequence[Any] | np.ndarray | pa.Array, *, relative: bool
) -> tuple[np.ndarray, np.ndarray]:
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
        arr = values if isinstance(values, pa.Array) else pa.array(values)
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


def start_times(
    ts: Sequence[Any] | np.ndarray | pa.Array, *, offset: int, relative: bool, stats: BatchStats
) -> tuple[np.ndarray, np.ndarray]:
    """(start_ns, usable mask) from JSON µs values; rows without a usable ts are counted."""
    ts_ns, ts_ok = exact_ns(ts, relative=relative)
    if offset:
        ts_ok &= ts_ns + np.int64(offset) >= ts_ns  # past int64 with the base time: not a time
    if not ts_ok.all():
        stats.skipped += int((~ts_ok).sum())
    return ts_ns + offset, ts_ok


def durations(dur: Sequence[Any] | np.ndarray | pa.Array, *, stats: BatchStats) -> np.ndarray:
    """dur_ns from JSON µs values (the kept rows only): unusable -> 0, negative -> 0 (counted)."""
    dur_ns, dur_ok = exact_ns(dur, relative=True)
    dur_ns = np.where(dur_ok, dur_ns, 0)
    neg = dur_ns < 0
    if neg.any():
        stats.negative_dur += int(neg.sum())
        dur_ns = np.where(neg, 0, dur_ns)
    return dur_ns


ARG_STR_FIELDS = frozenset({"collective", "dtype", "pg_name"})
ARG_INT32_FIELDS = frozenset({"cbid", "group_size"})


@dataclass
class Columns:
    """One batch of kept events as Arrow columns, before the derived columns (`assemble`).

    `args_all[i]` is row i's args object as written plus "\\n" (`{}\\n` where it has none);
    `args` holds the typed args fields (`fallback.Args`, int64/int32/string).
    """

    ph: pa.DictionaryArray
    cat: pa.DictionaryArray
    name: pa.DictionaryArray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    pid: pa.Array
    tid: pa.Array
    args: dict[str, pa.Array]
    args_all: pa.Array
    has_args: np.ndarray


def assemble(c: Columns, *, graph_corrs: set[int], stats: BatchStats) -> pa.Table:
    """The `events` batch (schema columns, before `conform`) from a reader's columns."""
    n = len(c.start_ns)
    cat_codes = c.cat.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    cat_dict = c.cat.dictionary.to_pylist()
    ph_codes = c.ph.indices.to_numpy(zero_copy_only=False)
    ph_dict = c.ph.dictionary.to_pylist()
    # Device rows: an `args.stream`, or a device category (pid = device, tid = stream).
    gpu_codes = [i for i, v in enumerate(cat_dict) if v in GPU_CATS]
    ph_x = [i for i, p in enumerate(ph_dict) if p == "X"]
    dev_cat = np.isin(cat_codes, gpu_codes) & np.isin(ph_codes, ph_x)
    a = c.args
    stream = pc.if_else(pa.array(dev_cat), pc.coalesce(a["stream"], c.tid), a["stream"])
    is_gpu = pc.is_valid(stream)
    device = pc.if_else(is_gpu, pc.coalesce(a["device"], c.pid), pa.nulls(n, pa.int64()))
    in_graph = pc.fill_null(
        pc.is_in(a["correlation"], pa.array(sorted(graph_corrs), type=pa.int64())), False
    )
    graph = pc.if_else(is_gpu, in_graph, pa.nulls(n, pa.bool_()))
    if "kernel" in cat_dict:
        counts = pc.value_counts(pc.filter(device, pc.fill_null(pc.equal(c.cat, "kernel"), False)))
        for item in counts.to_pylist():
            if item["values"] is not None:
                stats.devices[item["values"]] = (
                    stats.devices.get(item["values"], 0) + item["counts"]
                )
    covered = np.isin(cat_codes, [i for i, v in enumerate(cat_dict) if v in ARGS_COVERED_CATS])
    args_json = _masked_text(c.args_all, c.has_args & ~covered)
    values: list[float | None] = [None] * n
    c_codes = [i for i, p in enumerate(ph_dict) if p == "C"]
    if c_codes:
        rows = np.flatnonzero(np.isin(ph_codes, c_codes) & c.has_args).tolist()
        # as bytes: the args text is sliced from the file unchecked, and invalid UTF-8 in it
        # is msgspec's to refuse (no value), not a UnicodeDecodeError (found by atheris)
        raw = c.args_all.take(pa.array(rows, type=pa.int64()))  # typed: [] is no null array
        raw = raw.cast(pa.large_binary() if pa.types.is_large_string(raw.type) else pa.binary())
        for i, text in zip(rows, raw.to_pylist()):
            values[i] = _counter_value(text)
    stats.events += n
    columns: dict[str, pa.Array] = {
        "cat": c.cat,
        "name": c.name,
        "ph": c.ph,
        "start_ns": pa.array(c.start_ns, type=pa.int64()),
        "dur_ns": pa.array(c.dur_ns, type=pa.int64()),
        "pid": c.pid,
        "tid": c.tid,
        "device": device.cast(pa.int32(), safe=False),
        "stream": stream,
        "correlation": a["correlation"],
        "external_id": a["external_id"],
        "cbid": a["cbid"],
        "graph_launched": graph,
        "collective": a["collective"],
        "dtype": a["dtype"],
        "msg_nelems": a["msg_nelems"],
        "group_size": a["group_size"],
        "pg_name": a["pg_name"],
        "bytes": a["bytes"],
        "value": pa.array(values, type=pa.float64()),
        "args": args_json,
    }
    return pa.table(columns)


def _masked_text(text: pa.Array, keep: np.ndarray) -> pa.Array:
    """`text` with the rows not in `keep` null: the same buffers under a validity bitmap where
    `text` has no nulls and no offset (no copy of the text), else `if_else`."""
    if text.null_count == 0 and text.offset == 0:
        validity = pa.py_buffer(np.packbits(keep, bitorder="little"))
        buffers = text.buffers()
        return type(text).from_buffers(len(text), buffers[1], buffers[2], validity)
    return pc.if_else(pa.array(keep), text, pa.nulls(len(text), text.type))


def _counter_value(raw: str | bytes) -> float | None:
    try:
        obj = _DEC_ANY.decode(raw)
    except msgspec.DecodeError:
        return None
    if isinstance(obj, dict):
        for v in obj.values():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
    return None
