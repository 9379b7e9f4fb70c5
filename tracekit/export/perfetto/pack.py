"""Joining pieces (wire.py) into rows: rows grouped by layout, each group one fixed-width
byte matrix, interleaved back into row order by Arrow.

Rows are grouped by the lengths of their variable-length fields (a begin with a name and a
correlation id, an end without); each group is copied into one gap-free matrix (constants
filled, columns gathered with `np.take` as fixed-size void items), and Arrow interleaves the
groups back into row order (a binary-view array cast to binary: one memcpy a row). A boolean
mask over the padded matrices is the fallback without binary views.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from tracekit.export.perfetto.wire import I64, U8, Piece, total_len


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
