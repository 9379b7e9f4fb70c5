"""Place slices on tracks so that Perfetto's begin/end pairing reproduces them exactly.

A Perfetto track pairs `TYPE_SLICE_END` with the most recent open `TYPE_SLICE_BEGIN`, so the
slices of one track must nest (thread tracks) or not overlap at all (GPU stream lanes). These
helpers split slices into lanes where needed (no slice is ever dropped) and give the begin/end
order in which to write each lane.
"""

from __future__ import annotations

import heapq

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]


def disjoint_lanes(start: I64, end: I64) -> I64:
    """Lane index per slice such that slices of one lane never overlap (touching is fine).

    Greedy interval partitioning in start order (a slice takes the lowest lane free at its
    start), which uses as few lanes as slices overlap at one instant. Only slices that overlap
    something go through the Python loop: runs of slices separated in time from everything
    else are found vectorised and stay in lane 0.
    """
    n = start.shape[0]
    lanes = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lanes
    order = np.lexsort((end, start))
    s, e = start[order], end[order]
    running_end = np.maximum.accumulate(e)
    # a new group starts at i when slice i starts at or after every earlier slice's end
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = s[1:] >= running_end[:-1]
    alone = new_group.copy()
    alone[:-1] &= new_group[1:]
    crowded = np.flatnonzero(~alone)
    if crowded.shape[0] == 0:
        return lanes
    out = np.zeros(n, dtype=np.int64)
    # All lanes are free where a group starts, so groups are independent; in a group of two
    # the second slice takes lane 1. Larger groups go through the greedy loop.
    group = np.cumsum(new_group) - 1
    many = np.bincount(group)[group[crowded]] > 2
    pair = crowded[~many]
    out[pair] = ~new_group[pair]
    big = crowded[many]
    if big.shape[0]:
        out[big] = _greedy(s[big], e[big])
    lanes[order] = out
    return lanes


def _greedy(s: I64, e: I64) -> I64:
    """Greedy interval partitioning of slices sorted by start: lowest lane free at the start."""
    free: list[int] = []
    busy: list[tuple[int, int]] = []
    used = 0
    out = np.empty(s.shape[0], dtype=np.int64)
    for i, (si, ei) in enumerate(zip(s.tolist(), e.tolist())):
        while busy and busy[0][0] <= si:
            heapq.heappush(free, heapq.heappop(busy)[1])
        if free:
            lane = heapq.heappop(free)
        else:
            lane = used
            used += 1
        out[i] = lane
        heapq.heappush(busy, (ei, lane))
    return out


