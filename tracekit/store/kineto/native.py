"""The native reader: traces written one event per line, no per-event Python object.

The raw `traceEvents` array (already validated by msgspec's scan in `split_trace`) becomes
newline-delimited JSON by blanking its brackets and the commas that end lines (length kept, so
byte offsets stay those of the file). DuckDB's JSON reader parses it, each line strictly one
object, with every field kept as JSON text; the few distinct values of ph/cat/name/pid/tid are
decoded in Python, numbers are cast by Arrow. The args object of each event is sliced from the
bytes as written (it must be the event's last key, found by `"args"` occurring once in the line)
and parsed again by DuckDB for its typed fields: a slice that is not exactly one object fails
that parse. Whatever this reader does not take (other layouts, odd JSON types, escaped keys,
salvaged files) returns None, and the caller uses the general reader (`fallback`); the
differential test checks both give the same tables.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.store.kineto.columns import (
    ARG_FIELDS,
    ARG_INT32_FIELDS,
    ARG_STR_FIELDS,
    GRAPH_LAUNCH_PREFIXES,
    KEEP_PH,
    BatchStats,
    Columns,
    _to_int,
    assemble,
    durations,
    start_times,
)
from tracekit.store.kineto.raw import RawTrace, base_time_ns

_ARG_KEYS = {
    "stream": "stream",
    "correlation": "correlation",
    "external_id": "External id",
    "device": "device",
    "cbid": "cbid",
    "collective": "Collective name",
    "dtype": "dtype",
    "msg_nelems": "In msg nelems",
    "group_size": "Group size",
    "pg_name": "Process Group Name",
    "bytes": "bytes",
}
_EVENT_KEYS = ("ph", "cat", "name", "ts", "dur", "pid", "tid")
_DEC = msgspec.json.Decoder()
# Escapes that could spell the key "args" without the literal bytes `"args"`.
_ARGS_ESCAPES = tuple(
    f"\\u00{h}".encode() for h in ("61", "72", "67", "73", "41", "52", "47", "53")
)


class Declined(Exception):
    """The input is valid but not for this reader (the general reader takes it)."""


def available() -> bool:
    try:
        import duckdb  # noqa: F401
    except ImportError:
        return False
    return True


def read(trace: RawTrace, *, stats: BatchStats, batch_events: int) -> list[pa.Table] | None:
    """All `events` batches of the trace, or None when this reader declines it."""
    if trace.salvaged or isinstance(trace.events, list) or not available():
        return None
    local = BatchStats()
    try:
        tables = list(_read(trace, local, batch_events))
    except Declined:
        return None
    except Exception as exc:  # DuckDB / Arrow parse or cast errors: the general reader decides
        if type(exc).__module__.startswith(("duckdb", "_duckdb", "pyarrow")):
            return None
        raise
    stats.events += local.events
    stats.skipped += local.skipped
    stats.negative_dur += local.negative_dur
    for k, v in local.devices.items():
        stats.devices[k] = stats.devices.get(k, 0) + v
    return tables


def _read(trace: RawTrace, stats: BatchStats, batch_events: int) -> Iterator[pa.Table]:
    ev = memoryview(trace.events)  # type: ignore[arg-type]
    u = np.frombuffer(ev, dtype=np.uint8)
    if u.size < 2 or u[0] != ord("[") or u[-1] != ord("]"):
        raise Declined
    starts, ends = _lines(u)
    if len(starts) == 0:
        return
    data = trace.data  # the whole file: the events are a slice of it
    if b"\\u00" in data and any(e in data.lower() for e in _ARGS_ESCAPES):
        raise Declined
    fields = _event_fields(ev, u, ends)
    args_text, has_args = _args_text(ev, u, starts, ends)
    typed = _typed_args(args_text, has_args)
    args_all = _args_all(args_text, has_args)
    base = base_time_ns(trace)
    graph_corrs = _graph_corrs(fields["name"], typed["correlation"], data)
    n = len(starts)
    for lo in range(0, n, batch_events):
        hi = min(lo + batch_events, n)
        table = _batch(
            fields,
            typed,
            args_all,
            has_args,
            lo,
            hi,
            base=base,
            graph_corrs=graph_corrs,
            stats=stats,
        )
        if table is not None and table.num_rows:
            yield table


def _lines(u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (index of the closing brace) of each event line; Declined if any line is
    not `{...}` optionally followed by a comma."""
    nl = np.flatnonzero(u == 10)
    if nl.size == 0:
        raise Declined  # one line: not this layout
    bounds = np.concatenate(([0], nl, [u.size - 1]))
    s = bounds[:-1] + 1
    e = bounds[1:] - 1  # last byte of the segment
    keep = e >= s
    s, e = s[keep], e[keep]
    e = e - (u[e] == ord(","))
    if not ((u[s] == ord("{")).all() and (u[e] == ord("}")).all()):
        raise Declined
    return s, e


