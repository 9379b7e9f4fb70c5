"""Clock alignment of the parts of a multi-node run, on hand-built collectives."""

from __future__ import annotations

import math
from pathlib import Path

import pyarrow as pa
import pytest

from tests.outputs_synth import make_run
from tracekit.store import clock
from tracekit.store.join_nodes import join
from tracekit.store.reader import scan_table


def _anchors(ends: list[int], starts: list[int] | None = None) -> clock.Anchors:
    starts = starts or [e - 100_000 for e in ends]
    return {(0, k): [(s, e)] for k, (s, e) in enumerate(zip(starts, ends, strict=True))}


def test_offset_is_the_median_end_difference() -> None:
    ref = _anchors([1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000])
    # part 2's clock 700 us ahead; one collective left 40 us late there (latency)
    other = _anchors([1_700_000, 2_700_000, 3_740_000, 4_700_000, 5_700_000])
    est = clock.estimate(ref, other)
    assert est is not None
    assert est.offset_ns == 700_000
    assert est.anchors == 5
    assert est.spread_ns == 0.0  # MAD of (0, 0, 40 us, 0, 0) is 0
    # causality: the offset is at least (entry there - exit here) of every collective, the
    # latest being collective 2 (entered 40 us late there), and at most (exit there - entry
    # here), the least being 700 us + the 100 us a call lasts
    assert est.low_ns == 3_640_000 - 3_000_000
    assert est.high_ns == 1_700_000 - 900_000


