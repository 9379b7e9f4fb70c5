"""CUDA-graph replay per phase: which instances launched graphs and how much of their GPU time
came from graph kernels.

The per-instance columns (`graph_replayed`, `graph_kernel_frac`, `graph_launches`) are computed
by the breakdown (a graph launch is a `cudaGraphLaunch` / `cuGraphLaunch` / `hipGraphLaunch`
runtime call in the instance's CPU range; its kernels carry the launch's correlation id; in
light mode the collector counts `CUDAGraph.replay` calls). This module summarises them per phase
(`graph_summary`: the report's graph table) and per run (`cycle_replay_share`: the report's
"cycles with graph replay" card); docs/DEFINITIONS.md "graph_replayed, graph_kernel_frac".
"""

from __future__ import annotations

import polars as pl

GRAPH_LAUNCH = r"^(?:cudaGraphLaunch|cuGraphLaunch|hipGraphLaunch)(?:_v\d+|_ptsz|_spt)*$"


def graph_summary(bd: pl.DataFrame) -> pl.DataFrame:
    """Per phase: instances, replayed (instances that launched a graph), replayed_frac,
    graph_launches (total) and graph_kernel_frac, the share of the phase's busy time (forward +
    allreduce of its instances with a graph_kernel_frac) in graph-launched activities: the
    instances' fractions weighted by busy time, not their plain mean; null when none has busy
    time (light mode)."""
    busy = pl.col("forward_ns") + pl.col("allreduce_ns")
    exact = pl.col("graph_kernel_frac").is_not_null()
    return (
        bd.group_by("phase")
        .agg(
            pl.len().alias("instances"),
            pl.col("graph_replayed").sum().alias("replayed"),
            pl.col("graph_replayed").cast(pl.Float64).mean().alias("replayed_frac"),
            pl.col("graph_launches").sum().alias("graph_launches"),
            (
                (pl.col("graph_kernel_frac") * busy).filter(exact).sum() / busy.filter(exact).sum()
            ).alias("graph_kernel_frac"),
        )
        .with_columns(
            pl.when(pl.col("graph_kernel_frac").is_nan())
            .then(None)
            .otherwise(pl.col("graph_kernel_frac"))
            .alias("graph_kernel_frac")
        )
        .sort("phase")
    )


def cycle_replay_share(bd: pl.DataFrame) -> float | None:
    """The share of (rank, cycle) pairs, cycles >= 0, in which at least one phase instance
    launched a CUDA graph (`graph_replayed`); None when `bd` holds no cycle."""
    per = (
        bd.filter(pl.col("cycle") >= 0)
        .group_by("rank", "cycle")
        .agg(pl.col("graph_replayed").any())
    )
    if per.height == 0:
        return None
    share: float = per["graph_replayed"].cast(pl.Float64).mean()  # type: ignore[assignment]
    return share
