"""The statistics of `tracekit diff BASELINE... RUN` (docs/DEFINITIONS.md, "Diff"): each
phase's interval from the run-to-run spread of several baselines, or from the instances of one
run when there is one baseline, and the like cycles a full-mode diff compares.

With k >= 2 baseline runs, each run's median of a phase is one draw of "this command's median",
so their spread is the run-to-run noise (it includes each run's own sampling noise). The run
under test is one more draw: its median minus the baselines' mean median has a 95% prediction
interval of +-t(0.975, k - 1) x s x sqrt(1 + 1/k), s the standard deviation of the baselines'
medians (Student's t; the interval is honest about how little k runs say: k = 3 gives
t = 4.30). That interval is never narrower than the within-run bootstrap interval (resampling
instances), which one run's medians can undercut by chance. With one baseline only the
within-run interval exists: it says nothing about how two runs of one command differ.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

import polars as pl

from tracekit.analyzers.tquantile import t975

Noise = Literal["runs", "within-run"]


@dataclass(frozen=True)
class RunsInterval:
    """The run-to-run interval of one phase: B's median against k baseline medians (ms)."""

    base_ms: tuple[float, ...]  # each baseline run's median
    b_ms: float
    within_half_ms: float  # half-width of the within-run bootstrap interval (the floor)

    @property
    def a_ms(self) -> float:
        """The baselines' mean median."""
        return statistics.fmean(self.base_ms)

    @property
    def spread_ms(self) -> float:
        """s: the standard deviation of the baselines' medians (k >= 2)."""
        return statistics.stdev(self.base_ms)

    @property
    def half_ms(self) -> float:
        """The interval's half-width: the prediction interval's, at least the within-run one."""
        k = len(self.base_ms)
        runs = t975(k - 1) * self.spread_ms * math.sqrt(1 + 1 / k)
        return max(runs, self.within_half_ms)

    def ci95(self) -> tuple[float, float]:
        d = self.b_ms - self.a_ms
        return d - self.half_ms, d + self.half_ms


# ---- like cycles (full mode) ------------------------------------------------------------------


@dataclass(frozen=True)
class LikeCycles:
    """The cycles every run's compared rows come from, when a full-mode run's profiled
    window made them a subset: `cycles` common to all runs, or None (no restriction)."""

    cycles: tuple[int, ...] | None
    note: str | None


def _span(cycles: list[int]) -> str:
    return str(cycles[0]) if len(cycles) == 1 else f"{cycles[0]}-{cycles[-1]}"


def like_cycles(rows: list[pl.DataFrame], every: list[pl.DataFrame], windowed: bool) -> LikeCycles:
    """Which cycles a diff compares. `rows`: each run's rows (its steady state's share rows);
    `every`: each run's whole breakdown; `windowed`: some run's breakdown covers a profiled
    window only (full mode). Then the cycles of `rows` that every run has; failing those, the
    breakdown cycles every run has (with a note); failing those too, each run's own (note)."""
    if not windowed or len(rows) < 2:
        return LikeCycles(None, None)
    sets = [set(r["cycle"].to_list()) for r in rows]
    common = sorted(set.intersection(*sets))
    if common:
        return LikeCycles(
            tuple(common),
            f"full mode: forward / allreduce / overhead compared over the {len(common)} "
            f"profiled cycle(s) {_span(common)} that every run has",
        )
    whole = sorted(set.intersection(*[set(e["cycle"].to_list()) for e in every]))
    if whole:
        return LikeCycles(
            tuple(whole),
            f"full mode: forward / allreduce / overhead compared over the {len(whole)} "
            f"profiled cycle(s) {_span(whole)} that every run has (outside some run's steady "
            "state)",
        )
    counts = ", ".join(str(len(s)) for s in sets)
    return LikeCycles(
        None,
        f"full mode: the runs' profiled cycles have none in common; each run's own compared "
        f"({counts} cycles): give the runs one --profile-cycles",
    )
