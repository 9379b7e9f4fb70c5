"""Steady state: the cycles every aggregate uses (docs/DEFINITIONS.md, "Steady state").

A run's first cycles are often far slower than the rest (first calls, compilation, CUDA-graph
capture, the first request), and a short run can spend half its cycles there. The rule, decided
on cycle numbers so that every rank uses the same cycles, from T(c) = the median over ranks of
cycle c's time (`time_ns`), cycles in number order, n of them:

1. the obvious warm-up: the leading cycles above WARMUP_FACTOR x the median of the later half
   (the last n - n // 2 cycles), up to the first cycle at or below it;
2. MSER-5 (White 1997, the truncation rule of simulation output analysis): over the means of
   batches of 5 cycles (single cycles when n < 20), the truncation d <= n / 2 that minimises
   the squared standard error of the remaining mean, sum((Z_i - mean)^2) / (b - d)^2; a batch
   truncation is then refined to the cycle: one past the last cycle, up to a batch after it,
   slower than the steady mean + 3 standard deviations. It counts only when the cycles it drops are on average more than
   MIN_EXCESS slower than the ones it keeps (a slow drift, or a run that gets slower, is not a
   warm-up). Profiled cycles of a full-mode run (slowed by torch.profiler, not warming up) are
   left out of the series: they are warm-up only when they come before its last cycle;
3. sequence boundaries, the recorded cycles' `seq_start` (work of no cycle, a new request's
   prefill, ran just before: analyzers/cycletime.py): a warm-up that ends inside a sequence
   extends to the end of that sequence (a request's last cycles are warm-up when its first
   were), provided that keeps at least half the cycles.

The warm-up is the longest of 1 and 2 (then 3); the steady state is every cycle after it.
`--all-cycles` uses every cycle, `--cycles A:B` the cycles A to B - 1 (a Python slice: `64:`
from 64 on, `:10` the first ten).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Literal

import polars as pl

from tracekit.errors import InputError

WARMUP_FACTOR = 2.0
MSER_BATCH = 5  # MSER-5: batch means of 5 cycles ...
MSER_MIN_BATCHES = 4  # ... when there are at least 4 batches; else MSER on single cycles
OUTLIER_SD = 3.0  # refining a batch cut: a cycle this many sd above the steady mean is warm-up
MIN_EXCESS = 0.10  # MSER's cut counts when the dropped cycles are > 10% slower than the kept
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
    """How many leading values are obvious warm-up: above `factor` x the median of the later
    half (rule 1)."""
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


def mser_statistic(values: list[float], d: int) -> float:
    """White's MSER statistic of truncating `d` leading values: sum((x - mean)^2) / (n - d)^2
    over the values kept, the squared standard error of their mean up to a constant."""
    rest = values[d:]
    mu = statistics.fmean(rest)
    return sum((x - mu) ** 2 for x in rest) / len(rest) ** 2


def _argmin(values: list[float], cuts: range) -> int:
    """The cut of `cuts` with the least MSER statistic (the smallest on ties)."""
    best, best_g = cuts[0], mser_statistic(values, cuts[0])
    for d in cuts[1:]:
        g = mser_statistic(values, d)
        if g < best_g * (1 - 1e-12):
            best, best_g = d, g
    return best


def mser_length(values: list[float]) -> int:
    """MSER-5's truncation of `values` (rule 2 without its excess check): how many leading
    values to drop, at most half of them."""
    n = len(values)
    batch = MSER_BATCH if n >= MSER_BATCH * MSER_MIN_BATCHES else 1
    b = n // batch
    if b < 2:
        return 0
    means = [statistics.fmean(values[i * batch : (i + 1) * batch]) for i in range(b)]
    d = _argmin(means, range(b // 2 + 1)) * batch
    if batch == 1 or d == 0:
        return d
    return _refine(values, d, batch)


def _refine(values: list[float], d: int, batch: int) -> int:
    """A batch truncation `d` to the cycle: one past the last cycle, up to a batch after `d`
    (at most half the run), slower than the steady mean + OUTLIER_SD standard deviations (of
    the cycles after that); `d` when no cycle is."""
    n = len(values)
    hi = min(d + batch - 1, n // 2)
    after = values[hi + 1 :] if n - hi - 1 >= 2 else values[d:]
    limit = statistics.fmean(after) + OUTLIER_SD * statistics.pstdev(after)
    slow = [i for i in range(hi) if values[i] > limit]
    return slow[-1] + 1 if slow else d


def mser_warmup(values: list[float], min_excess: float = MIN_EXCESS) -> int:
    """Rule 2: MSER-5's truncation when the dropped values are on average more than
    `min_excess` slower than the kept ones, else 0."""
    d = mser_length(values)
    if d == 0:
        return 0
    dropped, kept = statistics.fmean(values[:d]), statistics.fmean(values[d:])
    return d if kept > 0 and dropped > (1 + min_excess) * kept else 0


def _sequence_end(numbers: list[int], starts: set[int], cut: int) -> int:
    """Rule 3: the cut moved to the end of the sequence it falls inside (the next sequence
    start after it), when there is one and it keeps at least half the cycles."""
    if cut == 0 or cut >= len(numbers) or numbers[cut] in starts:
        return cut
    nxt = next((i for i in range(cut + 1, len(numbers)) if numbers[i] in starts), None)
    return nxt if nxt is not None and nxt <= len(numbers) // 2 else cut


def warmup_cut(
    numbers: list[int],
    values: list[float],
    *,
    profiled: list[bool] | None = None,
    seq_starts: set[int] | None = None,
) -> int:
    """How many leading cycles (of `numbers`, times `values`) are warm-up: rules 1-3 of the
    module's docstring. `profiled`: which cycles a full-mode run's profiler slowed (left out of
    rule 2's series when only some are); `seq_starts`: the cycle numbers that start a sequence."""
    cut = warmup_length(values)
    flags = profiled if profiled and any(profiled) and not all(profiled) else None
    idx = [i for i in range(len(values)) if flags is None or not flags[i]]
    d = mser_warmup([values[i] for i in idx])
    if d > 0:
        cut = max(cut, idx[d - 1] + 1)  # up to and with the last series cycle dropped
    if seq_starts:
        cut = _sequence_end(numbers, seq_starts, cut)
    return cut


def _marks(times: pl.DataFrame, numbers: list[int]) -> dict[str, Any]:
    """`warmup_cut`'s `profiled` and `seq_starts` from the recorded cycles' `profiled` and
    `seq_start` columns (any rank), where the frame has them."""
    out: dict[str, Any] = {}
    for col in ("profiled", "seq_start"):
        if col not in times.columns:
            continue
        marked = set(
            times.filter(pl.col(col).fill_null(False) & (pl.col("cycle") >= 0))["cycle"].to_list()
        )
        if col == "profiled":
            out["profiled"] = [c in marked for c in numbers]
        else:
            out["seq_starts"] = marked
    return out


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
        w = warmup_cut(numbers, values, **_marks(times, numbers))
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
