"""analyzers/phases.py: the collector's `phases` table is trusted (merge placed it), annotation
ranges are placed here; known answers on hand-built inputs."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tracekit.analyzers._load import RankInputs
from tracekit.analyzers.phases import collector_phases, rank_phases
from tracekit.analyzers.rules import load_rules

PHASES = {
    "cycle": pl.Int64,
    "phase": pl.String,
    "depth": pl.Int32,
    "parent": pl.String,
    "pid": pl.Int64,
    "tid": pl.Int64,
    "seq": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


def _inputs(phases: list[tuple[object, ...]], events: pl.DataFrame | None = None) -> RankInputs:
    table = pl.DataFrame(phases, schema=PHASES, orient="row")
    return RankInputs(Path("run"), 0, events, table, None)


def _rows(inst: pl.DataFrame) -> list[tuple[object, ...]]:
    return inst.sort("inst").select("phase", "cycle", "depth", "parent", "top").rows()


def test_collector_records_keep_the_tables_depth_and_cycle() -> None:
    # GIVEN a phases table as merge wrote it: a verify in cycle 0 with an allreduce inside, a
    # draft in cycle 1 whose record says depth 0 although its range lies inside the verify's
    # (the table is the definition: nothing is nested again), a prefill in no cycle
    inp = _inputs(
        [
            (0, "verify", 0, None, 1, 1, 1, 100, 500),
            (0, "allreduce", 1, "verify", 1, 1, 2, 200, 300),
            (1, "draft", 0, None, 1, 1, 3, 400, 450),
            (-1, "prefill", 0, None, 1, 1, 4, 600, 700),
        ]
    )
    rp = collector_phases(inp)
    assert rp is not None
    assert rp.approximate
    # THEN depth, parent and cycle as written; top: the last depth-0 row before it
    assert _rows(rp.instances) == [
        ("verify", 0, 0, None, 0),
        ("allreduce", 0, 1, "verify", 0),
        ("draft", 1, 0, None, 2),
        ("prefill", -1, 0, None, 3),
    ]
    assert rp.tops["phase"].to_list() == ["verify", "draft"]
    # the cycles: each cycle's phase extent (no collector cycles table here)
    assert rp.cycles.select("cycle", "start_ns", "end_ns").rows() == [(0, 100, 500), (1, 400, 450)]


def test_a_table_without_depth_is_nested_here() -> None:
    # a store whose depth column is null (not written by merge): nested by the stack rule
    inp = _inputs(
        [
            (0, "verify", None, None, 1, 1, 1, 100, 500),
            (0, "allreduce", None, None, 1, 1, 2, 200, 300),
        ]
    )
    rp = collector_phases(inp)
    assert rp is not None
    assert _rows(rp.instances) == [("verify", 0, 0, None, 0), ("allreduce", 0, 1, "verify", 0)]


def test_annotations_win_over_records_and_no_phases_is_none() -> None:
    events = pl.DataFrame(
        {
            "cat": ["user_annotation", "user_annotation"],
            "name": ["tracekit/draft", "tracekit/verify"],
            "ph": ["X", "X"],
            "start_ns": [1000, 2000],
            "dur_ns": [900, 900],
            "pid": [1, 1],
            "tid": [1, 1],
        }
    )
    inp = _inputs([(0, "verify", 0, None, 1, 1, 1, 100, 500)], events)
    rp = rank_phases(inp, load_rules())
    assert rp is not None
    assert not rp.approximate
    # no cycle marks, no collector cycles: a cycle starts at each top-level draft
    assert _rows(rp.instances) == [("draft", 0, 0, None, 0), ("verify", 0, 0, None, 1)]
    assert set(rp.instances["source"].to_list()) == {"annotation"}
    assert rank_phases(RankInputs(Path("run"), 0, None, None, None), load_rules()) is None
