"""Lane assignment: no slice dropped, every lane pairs exactly as Perfetto pairs begin/end."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit.export.perfetto.lanes import (
    _sweep_order_lexsort,
    disjoint_lanes,
    is_nested,
    nested_lanes_and_order,
    sweep_order,
)

intervals = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 20)), min_size=0, max_size=40
).map(
    lambda xs: (
        np.array([s for s, _ in xs], dtype=np.int64),
        np.array([s + d for s, d in xs], dtype=np.int64),
    )
)


def _pairs_like_perfetto(start: np.ndarray, end: np.ndarray) -> bool:
    """Replay the sweep with a stack: every end must close its own begin."""
    idx, is_begin = sweep_order(start, end)
    stack: list[int] = []
    for i, b in zip(idx.tolist(), is_begin.tolist()):
        if b:
            stack.append(i)
        elif not stack or stack.pop() != i:
            return False
    return not stack


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_nested_lanes_each_lane_pairs_exactly(iv: tuple[np.ndarray, np.ndarray]) -> None:
    start, end = iv
    lanes, order = nested_lanes_and_order(start, end)
    assert lanes.shape == start.shape
    if order is not None:  # all in lane 0: the sweep order the check computed comes back
        assert not lanes.any()
        idx, is_begin = sweep_order(start, end)
        assert np.array_equal(order[0], idx)
        assert np.array_equal(order[1], is_begin)
    for lane in np.unique(lanes):
        sel = lanes == lane
        assert _pairs_like_perfetto(start[sel], end[sel])
        assert is_nested(*sweep_order(start[sel], end[sel]))


@settings(max_examples=200, deadline=None)
@given(intervals)
def test_disjoint_lanes_never_overlap_and_use_the_minimum(
    iv: tuple[np.ndarray, np.ndarray],
) -> None:
    start, end = iv
    lanes = disjoint_lanes(start, end)
    for lane in np.unique(lanes):
        s, e = start[lanes == lane], end[lanes == lane]
        overlap = np.maximum(s[:, None], s[None, :]) < np.minimum(e[:, None], e[None, :])
        np.fill_diagonal(overlap, False)
        assert not overlap.any()
        assert _pairs_like_perfetto(s, e)
    # no fewer lanes than slices of positive length open at one instant, no more than slices
    # open at one instant counting zero-length ones at their instant (greedy is optimal)
    if start.shape[0]:
        ts = np.unique(start)
        least = max(int(((start <= t) & (end > t)).sum()) for t in ts)
        most = max(
            int(((start <= t) & ((end > t) | (start == end)) & (end >= t)).sum()) for t in ts
        )
        assert max(least, 1) <= int(lanes.max()) + 1 <= max(most, 1)


def test_disjoint_lanes_pdl_pairs_use_two_lanes() -> None:
    # kernel i+1 starts 10 ns before kernel i ends, for every i: two lanes, alternating
    start = np.arange(0, 1000, 100, dtype=np.int64)
    end = start + 110
    assert disjoint_lanes(start, end).tolist() == [0, 1] * 5


def test_is_nested_detects_crossing_slices() -> None:
    start = np.array([0, 5], dtype=np.int64)
    end = np.array([10, 15], dtype=np.int64)
    assert not is_nested(*sweep_order(start, end))
    lanes, order = nested_lanes_and_order(start, end)
    assert lanes.tolist() == [0, 1]
    assert order is None
    assert is_nested(*sweep_order(np.array([0, 2, 10]), np.array([10, 8, 10])))


@settings(max_examples=300, deadline=None)
@given(intervals, st.booleans())
def test_sweep_order_matches_one_sort_of_all_points(
    iv: tuple[np.ndarray, np.ndarray], shuffle: bool
) -> None:
    start, end = iv
    if shuffle:
        perm = np.random.default_rng(len(start)).permutation(len(start))
        start, end = start[perm], end[perm]
    idx, is_begin = sweep_order(start, end)
    ref_idx, ref_begin = _sweep_order_lexsort(start, end)
    assert idx.tolist() == ref_idx.tolist()
    assert is_begin.tolist() == ref_begin.tolist()
