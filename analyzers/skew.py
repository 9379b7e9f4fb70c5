"""Rank skew: per cycle and phase, how far apart the ranks are and which one lags.

Collectives are matched across ranks by order within (cycle, phase): the k-th communication
activity of verify in cycle 7 on rank 0 is the same collective as the k-th on rank 3. A
collective's transfer time is the fastest rank's duration (the rank that arrived last waited
least); every other rank's extra duration is wait. A rank's work in a phase is its wall time
minus its allreduce wait; the slowest rank is the one with the most work (ties: lowest rank).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, cast

import polars as pl

from tracekit.analyzers.run_analysis import RunAnalysis
from tracekit.analyzers.summary_fields import SkewSummary

SKEW_COLUMNS = [
    "cycle",
    "phase",
    "ranks",
    "wall_ns_min",
    "wall_ns_max",
    "work_ns_min",
    "work_ns_max",
    "spread_ns",
    "slowest_rank",
    "collectives",
    "allreduce_transfer_ns",
    "allreduce_wait_ns_max",
]
LAG_COLUMNS = ["rank", "cycle", "work_ns", "lag_ns"]


def rank_waits(bd: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, cycle, phase): allreduce_wait_ns and matched collectives, for the
    collectives seen on every rank that ran the phase."""
    nranks = bd.group_by("cycle", "phase").agg(pl.col("rank").n_unique().alias("_n"))
    matched = (
        comm.join(nranks, on=["cycle", "phase"])
        .with_columns(
            pl.col("dur_ns").min().over("cycle", "phase", "k").alias("_min"),
            pl.len().over("cycle", "phase", "k").alias("_seen"),
        )
        .filter(pl.col("_seen") == pl.col("_n"))
    )
    return matched.group_by("rank", "cycle", "phase").agg(
        (pl.col("dur_ns") - pl.col("_min")).sum().alias("allreduce_wait_ns"),
        pl.col("_min").sum().alias("allreduce_transfer_ns"),
        pl.len().alias("collectives"),
    )


def rank_work(bd: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, cycle, phase) of the breakdown: wall_ns, allreduce_wait_ns,
    allreduce_transfer_ns, collectives (0 without matched collectives) and work_ns = wall_ns -
    allreduce_wait_ns."""
    return (
        bd.select("rank", "cycle", "phase", "wall_ns")
        .join(rank_waits(bd, comm), on=["rank", "cycle", "phase"], how="left")
        .with_columns(
            pl.col("allreduce_wait_ns").fill_null(0),
            pl.col("allreduce_transfer_ns").fill_null(0),
            pl.col("collectives").fill_null(0),
        )
        .with_columns((pl.col("wall_ns") - pl.col("allreduce_wait_ns")).alias("work_ns"))
    )


def skew_from(bd: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Per (cycle, phase) of a breakdown and its collectives: SKEW_COLUMNS."""
    return (
        rank_work(bd, comm)
        .sort("rank")
        .group_by("cycle", "phase")
        .agg(
            pl.len().alias("ranks"),
            pl.col("wall_ns").min().alias("wall_ns_min"),
            pl.col("wall_ns").max().alias("wall_ns_max"),
            pl.col("work_ns").min().alias("work_ns_min"),
            pl.col("work_ns").max().alias("work_ns_max"),
            (pl.col("work_ns").max() - pl.col("work_ns").min()).alias("spread_ns"),
            pl.col("rank")
            .sort()
            .get(pl.col("work_ns").sort_by("rank").arg_max())
            .alias("slowest_rank"),
            pl.col("collectives").max().cast(pl.Int64).alias("collectives"),
            pl.col("allreduce_transfer_ns").max().alias("allreduce_transfer_ns"),
            pl.col("allreduce_wait_ns").max().alias("allreduce_wait_ns_max"),
        )
        .sort("cycle", "phase")
        .select(SKEW_COLUMNS)
    )


def rank_lag_from(bd: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, cycle): work_ns, the rank's work summed over the cycle's phases, and lag_ns =
    work_ns minus the least work_ns of any rank in that cycle (LAG_COLUMNS, by rank and
    cycle)."""
    return (
        rank_work(bd, comm)
        .group_by("rank", "cycle")
        .agg(pl.col("work_ns").sum())
        .with_columns((pl.col("work_ns") - pl.col("work_ns").min().over("cycle")).alias("lag_ns"))
        .sort("rank", "cycle")
        .select(LAG_COLUMNS)
    )


def rank_lag_of(analysis: RunAnalysis) -> pl.DataFrame:
    """Per (rank, cycle) of an analysed run, every cycle: LAG_COLUMNS (`rank_lag_from`)."""
    return rank_lag_from(analysis.breakdown, analysis.collectives)


def skew_of(analysis: RunAnalysis) -> pl.DataFrame:
    """Per (cycle, phase) of an analysed run: SKEW_COLUMNS."""
    return skew_from(analysis.breakdown, analysis.collectives)


# the per-phase fields `tracekit summary` reports (its JSON's `skew`), in their order: the typed
# summary's (analyzers/summary_fields.py)
SUMMARY_SKEW_FIELDS = tuple(f.name for f in fields(SkewSummary))


def _ms(col: pl.Series) -> pl.Series:
    return col.cast(pl.Float64) / 1e6


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def phase_skew_stats(sk: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Per phase over its cycles (rows of `skew_from`): cycles, ranks, spread_ms_p50 / _p90 /
    _max, slowest_rank (the rank most often slowest; ties: lowest), slowest_rank_frac (the
    share of the phase's cycles it was), allreduce_wait_ms_p50 and allreduce_wait_ms_mean (over
    cycles, of the most-waiting rank's wait). p90 interpolates linearly."""
    out: dict[str, dict[str, Any]] = {}
    for phase in sorted(sk["phase"].unique().to_list()):
        rows = sk.filter(pl.col("phase") == phase)
        counts = (
            rows.group_by("slowest_rank")
            .len()
            .sort(["len", "slowest_rank"], descending=[True, False])
        )
        slowest, times = counts.row(0)
        spread = _ms(rows["spread_ns"])
        wait = _ms(rows["allreduce_wait_ns_max"])
        out[phase] = {
            "cycles": rows.height,
            "ranks": int(cast("int", rows["ranks"].max())),
            "spread_ms_p50": float(cast("float", spread.median())),
            "spread_ms_p90": _f(spread.quantile(0.9, interpolation="linear")),
            "spread_ms_max": float(cast("float", spread.max())),
            "slowest_rank": int(slowest),
            "slowest_rank_frac": times / rows.height,
            "allreduce_wait_ms_p50": _f(wait.median()),
            "allreduce_wait_ms_mean": float(cast("float", wait.mean())),
        }
    return out


def phase_skew(sk: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Per phase: the SUMMARY_SKEW_FIELDS of `phase_skew_stats` (`tracekit summary`'s `skew`)."""
    return {
        phase: {k: v[k] for k in SUMMARY_SKEW_FIELDS} for phase, v in phase_skew_stats(sk).items()
    }