def _event_fields(ev: memoryview, u: np.ndarray, ends: np.ndarray) -> dict[str, pa.Array]:
    """The event-level fields, parsed by DuckDB from the NDJSON form of the array."""
    import duckdb

    buf = bytearray(ev)
    view = np.frombuffer(buf, dtype=np.uint8)
    view[0] = view[-1] = ord(" ")
    after = ends + 1
    view[after[u[after] == ord(",")]] = ord(" ")
    con = duckdb.connect(config={"threads": 1})
    try:
        rel = con.read_json(
            io.BytesIO(buf),
            format="newline_delimited",
            columns=dict.fromkeys(_EVENT_KEYS, "JSON"),
            maximum_object_size=1 << 30,
        )
        table = rel.arrow().read_all()
    finally:
        con.close()
    if table.num_rows != len(ends):
        raise Declined
    return {k: table.column(k).combine_chunks() for k in _EVENT_KEYS}


def _args_text(
    raw: memoryview, u: np.ndarray, starts: np.ndarray, ends: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """The args objects as written (rows that have one), and which rows have one."""
    offsets = np.append(starts, ends[-1] + 1)
    lines = _strings(raw, offsets)
    count = pc.count_substring(lines, '"args"').to_numpy(zero_copy_only=False)
    if (count > 1).any():
        raise Declined
    has = count == 1
    pos = pc.find_substring(lines, '"args"').to_numpy(zero_copy_only=False)[has]
    p = starts[has] + pos
    if (u[p - 1] == ord("\\")).any() or not (u[p + 6] == ord(":")).all():
        raise Declined
    spaced = u[p + 7] == ord(" ")
    a = p + 7 + spaced
    z = ends[has] - 1
    if not ((u[a] == ord("{")).all() and (u[z] == ord("}")).all()):
        raise Declined  # not an object, or not the last key
    if not len(a):
        return pa.array([], type=pa.string()), has
    # Interleaved offsets: entry 2i is row i's args [a, z], entry 2i+1 the bytes between.
    pairs = np.empty(2 * len(a), dtype=np.int64)
    pairs[0::2] = a
    pairs[1::2] = z + 1
    spans = _strings(raw, pairs)
    text = spans.take(pa.array(np.arange(0, len(spans), 2)))
    return pc.binary_join_element_wise(text, "", "\n"), has


def _strings(raw: Any, offsets: np.ndarray) -> pa.Array:
    """Strings over `raw` between consecutive offsets (zero-copy)."""
    n = len(offsets) - 1
    offs = offsets
    if offs[-1] < 2**31:
        return pa.StringArray.from_buffers(
            n, pa.py_buffer(offs.astype(np.int32)), pa.py_buffer(raw)
        )
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offs), pa.py_buffer(raw))


def _typed_args(text: pa.Array, has: np.ndarray) -> dict[str, pa.Array]:
    """The typed args fields for every row (null where absent), parsed from the args lines."""
    import duckdb

    n = len(has)
    if not len(text):
        return {k: pa.nulls(n, _arg_type(k)) for k in ARG_FIELDS}
    offsets = np.frombuffer(
        text.buffers()[1], dtype=np.int32 if text.type == pa.string() else np.int64
    )
    lo, hi = int(offsets[text.offset]), int(offsets[text.offset + len(text)])
    data = memoryview(text.buffers()[2])[lo:hi]
    con = duckdb.connect(config={"threads": 1})
    try:
        rel = con.read_json(
            io.BytesIO(data),
            format="newline_delimited",
            columns={_ARG_KEYS[k]: "JSON" for k in ARG_FIELDS},
            maximum_object_size=1 << 30,
        )
        table = rel.arrow().read_all()
    finally:
        con.close()
    if table.num_rows != len(text):
        raise Declined
    idx = pa.array(np.cumsum(has) - 1, mask=~has)
    out = {}
    for k in ARG_FIELDS:
        col = table.column(_ARG_KEYS[k]).combine_chunks()
        out[k] = _arg_values(col, k).take(idx)
    return out


def _arg_type(k: str) -> pa.DataType:
    if k in ARG_STR_FIELDS:
        return pa.string()
    return pa.int32() if k in ARG_INT32_FIELDS else pa.int64()


def _arg_values(col: pa.Array, k: str) -> pa.Array:
    """JSON text -> typed values; Declined for any other JSON type (the general reader's rules)."""
    if col.null_count == len(col):
        return pa.nulls(len(col), _arg_type(k))
    if k in ARG_STR_FIELDS:
        return _json_strings(col)
    ints = pc.cast(col, pa.int64())  # raises for floats, strings, bools: declined
    if k in ARG_INT32_FIELDS:
        lo, hi = pc.min_max(ints).values()
        if lo.is_valid and not (lo.as_py() >= -(2**31) and hi.as_py() < 2**31):
            raise Declined
        return ints.cast(pa.int32())
    return ints


