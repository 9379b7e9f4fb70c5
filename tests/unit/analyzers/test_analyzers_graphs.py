"""CUDA-graph replay per phase (analyzers/graphs.py), known answers (ns)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.unit.analyzers import scenarios
from tracekit.analyzers.graphs import GRAPH_LAUNCH, cycle_replay_share, graph_summary
from tracekit.analyzers.run_analysis import analyze

COLS = ["phase", "instances", "replayed", "replayed_frac", "graph_launches"]


def test_graph_launch_names() -> None:
    # as the breakdown matches the runtime calls' names (analyzers/intervals.py)
    names = pl.Series(
        ["cudaGraphLaunch", "cudaGraphLaunch_v10000", "hipGraphLaunch", "cudaGraphInstantiate"]
    )
    assert names.str.contains(GRAPH_LAUNCH).to_list() == [True, True, True, False]


def test_graph_summary_two_rank_gpu(tmp_path: Path) -> None:
    g = graph_summary(analyze(scenarios.two_rank_gpu(tmp_path)).breakdown)
    # draft: 2 of 4 instances replayed a graph; graph kernels own 500 + 500 of the busy time
    # 500 + 400 + 500 + 500 ns: weighted by busy time 1000 / 1900, not the plain mean 0.5
    assert g.select(COLS).rows() == [("draft", 4, 2, 0.5, 2), ("verify", 4, 0, 0.0, 0)]
    assert g["graph_kernel_frac"].to_list() == [pytest.approx(1000 / 1900), 0.0]


def test_graph_share_weights_by_busy_time_and_skips_unmeasured() -> None:
    # decode: busy 900 (frac 1.0), 100 (frac 0.0) and a light-mode-like row with no frac (its
    # busy 5000 does not count): (900 x 1.0 + 100 x 0.0) / 1000 = 0.9 (plain mean 0.5).
    # idle: no busy time and no frac anywhere -> null.
    bd = pl.DataFrame(
        {
            "phase": ["decode", "decode", "decode", "idle"],
            "forward_ns": [800, 100, 5000, 0],
            "allreduce_ns": [100, 0, 0, 0],
            "graph_replayed": [True, False, True, False],
            "graph_launches": [1, 0, 1, 0],
            "graph_kernel_frac": [1.0, 0.0, None, None],
        }
    )
    g = graph_summary(bd)
    assert g.select(COLS).rows() == [
        ("decode", 3, 2, pytest.approx(2 / 3), 2),
        ("idle", 1, 0, 0.0, 0),
    ]
    assert g["graph_kernel_frac"].to_list() == [pytest.approx(0.9), None]


def test_cycle_replay_share_two_rank_gpu(tmp_path: Path) -> None:
    # each rank's cycle 0 replays a graph (in its draft), its cycle 1 none: 2 of 4 pairs
    assert cycle_replay_share(analyze(scenarios.two_rank_gpu(tmp_path)).breakdown) == 0.5


def test_cycle_replay_share_counts_a_pair_once_and_skips_outside_cycles() -> None:
    # rank 0 cycle 0: two replaying instances count once; rank 0 cycle 1: none; rank 1 cycle 0:
    # one of two; the cycle -1 replay is outside cycles -> 2 of 3 pairs
    bd = pl.DataFrame(
        {
            "rank": [0, 0, 0, 1, 1, 1],
            "cycle": [0, 0, 1, 0, 0, -1],
            "graph_replayed": [True, True, False, False, True, True],
        }
    )
    assert cycle_replay_share(bd) == pytest.approx(2 / 3)
    assert cycle_replay_share(bd.filter(pl.col("cycle") < 0)) is None
