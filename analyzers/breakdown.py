"""Breakdown of every phase instance: forward, allreduce and overhead on the device timeline.

One row a top-level phase instance in a cycle (BREAKDOWN_COLUMNS): its device intervals
(analyzers/intervals.py) split into forward / allreduce / overhead by analyzers/timeline.py,
graph launches, the allreduce implementation and the cycle's acceptance. Rows from the
collector's light-mode records are marked `approximate` (docs/DEFINITIONS.md).
"""

from __future__ import annotations

from typing import cast

import polars as pl

from tracekit.analyzers.phases import RankPhases
from tracekit.analyzers.timeline import split

DESIGN_SCHEMA = {  # DESIGN's fields of a phase instance, in its order
    "wall_ns": pl.Int64,
    "forward_ns": pl.Int64,
    "allreduce_ns": pl.Int64,
    "overhead_ns": pl.Int64,
    "graph_replayed": pl.Boolean,
    "graph_kernel_frac": pl.Float64,
    "allreduce_impl": pl.String,
    "kernels": pl.Int64,
}
DESIGN_FIELDS = tuple(DESIGN_SCHEMA)  # what `tracekit breakdown` and the Perfetto slices show
BREAKDOWN_SCHEMA = {  # the breakdown frame: columns and their types when it is empty
    "rank": pl.Int32,
    "cycle": pl.Int64,
    "phase": pl.String,
    "start_ns": pl.Int64,
    **DESIGN_SCHEMA,
    "approximate": pl.Boolean,
    "accept_len": pl.Float64,
    "end_ns": pl.Int64,
    "cpu_ns": pl.Int64,
    "unattributed_ns": pl.Int64,
    "graph_launches": pl.Int64,
    "device_end_ns": pl.Int64,
    "gpu_timed": pl.Boolean,
    # False: a light-mode instance that replayed CUDA graphs and saw no allreduce call (its
    # collectives, if any, ran inside the graphs): its allreduce is not measured, not 0
    "allreduce_measured": pl.Boolean,
    "inst": pl.Int64,  # the instance id (analyzers/run_analysis.py); not among the CLI's fields
}
BREAKDOWN_COLUMNS = list(BREAKDOWN_SCHEMA)


def _window_start(rp: RankPhases) -> int:
    top = rp.tops
    starts = [v for v in (rp.cycles["start_ns"].min(), top["start_ns"].min()) if v is not None]
    return min(int(cast("int", v)) for v in starts) if starts else 0


def rank_breakdown(rp: RankPhases, intervals: tuple[pl.DataFrame, pl.DataFrame]) -> pl.DataFrame:
    """Breakdown rows (BREAKDOWN_COLUMNS) of one rank's top-level phase instances, from its
    (device intervals, per-instance extras) (`intervals.rank_intervals`)."""
    top = rp.tops
    if top.height == 0:  # phases but no cycle on this rank: nothing to break down
        return _empty_breakdown()
    # gpu_timed (light mode): the instance's device interval is its CUDA-event span; false
    # where it is its CPU range (a CPU run, or a cycle `--gpu-sample N` left untimed); null for
    # trace-based rows (the trace's activities are the device timeline)
    if rp.approximate and "gpu_start_ns" in top.columns and "gpu_end_ns" in top.columns:
        timed = pl.col("gpu_start_ns").is_not_null() & pl.col("gpu_end_ns").is_not_null()
    else:
        timed = pl.lit(None, dtype=pl.Boolean)
    top = top.select(
        "inst", "rank", "cycle", "phase", "start_ns", "end_ns", timed.alias("gpu_timed")
    )
    ivals, extras = intervals
    parts = split(ivals, _window_start(rp))
    accept = rp.cycles.select("cycle", "accept_len")
    zero = pl.lit(0, dtype=pl.Int64)
    busy = pl.col("forward_ns") + pl.col("allreduce_ns")
    out = (
        top.join(parts, on="inst", how="left")
        .join(extras, on="inst", how="left")
        .join(accept.unique("cycle", keep="first"), on="cycle", how="left")
        .with_columns(
            *[pl.col(c).fill_null(zero) for c in ("forward_ns", "allreduce_ns", "overhead_ns")],
            pl.col("unattributed_ns").fill_null(zero),
            pl.col("kernels").fill_null(zero),
            pl.col("graph_launches").fill_null(zero),
        )
        .with_columns(
            (pl.col("forward_ns") + pl.col("allreduce_ns") + pl.col("overhead_ns")).alias(
                "wall_ns"
            ),
            (pl.col("end_ns") - pl.col("start_ns")).alias("cpu_ns"),
            (pl.col("graph_launches") > 0).alias("graph_replayed"),
            pl.when(pl.lit(rp.approximate) | (busy == 0))
            .then(None)
            .otherwise(pl.col("graph_ns").fill_null(zero) / busy)
            .alias("graph_kernel_frac"),
            pl.lit(rp.approximate).alias("approximate"),
        )
        .with_columns(
            (
                ~(
                    pl.col("approximate")
                    & pl.col("graph_replayed")
                    & (pl.col("allreduce_ns") == 0)
                    & pl.col("allreduce_impl").is_null()
                )
            ).alias("allreduce_measured")
        )
    )
    rows: pl.DataFrame = out.select(BREAKDOWN_COLUMNS).sort("start_ns")
    return rows


def hidden_in_compiled(bd: pl.DataFrame) -> pl.DataFrame:
    """Rows of a light-mode rank whose allreduce target ran inside torch.compile'd calls
    (`_load.hides_allreduce`): an instance without allreduce time has its allreduce not
    measured (the collectives may be inside the compiled call it made), not 0."""
    hidden = pl.col("approximate") & (pl.col("allreduce_ns") == 0)
    return bd.with_columns((pl.col("allreduce_measured") & ~hidden).alias("allreduce_measured"))


def measured_on_one_rank(bd: pl.DataFrame) -> pl.DataFrame:
    """A run of one rank has nothing to communicate: its allreduce is measured (0) even in
    CUDA graphs (`allreduce_measured` is decided per rank, before the ranks are known)."""
    if bd.height and bd["rank"].n_unique() < 2:
        return bd.with_columns(pl.lit(True).alias("allreduce_measured"))
    return bd


def _empty_breakdown() -> pl.DataFrame:
    return pl.DataFrame(schema=BREAKDOWN_SCHEMA)
