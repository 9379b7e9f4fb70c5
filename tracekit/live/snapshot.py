"""`tracekit top`'s data: a snapshot of a running server, computed from the live feed.

`TopState` takes the phase instances and cycles the feed completes and keeps, per rank and
phase, those of the recent window (`window_s`, default 30 s, ending at the latest record read,
not at the wall clock, so a finished run's raw directory gives the same frame every time) and
those of the first minutes (`baseline_s`, default 120 s from the first record), the reference
each phase's change is measured against. `snapshot()` returns a `Snapshot` (frozen values,
nothing of rich); `render.py` draws it.

Figures (per rank, over the window): cycles/s = cycles ended in the window / the window's
span (the records' span when the run is shorter); acceptance = mean tokens per cycle; per
phase p50 / p99 of the wall time (linear interpolation, numpy's default) and its share = its
wall time / the wall time of all phases; graph = share of instances that replayed a graph.
The **lagging rank** is the one with the most work per cycle, work = wall - allreduce (the rank
the others wait for in the collectives; DEFINITIONS.md "Rank skew"), shown with its excess over
the median rank, and named only above noise: over the cycles every rank has in the window,
the per-cycle excess d(c) = its work - the median rank's has a mean above 2 standard errors
(sd(d) / sqrt(n), n >= 3 cycles) and at least LAG_MIN_FRAC of the median rank's work per cycle
(a 0.3% difference is not a lag); otherwise `lag_note` says why no rank is named.
**Change** = window p50 / reference p50 - 1, all ranks pooled, where the reference is the
instances of the first minutes that ended before the window began: a window is never compared
with itself. While the window still overlaps the first minutes the reference is shorter
(`reference_s`); with none yet (a run shorter than the window) there is no change and
`change_note` says so.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from tracekit.live.instances import Cycle, Instance

BASELINE_MAX = 200_000  # instances kept from the first minutes (bounded memory)
LAG_MIN_FRAC = 0.01  # a lag under 1% of the median rank's work a cycle is not named
LAG_MIN_CYCLES = 3


@dataclass(frozen=True)
class PhaseRow:
    phase: str
    count: int
    p50_ms: float
    p99_ms: float
    share_pct: float
    forward_pct: float
    allreduce_pct: float
    overhead_pct: float
    graph_pct: float


@dataclass(frozen=True)
class RankRow:
    rank: int
    cycles: int  # all cycles read so far
    cycles_per_s: float
    accept_len: float | None
    work_ms_per_cycle: float | None
    phases: tuple[PhaseRow, ...]


@dataclass(frozen=True)
class Change:
    phase: str
    baseline_p50_ms: float
    now_p50_ms: float
    change_pct: float


@dataclass(frozen=True)
class Snapshot:
    run: str
    window_s: float
    baseline_s: float
    span_s: float  # first to latest record read
    latest_ns: int | None
    ranks: tuple[RankRow, ...]
    lagging_rank: int | None
    lagging_excess_ms: float | None  # its work per cycle over the median rank's
    changes: tuple[Change, ...]
    records_lost: int
    running: bool  # some process has not finished
    reference_s: float = 0.0  # the change's reference: the first seconds before the window
    change_note: str | None = None  # why there is no change, or why its reference is short
    lag_note: str | None = None  # why no rank is named lagging

    def rank(self, r: int) -> RankRow:
        return next(x for x in self.ranks if x.rank == r)


def quantile(values: list[float], q: float) -> float:
    """numpy's default (linear) quantile of a non-empty list."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


