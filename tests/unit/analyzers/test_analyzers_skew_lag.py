"""Rank lag per (rank, cycle) and the per-phase skew statistics, known answers (ns)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.unit.analyzers import scenarios
from tracekit.analyzers.run_analysis import analyze
from tracekit.analyzers.skew import (
    LAG_COLUMNS,
    SUMMARY_SKEW_FIELDS,
    phase_skew,
    phase_skew_stats,
    rank_lag_from,
    rank_lag_of,
    skew_from,
    skew_of,
)


def _bd(rows: list[tuple[int, int, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={"rank": pl.Int64, "cycle": pl.Int64, "phase": pl.String, "wall_ns": pl.Int64},
        orient="row",
    )


def _comm(rows: list[tuple[int, int, str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        rows,
        schema={
            "rank": pl.Int64,
            "cycle": pl.Int64,
            "phase": pl.String,
            "k": pl.Int64,
            "dur_ns": pl.Int64,
        },
        orient="row",
    )


@pytest.fixture
def three_ranks() -> tuple[pl.DataFrame, pl.DataFrame]:
    """Cycle 0: draft walls 100 / 150 / 120 (no collective); verify walls 500 / 400 / 450 with
    collective k0 of 300 / 100 / 200 (transfer 100: waits 200 / 0 / 100) and k1 (50, 60) seen on
    ranks 0 and 1 only, so not matched. Cycle 1: every wall 200 (draft) and 300 (verify), k0 50
    on every rank (no wait)."""
    bd = _bd(
        [
            (0, 0, "draft", 100),
            (1, 0, "draft", 150),
            (2, 0, "draft", 120),
            (0, 0, "verify", 500),
            (1, 0, "verify", 400),
            (2, 0, "verify", 450),
            *[(r, 1, "draft", 200) for r in range(3)],
            *[(r, 1, "verify", 300) for r in range(3)],
        ]
    )
    comm = _comm(
        [
            (0, 0, "verify", 0, 300),
            (1, 0, "verify", 0, 100),
            (2, 0, "verify", 0, 200),
            (0, 0, "verify", 1, 50),
            (1, 0, "verify", 1, 60),
            *[(r, 1, "verify", 0, 50) for r in range(3)],
        ]
    )
    return bd, comm


def test_rank_lag_three_ranks(three_ranks: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    # cycle 0 work: rank 0 100 + (500 - 200) = 400, rank 1 150 + 400 = 550, rank 2 120 +
    # (450 - 100) = 470 -> least 400: lag 0, 150, 70. Cycle 1: 500 each -> lag 0.
    lag = rank_lag_from(*three_ranks)
    assert lag.columns == LAG_COLUMNS
    assert lag.rows() == [
        (0, 0, 400, 0),
        (0, 1, 500, 0),
        (1, 0, 550, 150),
        (1, 1, 500, 0),
        (2, 0, 470, 70),
        (2, 1, 500, 0),
    ]


def test_rank_lag_of_two_rank_gpu(tmp_path: Path) -> None:
    # DEFINITIONS.md "Rank skew": cycle 0 rank 0 700 + 1600 - 200 = 2100, rank 1 800 + 1500 =
    # 2300; cycle 1 rank 0 2300 + 1700 - 200 = 3800, rank 1 2300 + 1700 = 4000
    lag = rank_lag_of(analyze(scenarios.two_rank_gpu(tmp_path)))
    assert lag.rows() == [(0, 0, 2100, 0), (0, 1, 3800, 0), (1, 0, 2300, 200), (1, 1, 4000, 200)]


def test_phase_skew_stats_three_ranks(three_ranks: tuple[pl.DataFrame, pl.DataFrame]) -> None:
    # draft: spreads 150 - 100 = 50 (rank 1 slowest) and 0 (tie: rank 0); wait 0.
    # verify: work 300 / 400 / 350 -> spread 100, rank 1; cycle 1 spread 0, rank 0; most-waiting
    # rank's wait 200 then 0 -> p50 100, mean 100. p90 of (0, 100) = 90; of (0, 50) = 45.
    per = phase_skew_stats(skew_from(*three_ranks))
    ms = 1e-6
    draft, verify = per["draft"], per["verify"]
    assert (draft["cycles"], draft["ranks"], draft["slowest_rank"]) == (2, 3, 0)
    assert draft["slowest_rank_frac"] == 0.5
    assert draft["spread_ms_p50"] == pytest.approx(25 * ms)
    assert draft["spread_ms_p90"] == pytest.approx(45 * ms)
    assert draft["spread_ms_max"] == pytest.approx(50 * ms)
    assert (draft["allreduce_wait_ms_p50"], draft["allreduce_wait_ms_mean"]) == (0.0, 0.0)
    assert verify["spread_ms_p50"] == pytest.approx(50 * ms)
    assert verify["spread_ms_p90"] == pytest.approx(90 * ms)
    assert verify["allreduce_wait_ms_p50"] == pytest.approx(100 * ms)
    assert verify["allreduce_wait_ms_mean"] == pytest.approx(100 * ms)


def test_phase_skew_is_the_summary_subset(tmp_path: Path) -> None:
    # `tracekit summary`'s `skew` keeps its fields and order (tests/golden)
    sk = skew_of(analyze(scenarios.two_rank_gpu(tmp_path)))
    full, summary = phase_skew_stats(sk), phase_skew(sk)
    assert set(summary) == {"draft", "verify"}
    for phase, fields in summary.items():
        assert tuple(fields) == SUMMARY_SKEW_FIELDS
        assert fields == {k: full[phase][k] for k in SUMMARY_SKEW_FIELDS}
    assert full["verify"]["spread_ms_p90"] == pytest.approx(190e-6)
