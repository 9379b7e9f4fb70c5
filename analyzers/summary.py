"""The summary of a run: cycle time, acceptance length, throughput and per-phase shares.

`summary_from` computes it from a `RunAnalysis` into the typed model of
analyzers/summary_fields.py (`Summary`), which `tracekit summary` (table, `--json`) and the
report render as it is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.analyzers.acceptance import kept_acceptance
from tracekit.analyzers.rules import RuleTable
from tracekit.analyzers.run_analysis import RunAnalysis, analyze
from tracekit.analyzers.skew import phase_skew, skew_from
from tracekit.analyzers.steady import CycleChoice, decide
from tracekit.analyzers.summary_fields import Acceptance, PhaseSummary, SkewSummary, Summary

NS_PER_MS = 1_000_000


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _timed(rows: pl.DataFrame) -> pl.DataFrame:
    """The GPU-timed rows when some rows are and some are not (light mode with `--gpu-sample
    N`: statistics come from the sampled cycles), else all rows."""
    if "gpu_timed" not in rows.columns:
        return rows
    timed = rows.filter(pl.col("gpu_timed").fill_null(False))
    return timed if 0 < timed.height < rows.height else rows


def phase_stats(bd: pl.DataFrame) -> dict[str, PhaseSummary]:
    """Per phase name: count, wall ms mean/p50/p90, forward/allreduce/overhead % of the summed
    wall time, share of instances that replayed a graph, allreduce implementation counts.
    With GPU-sampled light-mode runs the times and shares come from the GPU-timed instances
    (`gpu_timed_count` of the `count`)."""
    out: dict[str, PhaseSummary] = {}
    for phase in sorted(bd["phase"].unique().to_list()):
        every = bd.filter(pl.col("phase") == phase)
        rows = _timed(every)
        wall = rows["wall_ns"].cast(pl.Float64) / NS_PER_MS
        total = int(rows["wall_ns"].sum())

        def pct(col: str, rows: pl.DataFrame = rows, total: int = total) -> float | None:
            return None if total == 0 else 100.0 * int(rows[col].sum()) / total

        impls = (
            rows.filter(pl.col("allreduce_impl").is_not_null())
            .group_by("allreduce_impl")
            .len()
            .sort("allreduce_impl")
        )
        measured = (
            bool(rows["allreduce_measured"].all()) if "allreduce_measured" in rows.columns else True
        )
        out[phase] = PhaseSummary(
            count=every.height,
            gpu_timed_count=int(every["gpu_timed"].fill_null(False).sum())
            if "gpu_timed" in every.columns
            else 0,
            wall_ms_mean=_f(wall.mean()),
            wall_ms_p50=_f(wall.median()),
            wall_ms_p90=_f(wall.quantile(0.9, interpolation="linear")),
            forward_pct=pct("forward_ns"),
            allreduce_pct=pct("allreduce_ns") if measured else None,
            overhead_pct=pct("overhead_ns"),
            graph_replayed_frac=_f(rows["graph_replayed"].cast(pl.Float64).mean()),
            allreduce_impl=dict(impls.iter_rows()),
            allreduce_note=None if measured else _unmeasured_note(rows),
        )
    return out


COMPONENT_COLUMNS = ("forward_ns", "allreduce_ns", "overhead_ns")


def device_split(bd: pl.DataFrame) -> dict[str, float] | None:
    """The run's device time split: forward / allreduce / overhead in % of the summed wall time
    of its cycles' phase instances (docs/DEFINITIONS.md, "Summary"), from the GPU-timed
    instances when `--gpu-sample N` left some untimed, as the per-phase shares; keys without
    `_ns`. None when there is no device time."""
    rows = _timed(bd.filter(pl.col("cycle") >= 0))
    total = int(rows["wall_ns"].sum() or 0)
    if not total:
        return None
    return {c.removesuffix("_ns"): 100.0 * int(rows[c].sum()) / total for c in COMPONENT_COLUMNS}


IN_GRAPH = "not measured (inside a CUDA graph; --mode full measures it)"
IN_COMPILED = "not measured (inside a torch.compile'd call; --mode full measures it)"


def _unmeasured_note(rows: pl.DataFrame) -> str:
    """Why a phase's allreduce is not measured: CUDA graphs when an unmeasured instance
    replayed one, else the compiled calls its allreduce target ran in."""
    unmeasured = rows.filter(~pl.col("allreduce_measured"))
    return IN_GRAPH if bool(unmeasured["graph_replayed"].any()) else IN_COMPILED


NOT_MEASURED = (
    "allreduce not measured: {ranks} ranks recorded no communication, so their collectives ran "
    "where Python wrappers do not fire (inside a torch.compile graph or a captured CUDA graph); "
    "the phases' allreduce share is unknown, not 0%. Get it with `--mode full` (the profiler "
    "sees the communication ops and kernels inside graphs) or an eager run (vLLM: "
    "enforce_eager / --enforce-eager)"
)


def allreduce_measured(
    bd: pl.DataFrame, collectives: pl.DataFrame, instances: dict[str, int] | None = None
) -> bool:
    """False when a multi-rank run shows no communication at all: no communication time, no
    collective, and no `allreduce` phase call (wrapped or annotated); its collectives were
    invisible to the collectors (DEFINITIONS.md "Summary"). A single rank has nothing to
    communicate: 0 is then a measurement. So is a run whose allreduce calls were seen but ran
    no device work (gloo on GPU ranks in full mode: host-side, overhead on the device
    timeline)."""
    if bd.height == 0 or bd["rank"].n_unique() < 2:
        return True
    seen_calls = bool(instances and instances.get("allreduce", 0) > 0)
    return int(bd["allreduce_ns"].sum()) > 0 or collectives.height > 0 or seen_calls


def cycle_totals(recorded: pl.DataFrame) -> dict[str, Any]:
    """Cycle count, times and throughput of a run's (steady) recorded cycles, from totals.

    A cycle's time is the mean over ranks of its `time_ns`; cycle_ms_mean = total time /
    cycles; accept_len_mean = total tokens / cycles with a count; tokens_per_s = total tokens /
    total time of those cycles (so means, not medians: docs/DEFINITIONS.md, "Throughput").
    p50/p90 describe the spread.
    """
    per = (
        recorded.filter(pl.col("cycle") >= 0)
        .group_by("cycle")
        .agg(
            pl.col("time_ns").cast(pl.Float64).mean(),
            pl.col("accept_len").drop_nulls().first(),
        )
        .sort("cycle")
    )
    t_ms = per["time_ns"] / NS_PER_MS
    counted = per.filter(pl.col("accept_len").is_not_null())
    tokens = float(counted["accept_len"].sum()) if counted.height else None
    counted_s = float(counted["time_ns"].sum()) / 1e9 if counted.height else 0.0
    return {
        "cycles": per.height,
        "cycle_ms_p50": _f(t_ms.median()),
        "cycle_ms_p90": _f(t_ms.quantile(0.9, interpolation="linear")),
        "cycle_ms_mean": _f(t_ms.mean()),
        "accept_len_mean": None if tokens is None else tokens / counted.height,
        "tokens": tokens,
        "tokens_per_s": tokens / counted_s if tokens is not None and counted_s > 0 else None,
    }


def _timed_cycles(cycles: pl.DataFrame) -> int:
    """Cycles (rank, cycle) whose phases all carry CUDA-event times (light mode)."""
    if "gpu_timed" not in cycles.columns:
        return 0
    return int(cycles["gpu_timed"].fill_null(False).sum())


def _profiled(analysis: RunAnalysis) -> list[int] | None:
    rec = analysis.recorded
    if rec.height == 0 or bool(rec["profiled"].all()) or not bool(rec["profiled"].any()):
        return None
    cycles = sorted(set(rec.filter(pl.col("profiled"))["cycle"].to_list()))
    return [cycles[0], cycles[-1]]


def _pair(v: list[int] | None) -> tuple[int, int] | None:
    return None if not v else (int(v[0]), int(v[1]))


def summary_from(analysis: RunAnalysis, choice: CycleChoice | None = None) -> Summary:
    """DESIGN's summary of an analysis, over the steady-state cycles (or `choice`)."""
    steady = decide(analysis.recorded, choice)
    totals = cycle_totals(steady.keep(analysis.recorded))
    accept = kept_acceptance(analysis.run_dir, steady)  # pooled over requests, when read
    bd, shares_note = steady.keep_shares(analysis.breakdown)
    coll = steady.keep(analysis.collectives)
    measured = allreduce_measured(analysis.breakdown, analysis.collectives, analysis.instances)
    phases = phase_stats(bd)
    if not measured:
        phases = {k: replace(p, allreduce_pct=None) for k, p in phases.items()}
    ranks = analysis.breakdown["rank"].n_unique()
    st = steady.to_json()
    st.update(steady_cycles=_pair(st["steady_cycles"]), warmup_cycles=_pair(st["warmup_cycles"]))
    return Summary(
        ranks=ranks,
        cycles=analysis.recorded.filter(pl.col("cycle") >= 0)["cycle"].n_unique(),
        cycle_ms_p50=totals["cycle_ms_p50"],
        cycle_ms_mean=totals["cycle_ms_mean"],
        cycle_ms_p90=totals["cycle_ms_p90"],
        accept_len_mean=accept["accept_len_mean"] if accept else totals["accept_len_mean"],
        accept=Acceptance(**accept) if accept else None,
        tokens=totals["tokens"],
        tokens_per_s=totals["tokens_per_s"],
        **st,
        profiled_cycles=_pair(_profiled(analysis)),
        shares_note=shares_note,
        approximate=bool(bd["approximate"].any()),
        gpu_timed_cycles=_timed_cycles(analysis.cycles),
        phases=phases,
        allreduce_measured=measured,
        allreduce_note=None if measured else NOT_MEASURED.format(ranks=ranks),
        unknown_comm_kernels=list(analysis.unknown_comm),
        skew={k: SkewSummary(**v) for k, v in phase_skew(skew_from(bd, coll)).items()},
    )


def summarize(
    run_dir: Path,
    *,
    rules: Path | RuleTable | None = None,
    impl_table: Path | None = None,
    choice: CycleChoice | None = None,
) -> Summary:
    """DESIGN's summary fields (plus `cycle_ms_mean`, the steady state and `approximate`)."""
    return summary_from(analyze(run_dir, rules=rules, impl_table=impl_table), choice)