@dataclass
class TopState:
    window_s: float = 30.0
    baseline_s: float = 120.0
    first_ns: int | None = None
    latest_ns: int | None = None
    _recent: dict[tuple[int, str], deque[Instance]] = field(default_factory=dict)
    _baseline: dict[str, list[tuple[int, int]]] = field(default_factory=dict)  # (end, wall)
    _baseline_n: int = 0
    _cycles: dict[int, deque[Cycle]] = field(default_factory=dict)
    _cycle_count: dict[int, int] = field(default_factory=dict)

    def add(self, instances: list[Instance], cycles: list[Cycle]) -> None:
        for i in instances:
            start = i.end_ns - i.cpu_ns
            self.first_ns = start if self.first_ns is None else min(self.first_ns, start)
            self.latest_ns = i.end_ns if self.latest_ns is None else max(self.latest_ns, i.end_ns)
        for i in sorted(instances, key=lambda x: x.end_ns):
            self._recent.setdefault((i.rank, i.phase), deque()).append(i)
            if (
                self.first_ns is not None
                and i.end_ns - self.first_ns <= self.baseline_s * 1e9
                and self._baseline_n < BASELINE_MAX
            ):
                self._baseline.setdefault(i.phase, []).append((i.end_ns, i.wall_ns))
                self._baseline_n += 1
        for c in sorted(cycles, key=lambda x: x.end_ns):
            self._cycles.setdefault(c.rank, deque()).append(c)
            self._cycle_count[c.rank] = self._cycle_count.get(c.rank, 0) + 1
            self.latest_ns = c.end_ns if self.latest_ns is None else max(self.latest_ns, c.end_ns)
        self._trim()

    def _trim(self) -> None:
        if self.latest_ns is None:
            return
        edge = self.latest_ns - int(self.window_s * 1e9)
        for dq in self._recent.values():
            while dq and dq[0].end_ns < edge:
                dq.popleft()
        for cq in self._cycles.values():
            while cq and cq[0].end_ns < edge:
                cq.popleft()

    def snapshot(self, *, run: str = "", records_lost: int = 0, running: bool = False) -> Snapshot:
        latest = self.latest_ns
        span_s = (latest - self.first_ns) / 1e9 if latest and self.first_ns else 0.0
        window = min(self.window_s, span_s) if span_s > 0 else self.window_s
        ranks = sorted({r for r, _p in self._recent} | set(self._cycles))
        rows: list[RankRow] = []
        for rank in ranks:
            cq = self._cycles.get(rank, deque())
            accepts = [c.accept_len for c in cq if c.accept_len is not None]
            phases: list[PhaseRow] = []
            insts = {p: list(dq) for (r, p), dq in self._recent.items() if r == rank and dq}
            total = sum(i.wall_ns for lst in insts.values() for i in lst)
            work = sum(i.wall_ns - i.allreduce_ns for lst in insts.values() for i in lst)
            for phase in sorted(insts):
                lst = insts[phase]
                walls = [i.wall_ns / 1e6 for i in lst]
                w = sum(i.wall_ns for i in lst) or 1
                phases.append(
                    PhaseRow(
                        phase=phase,
                        count=len(lst),
                        p50_ms=quantile(walls, 0.5),
                        p99_ms=quantile(walls, 0.99),
                        share_pct=100 * sum(i.wall_ns for i in lst) / (total or 1),
                        forward_pct=100 * sum(i.forward_ns for i in lst) / w,
                        allreduce_pct=100 * sum(i.allreduce_ns for i in lst) / w,
                        overhead_pct=100 * sum(i.overhead_ns for i in lst) / w,
                        graph_pct=100 * sum(i.graph_replayed for i in lst) / len(lst),
                    )
                )
            rows.append(
                RankRow(
                    rank=rank,
                    cycles=self._cycle_count.get(rank, 0),
                    cycles_per_s=len(cq) / window if window > 0 else 0.0,
                    accept_len=sum(accepts) / len(accepts) if accepts else None,
                    work_ms_per_cycle=work / 1e6 / len(cq) if cq else None,
                    phases=tuple(phases),
                )
            )
        lag, excess, lag_note = _lagging(rows, self._recent)
        edge = (latest or 0) - int(window * 1e9)
        changes, ref_s, change_note = self._changes(edge)
        return Snapshot(
            run=run,
            window_s=self.window_s,
            baseline_s=self.baseline_s,
            span_s=span_s,
            latest_ns=latest,
            ranks=tuple(rows),
            lagging_rank=lag,
            lagging_excess_ms=excess,
            changes=tuple(changes),
            records_lost=records_lost,
            running=running,
            reference_s=ref_s,
            change_note=change_note,
            lag_note=lag_note,
        )

    def _changes(self, edge: int) -> tuple[list[Change], float, str | None]:
        """The phases' change against the reference: first-minutes instances ended before
        `edge` (the window's start); the reference's length in s; a note when it is short."""
        first = self.first_ns or 0
        ref_end = min(first + int(self.baseline_s * 1e9), edge)
        ref_s = max(0.0, (ref_end - first) / 1e9)
        changes: list[Change] = []
        for phase in sorted({p for _r, p in self._recent}):
            now = [i.wall_ns / 1e6 for (r, p), dq in self._recent.items() if p == phase for i in dq]
            base = [w / 1e6 for end, w in self._baseline.get(phase, []) if end < edge]
            if now and base:
                b, n = quantile(base, 0.5), quantile(now, 0.5)
                changes.append(Change(phase, b, n, 100 * (n / b - 1) if b > 0 else 0.0))
        if not changes:
            note = (
                f"no change yet: the last {self.window_s:g} s cover the whole run so far, so "
                "there is nothing before them to compare with"
            )
            return [], ref_s, note
        if ref_s < self.baseline_s:
            note = (
                f"reference: the first {ref_s:.0f} s, the part of the first "
                f"{self.baseline_s:g} s before the last {self.window_s:g} s (never the window "
                "itself)"
            )
            return changes, ref_s, note
        return changes, ref_s, None