def _alternating(
    theta: int, ref_wake: list[int], other_wake: list[int], n: int = 40
) -> tuple[clock.Anchors, clock.Anchors]:
    """n collectives 10 ms apart; the side entering last alternates (ref on even k) and
    leaves 5 us after it entered; the waiting side entered 50 us earlier and leaves the
    wake-up `*_wake[k // 2]` after the last entry. The other part's clock reads `theta` ahead."""
    ref: clock.Anchors = {}
    other: clock.Anchors = {}
    for k in range(n):
        t = 1_000_000 + k * 10_000_000
        if k % 2 == 0:  # ref last, other waits
            ref[(0, k)] = [(t, t + 5_000)]
            other[(0, k)] = [(t - 50_000 + theta, t + other_wake[k // 2] + theta)]
        else:  # other last, ref waits
            ref[(0, k)] = [(t - 50_000, t + ref_wake[k // 2])]
            other[(0, k)] = [(t + theta, t + 5_000 + theta)]
    return ref, other


def test_minimum_delay_when_both_sides_entered_last() -> None:
    """The other side's rank mostly wakes 80 us after the last entry, the reference's 30 us
    (a rank sharing its core with a busy process wakes late); once each, both woke in 10 us.
    The balanced end median leans by half the difference of the typical wake-ups (25 us); the
    midpoint of the causality bounds is set by the fastest wake-ups and is exact."""
    theta = 500_000
    ref_wake = [10_000] + [30_000] * 19
    other_wake = [10_000] + [80_000] * 19
    ref, other = _alternating(theta, ref_wake, other_wake)
    est = clock.estimate(ref, other)
    assert est is not None
    assert est.estimator == "minimum delay"
    # low = theta - fastest ref wake-up, high = theta + fastest other wake-up
    assert (est.low_ns, est.high_ns) == (theta - 10_000, theta + 10_000)
    assert est.offset_ns == theta
    # the end differences: theta + 75 us (ref last) or theta - 25 us (other last), one each
    # at theta +- 5 us: median theta, MAD 25 us; balanced over who was last: theta + 25 us
    assert est.spread_ns == pytest.approx(1.4826 * 25_000)
    # the third-best bound: theta - 30 us below (low side), theta + 55 us above (other last:
    # 5 us + its 50 us head start): hypot(20, 45) / 2 us
    assert est.error_ns == pytest.approx(math.hypot(20_000, 45_000) / 2)


def test_end_median_when_one_side_is_always_last() -> None:
    """The other part always enters last: its bound from above is set by its own waits and is
    loose, so the minimum delay is not used; the end median is, clipped into the bounds."""
    theta = 500_000
    ref: clock.Anchors = {}
    other: clock.Anchors = {}
    for k in range(20):
        t = 1_000_000 + k * 10_000_000
        ref[(0, k)] = [(t - 50_000, t + 30_000)]  # waits, wakes 30 us after the last entry
        other[(0, k)] = [(t + theta, t + 5_000 + theta)]
    est = clock.estimate(ref, other)
    assert est is not None
    assert est.estimator == "end median"
    assert (est.low_ns, est.high_ns) == (theta - 30_000, theta + 55_000)
    assert est.offset_ns == theta - 25_000  # leans by the wake-up less the last side's 5 us


def test_contradicting_anchors_give_the_balanced_end_median() -> None:
    """A mismatched collective (entered there 1 ms after it was left here) empties the
    causality interval: no bounds; the end differences balanced over who entered last,
    where whoever is last leaves at once and the other 30 us later."""
    theta = 500_000
    ref_ends, other_ends, ref_starts, other_starts = [], [], [], []
    for k in range(40):
        t = k * 10_000_000
        other_last = k % 4 != 0  # the other part enters last 3 times in 4
        ref_starts.append(t - (50_000 if other_last else 0))
        other_starts.append(t + theta - (0 if other_last else 50_000))
        ref_ends.append(t + 100_000 + (30_000 if other_last else 0))
        other_ends.append(t + theta + 100_000 + (0 if other_last else 30_000))
    other_starts[7] = ref_ends[7] + theta + 1_000_000
    other_ends[7] = other_starts[7] + 100_000
    est = clock.estimate(_anchors(ref_ends, ref_starts), _anchors(other_ends, other_starts))
    assert est is not None
    assert (est.low_ns, est.high_ns) == (None, None)
    assert est.estimator == "end median"
    assert est.offset_ns == theta  # the plain median would be theta - 30 us


def test_too_few_common_collectives_keep_the_wall_clock(tmp_path: Path) -> None:
    assert clock.estimate(_anchors([1, 2]), _anchors([1, 2])) is None
    make_run(tmp_path / "a", ranks=1, events=False, counters=False)
    (tmp_path / "b").mkdir()
    got = clock.align([("a", "h0", tmp_path / "a"), ("b", "h1", tmp_path / "b")])
    assert got[0].method == "reference"
    assert got[1].method == "wall clock"
    assert got[1].offset_ns == 0
    assert got[1].error_ns is None


def test_anchors_from_phases_number_collectives_per_cycle() -> None:
    t = pa.table(
        {
            "cycle": [0, 0, 0, 1, 1],
            "phase": ["allreduce", "verify", "allreduce", "allreduce", "draft"],
            "start_ns": [10, 5, 30, 50, 40],
            "end_ns": [20, 60, 40, 55, 45],
            "gpu_end_ns": pa.array([None] * 5, pa.int64()),
        }
    )
    assert clock.anchors_from_phases(t) == {
        (0, 0): [(10, 20)],
        (0, 1): [(30, 40)],
        (1, 0): [(50, 55)],
    }


def test_anchors_from_events_use_communication_kernels(tmp_path: Path) -> None:
    make_run(tmp_path / "r", ranks=1, cycles=3, counters=False)
    anchors, source = clock.part_anchors(tmp_path / "r")
    # the synthetic run's phases table has no allreduce phase: its NCCL kernels are used
    assert source == "events"
    assert sorted(anchors) == [(-1, 0), (-1, 1), (-1, 2)]


def test_shift_moves_only_time_columns() -> None:
    t = pa.table({"start_ns": [100, 200], "end_ns": [150, 250], "seq": [1, 2]})
    out = clock.shift(t, "phases", 40)
    assert out.column("start_ns").to_pylist() == [60, 160]
    assert out.column("end_ns").to_pylist() == [110, 210]
    assert out.column("seq").to_pylist() == [1, 2]


def _part(path: Path, ranks: list[int], offset: int, node: int, nnodes: int = 2) -> None:
    """A node's part: make_run's ranks renamed to `ranks`, its clock `offset` ns ahead."""
    import json
    import shutil

    from tracekit.store.reader import table_files

    tmp = path.with_name(path.name + "-src")
    make_run(tmp, ranks=max(ranks) + 1, cycles=4, counters=False)
    for table in ("events", "phases", "cycles", "manifests"):
        for rank, f in table_files(tmp, table):
            if rank not in ranks:
                continue
            import pyarrow.parquet as pq

            data = clock.shift(pq.read_table(f), table, -offset)
            dst = path / "store" / table / f"rank={rank}" / f.name
            dst.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(data, dst)
    shutil.rmtree(tmp)
    (path / "run.json").write_text(
        json.dumps({"node_rank": node, "nnodes": nnodes, "host": f"h{node}"})
    )


def test_join_shifts_each_part_back_onto_the_reference_clock(tmp_path: Path) -> None:
    _part(tmp_path / "n0", [0, 1], 0, 0)
    _part(tmp_path / "n1", [2, 3], 2_500_000, 1)
    res = join([tmp_path / "n1", tmp_path / "n0"], tmp_path / "run")
    assert res.ranks == [0, 1, 2, 3]
    assert res.missing_nodes == []
    c = {x.part: x for x in res.clock}
    assert c["node-0"].method == "reference"
    # make_run's ranks start 20 us apart (its skew), so the NCCL kernels end 20 us * rank apart:
    # the per-part median end is that of its ranks, so the estimate is 2.5 ms + 40 us
    assert c["node-1"].offset_ns == 2_500_000 + 40_000
    assert c["node-1"].source == "events"
    assert c["node-1"].anchors == 4
    base = scan_table(tmp_path / "n0", "cycles").collect()
    joined = scan_table(tmp_path / "run", "cycles").collect().sort("rank", "cycle")
    r2 = joined.filter(joined["rank"] == 2)["start_ns"].to_list()
    src = scan_table(tmp_path / "n1", "cycles").collect().sort("rank", "cycle")
    assert r2 == [s - c["node-1"].offset_ns for s in src.filter(src["rank"] == 2)["start_ns"]]
    assert base.height == 8


def test_join_refuses_two_parts_holding_one_rank(tmp_path: Path) -> None:
    from tracekit.errors import RankError

    _part(tmp_path / "n0", [0, 1], 0, 0)
    _part(tmp_path / "n1", [1, 2], 0, 1)
    with pytest.raises(RankError, match="both hold rank 1"):
        join([tmp_path / "n0", tmp_path / "n1"], tmp_path / "run")