def _json_strings(col: pa.Array) -> pa.Array:
    """JSON string texts -> their values (no escapes; Declined otherwise)."""
    valid = pc.drop_null(col)
    if not (
        pc.all(pc.starts_with(valid, '"')).as_py()
        and pc.all(pc.ends_with(valid, '"')).as_py()
        and not pc.any(pc.match_substring(valid, "\\")).as_py()
    ):
        raise Declined
    return pc.utf8_slice_codeunits(col, 1, -1)


def _args_all(text: pa.Array, has: np.ndarray) -> pa.Array:
    """Row i's args text plus "\\n" (`{}\\n` where it has none), as the general reader has it."""
    idx = np.where(has, np.cumsum(has) - 1, len(text))
    pool = pa.concat_arrays([text.cast(pa.string()), pa.array(["{}\n"], type=pa.string())])
    return pool.take(pa.array(idx))


def _graph_corrs(name: pa.Array, correlation: pa.Array, data: bytes) -> set[int]:
    if b"GraphLaunch" not in data:
        return set()
    names = _decode_dictionary(name)
    out: set[int] = set()
    for value, corr in zip(names, correlation.to_pylist()):
        if corr is not None and isinstance(value, str) and value.startswith(GRAPH_LAUNCH_PREFIXES):
            out.add(corr)
    return out


def _decode_dictionary(col: pa.Array) -> list[Any]:
    """Each row's JSON text decoded (distinct texts decoded once); None for SQL NULL."""
    enc = pc.dictionary_encode(col)
    uniq = [_DEC.decode(t) for t in enc.dictionary.to_pylist()]
    idx = enc.indices.to_pylist()
    return [None if i is None else uniq[i] for i in idx]


def _text_column(col: pa.Array, *, null_as: str | None) -> pa.Array:
    """A string column from JSON texts that must all be strings (or null)."""
    enc = pc.dictionary_encode(col)
    uniq = [_DEC.decode(t) for t in enc.dictionary.to_pylist()]
    if not all(type(v) is str for v in uniq):
        raise Declined
    values = pa.array(uniq, type=pa.string())
    out = values.take(enc.indices)
    return out.fill_null(null_as) if null_as is not None else out


def _id_column(col: pa.Array) -> pa.Array:
    """pid/tid: JSON ints or strings of digits -> int64, anything else null (few distinct)."""
    enc = pc.dictionary_encode(col)
    conv = []
    for t in enc.dictionary.to_pylist():
        v = _DEC.decode(t)
        conv.append(_to_int(v) if type(v) in (int, float, str) else None)
    return pa.array(conv, type=pa.int64()).take(enc.indices)


def _numbers(col: pa.Array) -> np.ndarray:
    """JSON number texts -> float64 (NaN where null); casts fail for other types (declined)."""
    out: np.ndarray = pc.cast(col, pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False)
    return out


def _batch(
    fields: dict[str, pa.Array],
    typed: dict[str, pa.Array],
    args_all: pa.Array,
    has_args: np.ndarray,
    lo: int,
    hi: int,
    *,
    base: int | None,
    graph_corrs: set[int],
    stats: BatchStats,
) -> pa.Table | None:
    """Input events [lo, hi) -> the batch the general reader makes of them."""
    ph = _text_column(fields["ph"].slice(lo, hi - lo), null_as="")
    keep = pc.is_in(ph, pa.array(sorted(KEEP_PH))).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(keep) + lo
    if not len(rows):
        return None
    f = {k: v.take(rows) for k, v in fields.items()}
    start_ns, ok = start_times(
        _numbers(f["ts"]), offset=base or 0, relative=base is not None, stats=stats
    )
    if not ok.all():
        rows, start_ns = rows[ok], start_ns[ok]
        f = {k: v.filter(pa.array(ok)) for k, v in f.items()}
    dur_ns = durations(_numbers(f["dur"]), stats=stats)
    args = {k: v.take(rows) for k, v in typed.items()}
    columns = Columns(
        ph=_text_column(f["ph"], null_as="").dictionary_encode(),
        cat=_text_column(f["cat"], null_as=None).dictionary_encode(),
        name=_text_column(f["name"], null_as="").dictionary_encode(),
        start_ns=start_ns,
        dur_ns=dur_ns,
        pid=_id_column(f["pid"]),
        tid=_id_column(f["tid"]),
        args=args,
        args_all=args_all.take(rows),
        has_args=has_args[rows],
    )
    return assemble(columns, graph_corrs=graph_corrs, stats=stats)
