"""Steady state: the cycles every aggregate uses (docs/DEFINITIONS.md, "Steady state").

A run's first cycles are often far slower than the rest (first calls, compilation, CUDA-graph
capture, the first request), and a short run can spend half its cycles there. The rule, decided
on cycle numbers so that every rank uses the same cycles:

1. T(c) = the median over ranks of cycle c's time (`time_ns`), cycles in number order;
2. m = the median of T over the later half of the cycles (the last n - n // 2 of them);
3. warm-up = the leading cycles whose T is above WARMUP_FACTOR x m, up to the first cycle at or
   below it; the steady state is every cycle from there on.

A run without such a stretch excludes nothing. `--all-cycles` uses every cycle, `--cycles A:B`
the cycles A to B - 1 (a Python slice: `64:` from 64 on, `:10` the first ten).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from tracekit.errors import InputError

WARMUP_FACTOR = 2.0
NS_PER_MS = 1_000_000

CycleMode = Literal["auto", "all", "range"]


@dataclass(frozen=True)
class CycleChoice:
    """Which cycles the user asked for: `auto` (steady state), `all`, or `range` [start, stop)."""

    mode: CycleMode = "auto"
    start: int | None = None
    stop: int | None = None

    @classmethod
    def parse(cls, *, all_cycles: bool = False, cycles: str | None = None) -> CycleChoice:
        """From `--all-cycles` / `--cycles A:B`; InputError on a malformed or doubled choice."""
        if all_cycles and cycles is not None:
            msg = "give --all-cycles or --cycles A:B, not both"
            raise InputError(msg)
        if all_cycles:
            return cls("all")
        if cycles is None:
            return cls("auto")
        a, sep, b = cycles.partition(":")
        try:
            start = int(a) if a.strip() else None
            stop = int(b) if b.strip() else None
        except ValueError:
            start = stop = -1
        if not sep or (start is not None and start < 0) or (stop is not None and stop < 0):
            msg = f"--cycles {cycles!r}: expected A:B with cycle numbers A < B (e.g. 64:, 0:10)"
            raise InputError(msg)
        if start is not None and stop is not None and stop <= start:
            msg = f"--cycles {cycles!r}: B must be greater than A (A:B is cycles A to B - 1)"
            raise InputError(msg)
        return cls("range", start, stop)


def _span(cycles: list[int]) -> str:
    if not cycles:
        return "none"
    return str(cycles[0]) if len(cycles) == 1 else f"{cycles[0]}-{cycles[-1]}"


PROFILED_OUTSIDE = "the profiled cycles lie outside the steady state; shares from them"


@dataclass(frozen=True)
class Steady:
    """The cycles an aggregate uses, and why."""

    mode: CycleMode
    kept: tuple[int, ...]  # cycle numbers used, ascending
    excluded: tuple[int, ...]  # recorded cycle numbers left out, ascending
    warmup: tuple[int, ...]  # of those, the warm-up the rule found (mode auto)
    warmup_ms_p50: float | None
    steady_ms_p50: float | None

    def keep(self, frame: pl.DataFrame) -> pl.DataFrame:
        """The rows of `frame` (a `cycle` column) in the kept cycles."""
        if not self.excluded:
            return frame
        kept: pl.DataFrame = frame.filter(pl.col("cycle").is_in(list(self.kept)))
        return kept

    def keep_shares(self, breakdown: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
        """The breakdown rows the device-timeline shares use: those of the kept cycles; when
        none is kept but the breakdown has rows (a full-mode run whose profiled window lies
        outside the steady state, e.g. slowed into the warm-up by the profiler), all of them,
        with a note saying so."""
        kept = self.keep(breakdown)
        if kept.height == 0 and breakdown.height:
            return breakdown, PROFILED_OUTSIDE
        return kept, None

    @property
    def note(self) -> str | None:
        """One sentence for the text output, or None when every recorded cycle is used."""
        if self.mode == "auto" and self.warmup:
            return (
                f"cycles {_span(list(self.warmup))} excluded as warm-up: median "
                f"{self.warmup_ms_p50:.3g} ms against {self.steady_ms_p50:.3g} ms after "
                "(--all-cycles to keep them)"
            )
        if self.mode == "range" and self.excluded:
            return (
                f"cycles {_span(list(self.kept))} used (--cycles), "
                f"{len(self.excluded)} other cycle(s) left out"
            )
        return None

    def to_json(self) -> dict[str, Any]:
        kept, warm = list(self.kept), list(self.warmup)
        return {
            "cycle_selection": self.mode,
            "steady_cycles": [kept[0], kept[-1]] if kept else None,
            "warmup_cycles": [warm[0], warm[-1]] if warm else None,
            "excluded": len(self.excluded),
            "warmup_ms_p50": self.warmup_ms_p50,
            "steady_ms_p50": self.steady_ms_p50,
            "steady_note": self.note,
        }


def cycle_times(times: pl.DataFrame) -> list[tuple[int, float]]:
    """(cycle, median over ranks of time_ns) of every recorded cycle >= 0, by cycle number."""
    per = (
        times.filter(pl.col("cycle") >= 0)
        .group_by("cycle")
        .agg(pl.col("time_ns").cast(pl.Float64).median())
        .sort("cycle")
    )
    return [(int(c), float(t or 0.0)) for c, t in per.iter_rows()]


def warmup_length(values: list[float], factor: float = WARMUP_FACTOR) -> int:
    """How many leading values are warm-up: above `factor` x the median of the later half."""
    n = len(values)
    if n < 2:
        return 0
    m = statistics.median(values[n // 2 :])
    if not m > 0:
        return 0
    w = 0
    while w < n and values[w] > factor * m:
        w += 1
    return w


def _p50_ms(values: list[float]) -> float | None:
    return statistics.median(values) / NS_PER_MS if values else None


def decide(times: pl.DataFrame, choice: CycleChoice | None = None) -> Steady:
    """The steady state of a run from its recorded cycles (columns rank, cycle, time_ns)."""
    choice = choice or CycleChoice()
    per = cycle_times(times)
    numbers = [c for c, _ in per]
    values = [t for _, t in per]
    warm: list[int] = []
    if choice.mode == "auto":
        w = warmup_length(values)
        warm = numbers[:w]
        kept = numbers[w:]
    elif choice.mode == "all":
        kept = numbers
    else:
        lo = choice.start if choice.start is not None else 0
        hi = choice.stop
        kept = [c for c in numbers if c >= lo and (hi is None or c < hi)]
        if not kept:
            msg = (
                f"--cycles {lo}:{'' if hi is None else hi} selects no recorded cycle; "
                f"this run has cycles {_span(numbers)}"
            )
            raise InputError(msg)
    kept_set = set(kept)
    return Steady(
        mode=choice.mode,
        kept=tuple(kept),
        excluded=tuple(c for c in numbers if c not in kept_set),
        warmup=tuple(warm),
        warmup_ms_p50=_p50_ms(values[: len(warm)]),
        steady_ms_p50=_p50_ms([t for c, t in per if c in kept_set]),
    )
