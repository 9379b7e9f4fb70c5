"""The analysis of a run: built once per command by `analyze`, read by every figure and output.

`analyze(run_dir)` goes rank by rank (one rank's events in memory at a time; on Dask one task a
rank): the rank's inputs read once (analyzers/_load.py), phase instances and cycles
(analyzers/phases.py), device intervals attributed to the instances (analyzers/intervals.py),
the breakdown rows (analyzers/breakdown.py), the cycle frame (cycle times) and every recorded
cycle (analyzers/cycletime.py) and the collectives. `RunAnalysis` holds the results; summary, breakdown, skew,
kernels, breakeven, diff, the report and the Perfetto export read them from it. The export
of a run directory uses `analyze_rank` alone, one rank at a time, on the events it reads for
itself (`rank_events`), without the recorded cycles (`recorded=False`).

Instance ids: `inst` numbers one rank's phase instances (sub-phases included) in the order
analyzers/phases.py sorts them; (rank, inst) names one instance in every table here (the
breakdown's rows, the device intervals, `RankPhases.instances`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from tracekit.analyzers._load import (
    EVENT_COLUMNS,
    hides_allreduce,
    read_events,
    read_rank,
    run_ranks,
)
from tracekit.analyzers.allreduce import UNKNOWN, ImplTable, load_impl_table
from tracekit.analyzers.breakdown import hidden_in_compiled, measured_on_one_rank, rank_breakdown
from tracekit.analyzers.cyclerule import no_cycle_message
from tracekit.analyzers.cycletime import (
    collector_breakdown,
    cycle_frame,
    outside_cycles,
    recorded_cycles,
)
from tracekit.analyzers.intervals import collective_rows, rank_intervals
from tracekit.analyzers.phases import RankPhases, collector_phases, no_phases, rank_phases
from tracekit.analyzers.rules import RuleTable, load_rules
from tracekit.errors import NoCyclesError

# `timed`: each top-level phase instance's wall time in every recorded cycle (a full-mode run's
# from its collector records, light-mode timing; else the breakdown's)
TIMED_COLUMNS = ["rank", "cycle", "phase", "wall_ns"]


@dataclass(frozen=True)
class RankAnalysis:
    """One rank's share of a run's analysis.

    `phases`: its phase instances (with `inst`) and cycles. `counts`: instances per phase name
    (sub-phases included). The rest is None when the rank has phases but no cycle:
    `intervals` its device intervals (start_ns, end_ns, inst, comm, graph, kernel, name, label;
    `inst` null for work of no instance), `extras` per-instance graph launches and allreduce
    implementation, `breakdown` its rows (BREAKDOWN_COLUMNS, `inst` among them), `cycles` its
    cycle frame (`cycle_frame`), `recorded` every cycle it recorded (RECORDED_COLUMNS; None
    also when analysed with `recorded=False`), `collectives` its communication activities
    (`collective_rows`).
    """

    rank: int
    phases: RankPhases
    counts: dict[str, int]
    intervals: pl.DataFrame | None = None
    extras: pl.DataFrame | None = None
    breakdown: pl.DataFrame | None = None
    cycles: pl.DataFrame | None = None
    recorded: pl.DataFrame | None = None
    collectives: pl.DataFrame | None = None
    unknown: tuple[str, ...] = ()
    timed: pl.DataFrame | None = None

    @property
    def has_cycles(self) -> bool:
        return self.breakdown is not None


@dataclass(frozen=True)
class RunAnalysis:
    """The analysis of one run (see the module's docstring).

    `breakdown`, `cycles`, `recorded` and `collectives` are the ranks' frames together.
    `cycles` are the cycles the breakdown covers (in full mode: the profiled window);
    `recorded` is every cycle the run recorded (in full mode from the collector's own records,
    `profiled` marking the window), which cycle counts, times, acceptance and the steady state
    come from; `timed` the wall time of every top-level phase instance of those (TIMED_COLUMNS;
    a full-mode run's from its collector records, so diff compares phases over every steady
    cycle, not only the profiled window). `instances` counts phase instances per name
    (sub-phases included).
    `unknown_comm`: communication-looking names no implementation entry matched.
    """

    run_dir: Path
    ranks: tuple[RankAnalysis, ...]
    breakdown: pl.DataFrame
    cycles: pl.DataFrame
    unknown_comm: list[str]
    collectives: pl.DataFrame  # rank, cycle, phase, k (order in the instance), dur_ns
    recorded: pl.DataFrame = field(default_factory=lambda: pl.DataFrame())
    instances: dict[str, int] = field(default_factory=dict)
    timed: pl.DataFrame = field(default_factory=lambda: pl.DataFrame())

    def rank(self, rank: int) -> RankAnalysis | None:
        """The analysis of one rank, None when the run has no such rank with phases."""
        return next((r for r in self.ranks if r.rank == rank), None)


def analyze_rank(
    run_dir: Path | str,
    rank: int,
    rules: RuleTable,
    table: ImplTable,
    *,
    events: pl.DataFrame | None = None,
    recorded: bool = True,
) -> RankAnalysis | None:
    """One rank's analysis; None when the rank has no phases at all.

    The rank's events are read here, once (or given: `events`, as `rank_events` read them for
    a caller that needs them too, the Perfetto export), and live only in the rank's inputs:
    they die when this returns (the RankAnalysis keeps the intervals, not the events), so one
    rank's events are in memory at a time. `recorded=False` leaves `RankAnalysis.recorded`
    None (the cycles are not timed from the collector's records) for a caller that reads only
    the phases, breakdown and cycle frame; `combine` refuses such ranks."""
    inputs = read_rank(Path(run_dir), rank, events)
    rp = rank_phases(inputs, rules)
    if rp is None:
        return None
    counts = {str(n): int(c) for n, c in rp.instances.group_by("phase").len().iter_rows()}
    if rp.tops.height == 0:  # phases but no cycle on this rank
        return RankAnalysis(rank, rp, counts)
    ivals, extras = rank_intervals(inputs, rp, table)
    unknown = ivals.filter(pl.col("label") == UNKNOWN)["name"].unique().cast(pl.String)
    bd = rank_breakdown(rp, (ivals, extras))
    if rp.approximate and hides_allreduce(Path(run_dir), rank):
        bd = hidden_in_compiled(bd)
    cyc = cycle_frame(bd, rp.cycles, outside_cycles(rp))
    rec, timed = None, None
    if recorded:
        light = None if rp.approximate else collector_phases(inputs)  # every cycle of a full run
        light_bd = collector_breakdown(light)
        rec = recorded_cycles(rp, cyc, light, light_bd)
        timed = (bd if light_bd is None else light_bd).select(TIMED_COLUMNS)
    return RankAnalysis(
        rank,
        rp,
        counts,
        intervals=ivals,
        extras=extras,
        breakdown=bd,
        cycles=cyc,
        recorded=rec,
        timed=timed,
        collectives=collective_rows(rp, ivals),
        unknown=tuple(sorted(unknown.to_list())),
    )


def rank_events(run_dir: Path | str, rank: int, also: tuple[str, ...] = ()) -> pl.DataFrame | None:
    """The rank's events table with the columns the analysis reads and `also` (all rows, in
    file order; None when the rank has none): for a caller that needs the events itself and
    hands them to `analyze_rank(events=...)`, so that they are read once."""
    columns = EVENT_COLUMNS + tuple(c for c in also if c not in EVENT_COLUMNS)
    events: pl.DataFrame | None = read_events(Path(run_dir), rank, columns)
    return events


def _cat(frames: list[pl.DataFrame | None]) -> pl.DataFrame:
    return pl.concat([f for f in frames if f is not None], how="vertical_relaxed")


def combine(run_dir: Path, results: list[RankAnalysis | None]) -> RunAnalysis:
    """The run's analysis from its ranks' (in rank order; None: a rank without phases)."""
    found = [r for r in results if r is not None]
    if not found:
        raise no_phases(run_dir)
    counts: dict[str, int] = {}
    for r in found:
        for name, n in r.counts.items():
            counts[name] = counts.get(name, 0) + n
    done = [r for r in found if r.has_cycles]
    if not done:
        raise NoCyclesError(no_cycle_message(run_dir, counts), instances=counts)
    if any(r.recorded is None for r in done):
        raise ValueError("combine: a rank analysed with recorded=False")
    return RunAnalysis(
        run_dir=Path(run_dir),
        ranks=tuple(found),
        breakdown=measured_on_one_rank(
            _cat([r.breakdown for r in done]).sort("rank", "cycle", "start_ns")
        ),
        cycles=_cat([r.cycles for r in done]).sort("rank", "cycle"),
        unknown_comm=sorted({u for r in done for u in r.unknown}),
        collectives=_cat([r.collectives for r in done]),
        recorded=_cat([r.recorded for r in done]).sort("rank", "cycle"),
        instances=dict(sorted(counts.items())),
        timed=_cat([r.timed for r in done]),
    )


def analyze(
    run_dir: Path,
    *,
    rules: Path | RuleTable | None = None,
    impl_table: Path | ImplTable | None = None,
) -> RunAnalysis:
    """The analysis of the run in `run_dir`: every rank's, one rank at a time (one task a rank
    on the current Dask engine, tracekit/distributed.py)."""
    run_dir = Path(run_dir)
    rule_table = rules if isinstance(rules, RuleTable) else load_rules(rules)
    table = impl_table if isinstance(impl_table, ImplTable) else load_impl_table(impl_table)
    ranks = run_ranks(run_dir)
    from tracekit.distributed import current_engine

    engine = current_engine()
    if engine is not None:
        items = [(str(run_dir), r, rule_table, table) for r in ranks]
        return combine(run_dir, engine.starmap(analyze_rank, items))
    return combine(run_dir, [analyze_rank(run_dir, r, rule_table, table) for r in ranks])
