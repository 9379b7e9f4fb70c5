"""Cycle times of a rank: the cycle frame of its breakdown, and every cycle it recorded.

`cycle_frame` gives each cycle its span and its time (docs/DEFINITIONS.md "Cycle time");
`recorded_cycles` every cycle the rank recorded: in full mode the trace covers only the
profiled window, the collector's records (light-mode timing) every cycle.
"""

from __future__ import annotations

import polars as pl

from tracekit.analyzers.breakdown import rank_breakdown
from tracekit.analyzers.intervals import light_intervals
from tracekit.analyzers.phases import RankPhases

RECORDED_COLUMNS = [
    "rank",
    "cycle",
    "time_ns",
    "wall_ns",
    "accept_len",
    "profiled",
    "seq_start",
]


def collector_breakdown(light: RankPhases | None) -> pl.DataFrame | None:
    """The breakdown rows of a full-mode rank's collector records (light-mode timing, every
    cycle); None without records."""
    if light is None or light.tops.height == 0:
        return None
    bd: pl.DataFrame = rank_breakdown(light, light_intervals(light))
    return bd


def recorded_cycles(
    rp: RankPhases,
    cycles: pl.DataFrame,
    light: RankPhases | None = None,
    light_bd: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Every cycle the rank recorded (RECORDED_COLUMNS), from its cycle frame `cycles`.

    A full-mode rank's trace (`rp`) covers only the profiled window; its collector records
    (`light`: analyzers/phases.py `collector_phases`, light-mode timing; `light_bd` their
    `collector_breakdown` when already built) cover every cycle, `profiled` marking the
    window's."""
    if rp.approximate or light is None or light.tops.height == 0:
        return cycles.with_columns(pl.lit(not rp.approximate).alias("profiled")).select(
            RECORDED_COLUMNS
        )
    bd = light_bd if light_bd is not None else collector_breakdown(light)
    assert bd is not None  # light has top-level phases
    every = cycle_frame(bd, light.cycles, outside_cycles(light))
    window = cycles["cycle"].unique().to_list()
    return every.with_columns(pl.col("cycle").is_in(window).alias("profiled")).select(
        RECORDED_COLUMNS
    )


def outside_cycles(rp: RankPhases) -> pl.DataFrame:
    """Start times of the rank's top-level phase instances that belong to no cycle (a new
    request's prefill, a phase the cycle rule does not count): the work that makes a gap
    between two cycles part of neither."""
    starts: pl.DataFrame = rp.instances.filter(
        (pl.col("depth") == 0) & (pl.col("cycle") < 0)
    ).select(pl.col("start_ns").alias("_os"))
    return starts


def cycle_frame(
    bd: pl.DataFrame, cycles: pl.DataFrame, outside: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Per (rank, cycle) of one rank: wall_ns (sum of its phases), device_end_ns, span_ns:
    from the previous cycle's device end (first cycle: its CPU start) to its own device end,
    and time_ns: span_ns less the gap between cycles (from the later of the previous cycle's
    CPU end and device end to this cycle's CPU start) when the host ran work of no cycle in it
    (`outside`: start_ns of such instances, as `_os`) or the gap is longer than the rank's
    median cycle span; the cycle time of docs/DEFINITIONS.md. A shorter gap with no such work
    (the decode loop's own bookkeeping between two phases: sampling, stopping checks) is the
    cycles' time and stays in it. `seq_start`: work of no cycle ran in the gap before the cycle
    (a new request's prefill), so a new sequence starts with it (the steady state's rule 3)."""
    per = bd.group_by("rank", "cycle").agg(
        pl.col("wall_ns").sum(),
        pl.col("device_end_ns").max(),
        pl.col("approximate").any(),
        pl.len().alias("phases"),
        pl.col("gpu_timed").all().alias("gpu_timed"),  # null when every row's is null
    )
    cyc = (
        cycles.select(
            "rank",
            "cycle",
            pl.col("start_ns").alias("cpu_start_ns"),
            pl.col("end_ns").alias("_cpu_end"),
            "accept_len",
        )
        .unique(["rank", "cycle"], keep="first")
        .join(per, on=["rank", "cycle"], how="inner")
        .sort("cycle")
    )
    prev = pl.col("device_end_ns").shift(1)
    span = pl.col("device_end_ns") - prev.fill_null(pl.col("cpu_start_ns"))
    # between cycles: the host ran no cycle and the device had no cycle's work, and the host
    # ran work of no cycle there (a new request's prefill): part of no cycle's time
    gap_start = pl.max_horizontal(prev, pl.col("_cpu_end").shift(1))
    cyc = cyc.with_columns(gap_start.alias("_gs"))
    if outside is not None and outside.height:
        cyc = cyc.join_asof(
            outside.sort("_os"), left_on="cpu_start_ns", right_on="_os", strategy="backward"
        )
        foreign = pl.col("_os").is_not_null() & (pl.col("_os") >= pl.col("_gs"))
    else:
        cyc = cyc.with_columns(pl.lit(None, dtype=pl.Int64).alias("_os"))
        foreign = pl.lit(False)
    # ... or a pause longer than the rank's median cycle span (torch.profiler starting or
    # stopping, a request arriving): no decode loop's own bookkeeping takes a whole cycle
    raw_gap = pl.col("cpu_start_ns") - pl.col("_gs")
    long = raw_gap > span.median()
    gap = pl.when(foreign | long).then(raw_gap).otherwise(0)
    return cyc.with_columns(
        span.alias("span_ns"),
        # the cycle time of summary, breakeven and the steady state (docs/DEFINITIONS.md)
        (span - gap.clip(lower_bound=0).fill_null(0)).fill_null(0).alias("time_ns"),
        # a new sequence (request) starts here: work of no cycle (its prefill) ran just before
        foreign.fill_null(False).alias("seq_start"),
    ).drop("_cpu_end", "_gs", "_os")