def sweep_order(start: I64, end: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """Begin/end points of the slices in the order to write them.

    Returns (slice index, is_begin) per point. Ties at one timestamp: ends of slices with a
    duration first, then begins (longer slice first, so parents open before children), then
    ends of zero-length slices. Inner slices end before outer ones at the same instant.

    Same order as sorting all points by (time, kind, tie, index) (`_sweep_order_lexsort`), but
    begins and ends are sorted separately, each on one integer key, and merged; slices that
    follow each other without overlap (a GPU lane) take a shortcut.
    """
    n = start.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    if bool((end > start).all()) and bool((start[1:] >= end[:-1]).all()):
        # b0 < e0 <= b1 < e1 ...: at a shared instant the end (with a duration) goes first
        return np.repeat(np.arange(n), 2), np.tile(np.array([True, False]), n)
    t0 = int(start.min())
    if int(end.max()) - t0 >= 1 << 60 or bool((end < start).any()):
        return _sweep_order_lexsort(start, end)
    # by start; equal starts keep index order
    if bool((start[1:] >= start[:-1]).all()):
        perm = None
        s, e = start, end
    else:
        perm = np.argsort(start, kind="stable")
        s, e = start[perm], end[perm]
    # begins: by start, then later end first (parent before child), then index
    same = s[1:] == s[:-1]
    nested_ties = bool((e[1:][same] <= e[:-1][same]).all())
    ob = np.arange(n) if nested_ties else np.lexsort((-e, s))
    # ends: by end, ends with a duration before zero-length ones, then later start first and
    # index descending; starts are sorted, so that is index descending
    zero = e == s
    key_e = ((e - t0) << 1) | zero
    oe = np.argsort(key_e, kind="stable")
    k = key_e[oe]
    tied = k[1:] == k[:-1]
    if tied.any():  # reverse each run of equal keys: index descending
        run_start = np.flatnonzero(np.concatenate([[True], ~tied]))
        run_len = np.diff(np.append(run_start, n))
        first = np.repeat(run_start, run_len)
        last = first + np.repeat(run_len, run_len) - 1
        oe = oe[first + last - np.arange(n)]
    # merge on (time, kind): kind 0 = end with a duration, 1 = begin, 2 = zero-length end
    keys = np.concatenate([((s[ob] - t0) << 2) | 1, ((e[oe] - t0) << 2) | (zero[oe] << 1)])
    order = np.argsort(keys, kind="stable")  # two sorted runs: a linear merge
    idx = np.concatenate([ob, oe])[order]
    if perm is not None:
        idx = perm[idx]
    return idx, order < n


def _sweep_order_lexsort(start: I64, end: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
    """`sweep_order` as one sort of all points (the reference for the tests)."""
    n = start.shape[0]
    idx = np.concatenate([np.arange(n), np.arange(n)])
    is_begin = np.concatenate([np.ones(n, dtype=bool), np.zeros(n, dtype=bool)])
    ts = np.concatenate([start, end])
    zero = end == start
    kind = np.concatenate([np.ones(n, dtype=np.int64), np.where(zero, 2, 0)])
    tie = np.concatenate([-end, -start])
    tie2 = np.concatenate([np.arange(n), -np.arange(n)])
    order = np.lexsort((tie2, tie, kind, ts))
    return idx[order], is_begin[order]


def is_nested(idx: I64, is_begin: npt.NDArray[np.bool_]) -> bool:
    """Whether the begin/end sequence pairs every end with its own begin (a stack discipline)."""
    if idx.shape[0] == 0:
        return True
    step = np.where(is_begin, 1, -1)
    depth_after = np.cumsum(step)
    level = np.where(is_begin, depth_after, depth_after + 1)
    if depth_after.min() < 0:
        return False
    # levels are small: a 16-bit stable sort is a radix sort
    order = np.argsort(level.astype(np.int16) if level.max() < 1 << 15 else level, kind="stable")
    lv, ib, ix = level[order], is_begin[order], idx[order]
    # within each level, points must alternate begin, end with the same slice
    if ib[0::2].all() and not ib[1::2].any():
        return bool((ix[0::2] == ix[1::2]).all() and (lv[0::2] == lv[1::2]).all())
    return False


def nested_lanes_and_order(
    start: I64, end: I64
) -> tuple[I64, tuple[I64, npt.NDArray[np.bool_]] | None]:
    """Lane index per slice such that each lane's slices nest strictly (no partial overlap),
    and `sweep_order(start, end)` when every slice is in lane 0 (it is computed for the check
    anyway), else None.

    Properly nested input (the common case, checked without a Python loop) stays in lane 0; a
    slice that crosses the end of an enclosing one goes to the lowest lane where it nests.
    """
    n = start.shape[0]
    lanes = np.zeros(n, dtype=np.int64)
    if n < 2:
        return lanes, None
    idx, is_begin = sweep_order(start, end)
    if is_nested(idx, is_begin):
        return lanes, (idx, is_begin)
    order = np.lexsort((-end, start))
    stacks: list[list[int]] = []
    out = np.empty(n, dtype=np.int64)
    for i, (si, ei) in enumerate(zip(start[order].tolist(), end[order].tolist())):
        for lane, stack in enumerate(stacks):
            while stack and stack[-1] <= si and not (stack[-1] == si == ei):
                stack.pop()
            if not stack or ei <= stack[-1]:
                stack.append(ei)
                out[i] = lane
                break
        else:
            stacks.append([ei])
            out[i] = len(stacks) - 1
    lanes[order] = out
    return lanes, None
