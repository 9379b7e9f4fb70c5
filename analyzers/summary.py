"""The summary of a run: cycle time, acceptance length, throughput and per-phase shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from tracekit.analyzers.breakdown import Analysis, analyze
from tracekit.analyzers.rules import RuleTable
from tracekit.analyzers.skew import phase_skew, skew_from

NS_PER_MS = 1_000_000


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def phase_stats(bd: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """Per phase name: count, wall ms mean/p50/p90, forward/allreduce/overhead % of the summed
    wall time, share of instances that replayed a graph, allreduce implementation counts."""
    out: dict[str, dict[str, Any]] = {}
    for phase in sorted(bd["phase"].unique().to_list()):
        rows = bd.filter(pl.col("phase") == phase)
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
        out[phase] = {
            "count": rows.height,
            "wall_ms_mean": _f(wall.mean()),
            "wall_ms_p50": _f(wall.median()),
            "wall_ms_p90": _f(wall.quantile(0.9, interpolation="linear")),
            "forward_pct": pct("forward_ns"),
            "allreduce_pct": pct("allreduce_ns"),
            "overhead_pct": pct("overhead_ns"),
            "graph_replayed_frac": _f(rows["graph_replayed"].cast(pl.Float64).mean()),
            "allreduce_impl": dict(impls.iter_rows()),
        }
    return out


NOT_MEASURED = (
    "allreduce not measured: {ranks} ranks recorded no communication, so their collectives ran "
    "where Python wrappers do not fire (inside a torch.compile graph or a captured CUDA graph); "
    "the phases' allreduce share is unknown, not 0%. Get it with `--mode full` (the profiler "
    "sees the communication ops and kernels inside graphs) or an eager run (vLLM: "
    "enforce_eager / --enforce-eager)"
)


def allreduce_measured(bd: pl.DataFrame, collectives: pl.DataFrame) -> bool:
    """False when a multi-rank run shows no communication at all: its collectives were
    invisible to the collectors (DEFINITIONS.md "allreduce not measured"). A single rank has
    nothing to communicate: 0 is then a measurement."""
    if bd.height == 0 or bd["rank"].n_unique() < 2:
        return True
    return int(bd["allreduce_ns"].sum()) > 0 or collectives.height > 0


def summary_from(analysis: Analysis) -> dict[str, Any]:
    bd, cyc = analysis.breakdown, analysis.cycles
    measured = allreduce_measured(bd, analysis.collectives)
    wall_ms = cyc["wall_ns"].cast(pl.Float64) / NS_PER_MS
    per_cycle_accept = (
        cyc.filter(pl.col("accept_len").is_not_null())
        .group_by("cycle")
        .agg(pl.col("accept_len").first())
    )
    accept = _f(per_cycle_accept["accept_len"].mean()) if per_cycle_accept.height else None
    mean_ms = _f(wall_ms.mean())
    tokens_per_s = accept * 1000.0 / mean_ms if accept is not None and mean_ms else None
    phases = phase_stats(bd)
    if not measured:
        for p in phases.values():
            p["allreduce_pct"] = None
    return {
        "ranks": bd["rank"].n_unique(),
        "cycles": cyc["cycle"].n_unique(),
        "cycle_ms_p50": _f(wall_ms.median()),
        "cycle_ms_mean": mean_ms,
        "accept_len_mean": accept,
        "tokens_per_s": tokens_per_s,
        "approximate": bool(bd["approximate"].any()),
        "phases": phases,
        "allreduce_measured": measured,
        "allreduce_note": None if measured else NOT_MEASURED.format(ranks=bd["rank"].n_unique()),
        "unknown_comm_kernels": analysis.unknown_comm,
        "skew": phase_skew(skew_from(bd, analysis.collectives)),
    }


def summarize(
    run_dir: Path,
    *,
    rules: Path | RuleTable | None = None,
    impl_table: Path | None = None,
) -> dict[str, Any]:
    """DESIGN's summary fields (plus `cycle_ms_mean` and `approximate`) of a run directory."""
    return summary_from(analyze(run_dir, rules=rules, impl_table=impl_table))
