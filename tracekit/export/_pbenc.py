"""Vectorised protobuf encoding of many small Perfetto track-event packets at once.

Building one `TracePacket` object per slice costs about 4 µs in Python (upb), which caps an
export near 250k events/s. The bulk of a trace is simple slices (kernels, runtime calls, CPU
ops), whose packets differ only in a few integers, so they are encoded here with numpy: every
field becomes a (rows, width) byte matrix plus a per-row length (varints a 64-bit word at a
time). Rows are then grouped by layout (the lengths of their variable-length fields: a begin
with a name and a correlation id, an end without); each group is copied into one gap-free
matrix (constants filled, columns gathered with `np.take` as fixed-size void items), and Arrow
interleaves the groups back into row order (a binary-view array cast to binary: one memcpy a
row). A boolean mask over the padded matrices is the fallback without binary views.

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
import pyarrow as pa

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
    """A column of the output: `data[i, :lens[i]]` are row i's bytes.

    `data` may be a read-only broadcast view (the same bytes on every row, see `const`).
    """

    data: U8
    lens: I64
    fixed: int | None = None  # every row uses exactly this many bytes (`lens` says the same)


_U = np.uint64
# Thresholds: a varint of x has more than k bytes when x >= 2**(7k).
_MORE = [_U(1 << (7 * k)) for k in range(10)]
# Continuation bits of the first 8 bytes of a varint of each length (1..10 bytes).
_CONT = np.array(
    [0] + [sum(0x80 << (8 * k) for k in range(min(n - 1, 8))) for n in range(1, 11)],
    dtype=np.uint64,
)


def _spread(x: U64) -> U64:
    """Bits 0..55 of `x` as eight 7-bit groups, one in the low bits of each byte."""
    y = x & _U(0x00FFFFFFFFFFFFFF)
    y = ((y & _U(0x00FFFFFFF0000000)) << _U(4)) | (y & _U(0x000000000FFFFFFF))
    y = ((y & _U(0x0FFFC0000FFFC000)) << _U(2)) | (y & _U(0x00003FFF00003FFF))
    y = ((y & _U(0x3F803F803F803F80)) << _U(1)) | (y & _U(0x007F007F007F007F))
    return y


def varint(values: npt.ArrayLike) -> Piece:
    """Base-128 varints of non-negative integers, one a row.

    Computed a 64-bit word at a time: bytes 0..7 of every row's varint as one uint64 (bit
    spreading, then the continuation bits of the row's length), bytes 8..9 as a second word.
    `data` is 8 or 16 bytes wide; row i's varint is `data[i, :lens[i]]`.
    """
    x = np.asarray(values)
    if x.dtype != np.uint64:
        x = x.astype(np.uint64)
    n = x.shape[0]
    if n == 0:
        return Piece(np.zeros((0, 1), np.uint8), np.zeros(0, dtype=np.int64))
    width = max(1, (int(x.max()).bit_length() + 6) // 7)
    if width == 1:
        return Piece(x.astype(np.uint8).reshape(n, 1), np.ones(n, dtype=np.int64), 1)
    fixed = None
    if (int(x.min()).bit_length() + 6) // 7 == width:
        fixed = width
        lens = np.full(n, width, dtype=np.int64)
        cont: U64 | np.uint64 = _CONT[width]
    else:
        lens = np.ones(n, dtype=np.int64)
        for k in range(1, width):
            lens += x >= _MORE[k]
        cont = np.take(_CONT, lens)
    words = np.empty((n, 2 if width > 8 else 1), dtype=np.uint64)
    words[:, 0] = _spread(x) | cont
    if width > 8:
        high = (x >> _U(56)) & _U(0x7F)
        high |= (x >= _MORE[9]).astype(np.uint64) << _U(7)  # byte 8 continues
        high |= (x >> _U(63)) << _U(8)  # byte 9
        words[:, 1] = high
    return Piece(words.view(np.uint8), lens, fixed)


def const(raw: bytes, n: int) -> Piece:
    """The same bytes on every row (a broadcast view: nothing is copied)."""
    data = np.broadcast_to(np.frombuffer(raw, dtype=np.uint8), (n, len(raw)))
    return Piece(data, np.full(n, len(raw), dtype=np.int64), len(raw))


def fixed64(values: npt.ArrayLike) -> Piece:
    x = np.ascontiguousarray(np.asarray(values).astype("<u8"))
    return Piece(x.view(np.uint8).reshape(-1, 8), np.full(x.shape[0], 8, dtype=np.int64), 8)


def field_varint(
    field: int, values: npt.ArrayLike, present: npt.NDArray[np.bool_] | None = None
) -> list[Piece]:
    """`field` as a varint on every row (or on rows where `present`)."""
    vals = np.asarray(values)
    pieces = [const(_tag(field, 0), vals.shape[0]), varint(vals)]
    if present is not None:
        pieces = [Piece(p.data, np.where(present, p.lens, 0)) for p in pieces]
    return pieces


def field_fixed64(
    field: int, values: npt.ArrayLike, present: npt.NDArray[np.bool_] | None = None
) -> list[Piece]:
    vals = np.asarray(values)
    pieces = [const(_tag(field, 1), vals.shape[0]), fixed64(vals)]
    if present is not None:
        pieces = [Piece(p.data, np.where(present, p.lens, 0)) for p in pieces]
    return pieces


def _small_varint_field(field: int, values: npt.NDArray[Any]) -> list[Piece]:
    """`field` with values below 128 (enums): tag and value from a lookup table."""
    vals = values.astype(np.int64)
    if vals.min(initial=0) < 0 or vals.max(initial=0) >= 128:
        return field_varint(field, vals)
    tag = _tag(field, 0)
    table = np.array([[*tag, v] for v in range(128)], dtype=np.uint8)
    return [
        Piece(
            np.take(table, vals, axis=0),
            np.full(vals.shape[0], len(tag) + 1, dtype=np.int64),
            len(tag) + 1,
        )
    ]


def total_len(pieces: list[Piece]) -> I64:
    fixed = sum(p.fixed for p in pieces if p.fixed is not None)
    out = np.full(pieces[0].lens.shape[0], fixed, dtype=np.int64)
    for p in pieces:
        if p.fixed is None:
            out += p.lens
    return out


def field_message(field: int, pieces: list[Piece]) -> list[Piece]:
    """`pieces` wrapped as a length-delimited sub-message `field`."""
    n = pieces[0].lens.shape[0]
    return [const(_tag(field, 2), n), varint(total_len(pieces)), *pieces]


# --------------------------------------------------------------------------------------------
# joining pieces: rows grouped by layout, each group one fixed-width byte matrix


@dataclass
class _Col:
    """A piece to copy: per-row bytes (`data` C-contiguous) or, when `raw` is set, the same
    bytes on every row; `lo`/`hi` the smallest and largest row length."""

    data: U8 | None
    raw: bytes | None
    lens: I64
    lo: int
    hi: int


@dataclass
class _Group:
    """Rows `rows` (None: every row, in order), each `width` bytes long, in `data` (rows x
    width, C-contiguous)."""

    rows: I64 | None
    width: int
    data: U8  # rows x (width + _SLACK): a row's bytes, then slack


def _columns(pieces: list[Piece]) -> list[bytes | _Col]:
    """The pieces as constants (bytes, neighbours merged) and columns; empty ones dropped."""
    n = pieces[0].lens.shape[0]
    items: list[bytes | _Col] = []
    for p in pieces:
        if n == 0 or p.data.shape[1] == 0:
            continue
        if p.fixed is not None:
            lo = hi = p.fixed
        else:
            lo, hi = int(p.lens.min()), int(p.lens.max())
        if hi == 0:
            continue
        broadcast = p.data.strides[0] == 0
        if lo == hi and broadcast:
            raw = p.data[0, :lo].tobytes()
            if items and isinstance(items[-1], bytes):
                items[-1] += raw
            else:
                items.append(raw)
            continue
        if broadcast:
            items.append(_Col(None, p.data[0].tobytes(), p.lens, lo, hi))
        else:
            items.append(_Col(np.ascontiguousarray(p.data), None, p.lens, lo, hi))
    return items


def _void(buf: U8, offset: int, width: int, n: int, stride: int) -> npt.NDArray[np.void]:
    """`n` items of `width` bytes in `buf` from `offset`, `stride` bytes apart, as one array."""
    return np.ndarray((n,), dtype=f"V{width}", buffer=buf, offset=offset, strides=(stride,))


def _groups(pieces: list[Piece]) -> list[_Group]:
    """Rows grouped by the lengths of their variable-length pieces; each group's rows are
    encoded into one matrix without gaps (constants filled, columns gathered with `take`)."""
    n = pieces[0].lens.shape[0]
    items = _columns(pieces)
    var = [c for c in items if isinstance(c, _Col) and c.lo != c.hi]
    row_sets: list[I64 | None]
    if not var:
        row_sets = [None]
    else:
        radix = 1
        for c in var:
            radix *= c.hi + 1
        if radix <= 1 << 22:  # one small integer a layout: group with bincount
            key = np.zeros(n, dtype=np.int64)
            radix = 1
            for c in var:
                key += c.lens * radix
                radix *= c.hi + 1
            counts = np.bincount(key)
            used = np.flatnonzero(counts)
            lut = np.zeros(counts.shape[0], dtype=np.int64)
            lut[used] = np.arange(used.shape[0])
            inv = lut[key]
            sizes = counts[used]
        else:
            lens = np.stack([c.lens for c in var], axis=1)
            _u, inv, sizes = np.unique(lens, axis=0, return_inverse=True, return_counts=True)
            inv = inv.reshape(-1)
        if sizes.shape[0] == 1:
            row_sets = [None]
        elif sizes.shape[0] <= 16:
            row_sets = [np.flatnonzero(inv == g) for g in range(sizes.shape[0])]
        else:
            order = np.argsort(inv, kind="stable")
            bounds = np.cumsum(sizes)
            row_sets = list(np.split(order, bounds[:-1]))
    groups: list[_Group] = []
    for rows in row_sets:
        first = 0 if rows is None else int(rows[0])
        m = n if rows is None else rows.shape[0]
        used_lens = [
            len(c) if isinstance(c, bytes) else (c.lo if c.lo == c.hi else int(c.lens[first]))
            for c in items
        ]
        width = sum(used_lens)
        stride = width + _SLACK
        data = np.empty((m, stride), dtype=np.uint8)
        col = 0
        # Left to right, each piece copied as items of a power-of-two size (fast copy loops):
        # the bytes past its own length are overwritten by the next piece, or land in the slack.
        for item, k in zip(items, used_lens):
            if k == 0:
                continue
            size = _item_size(k)
            if isinstance(item, bytes) or item.raw is not None:
                raw = item if isinstance(item, bytes) else item.raw
                assert raw is not None
                value = np.frombuffer(raw[:k].ljust(size, b"\0"), dtype=f"V{size}")[0]
                _void(data, col, size, m, stride)[...] = value
            else:
                c = item
                assert c.data is not None
                w = c.data.shape[1]
                if size > w:
                    size = k
                src = _void(c.data, 0, size, n, w)
                dst = _void(data, col, size, m, stride)
                if rows is None:
                    dst[...] = src
                else:
                    np.take(src, rows, out=dst, mode="clip")
            col += k
        groups.append(_Group(rows, width, data))
    return groups


_SLACK = 16


def _item_size(k: int) -> int:
    """The power of two at or above `k` (for k <= 16; else `k`)."""
    return k if k > 16 else 1 << (k - 1).bit_length()


_VIEWS = hasattr(pa, "binary_view")


def pack(pieces: list[Piece]) -> tuple[memoryview, I64]:
    """Every row's used bytes, row after row, and each row's length.

    Rows of one layout form one matrix; the matrices are interleaved back into row order by
    Arrow (a binary-view array, one view a row into its group's matrix, cast to binary).
    """
    lens = total_len(pieces)
    n = lens.shape[0]
    if n == 0:
        return memoryview(b""), lens
    if not _VIEWS:
        return memoryview(_mask_join(pieces)), lens
    groups = _groups(pieces)
    if len(groups) == 1:
        one = groups[0]
        return np.ascontiguousarray(one.data[:, : one.width]).data.cast("B"), lens
    views = np.empty((n, 4), dtype=np.int32)  # length, prefix, buffer index, offset
    views[:, 0] = lens
    for g, grp in enumerate(groups):
        assert grp.rows is not None
        m = grp.rows.shape[0]
        stride = grp.data.shape[1]
        if grp.width > 12:
            views[grp.rows, 1] = np.ndarray((m,), dtype="<i4", buffer=grp.data, strides=(stride,))
            views[grp.rows, 2] = g
            views[grp.rows, 3] = np.arange(0, m * stride, stride, dtype=np.int32)
        else:  # short rows are stored in the view itself
            inline = np.zeros((m, 12), dtype=np.uint8)
            inline[:, : grp.width] = grp.data[:, : grp.width]
            views.view(np.uint8).reshape(n, 16)[grp.rows, 4:] = inline
    arr = pa.Array.from_buffers(
        pa.binary_view(),
        n,
        [None, pa.py_buffer(views), *(pa.py_buffer(g.data) for g in groups)],
    )
    out = arr.cast(pa.large_binary())
    buf = out.buffers()[2]
    total = int(lens.sum())
    return memoryview(buf).cast("B")[:total], lens


def join(pieces: list[Piece]) -> bytes:
    """Concatenate every row's used bytes, row after row."""
    return bytes(pack(pieces)[0])


def _mask_join(pieces: list[Piece]) -> bytes:
    """`join` without Arrow's binary views (pyarrow < 16): padded matrices, masked."""
    data = np.concatenate([p.data for p in pieces], axis=1)
    n = data.shape[0]
    mask = np.concatenate(
        [np.arange(p.data.shape[1])[None, :] < p.lens[:, None] for p in pieces], axis=1
    )
    return bytes(data[mask].tobytes()) if n else b""


def compact(pieces: list[Piece]) -> Piece:
    """Several pieces as one: each row's used bytes packed to the left of one matrix."""
    n = pieces[0].lens.shape[0]
    lens = total_len(pieces)
    width = int(lens.max()) if n else 0
    out = np.zeros((n, max(width, 1)), dtype=np.uint8)
    if width:
        for grp in _groups(pieces):
            if grp.width == 0:
                continue
            dst = _void(out, 0, grp.width, n, out.shape[1])
            src = _void(grp.data, 0, grp.width, grp.data.shape[0], grp.data.shape[1])
            if grp.rows is None:
                dst[...] = src
            else:
                dst[grp.rows] = src
    return Piece(out, lens)


def empty(n: int) -> Piece:
    return Piece(np.zeros((n, 1), dtype=np.uint8), np.zeros(n, dtype=np.int64))


def take(piece: Piece, index: npt.NDArray[np.int64], present: npt.NDArray[np.bool_]) -> Piece:
    """Rows `index` of `piece`, empty where not `present`."""
    return Piece(np.take(piece.data, index, axis=0), np.where(present, piece.lens[index], 0))


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
    enc = [_tag(field, 2) + _varint_bytes(len(b)) + b for b in (u.encode() for u in uniq)]
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
        name_piece = const(_tag(10, 2) + _varint_bytes(len(name.encode())) + name.encode(), n)
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
    packet.append(const(_tag(10, 0) + _varint_bytes(sequence_id), n))
    packet += field_message(11, te)
    packet.append(const(_tag(13, 0) + _varint_bytes(SEQ_NEEDS_INCREMENTAL_STATE), n))
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
) -> memoryview:
    """`TYPE_COUNTER` events with `double_counter_value` (field 44); NaN values are left out."""
    ts_a = np.asarray(ts)
    vals = np.asarray(values, dtype=np.float64)
    keep = ~np.isnan(vals)
    ts_a, vals = ts_a[keep], vals[keep]
    n = ts_a.shape[0]
    if n == 0:
        return memoryview(b"")
    te: list[Piece] = [const(_tag(9, 0) + _varint_bytes(4), n)]
    te.append(const(_tag(11, 0) + _varint_bytes(track_uuid), n))
    te += field_fixed64(44, vals.astype("<f8").view("<u8"))
    return _packets(ts_a, sequence_id, te)[0]
