"""Vectorised protobuf encoding of many small Perfetto track-event packets at once.

Building one `TracePacket` object per slice costs about 4 µs in Python (upb), which caps an
export near 250k events/s. The bulk of a trace is simple slices (kernels, runtime calls, CPU
ops), whose packets differ only in a few integers, so they are encoded here with numpy: every
field becomes a (rows, width) byte matrix plus a per-row length, the matrices are laid side by
side, and a boolean mask keeps each row's used bytes, in row order.

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

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]

SEQ_NEEDS_INCREMENTAL_STATE = 2


def _tag(field: int, wire: int) -> bytes:
    return _varint_bytes((field << 3) | wire)


def _varint_bytes(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@dataclass
class Piece:
    """A column of the output: `data[i, :lens[i]]` are row i's bytes."""

    data: U8
    lens: I64


def varint(values: npt.ArrayLike) -> Piece:
    """Base-128 varints of non-negative integers, one a row."""
    x = np.asarray(values).astype(np.uint64, copy=True)
    n = x.shape[0]
    cols: list[U8] = []
    lens = np.ones(n, dtype=np.int64)
    for _ in range(10):
        low = (x & np.uint64(0x7F)).astype(np.uint8)
        x >>= np.uint64(7)
        more = x != 0
        cols.append(low | (more.astype(np.uint8) << np.uint8(7)))
        if not more.any():
            break
        lens += more
    return Piece(np.stack(cols, axis=1) if cols else np.zeros((n, 1), np.uint8), lens)


def const(raw: bytes, n: int) -> Piece:
    """The same bytes on every row."""
    data = np.broadcast_to(np.frombuffer(raw, dtype=np.uint8), (n, len(raw)))
    return Piece(np.ascontiguousarray(data), np.full(n, len(raw), dtype=np.int64))


def fixed64(values: npt.ArrayLike) -> Piece:
    x = np.ascontiguousarray(np.asarray(values).astype("<u8"))
    return Piece(x.view(np.uint8).reshape(-1, 8), np.full(x.shape[0], 8, dtype=np.int64))


def field_varint(
    field: int, values: npt.ArrayLike, present: npt.NDArray[np.bool_] | None = None
) -> list[Piece]:
    """`field` as a varint on every row (or on rows where `present`)."""
    vals = np.asarray(values)
    pieces = [const(_tag(field, 0), vals.shape[0]), varint(vals)]
    if present is not None:
        for p in pieces:
            p.lens = np.where(present, p.lens, 0)
    return pieces


def field_fixed64(
    field: int, values: npt.ArrayLike, present: npt.NDArray[np.bool_] | None = None
) -> list[Piece]:
    vals = np.asarray(values)
    pieces = [const(_tag(field, 1), vals.shape[0]), fixed64(vals)]
    if present is not None:
        for p in pieces:
            p.lens = np.where(present, p.lens, 0)
    return pieces


def _small_varint_field(field: int, values: npt.NDArray[Any]) -> list[Piece]:
    """`field` with values below 128 (enums): tag and value from a lookup table."""
    vals = values.astype(np.int64)
    if vals.min(initial=0) < 0 or vals.max(initial=0) >= 128:
        return field_varint(field, vals)
    tag = _tag(field, 0)
    table = np.array([[*tag, v] for v in range(128)], dtype=np.uint8)
    return [Piece(table[vals], np.full(vals.shape[0], len(tag) + 1, dtype=np.int64))]


def total_len(pieces: list[Piece]) -> I64:
    out = np.zeros(pieces[0].lens.shape[0], dtype=np.int64)
    for p in pieces:
        out += p.lens
    return out


def field_message(field: int, pieces: list[Piece]) -> list[Piece]:
    """`pieces` wrapped as a length-delimited sub-message `field`."""
    n = pieces[0].lens.shape[0]
    return [const(_tag(field, 2), n), varint(total_len(pieces)), *pieces]


def join(pieces: list[Piece]) -> bytes:
    """Concatenate every row's used bytes, row after row."""
    data = np.concatenate([p.data for p in pieces], axis=1)
    if all(p.lens.min(initial=0) == p.data.shape[1] for p in pieces):
        full: bytes = data.tobytes()  # every row uses every column
        return full
    n = data.shape[0]
    mask = np.concatenate(
        [
            np.ones((n, p.data.shape[1]), dtype=bool)
            if p.lens.min(initial=0) == p.data.shape[1]
            else np.arange(p.data.shape[1])[None, :] < p.lens[:, None]
            for p in pieces
        ],
        axis=1,
    )
    out: bytes = data[mask].tobytes()
    return out


def compact(pieces: list[Piece]) -> Piece:
    """Several pieces as one: each row's used bytes packed to the left of one matrix."""
    n = pieces[0].lens.shape[0]
    lens = total_len(pieces)
    width = int(lens.max()) if n else 0
    out = np.zeros((n, max(width, 1)), dtype=np.uint8)
    if width:
        flat = np.frombuffer(join(pieces), dtype=np.uint8)
        rows = np.repeat(np.arange(n), lens)
        starts = np.cumsum(lens) - lens
        cols = np.arange(flat.shape[0]) - np.repeat(starts, lens)
        out[rows, cols] = flat
    return Piece(out, lens)


def empty(n: int) -> Piece:
    return Piece(np.zeros((n, 1), dtype=np.uint8), np.zeros(n, dtype=np.int64))


def take(piece: Piece, index: npt.NDArray[np.int64], present: npt.NDArray[np.bool_]) -> Piece:
    """Rows `index` of `piece`, empty where not `present`."""
    return Piece(piece.data[index], np.where(present, piece.lens[index], 0))


