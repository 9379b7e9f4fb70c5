"""The exact split of a rank's device timeline into forward, allreduce and overhead.

Input: device intervals (GPU activities, or on CPU-only runs top-level ops) with the phase
instance they belong to (`inst`, null when no phase launched them) and whether they are
communication. Every instant from the window start to the last interval's end is:

* busy: owned by the running interval that started first (ties: compute before communication);
  that interval's phase gets it as forward (compute) or allreduce (communication) time;
* idle: charged, as overhead, to the phase whose work runs next.

Busy time of intervals no phase launched is charged like idle time (overhead of the next phase)
and also reported as `unattributed_ns`. So the phases' wall times add up to the timeline from the
window start to the last phase's last interval.
"""

from __future__ import annotations

import polars as pl

SPLIT_COLUMNS = [
    "inst",
    "forward_ns",
    "allreduce_ns",
    "overhead_ns",
    "unattributed_ns",
    "graph_ns",
    "kernels",
    "device_start_ns",
    "device_end_ns",
]


def split(intervals: pl.DataFrame, window_start: int) -> pl.DataFrame:
    """Per phase instance: forward, allreduce, overhead (idle + unattributed), graph busy time.

    `intervals` columns: start_ns, end_ns, inst (Int64, nullable), comm (bool), graph (bool),
    kernel (bool). Intervals before `window_start` are clipped to it.
    """
    s, e = pl.col("start_ns"), pl.col("end_ns")
    df = (
        intervals.lazy()
        .filter(e > window_start)
        .with_columns(pl.max_horizontal(s, pl.lit(window_start)).alias("start_ns"))
        .sort(["start_ns", "comm"])
        .with_columns(e.cum_max().shift(1).fill_null(window_start).alias("_m"))
        .with_columns(
            (e - pl.max_horizontal(s, pl.col("_m"))).clip(lower_bound=0).alias("_own"),
            (s - pl.col("_m")).clip(lower_bound=0).alias("_idle"),
            pl.col("inst").fill_null(strategy="backward").alias("_charge"),
        )
        .filter(pl.col("_charge").is_not_null())
    )
    att = pl.col("inst").is_not_null()
    zero = pl.lit(0, dtype=pl.Int64)
    return (
        df.group_by(pl.col("_charge").alias("inst"))
        .agg(
            pl.when(att & ~pl.col("comm"))
            .then(pl.col("_own"))
            .otherwise(zero)
            .sum()
            .alias("forward_ns"),
            pl.when(att & pl.col("comm"))
            .then(pl.col("_own"))
            .otherwise(zero)
            .sum()
            .alias("allreduce_ns"),
            (pl.col("_idle") + pl.when(att).then(zero).otherwise(pl.col("_own")))
            .sum()
            .alias("overhead_ns"),
            pl.when(att).then(zero).otherwise(pl.col("_own")).sum().alias("unattributed_ns"),
            pl.when(att & pl.col("graph"))
            .then(pl.col("_own"))
            .otherwise(zero)
            .sum()
            .alias("graph_ns"),
            (att & pl.col("kernel")).sum().cast(pl.Int64).alias("kernels"),
            pl.col("start_ns").filter(att).min().alias("device_start_ns"),
            pl.col("end_ns").filter(att).max().alias("device_end_ns"),
        )
        .select(SPLIT_COLUMNS)
        .collect()
    )
