"""Clock alignment of the parts of a multi-node run, on hand-built collectives."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tests.outputs_synth import make_run
from tracekit.store import clock
from tracekit.store.parts import join
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


def test_balanced_over_who_entered_last() -> None:
    """Whoever enters last leaves at once, the other after a 30 us wake-up: the plain median
    leans 30 us to the side that is mostly last; balancing the two sides removes it."""
    ref_ends, other_ends, ref_starts, other_starts = [], [], [], []
    theta = 500_000
    for k in range(40):
        t = k * 10_000_000
        other_last = k % 4 != 0  # the other part enters last 3 times in 4
        ref_starts.append(t - (50_000 if other_last else 0))
        other_starts.append(t + theta - (0 if other_last else 50_000))
        ref_ends.append(t + 100_000 + (30_000 if other_last else 0))
        other_ends.append(t + theta + 100_000 + (0 if other_last else 30_000))
    est = clock.estimate(_anchors(ref_ends, ref_starts), _anchors(other_ends, other_starts))
    assert est is not None
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
