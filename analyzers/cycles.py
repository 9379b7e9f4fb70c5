"""Cycles of a rank's trace: the ranges of its speculative iterations.

In order of preference: `tracekit/cycle` ranges in the trace; the collector's `cycles` table;
failing both, a cycle starts at each top-level `draft` instance (or, in a run without drafts such
as a plain-decoding baseline, at each top-level instance of the first phase seen). Cycle numbers
come from the collector's table when it has the cycle, else they count from 0 on each rank.
Which cycle a phase instance belongs to is tracekit/store/placement.py's rule (`place`).
"""

from __future__ import annotations

import polars as pl

from tracekit.store.placement import place
from tracekit.store.rank_tables import cycle_source

CYCLE_SCHEMA = {  # a rank's cycles frame (RankPhases.cycles)
    "rank": pl.Int32,
    "cycle": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "accept_len": pl.Float64,
    "source": pl.String,  # rank_tables.CycleSource's values
}
CYCLE_COLUMNS = list(CYCLE_SCHEMA)


def _outermost(ranges: pl.DataFrame) -> pl.DataFrame:
    """Drop ranges that start inside an earlier range (nested cycle marks)."""
    df = ranges.sort(["start_ns", "end_ns"], descending=[False, True])
    prev_end = pl.col("end_ns").cum_max().shift(1)
    return df.filter(prev_end.is_null() | (pl.col("start_ns") >= prev_end))


def _match_collector(marks: pl.DataFrame, collector: pl.DataFrame | None) -> pl.DataFrame:
    """Number cycle marks: the collector's cycle with the nearest start if they overlap by at
    least half the mark, else the mark's ordinal."""
    marks = marks.with_row_index("_ord").with_columns(pl.col("_ord").cast(pl.Int64))
    if collector is None or collector.height == 0:
        return marks.with_columns(
            pl.col("_ord").alias("cycle"), pl.lit(None, dtype=pl.Float64).alias("accept_len")
        ).drop("_ord")
    cc = collector.select(
        pl.col("cycle").alias("_cc"),
        pl.col("start_ns").alias("_cs"),
        pl.col("end_ns").alias("_ce"),
        pl.col("accept_len").cast(pl.Float64).alias("_al"),
    ).sort("_cs")
    # Nearest start, then at least half the mark's range must overlap the collector's cycle:
    # the trace's clock and the collector's `time.time_ns` differ by microseconds.
    joined = marks.sort("start_ns").join_asof(
        cc, left_on="start_ns", right_on="_cs", strategy="nearest"
    )
    overlap = pl.min_horizontal("end_ns", "_ce") - pl.max_horizontal("start_ns", "_cs")
    hit = pl.col("_cc").is_not_null() & (2 * overlap >= pl.col("end_ns") - pl.col("start_ns"))
    return joined.with_columns(
        pl.when(hit).then(pl.col("_cc")).otherwise(pl.col("_ord")).alias("cycle"),
        pl.when(hit).then(pl.col("_al")).otherwise(None).alias("accept_len"),
    ).drop("_ord", "_cc", "_cs", "_ce", "_al")


def _starts_with(top: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    first = top.sort("start_ns")
    names = first["phase"].to_list()
    marker = "draft" if "draft" in names else names[0]
    starts = first.filter(pl.col("phase") == marker).select("start_ns")
    last_end = int(first["end_ns"].max())  # type: ignore[arg-type]
    ranges = starts.with_columns(
        pl.col("start_ns").shift(-1).fill_null(last_end).alias("end_ns"),
        pl.int_range(pl.len(), dtype=pl.Int64).alias("cycle"),
        pl.lit(None, dtype=pl.Float64).alias("accept_len"),
    )
    return ranges, cycle_source("starts_with", marker)


def _collector_ranges(collector: pl.DataFrame) -> pl.DataFrame:
    return collector.select(
        "cycle",
        "start_ns",
        "end_ns",
        pl.col("accept_len").cast(pl.Float64),
        pl.col("source").cast(pl.String).fill_null(cycle_source("cycles")),
    )


def assign_cycles(
    inst: pl.DataFrame, marks: pl.DataFrame, collector: pl.DataFrame | None, rank: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Give every instance a `cycle` (-1: outside any cycle); return (instances, cycles)."""
    top = inst.filter(pl.col("depth") == 0)
    if marks.height:
        ranges = _match_collector(_outermost(marks.select("start_ns", "end_ns")), collector)
        source = cycle_source("cycle_annotation")
    elif collector is not None and collector.height:
        ranges, source = _collector_ranges(collector), None
    else:
        ranges, source = _starts_with(top)
    if source is not None:
        ranges = ranges.with_columns(pl.lit(source).alias("source"))
    ranges = ranges.sort("start_ns")
    out = place(inst, ranges)
    cycles = ranges.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")).select(
        [pl.col(c).cast(t) for c, t in CYCLE_SCHEMA.items()]
    )
    return out, cycles


def cycles_from_collector(
    inst: pl.DataFrame, collector: pl.DataFrame | None, rank: int
) -> pl.DataFrame:
    """Cycles of a light-mode rank: the collector's table, else each cycle's phase extent."""
    if collector is not None and collector.height:
        ranges = _collector_ranges(collector)
    else:
        ranges = (
            inst.filter(pl.col("cycle") >= 0)
            .group_by("cycle")
            .agg(
                pl.col("start_ns").min(),
                pl.col("end_ns").max(),
                pl.col("accept_len").drop_nulls().last().cast(pl.Float64)
                if "accept_len" in inst.columns
                else pl.lit(None, dtype=pl.Float64).alias("accept_len"),
            )
            .with_columns(pl.lit(cycle_source("phases")).alias("source"))
        )
    return (
        ranges.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank"))
        .select([pl.col(c).cast(t) for c, t in CYCLE_SCHEMA.items()])
        .sort("cycle")
    )