def stack(pieces: list[Piece]) -> Piece:
    """Pieces of different row sets one below the other (padded to one width)."""
    width = max(p.data.shape[1] for p in pieces)
    data = np.concatenate(
        [np.pad(p.data, ((0, 0), (0, width - p.data.shape[1]))) for p in pieces], axis=0
    )
    return Piece(data, np.concatenate([p.lens for p in pieces]))


def ragged(rows: list[bytes]) -> Piece:
    """Pre-encoded bytes per row (any lengths)."""
    lens = np.array([len(r) for r in rows], dtype=np.int64)
    width = max(int(lens.max()) if rows else 0, 1)
    flat = np.frombuffer(b"".join(rows), dtype=np.uint8)
    out = np.zeros((len(rows), width), dtype=np.uint8)
    if flat.shape[0]:
        starts = np.cumsum(lens) - lens
        r = np.repeat(np.arange(len(rows)), lens)
        out[r, np.arange(flat.shape[0]) - np.repeat(starts, lens)] = flat
    return Piece(out, lens)


def _string_piece(field: int, values: list[str | None]) -> Piece:
    """`field` as a string on each row (absent for None); each distinct string encoded once."""
    n = len(values)
    uniq: dict[str, int] = {}
    idx = np.empty(n, dtype=np.int64)
    for i, v in enumerate(values):
        idx[i] = -1 if v is None else uniq.setdefault(v, len(uniq))
    if not uniq:
        return empty(n)
    enc = [_tag(field, 2) + _varint_bytes(len(b)) + b for b in (u.encode() for u in uniq)]
    width = max(len(e) for e in enc)
    table = np.zeros((len(enc), width), dtype=np.uint8)
    for i, e in enumerate(enc):
        table[i, : len(e)] = np.frombuffer(e, dtype=np.uint8)
    lens_u = np.array([len(e) for e in enc], dtype=np.int64)
    safe = np.maximum(idx, 0)
    return Piece(table[safe], np.where(idx >= 0, lens_u[safe], 0))


def debug_annotations(columns: dict[str, tuple[str, Any]], n: int) -> Piece:
    """TrackEvent.debug_annotations (field 4), one a column, per row; None / NaN leave it out.

    `columns` maps an argument name to (kind, values), kind one of "int", "double", "bool",
    "string". DebugAnnotation fields: name 10, bool_value 2, int_value 4, double_value 5,
    string_value 6.
    """
    pieces: list[Piece] = []
    for name, (kind, values) in columns.items():
        name_piece = const(_tag(10, 2) + _varint_bytes(len(name.encode())) + name.encode(), n)
        if kind == "string":
            value = _string_piece(6, list(values))
            present = value.lens > 0
            value_pieces = [value]
        else:
            arr = np.asarray(values, dtype=np.float64 if kind == "double" else object)
            if kind == "double":
                present = ~np.isnan(arr)
                value_pieces = field_fixed64(
                    5, np.where(present, arr, 0.0).astype("<f8").view("<u8")
                )
            else:
                present = np.array([v is not None for v in arr], dtype=bool)
                ints = np.array([0 if v is None else int(v) for v in arr], dtype=np.int64)
                value_pieces = field_varint(2 if kind == "bool" else 4, ints.view(np.uint64))
        sub = field_message(4, [name_piece, *value_pieces])
        for p in sub:
            p.lens = np.where(present, p.lens, 0)
        pieces += sub
    return compact(pieces) if pieces else empty(n)


def _packets(ts: npt.NDArray[Any], sequence_id: int, te: list[Piece]) -> tuple[bytes, I64]:
    n = ts.shape[0]
    packet: list[Piece] = []
    packet += field_varint(8, ts)
    packet.append(const(_tag(10, 0) + _varint_bytes(sequence_id), n))
    packet += field_message(11, te)
    packet.append(const(_tag(13, 0) + _varint_bytes(SEQ_NEEDS_INCREMENTAL_STATE), n))
    framed = field_message(1, packet)
    return join(framed), total_len(framed)


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
) -> tuple[bytes, I64]:
    """One `Trace{packet{...track_event{...}}}` a row; zero in an optional column means absent.

    Returns the bytes and each row's length.
    """
    ts_a = np.asarray(ts)
    n = ts_a.shape[0]
    if n == 0:
        return b"", np.zeros(0, dtype=np.int64)
    te: list[Piece] = []
    te += _small_varint_field(9, np.asarray(event_type))
    if name_iid is not None:
        iid = np.asarray(name_iid)
        if iid.any():
            te += field_varint(10, iid, iid != 0)
    uuid = np.asarray(track_uuid)
    if uuid.ndim == 0 or (uuid.shape[0] and (uuid == uuid[0]).all()):
        one = int(uuid) if uuid.ndim == 0 else int(uuid[0])
        te.append(const(_tag(11, 0) + _varint_bytes(one), n))  # one track: encode once
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
) -> bytes:
    """`TYPE_COUNTER` events with `double_counter_value` (field 44); NaN values are left out."""
    ts_a = np.asarray(ts)
    vals = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(vals)
    ts_a, vals = ts_a[keep], vals[keep]
    n = ts_a.shape[0]
    if n == 0:
        return b""
    te: list[Piece] = [const(_tag(9, 0) + _varint_bytes(4), n)]
    te.append(const(_tag(11, 0) + _varint_bytes(track_uuid), n))
    te += field_fixed64(44, vals.astype("<f8").view("<u8"))
    return _packets(ts_a, sequence_id, te)[0]
