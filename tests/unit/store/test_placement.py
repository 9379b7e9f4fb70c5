"""tracekit/store/placement.py: nesting (`nest`, by hand and against the stack walk
`_nest_loop`) and cycle membership (`place`, the midpoint rule), with known answers; and merge
(collector records) and the analyzers (a trace's annotations) placing one run alike."""

from __future__ import annotations

import random
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.conftest import SAMPLE_TRACES
from tests.unit.store._records import phases_and_cycles
from tracekit.analyzers._load import read_rank
from tracekit.analyzers.cycles import assign_cycles
from tracekit.analyzers.phases import annotation_phases, collector_phases
from tracekit.analyzers.rules import load_rules
from tracekit.store.merge import merge
from tracekit.store.placement import OUTSIDE, _nest_loop, nest, nesting_order, place

SCHEMA = {
    "pid": pl.Int64,
    "tid": pl.Int64,
    "phase": pl.String,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


def _walk(ranges: pl.DataFrame) -> pl.DataFrame:
    df = nesting_order(ranges)
    out: pl.DataFrame = _nest_loop(
        df.with_row_index("inst").with_columns(pl.col("inst").cast(pl.Int64))
    )
    return out


def _frame(rows: list[tuple[int | None, int, str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def test_crossing_ranges_follow_the_stack_walk() -> None:
    # a [0,10) holds b [5,15); c [12,20) starts after a ended but b is still open, so the
    # walk (which only pops from the top) keeps a under b: c is at depth 2, parent b, top a;
    # d [16,18) starts after b ended but inside c; e [21,22) after everything: a new top
    out = nest(
        _frame(
            [
                (1, 1, "a", 0, 10),
                (1, 1, "b", 5, 15),
                (1, 1, "c", 12, 20),
                (1, 1, "d", 16, 18),
                (1, 1, "e", 21, 22),
                (1, 2, "f", 6, 7),  # another thread: its own top
            ]
        )
    )
    got = {r["phase"]: (r["depth"], r["parent"], r["top"]) for r in out.iter_rows(named=True)}
    assert got == {
        "a": (0, None, 0),
        "b": (1, "a", 0),
        "c": (2, "b", 0),
        "d": (3, "c", 0),
        "e": (0, None, 4),
        "f": (0, None, 5),
    }


def test_same_start_longer_first_and_touching_ends() -> None:
    out = nest(_frame([(0, 0, "in", 0, 5), (0, 0, "out", 0, 9), (0, 0, "next", 9, 12)]))
    assert out.select("phase", "depth", "parent", "top").rows() == [
        ("out", 0, None, 0),
        ("in", 1, "out", 0),
        ("next", 0, None, 2),  # starts where `out` ends: not inside it
    ]


def test_random_ranges_match_the_walk() -> None:
    rng = random.Random(15)
    for _ in range(400):
        span = rng.choice([5, 30, 200])
        rows = []
        for _ in range(rng.randint(0, 60)):
            s = rng.randint(0, span)
            d = rng.choice([0, 1, 2, 5, 10, 40, 500])
            rows.append((rng.choice([0, 1, None]), rng.choice([7, 8]), rng.choice("abc"), s, s + d))
        ranges = _frame(rows)
        assert_frame_equal(nest(ranges), _walk(ranges))


def test_empty_and_null_ends() -> None:
    empty = _frame([])
    assert_frame_equal(nest(empty), _walk(empty))
    # a null end takes the walk itself (which treats it as it always did)
    out = nest(_frame([(0, 0, "a", 0, 10)]).with_columns(pl.lit(None, pl.Int64).alias("end_ns")))
    assert out["depth"].to_list() == [0]


# ---- nesting: known answers ---------------------------------------------------------------


def _nested(rows: list[tuple[int, int, str, int, int, int]]) -> dict[int, tuple[Any, ...]]:
    """seq -> (depth, parent, seq of its top) of ranges (pid, tid, phase, start, end, seq)."""
    schema = {**SCHEMA, "seq": pl.Int64}
    out = nest(pl.DataFrame(rows, schema=schema, orient="row"))
    seq_of = dict(zip(out["inst"].to_list(), out["seq"].to_list(), strict=True))
    return {
        r["seq"]: (r["depth"], r["parent"], seq_of[r["top"]]) for r in out.iter_rows(named=True)
    }


def test_equal_ranges_nest_in_record_order() -> None:
    # two calls stamped with the same start and end (a coarse clock): the first entered (seq 1)
    # is the outer one, whatever order the rows come in; the third starts with them, ends first
    rows = [(1, 1, "verify", 100, 200, 2), (1, 1, "draft", 100, 200, 1), (1, 1, "ar", 100, 150, 3)]
    assert _nested(rows) == {1: (0, None, 1), 2: (1, "draft", 1), 3: (2, "verify", 1)}
    assert _nested(rows[::-1]) == _nested(rows)


def test_threads_and_processes_nest_apart() -> None:
    # the same times on another thread and in another process: three tops, one child each
    rows = [
        (1, 1, "verify", 0, 100, 1),
        (1, 1, "allreduce", 10, 20, 2),
        (1, 2, "verify", 0, 100, 3),
        (1, 2, "allreduce", 10, 20, 4),
        (2, 1, "verify", 0, 100, 5),
        (2, 1, "allreduce", 10, 20, 6),
    ]
    got = _nested(rows)
    assert [got[s] for s in (1, 3, 5)] == [(0, None, 1), (0, None, 3), (0, None, 5)]
    assert [got[s] for s in (2, 4, 6)] == [(1, "verify", 1), (1, "verify", 3), (1, "verify", 5)]


# ---- cycle membership: the midpoint rule --------------------------------------------------


def _spans(spans: list[tuple[int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        {"cycle": list(range(len(spans))), "start_ns": [a for a, _ in spans],
         "end_ns": [b for _, b in spans]},
    )  # fmt: skip


def _placed(
    rows: list[tuple[str, int, int]], spans: list[tuple[int, int]]
) -> list[tuple[Any, ...]]:
    """(phase, depth, cycle) of ranges on one thread placed in cycles `spans`, in start order."""
    ranges = pl.DataFrame([(1, 1, p, s, e) for p, s, e in rows], schema=SCHEMA, orient="row")
    out = place(nest(ranges), _spans(spans)).sort("start_ns", "inst")
    return list(out.select("phase", "depth", "cycle").iter_rows())


def test_annotations_8us_outside_their_records_stay_in_their_cycle() -> None:
    # issue 13's vLLM case: cycles (starts_with verify) recorded 1000..5000 us and 6000..10000 us;
    # the profiler's ranges open 8 us before and close 8 us after the records, so the first
    # verify starts before its cycle and each draft ends after it
    spans = [(1_000_000, 5_000_000), (6_000_000, 10_000_000)]
    rows = [
        ("verify", 992_000, 3_008_000),
        ("draft", 3_092_000, 5_008_000),
        ("verify", 5_992_000, 8_008_000),
        ("draft", 8_092_000, 10_008_000),
    ]
    assert _placed(rows, spans) == [
        ("verify", 0, 0), ("draft", 0, 0), ("verify", 0, 1), ("draft", 0, 1),
    ]  # fmt: skip


def test_midpoint_on_a_boundary() -> None:
    # cycles [0, 100] and [100, 200]: a range whose midpoint is 100 is in the later cycle (the
    # cycle that starts there); one whose midpoint is the last cycle's end is still in it
    assert _placed([("a", 50, 150)], [(0, 100), (100, 200)]) == [("a", 0, 1)]
    assert _placed([("a", 150, 250)], [(0, 100), (100, 200)]) == [("a", 0, 1)]
    assert _placed([("a", 151, 251)], [(0, 100), (100, 200)]) == [("a", 0, OUTSIDE)]


def test_sub_phase_takes_its_tops_cycle() -> None:
    # a verify [300, 1600] (midpoint 950) in cycle 0 [0, 1000]: its allreduce [1200, 1500]
    # (midpoint 1350, in cycle 1 [1000, 2000]) is a sub-phase and stays with its verify
    got = _placed([("verify", 300, 1600), ("allreduce", 1200, 1500)], [(0, 1000), (1000, 2000)])
    assert got == [("verify", 0, 0), ("allreduce", 1, 0)]


def test_phase_between_cycles_is_in_none() -> None:
    # a prefill [2500, 2900] between cycle 0 [0, 2000] and cycle 1 [3000, 5000]; a phase
    # before the first cycle and after the last
    rows = [("x", -500, -100), ("draft", 100, 900), ("prefill", 2500, 2900), ("y", 6000, 7000)]
    got = _placed(rows, [(0, 2000), (3000, 5000)])
    assert got == [("x", 0, -1), ("draft", 0, 0), ("prefill", 0, -1), ("y", 0, -1)]


def test_no_cycles_places_everything_outside() -> None:
    assert _placed([("draft", 0, 10), ("verify", 10, 20)], []) == [
        ("draft", 0, -1),
        ("verify", 0, -1),
    ]


def test_cycles_of_one_process_only_hold_its_ranges() -> None:
    # two processes of one rank each numbered cycles over the same time (`by="pid"`)
    inst = nest(
        pl.DataFrame([(1, 1, "v", 10, 20), (2, 1, "v", 10, 20)], schema=SCHEMA, orient="row")
    )
    cycles = pl.DataFrame({"cycle": [0, 1], "start_ns": [0, 5], "end_ns": [30, 30], "pid": [1, 2]})
    out = place(inst, cycles, by="pid").sort("pid")
    assert out["cycle"].to_list() == [0, 1]
    assert place(inst, cycles)["cycle"].to_list() == [1, 1]  # without: the later start


# ---- merge and the analyzers place one run alike ------------------------------------------


def _record(
    kind: str, phase: str | None, raw: int, start: int, end: int, seq: int
) -> dict[str, Any]:
    return {
        "kind": kind, "phase": phase, "cycle": raw, "depth": 0, "parent": None, "pid": 7,
        "tid": 1, "seq": seq, "start_ns": start, "end_ns": end, "gpu_start_ns": None,
        "gpu_end_ns": None, "graph_replays": 0, "accept_len": None, "ok": True, "target": "",
    }  # fmt: skip


def test_merge_and_annotations_agree_on_a_hand_built_run() -> None:
    # GIVEN vLLM-like records (starts_with verify, require draft): a prefill step before the
    # first cycle (raw 0: a verify without draft), then two cycles whose verify holds an
    # allreduce; and the profiler's ranges of the same calls, 8 us wider at either end
    calls = [  # phase, raw cycle, start, end (us)
        ("verify", 0, 100, 900),
        ("verify", 1, 1000, 3000),
        ("allreduce", 1, 2000, 2900),
        ("draft", 1, 3100, 5000),
        ("verify", 2, 6000, 8000),
        ("allreduce", 2, 6100, 6200),
        ("draft", 2, 8100, 10000),
    ]
    us = 1000
    recs = [_record("phase", p, c, s * us, e * us, i + 1) for i, (p, c, s, e) in enumerate(calls)]
    phases, cycles = phases_and_cycles(recs, {"starts_with": "verify", "require": "draft"})
    ann = pl.DataFrame(
        [(7, 1, p, s * us - 8000, e * us + 8000, "annotation") for p, _c, s, e in calls],
        schema={**SCHEMA, "source": pl.String},
        orient="row",
    )
    collector = pl.DataFrame(cycles).with_columns(pl.col("accept_len").cast(pl.Float64))
    marks = pl.DataFrame(schema={"start_ns": pl.Int64, "end_ns": pl.Int64})
    out, _ = assign_cycles(nest(ann), marks, collector, rank=0)
    # THEN the same (cycle, phase, depth, parent), by hand: the prefill verify in no cycle
    want = [
        (-1, "verify", 0, None),
        (0, "verify", 0, None),
        (0, "allreduce", 1, "verify"),
        (0, "draft", 0, None),
        (1, "verify", 0, None),
        (1, "allreduce", 1, "verify"),
        (1, "draft", 0, None),
    ]
    key = ("cycle", "phase", "depth", "parent")
    assert [tuple(r[k] for k in key) for r in phases] == want
    assert list(out.sort("start_ns").select(*key).iter_rows()) == want


@pytest.mark.slow  # merges and ingests a sample run: about 3 s
def test_merge_and_annotations_agree_on_a_sample_run(tmp_path: Path) -> None:
    # GIVEN a full-mode H200 run (profiled cycles 10-12, every cycle recorded by the collector)
    run = tmp_path / "run"
    shutil.copytree(SAMPLE_TRACES / "gpu_h200_full" / "extend", run)
    merge(run)
    inputs = read_rank(run, 0)
    # WHEN its annotations are placed by the analyzers and its records by merge
    ann = annotation_phases(inputs, load_rules())
    rec = collector_phases(inputs)
    assert ann is not None
    assert rec is not None
    window = sorted(set(ann.instances.filter(pl.col("cycle") >= 0)["cycle"].to_list()))
    assert window == [10, 11, 12]
    key = ["cycle", "phase", "depth", "parent"]

    def counts(inst: pl.DataFrame) -> list[tuple[Any, ...]]:
        return inst.filter(pl.col("cycle").is_in(window)).group_by(key).len().sort(key).rows()

    # THEN every profiled cycle has the same instances, sub-phases included, and no
    # annotation fell outside its cycle
    assert counts(ann.instances) == counts(rec.instances)
    assert ann.instances.filter(pl.col("depth") > 0).height > 0
    assert ann.instances.filter(pl.col("cycle") < 0).height == 0


@pytest.mark.slow  # merges a sample run: about 2 s
def test_analyzers_read_the_nesting_merge_wrote(tmp_path: Path) -> None:
    # GIVEN a light-mode sample run merged (its `phases` table holds inst and top)
    run = tmp_path / "run"
    shutil.copytree(SAMPLE_TRACES / "gpu_h200_light" / "graph", run)
    merge(run)
    inputs = read_rank(run, 0)
    assert inputs.phases is not None
    table = inputs.phases
    # WHEN the analyzers take the rank's phases
    got = collector_phases(inputs)
    assert got is not None
    # THEN their instances are the table's rows in its `inst` order, with its `top`
    assert got.instances["inst"].to_list() == sorted(table["inst"].to_list())
    by_inst = table.sort("inst")
    assert got.instances["top"].to_list() == by_inst["top"].to_list()
    assert got.instances.filter(pl.col("depth") > 0).height > 0
    # AND they are taken as written, not derived again: a `top` changed in the table is read
    moved = table.with_columns(
        pl.when(pl.col("depth") > 0).then(pl.lit(-7)).otherwise(pl.col("top")).alias("top")
    )
    read = collector_phases(replace(inputs, phases=moved))
    assert read is not None
    assert read.instances.filter(pl.col("depth") > 0)["top"].unique().to_list() == [-7]
    # AND a store merged before `inst`/`top` were written gives the same instances
    old = collector_phases(replace(inputs, phases=table.drop("inst", "top")))
    assert old is not None
    assert_frame_equal(old.instances, got.instances, check_column_order=False)
