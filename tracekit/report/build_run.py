"""The report's sections of one run's analysis: headline, per-cycle components, distributions,
rank skew, CUDA graphs and allreduce implementations, top kernels.

Figures come from the analyzers (`summary_from`, whose typed summary the headline holds as it
is; `skew_of`, `phase_skew_stats`, `rank_lag_of`, `graph_summary`, `kernels_of`,
`device_split`; docs/DEFINITIONS.md). Still aggregated here from
the breakdown rows, having no definition in DEFINITIONS.md yet: the per-cycle means over ranks
(over time) and the headline's share of (rank, cycle) pairs with a graph launch
(`graph_cycle_frac`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from tracekit.errors import TracekitError
from tracekit.report.section_data import (
    COMPONENTS,
    Breakeven,
    Component,
    Distributions,
    GraphPhase,
    GraphsAllreduce,
    Headline,
    ImplCount,
    Kernel,
    Kernels,
    NoCycles,
    OverTime,
    PhaseCycles,
    PhaseSamples,
    Section,
    SectionId,
    Skew,
    SkewPhase,
)

if TYPE_CHECKING:
    from tracekit.analyzers.run_analysis import RunAnalysis
    from tracekit.report.build import Run

T = TypeVar("T")

NS_PER_MS = 1_000_000
TOP_KERNELS = 10


def sections(run: Run, be: Breakeven | str) -> list[Section]:
    return [
        headline(run, be),
        over_time(run),
        distributions(run),
        skew(run),
        graphs_allreduce(run),
        kernels(run),
    ]


def unavailable(exc: BaseException, what: str) -> str:
    """Why a section is missing: its analyzer is not installed, or it raised `exc`."""
    if isinstance(exc, ImportError):
        return f"{what} is not available in this tracekit (`{exc.name or exc}` is not installed)"
    return f"{what} failed: {exc}"


def _analyzed(
    run: Run, sid: SectionId, title: str, what: str, compute: Callable[[RunAnalysis], T]
) -> T | Section:
    """`compute` of the run's analysis (the analyzer `what` names, imported inside it), or the
    section saying why not: the run's analysis failed, or the analyzer is not installed or
    raised."""
    if run.analysis is None:
        why = run.error if run.exc is None else unavailable(run.exc, what)
        return Section(sid, title, unavailable=why)
    try:
        return compute(run.analysis)
    except (ImportError, TracekitError) as exc:
        return Section(sid, title, unavailable=unavailable(exc, what))


# ---- headline ---------------------------------------------------------------------------------


def graph_cycle_frac(bd: pl.DataFrame) -> float | None:
    """The headline's graph card: the analyzers' `cycle_replay_share` (docs/DEFINITIONS.md,
    "graph_replayed, graph_kernel_frac")."""
    from tracekit.analyzers.graphs import cycle_replay_share

    share: float | None = cycle_replay_share(bd)
    return share


def device_pct(bd: pl.DataFrame) -> dict[Component, float] | None:
    """The headline's split: the analyzers' `device_split` (docs/DEFINITIONS.md, "Summary")."""
    from tracekit.analyzers.summary import device_split

    split = device_split(bd)
    return None if split is None else {c: split[c] for c in COMPONENTS}


def headline(run: Run, be: Breakeven | str) -> Section:
    title = "Headline"
    if run.no_cycles is not None:
        return Section(
            "headline", title, NoCycles(run.error or "", dict(sorted(run.no_cycles.items())))
        )
    bd = run.bd
    sm = run.summary
    if sm is None or bd is None:
        return Section("headline", title, unavailable=run.error)
    data = Headline(
        summary=sm,
        breakeven=be if isinstance(be, Breakeven) else None,
        graph_cycle_frac=graph_cycle_frac(bd),
        device_pct=device_pct(bd),
    )
    return Section("headline", title, data)


# ---- per cycle, per rank ----------------------------------------------------------------------


def over_time(run: Run) -> Section:
    """Per phase and cycle the mean over ranks of each component, every cycle (warm-up too)."""
    title = "Where each cycle's time goes, per phase"
    if run.analysis is None:
        return Section("over-time", title, unavailable=run.error)
    per = (
        run.analysis.breakdown.filter(pl.col("cycle") >= 0)
        .group_by("phase", "cycle")
        .agg([pl.col(f"{c}_ns").mean() for c in COMPONENTS])
        .sort("phase", "cycle")
    )
    phases = []
    for phase in sorted(per["phase"].unique().to_list()):
        rows = per.filter(pl.col("phase") == phase)
        ms: dict[Component, list[float | None]] = {
            c: (rows[f"{c}_ns"] / NS_PER_MS).to_list() for c in COMPONENTS
        }
        phases.append(PhaseCycles(phase, rows["cycle"].to_list(), ms))
    return Section("over-time", title, OverTime(phases))


def distributions(run: Run) -> Section:
    title = "Distributions per phase and rank"
    bd = run.bd
    if bd is None:
        return Section("distributions", title, unavailable=run.error)
    bd = bd.filter(pl.col("cycle") >= 0).sort("rank", "cycle")
    phases = []
    for phase in sorted(bd["phase"].unique().to_list()):
        rows = bd.filter(pl.col("phase") == phase)
        phases.append(
            PhaseSamples(phase, rows["rank"].to_list(), (rows["wall_ns"] / NS_PER_MS).to_list())
        )
    return Section("distributions", title, Distributions(phases))


def _us(ms: float | None) -> float | None:
    return None if ms is None else ms * 1000


def _skew_phases(per: dict[str, dict[str, Any]]) -> list[SkewPhase]:
    return [
        SkewPhase(
            phase=phase,
            cycles=int(p["cycles"]),
            spread_us_p50=_us(p["spread_ms_p50"]),
            spread_us_p90=_us(p["spread_ms_p90"]),
            wait_us_p50=_us(p["allreduce_wait_ms_p50"]),
            slowest_rank=p["slowest_rank"],
            slowest_frac=p["slowest_rank_frac"],
        )
        for phase, p in sorted(per.items())
    ]


def _skew_of(an: RunAnalysis) -> tuple[dict[str, dict[str, Any]], pl.DataFrame]:
    from tracekit.analyzers.skew import phase_skew_stats, rank_lag_of, skew_of

    return phase_skew_stats(skew_of(an)), rank_lag_of(an)


def skew(run: Run) -> Section:
    title = "Rank skew"
    got = _analyzed(run, "skew", title, "the skew analysis (`tracekit.analyzers.skew`)", _skew_of)
    if isinstance(got, Section):
        return got
    per, lag = got
    ranks = sorted(lag["rank"].unique().to_list())
    cycles = sorted(lag["cycle"].unique().to_list())
    col_of = {c: i for i, c in enumerate(cycles)}
    z: list[list[float | None]] = [[None] * len(cycles) for _ in ranks]
    for i, r in enumerate(ranks):
        rows = lag.filter(pl.col("rank") == r)
        for c, v in zip(rows["cycle"].to_list(), rows["lag_ns"].to_list()):
            z[i][col_of[c]] = None if v is None else v / 1000
    return Section("skew", title, Skew(_skew_phases(per), ranks, cycles, z))


def graphs_allreduce(run: Run) -> Section:
    title = "CUDA graphs and allreduce implementations"
    bd = run.bd
    if bd is None or run.summary is None:
        return Section("graphs-allreduce", title, unavailable=run.error)
    from tracekit.analyzers.graphs import graph_summary

    graphs = [
        GraphPhase(
            r["phase"],
            int(r["instances"]),
            int(r["replayed"]),
            r["replayed_frac"],
            r["graph_kernel_frac"],
        )
        for r in graph_summary(bd).iter_rows(named=True)
    ]
    impls = []
    for phase, v in sorted(run.summary.phases.items()):
        counts = v.allreduce_impl
        if not counts:
            impls.append(ImplCount(phase, None, None))
        impls += [ImplCount(phase, impl, int(n)) for impl, n in sorted(counts.items())]
    return Section("graphs-allreduce", title, GraphsAllreduce(graphs, impls))


def _kernels_of(an: RunAnalysis) -> pl.DataFrame:
    from tracekit.analyzers.kernels import kernels_of

    top: pl.DataFrame = kernels_of(an, TOP_KERNELS)
    return top


def kernels(run: Run) -> Section:
    title = "Top kernels per phase"
    what = "the kernel table (`tracekit.analyzers.kernels`)"
    tk = _analyzed(run, "kernels", title, what, _kernels_of)
    if isinstance(tk, Section):
        return tk
    if tk.height == 0:
        return Section(
            "kernels",
            title,
            unavailable="no kernels attributed to phases (a light-mode run records no kernels; use `--mode full`)",
        )
    out: dict[str, list[Kernel]] = {}
    for phase in sorted(tk["phase"].unique().to_list()):
        out[phase] = [
            Kernel(
                name=r["name"],
                count=int(r["count"]),
                total_ms=r["total_ns"] / NS_PER_MS,
                mean_us=r["total_ns"] / 1000 / r["count"] if r["count"] else None,
                allreduce_impl=r["allreduce_impl"],
            )
            for r in tk.filter(pl.col("phase") == phase).iter_rows(named=True)
        ]
    return Section("kernels", title, Kernels(out))
