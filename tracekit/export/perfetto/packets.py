"""Vectorised protobuf encoding of many small Perfetto track-event packets at once.

Building one `TracePacket` object per slice costs about 4 µs in Python (upb), which caps an
export near 250k events/s. The bulk of a trace is simple slices (kernels, runtime calls, CPU
ops), whose packets differ only in a few integers, so they are encoded here with numpy: every
field becomes a column of bytes (wire.py), and the columns are joined into rows (pack.py).

Each output row is one complete `Trace` message holding one `TracePacket` (field 1 of `Trace`),
the same framing `perfetto.trace_builder.proto_builder.StreamingTraceProtoBuilder.write_packet`
writes, so the bytes can be appended to a file that builder writes to.

Field numbers are those of `protos/perfetto/trace/trace_packet.proto` and `track_event.proto`
(checked against `perfetto_trace_pb2` by the unit tests):

- TracePacket: timestamp 8 (varint), trusted_packet_sequence_id 10 (varint), track_event 11
  (message), sequence_flags 13 (varint).
- TrackEvent: type 9, name_iid 10, track_uuid 11 (varints), flow_ids 47 (repeated fixed64),
  correlation_id 52 (varint).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from tracekit.export.perfetto.pack import compact, pack
from tracekit.export.perfetto.wire import (
    I64,
    Piece,
    const,
    empty,
    field_fixed64,
    field_message,
    field_varint,
    small_varint_field,
    tag,
    varint_bytes,
)

SEQ_NEEDS_INCREMENTAL_STATE = 2


def _string_piece(field: int, values: Any) -> Piece:
    """`field` as a string on each row (absent for None); each distinct string encoded once.

    `values`: a list, or a polars string Series (coded without a Python loop over rows)."""
    n = len(values)
    uniq: dict[str, int] = {}
    if _is_series(values):
        import polars as pl

        distinct = values.drop_nulls().unique(maintain_order=True)
        uniq = {s: i for i, s in enumerate(distinct.to_list())}
        codes = pl.Series(np.arange(distinct.len(), dtype=np.int64))
        idx = (
            values.replace_strict(distinct, codes, default=-1, return_dtype=pl.Int64)
            .fill_null(-1)
            .to_numpy()
        )
    else:
        idx = np.empty(n, dtype=np.int64)
        for i, v in enumerate(values):
            idx[i] = -1 if v is None else uniq.setdefault(v, len(uniq))
    if not uniq:
        return empty(n)
    enc = [tag(field, 2) + varint_bytes(len(b)) + b for b in (u.encode() for u in uniq)]
    width = max(len(e) for e in enc)
    table = np.zeros((len(enc), width), dtype=np.uint8)
    for i, e in enumerate(enc):
        table[i, : len(e)] = np.frombuffer(e, dtype=np.uint8)
    lens_u = np.array([len(e) for e in enc], dtype=np.int64)
    safe = np.maximum(idx, 0)
    return Piece(table[safe], np.where(idx >= 0, lens_u[safe], 0))


def _is_series(values: Any) -> bool:
    return hasattr(values, "is_null") and hasattr(values, "to_numpy")


def _pl_float64() -> Any:
    import polars as pl

    return pl.Float64


def _pl_int64() -> Any:
    import polars as pl

    return pl.Int64


def debug_annotations(columns: dict[str, tuple[str, Any]], n: int) -> Piece:
    """TrackEvent.debug_annotations (field 4), one a column, per row; None / NaN leave it out.

    `columns` maps an argument name to (kind, values), kind one of "int", "double", "bool",
    "string"; values a list or a polars Series (nulls: absent). DebugAnnotation fields: name
    10, bool_value 2, int_value 4, double_value 5, string_value 6.
    """
    pieces: list[Piece] = []
    for name, (kind, values) in columns.items():
        name_piece = const(tag(10, 2) + varint_bytes(len(name.encode())) + name.encode(), n)
        if kind == "string":
            value = _string_piece(6, list(values))
            present = value.lens > 0
            value_pieces = [value]
        elif kind == "double":
            if _is_series(values):
                arr = values.cast(_pl_float64()).fill_null(float("nan")).to_numpy()
            else:
                arr = np.asarray(values, dtype=np.float64)
            present = ~np.isnan(arr)
            value_pieces = field_fixed64(5, np.where(present, arr, 0.0).astype("<f8").view("<u8"))
        else:
            if _is_series(values):
                present = ~values.is_null().to_numpy()
                ints = values.fill_null(0).cast(_pl_int64()).to_numpy().astype(np.int64)
            else:
                obj = np.asarray(values, dtype=object)
                present = np.array([v is not None for v in obj], dtype=bool)
                ints = np.array([0 if v is None else int(v) for v in obj], dtype=np.int64)
            value_pieces = field_varint(2 if kind == "bool" else 4, ints.view(np.uint64))
        sub = field_message(4, [name_piece, *value_pieces])
        pieces += [Piece(p.data, np.where(present, p.lens, 0)) for p in sub]
    return compact(pieces) if pieces else empty(n)


def _packets(ts: npt.NDArray[Any], sequence_id: int, te: list[Piece]) -> tuple[memoryview, I64]:
    n = ts.shape[0]
    packet: list[Piece] = []
    packet += field_varint(8, ts)
    packet.append(const(tag(10, 0) + varint_bytes(sequence_id), n))
    packet += field_message(11, te)
    packet.append(const(tag(13, 0) + varint_bytes(SEQ_NEEDS_INCREMENTAL_STATE), n))
    framed = field_message(1, packet)
    return pack(framed)


def track_event_packets(
    *,
    ts: npt.ArrayLike,
    event_type: npt.ArrayLike,
    track_uuid: npt.ArrayLike,
    sequence_id: int,
    name_iid: npt.ArrayLike | None = None,
    correlation: npt.ArrayLike | None = None,
    flow_id: npt.ArrayLike | None = None,
    extra: Piece | None = None,
) -> tuple[memoryview, I64]:
    """One `Trace{packet{...track_event{...}}}` a row; zero in an optional column means absent.

    Returns the bytes and each row's length.
    """
    ts_a = np.asarray(ts)
    n = ts_a.shape[0]
    if n == 0:
        return memoryview(b""), np.zeros(0, dtype=np.int64)
    te: list[Piece] = []
    te += small_varint_field(9, np.asarray(event_type))
    if name_iid is not None:
        iid = np.asarray(name_iid)
        if iid.any():
            te += field_varint(10, iid, iid != 0)
    uuid = np.asarray(track_uuid)
    if uuid.ndim == 0 or (uuid.shape[0] and (uuid == uuid[0]).all()):
        one = int(uuid) if uuid.ndim == 0 else int(uuid[0])
        te.append(const(tag(11, 0) + varint_bytes(one), n))  # one track: encode once
    else:
        te += field_varint(11, uuid)
    if flow_id is not None:
        fid = np.asarray(flow_id)
        if fid.any():
            te += field_fixed64(47, fid, fid != 0)
    if correlation is not None:
        corr = np.asarray(correlation)
        if corr.any():
            te += field_varint(52, corr, corr != 0)
    if extra is not None:
        te.append(extra)  # pre-encoded fields (debug annotations, several flow ids)
    return _packets(ts_a, sequence_id, te)


def counter_packets(
    *, ts: npt.ArrayLike, track_uuid: int, sequence_id: int, values: npt.ArrayLike
) -> memoryview:
    """`TYPE_COUNTER` events with `double_counter_value` (field 44); NaN values are left out."""
    ts_a = np.asarray(ts)
    vals = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(vals)
    ts_a, vals = ts_a[keep], vals[keep]
    n = ts_a.shape[0]
    if n == 0:
        return memoryview(b"")
    te: list[Piece] = [const(tag(9, 0) + varint_bytes(4), n)]
    te.append(const(tag(11, 0) + varint_bytes(track_uuid), n))
    te += field_fixed64(44, vals.astype("<f8").view("<u8"))
    return _packets(ts_a, sequence_id, te)[0]
