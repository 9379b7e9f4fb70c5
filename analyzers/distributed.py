"""The per-rank analysis as tasks: `analyze` run on an engine (tracekit/distributed.py).

`analyze_rank` is the body of `breakdown.analyze`'s loop for one rank (its phases, device
intervals, collectives, breakdown, cycles and recorded cycles), and `reduce` is what `analyze`
does with the ranks' results, so a run analysed here or on a Dask cluster gives the same
`Analysis` (tests/unit/test_distributed.py checks it frame by frame on the sample traces and
on 64 synthetic ranks). Each task reads only its rank's partitions of the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import polars as pl

from tracekit.analyzers import _load
from tracekit.analyzers.allreduce import UNKNOWN, ImplTable
from tracekit.analyzers.rules import RuleTable
from tracekit.errors import NoCyclesError

if TYPE_CHECKING:
    from tracekit.analyzers.breakdown import Analysis
    from tracekit.distributed import DaskEngine


@dataclass(frozen=True)
class RankResult:
    rank: int
    counts: dict[str, int]  # phase instances per name
    breakdown: pl.DataFrame | None = None  # None: phases but no cycle on this rank
    cycles: pl.DataFrame | None = None
    collectives: pl.DataFrame | None = None
    recorded: pl.DataFrame | None = None
    unknown: tuple[str, ...] = ()


def analyze_rank(run_dir: str, rank: int, rules: RuleTable, table: ImplTable) -> RankResult | None:
    """One rank's share of `analyze`; None when the rank has no phases at all."""
    from tracekit.analyzers.breakdown import (
        _top,
        collective_rows,
        cycle_frame,
        rank_breakdown,
        rank_intervals,
        recorded_cycles,
    )
    from tracekit.analyzers.phases import rank_phases

    path = Path(run_dir)
    rp = rank_phases(path, rank, rules)
    if rp is None:
        return None
    counts = {str(n): int(c) for n, c in rp.instances.group_by("phase").len().iter_rows()}
    if _top(rp).height == 0:
        return RankResult(rank, counts)
    ivals = rank_intervals(path, rp, table)
    unknown = ivals[0].filter(pl.col("label") == UNKNOWN)["name"].unique().cast(pl.String).to_list()
    comm = collective_rows(rp, ivals[0])
    bd = rank_breakdown(path, rp, table, ivals)
    cyc = cycle_frame(bd, rp.cycles)
    rec = recorded_cycles(path, rp, table, cyc)
    _load._cache.clear()  # a worker keeps no rank's rows after its task
    return RankResult(rank, counts, bd, cyc, comm, rec, tuple(unknown))


def _cat(frames: list[pl.DataFrame | None]) -> pl.DataFrame:
    return pl.concat([f for f in frames if f is not None], how="vertical_relaxed")


def reduce(run_dir: Path, results: list[RankResult | None]) -> Analysis:
    """`analyze`'s result from the ranks' results (in rank order)."""
    from tracekit.analyzers.breakdown import Analysis
    from tracekit.analyzers.cyclerule import no_cycle_message
    from tracekit.analyzers.phases import _no_phases

    found = [r for r in results if r is not None]
    if not found:
        raise _no_phases(run_dir)
    counts: dict[str, int] = {}
    for r in found:
        for name, n in r.counts.items():
            counts[name] = counts.get(name, 0) + n
    done = [r for r in found if r.breakdown is not None]
    if not done:
        raise NoCyclesError(no_cycle_message(run_dir, counts), instances=counts)
    return Analysis(
        breakdown=_cat([r.breakdown for r in done]).sort("rank", "cycle", "start_ns"),
        cycles=_cat([r.cycles for r in done]).sort("rank", "cycle"),
        unknown_comm=sorted({u for r in done for u in r.unknown}),
        collectives=_cat([r.collectives for r in done]),
        recorded=_cat([r.recorded for r in done]).sort("rank", "cycle"),
        instances=dict(sorted(counts.items())),
    )


def analyze_on(engine: DaskEngine, run_dir: Path, rules: RuleTable, table: ImplTable) -> Analysis:
    """`analyze(run_dir)` with one task a rank on `engine`."""
    ranks = _load.run_ranks(Path(run_dir))
    items = [(str(run_dir), r, rules, table) for r in ranks]
    return reduce(Path(run_dir), engine.starmap(analyze_rank, items))
