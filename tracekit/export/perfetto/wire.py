"""Protobuf wire encoding, a column at a time: each field of many packets becomes a `Piece`,
a (rows, width) byte matrix plus each row's length (varints a 64-bit word at a time).

Field numbers of the packets built from these pieces are in `packets.py`; joining pieces
into rows is `pack.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

U8 = npt.NDArray[np.uint8]
I64 = npt.NDArray[np.int64]
U64 = npt.NDArray[np.uint64]


def tag(field: int, wire: int) -> bytes:
    return varint_bytes((field << 3) | wire)


def varint_bytes(value: int) -> bytes:
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
    pieces = [const(tag(field, 0), vals.shape[0]), varint(vals)]
    if present is not None:
        pieces = [Piece(p.data, np.where(present, p.lens, 0)) for p in pieces]
    return pieces


def field_fixed64(
    field: int, values: npt.ArrayLike, present: npt.NDArray[np.bool_] | None = None
) -> list[Piece]:
    vals = np.asarray(values)
    pieces = [const(tag(field, 1), vals.shape[0]), fixed64(vals)]
    if present is not None:
        pieces = [Piece(p.data, np.where(present, p.lens, 0)) for p in pieces]
    return pieces


def small_varint_field(field: int, values: npt.NDArray[Any]) -> list[Piece]:
    """`field` with values below 128 (enums): tag and value from a lookup table."""
    vals = values.astype(np.int64)
    if vals.min(initial=0) < 0 or vals.max(initial=0) >= 128:
        return field_varint(field, vals)
    prefix = tag(field, 0)
    table = np.array([[*prefix, v] for v in range(128)], dtype=np.uint8)
    return [
        Piece(
            np.take(table, vals, axis=0),
            np.full(vals.shape[0], len(prefix) + 1, dtype=np.int64),
            len(prefix) + 1,
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
    return [const(tag(field, 2), n), varint(total_len(pieces)), *pieces]


def empty(n: int) -> Piece:
    return Piece(np.zeros((n, 1), dtype=np.uint8), np.zeros(n, dtype=np.int64))


def take(piece: Piece, index: npt.NDArray[np.int64], present: npt.NDArray[np.bool_]) -> Piece:
    """Rows `index` of `piece`, empty where not `present`."""
    return Piece(np.take(piece.data, index, axis=0), np.where(present, piece.lens[index], 0))


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
