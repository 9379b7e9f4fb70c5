"""Known-answer tests of phases, cycles and the forward/allreduce/overhead split.

Every expected number is worked out by hand in the comments (times in ns). The rule: each
instant of the device timeline belongs to the running activity that started first; idle time
(and work no phase launched) is overhead of the phase whose work runs next.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.unit.analyzers import scenarios
from tracekit.analyzers.run_analysis import analyze
from tracekit.errors import StoreError

COLS = ["rank", "cycle", "phase", "wall_ns", "forward_ns", "allreduce_ns", "overhead_ns"]


def rows(df: pl.DataFrame, cols: list[str] = COLS) -> list[tuple[object, ...]]:
    return [tuple(r) for r in df.select(cols).iter_rows()]


def test_two_rank_gpu_split_to_the_nanosecond(tmp_path: Path) -> None:
    # GIVEN two ranks, two cycles each (scenarios.two_rank_gpu)
    run = scenarios.two_rank_gpu(tmp_path)
    # WHEN
    bd = analyze(run).breakdown
    # THEN rank 0, window from the first cycle's CPU start (1000):
    #   draft0: k1 [1200,1500] idle 200 + 300, k2 [1500,1700] 200 -> fwd 500, ovh 200
    #   verify0: gemm [2300,2800] idle 600 + 500 fwd; nccl [2800,3300] 500 allreduce
    #   stray [4600,4700] (no phase): idle 1300 + own 100, charged to the next phase (draft1)
    #   draft1: k3 [5200,5600] idle 500 + 400 -> fwd 400, ovh 1300+100+500 = 1900
    #   verify1: gemm [6200,6900] idle 600 + 700; custom AR [6800,7300] started later, so
    #            gemm owns [6800,6900] and the allreduce 400
    # rank 1: draft0 idle 300 + 200 + 300; verify0 idle 500, gemm 700, nccl 300;
    #   draft1 memcpy [5100,5200] idle 1800 + 100, k3 400; verify1 idle 600, gemm 800, AR 300
    assert rows(bd) == [
        (0, 0, "draft", 700, 500, 0, 200),
        (0, 0, "verify", 1600, 500, 500, 600),
        (0, 1, "draft", 2300, 400, 0, 1900),
        (0, 1, "verify", 1700, 700, 400, 600),
        (1, 0, "draft", 800, 500, 0, 300),
        (1, 0, "verify", 1500, 700, 300, 500),
        (1, 1, "draft", 2300, 500, 0, 1800),
        (1, 1, "verify", 1700, 800, 300, 600),
    ]
    extra = ["graph_replayed", "graph_kernel_frac", "allreduce_impl", "kernels", "unattributed_ns"]
    assert rows(bd.filter(pl.col("rank") == 0), extra) == [
        (True, 1.0, None, 2, 0),
        (False, 0.0, "nccl:RING/LL/bf16", 2, 0),
        (False, 0.0, None, 1, 100),
        (False, 0.0, "custom_ar", 2, 0),
    ]
    # the memcpy is GPU work of draft1 but not a kernel
    assert bd.filter((pl.col("rank") == 1) & (pl.col("cycle") == 1))["kernels"].to_list() == [1, 2]
    assert not bd["approximate"].any()


def test_phases_add_up_to_the_cycle_span(tmp_path: Path) -> None:
    run = scenarios.two_rank_gpu(tmp_path)
    cyc = analyze(run).cycles
    # cycle 0 spans 1000 (its CPU start) -> 3300; cycle 1 spans 3300 -> 7300, on both ranks
    assert rows(cyc, ["rank", "cycle", "span_ns", "wall_ns"]) == [
        (0, 0, 2300, 2300),
        (0, 1, 4000, 4000),
        (1, 0, 2300, 2300),
        (1, 1, 4000, 4000),
    ]


def _instances(run: Path) -> pl.DataFrame:
    """Every phase instance of the run (sub-phases included), by rank and start."""
    frames = [r.phases.instances for r in analyze(run).ranks]
    return pl.concat(frames, how="vertical_relaxed").sort("rank", "start_ns")


def test_phase_instances_nesting(tmp_path: Path) -> None:
    run = scenarios.two_rank_gpu(tmp_path)
    inst = _instances(run).filter(pl.col("rank") == 0)
    assert rows(inst, ["cycle", "phase", "start_ns", "end_ns", "depth", "parent", "source"])[
        :3
    ] == [
        (0, "draft", 1000, 2000, 0, None, "annotation"),
        (0, "verify", 2000, 4000, 0, None, "annotation"),
        (0, "allreduce", 2150, 2250, 1, "verify", "annotation"),
    ]


def test_cpu_only_rank_uses_top_level_ops_and_gloo(tmp_path: Path) -> None:
    run = scenarios.cpu_gloo(tmp_path)
    bd = analyze(run).breakdown
    # matmul [100,2000] idle 100 + 1900 (aten::mm nested, ignored); relu [2000,3000] 1000;
    # c10d::allreduce_ [3100,3200] idle 100 + 100; gloo:all_reduce [3300,7800] idle 100 + 4500
    assert rows(bd) == [(0, 0, "verify", 7800, 2900, 4600, 300)]
    assert bd["allreduce_impl"].to_list() == ["gloo"]
    assert bd["kernels"].to_list() == [4]


def test_light_mode_is_approximate(tmp_path: Path) -> None:
    run = scenarios.light_mode(tmp_path)
    bd = analyze(run).breakdown
    # draft GPU span [1100,1900]: idle 100 + 800 forward
    # verify [2100,3900] with the allreduce sub-phase [3200,3700]: idle 200, forward 1100 + 200,
    # allreduce 500
    assert rows(bd) == [(0, 0, "draft", 900, 800, 0, 100), (0, 0, "verify", 2000, 1300, 500, 200)]
    assert bd["approximate"].to_list() == [True, True]
    assert bd["graph_replayed"].to_list() == [True, False]
    assert bd["graph_kernel_frac"].to_list() == [None, None]
    assert bd["accept_len"].to_list() == [3.0, 3.0]


def test_sglang_spans_through_the_rule_table(tmp_path: Path) -> None:
    run = scenarios.sglang_spans(tmp_path)
    bd = analyze(run).breakdown
    # the verify before the first draft is outside every cycle; step[DRAFT] is draft's sub-phase
    assert rows(bd) == [
        (0, 0, "draft", 800, 600, 0, 200),
        (0, 0, "verify", 1100, 800, 0, 300),
        (0, 0, "draft_extend", 500, 300, 0, 200),
        (0, 1, "draft", 1200, 500, 0, 700),
        (0, 1, "verify", 1300, 800, 0, 500),
        (0, 1, "draft_extend", 500, 300, 0, 200),
    ]
    inst = _instances(run)
    sub = inst.filter(pl.col("depth") == 1)
    assert rows(sub, ["phase", "parent", "source"]) == [("draft", "draft", "rule")]


def test_user_rules_file(tmp_path: Path) -> None:
    run = scenarios.sglang_spans(tmp_path / "run")
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\npattern = "draft_extend"\nphase = "extend"\n')
    bd = analyze(run, rules=rules).breakdown
    assert sorted(set(bd["phase"].to_list())) == ["draft", "extend", "verify"]


def test_no_phases_is_a_store_error(tmp_path: Path) -> None:
    from tests.unit.analyzers.builders import RankTrace, write_events

    tr = RankTrace()
    tr.range("something_else", 0, 10)
    run = write_events(tmp_path, {0: tr})
    with pytest.raises(StoreError, match="--rules"):
        analyze(run)


def test_cycle_marks_take_the_collectors_numbers(tmp_path: Path) -> None:
    # the collector's clock starts each cycle 20 ns after the trace's `tracekit/cycle` mark;
    # its cycles are numbered 5 and 6 and know the acceptance length
    from tests.unit.analyzers.builders import write_rows

    run = scenarios.two_rank_gpu(tmp_path)
    for rank in (0, 1):
        write_rows(
            run,
            "cycles",
            rank,
            [
                {
                    "cycle": 5,
                    "start_ns": 1020,
                    "end_ns": 5010,
                    "accept_len": 2.0,
                    "source": "cycle_target",
                },
                {
                    "cycle": 6,
                    "start_ns": 5020,
                    "end_ns": 9010,
                    "accept_len": 4.0,
                    "source": "cycle_target",
                },
            ],
        )
    a = analyze(run)
    assert rows(a.cycles, ["rank", "cycle", "accept_len", "span_ns"]) == [
        (0, 5, 2.0, 2300),
        (0, 6, 4.0, 4000),
        (1, 5, 2.0, 2300),
        (1, 6, 4.0, 4000),
    ]
    assert a.breakdown["accept_len"].to_list() == [2.0, 2.0, 4.0, 4.0] * 2