def _cycle_work(recent: dict[tuple[int, str], deque[Instance]]) -> dict[int, dict[int, int]]:
    """rank -> raw cycle -> work (wall - allreduce) of its window instances."""
    out: dict[int, dict[int, int]] = {}
    for (rank, _p), dq in recent.items():
        per = out.setdefault(rank, {})
        for i in dq:
            per[i.cycle] = per.get(i.cycle, 0) + i.wall_ns - i.allreduce_ns
    return out


def _lagging(
    rows: list[RankRow], recent: dict[tuple[int, str], deque[Instance]]
) -> tuple[int | None, float | None, str | None]:
    """The lagging rank and its excess (ms a cycle) over the median rank when above noise
    (the module's docstring), else (None, excess, why)."""
    works = [(r.work_ms_per_cycle, r.rank) for r in rows if r.work_ms_per_cycle is not None]
    if len(works) < 2:
        return None, None, None
    top_work, top = max(works, key=lambda x: (x[0], -x[1]))
    med = quantile([w for w, _r in works], 0.5)
    excess = top_work - med
    per = _cycle_work(recent)
    ranks = [r for _w, r in works]
    common = sorted(set.intersection(*[set(per.get(r, {})) for r in ranks]))
    diffs = [(per[top][c] - quantile([float(per[r][c]) for r in ranks], 0.5)) / 1e6 for c in common]
    pct = 100 * excess / med if med > 0 else 0.0
    if len(diffs) < LAG_MIN_CYCLES:
        why = f"too few cycles in the window ({len(diffs)}) to tell a lag from noise"
        return None, excess, why
    mean, se = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
    if excess < LAG_MIN_FRAC * med:
        why = (
            f"rank {top}'s +{excess:.3f} ms ({pct:.1f}%) a cycle is under "
            f"{100 * LAG_MIN_FRAC:g}% of the median rank's work"
        )
        return None, excess, why
    if mean <= 2 * se:
        why = (
            f"rank {top}'s +{excess:.3f} ms ({pct:.1f}%) a cycle is within noise (cycle-to-cycle "
            f"excess {mean:+.3f} +- {2 * se:.3f} ms)"
        )
        return None, excess, why
    return top, excess, None
