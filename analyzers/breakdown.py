"""Breakdown of every phase instance: forward, allreduce and overhead on the device timeline.

Exact mode (the rank's events table has phase ranges): a GPU activity belongs to the phase
instance whose CPU range on the launching thread contains its launching runtime call (matched by
correlation id), which covers every kernel of a graph launch. On CPU-only ranks the device
timeline is the rank's top-level CPU ops (and gloo's worker ranges), attributed by start time.
Light mode (the collector's `phases` records only): the phase's CUDA-event span (CPU clocks when
there is no GPU), allreduce sub-phases being the allreduce part; rows marked `approximate`.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np
import polars as pl

from tracekit.analyzers import _load
from tracekit.analyzers.allreduce import ImplTable
from tracekit.analyzers.graphs import GRAPH_LAUNCH
from tracekit.analyzers.phases import RankPhases, _from_collector
from tracekit.analyzers.timeline import split

BREAKDOWN_COLUMNS = [
    "rank",
    "cycle",
    "phase",
    "start_ns",
    "wall_ns",
    "forward_ns",
    "allreduce_ns",
    "overhead_ns",
    "graph_replayed",
    "graph_kernel_frac",
    "allreduce_impl",
    "kernels",
    "approximate",
    "accept_len",
    "end_ns",
    "cpu_ns",
    "unattributed_ns",
    "graph_launches",
    "device_end_ns",
    "gpu_timed",
    "inst",  # the instance id (analyzers/model.py); not among the CLI's fields
]


def _labels(names: list[str], table: ImplTable, *, rocm: bool) -> pl.DataFrame:
    return pl.DataFrame(
        {"name": names, "label": [table.classify(n, rocm=rocm) for n in names]},
        schema={"name": pl.String, "label": pl.String},
    )


def _top(rp: RankPhases) -> pl.DataFrame:
    top: pl.DataFrame = rp.instances.filter((pl.col("depth") == 0) & (pl.col("cycle") >= 0))
    return top


def _window_start(rp: RankPhases) -> int:
    top = _top(rp)
    starts = [v for v in (rp.cycles["start_ns"].min(), top["start_ns"].min()) if v is not None]
    return min(int(cast("int", v)) for v in starts) if starts else 0


def _attribute_by_thread(launches: pl.DataFrame, top: pl.DataFrame) -> pl.DataFrame:
    """Add `inst`: the top-level instance on the same (pid, tid) whose range contains `ts`."""
    ranges = top.select(
        pl.col("pid").cast(pl.Int64),
        pl.col("tid").cast(pl.Int64),
        pl.col("start_ns").alias("_is"),
        pl.col("end_ns").alias("_ie"),
        pl.col("inst").alias("_inst"),
    ).sort("_is")
    joined = launches.with_columns(pl.col("pid").cast(pl.Int64), pl.col("tid").cast(pl.Int64))
    joined = joined.sort("ts").join_asof(
        ranges,
        left_on="ts",
        right_on="_is",
        by=["pid", "tid"],
        strategy="backward",
        check_sortedness=False,  # sorted by time; polars cannot check it per group
    )
    inside = pl.col("_inst").is_not_null() & (pl.col("ts") <= pl.col("_ie"))
    return joined.with_columns(pl.when(inside).then(pl.col("_inst")).alias("inst")).drop(
        "_is", "_ie", "_inst"
    )


def _attribute_by_time(rows: pl.DataFrame, top: pl.DataFrame) -> pl.DataFrame:
    ranges = top.select(
        pl.col("start_ns").alias("_is"),
        pl.col("end_ns").alias("_ie"),
        pl.col("inst").alias("_inst"),
    ).sort("_is")
    joined = rows.sort("start_ns").join_asof(ranges, left_on="start_ns", right_on="_is")
    inside = pl.col("_inst").is_not_null() & (pl.col("start_ns") < pl.col("_ie"))
    return joined.with_columns(pl.when(inside).then(pl.col("_inst")).alias("inst")).drop(
        "_is", "_ie", "_inst"
    )


def _exact(run_dir: Path, rp: RankPhases, table: ImplTable) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(split per instance, per-instance extras: graph_launches, allreduce_impl)."""
    events = _load.scan_events(run_dir, rp.rank)
    assert events is not None  # exact mode is chosen only when the rank has events
    top = _top(rp)
    gpu = (
        events.filter(pl.col("cat").is_in(_load.GPU_CATS) & (pl.col("ph") == "X"))
        .select(
            "name",  # still categorical: names are classified once each, not once a row
            (pl.col("cat") == "kernel").alias("kernel"),
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
            "correlation",
            pl.col("graph_launched").fill_null(False),
        )
        .collect()
    )
    runtime = (
        events.filter(pl.col("cat").is_in(_load.RUNTIME_CATS))
        .select("name", "pid", "tid", pl.col("start_ns").alias("ts"), "correlation")
        .collect()
    )
    if gpu.height == 0:
        return _cpu_intervals(events, top, table)
    runtime_names = runtime["name"].unique().cast(pl.String)
    rocm = bool(runtime_names.str.starts_with("hip").any())
    graph_names = runtime_names.filter(runtime_names.str.contains(GRAPH_LAUNCH)).to_list()
    launches = _attribute_by_thread(runtime, top)
    is_graph = pl.col("name").is_in(graph_names)
    graph_launches = (
        launches.filter(is_graph & pl.col("inst").is_not_null())
        .group_by("inst")
        .agg(pl.len().cast(pl.Int64).alias("graph_launches"))
    )
    graph_corr = launches.filter(is_graph).select("correlation").unique()
    by_corr = launches.filter(pl.col("correlation").is_not_null()).select("correlation", "inst")
    if by_corr["correlation"].n_unique() < by_corr.height:  # cheaper than `unique` when none repeat
        by_corr = by_corr.unique("correlation", keep="first")
    names = gpu["name"].unique()
    labels = _labels(names.cast(pl.String).to_list(), table, rocm=rocm).with_columns(
        pl.col("name").cast(names.dtype)
    )
    intervals = (
        gpu.with_columns(_inst_by_correlation(gpu["correlation"], by_corr))
        .join(labels, on="name", how="left")
        .join(graph_corr.with_columns(pl.lit(True).alias("_g")), on="correlation", how="left")
        .with_columns(
            pl.col("label").is_not_null().alias("comm"),
            (pl.col("graph_launched") | pl.col("_g").fill_null(False)).alias("graph"),
        )
    )
    return _finish_intervals(intervals, rp, graph_launches)


def _inst_by_correlation(corr: pl.Series, by_corr: pl.DataFrame) -> pl.Series:
    """`inst` of the launch with each correlation id (null where none): the left join of
    `corr` on by_corr's unique `correlation`, as a binary search over the sorted ids (several
    times cheaper than polars' hash join at a rank's 10^5 to 10^6 rows)."""
    keys = by_corr["correlation"].to_numpy()
    vals = by_corr["inst"].fill_null(-1).to_numpy()
    if len(keys) > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        order = np.argsort(keys, kind="stable")
        keys, vals = keys[order], vals[order]
    q = corr.fill_null(0).to_numpy()
    if len(keys) == 0:
        return pl.Series("inst", [None] * len(q), dtype=pl.Int64)
    pos = np.minimum(np.searchsorted(keys, q), len(keys) - 1)
    hit = (keys[pos] == q) & ~corr.is_null().to_numpy()
    inst = np.where(hit, vals[pos], -1)
    return pl.Series("inst", inst, dtype=pl.Int64).set(pl.Series(inst < 0), None)


def _cpu_intervals(
    events: pl.LazyFrame, top: pl.DataFrame, table: ImplTable
) -> tuple[pl.DataFrame, pl.DataFrame]:
    ops = (
        events.filter((pl.col("cat") == "cpu_op") & (pl.col("ph") == "X"))
        .select(
            pl.col("name").cast(pl.String),
            "pid",
            "tid",
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        )
        .sort(["pid", "tid", "start_ns", "end_ns"], descending=[False, False, False, True])
        .with_columns(pl.col("end_ns").cum_max().shift(1).over("pid", "tid").alias("_prev"))
        .filter(pl.col("_prev").is_null() | (pl.col("start_ns") >= pl.col("_prev")))
        .drop("_prev")
        .collect()
    )
    ann = (
        events.filter((pl.col("cat") == "user_annotation") & (pl.col("ph") == "X"))
        .select(
            pl.col("name").cast(pl.String),
            "pid",
            "tid",
            "start_ns",
            (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
        )
        .collect()
    )
    names = sorted(set(ops["name"].unique().to_list()) | set(ann["name"].unique().to_list()))
    labels = _labels(names, table, rocm=False)
    ann = ann.join(labels, on="name", how="inner").filter(
        pl.col("label").is_not_null() & ~pl.col("name").str.starts_with("tracekit/")
    )
    rows = pl.concat([ops.join(labels, on="name", how="left"), ann], how="vertical_relaxed")
    rows = _attribute_by_time(rows, top).with_columns(
        pl.col("label").is_not_null().alias("comm"),
        pl.lit(False).alias("graph"),
        pl.lit(True).alias("kernel"),
    )
    empty = pl.DataFrame(schema={"inst": pl.Int64, "graph_launches": pl.Int64})
    return _finish_intervals(rows, None, empty)


def _finish_intervals(
    intervals: pl.DataFrame, rp: RankPhases | None, graph_launches: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    # `combine_labels` of each instance's labels, as one polars expression (no Python call a
    # row): distinct non-empty labels sorted, `c10d` dropped beside a more specific one
    label = pl.col("label").cast(pl.String)
    labels = pl.col("_labels")
    specific = labels.list.eval(pl.element().filter(pl.element() != "c10d"))
    impl = (
        intervals.filter(pl.col("comm") & pl.col("inst").is_not_null())
        .group_by("inst")
        .agg(label.filter(label.is_not_null() & (label != "")).unique().sort().alias("_labels"))
        .with_columns(
            pl.when(labels.list.len() > 1).then(specific).otherwise(labels).alias("_labels")
        )
        .with_columns(
            pl.when(labels.list.len() > 0)
            .then(labels.list.join("+"))
            .otherwise(pl.lit(None, dtype=pl.String))
            .alias("allreduce_impl")
        )
        .drop("_labels")
    )
    extras = graph_launches.join(impl, on="inst", how="full", coalesce=True)
    cols = intervals.select(
        "start_ns",
        "end_ns",
        pl.col("inst").cast(pl.Int64),
        "comm",
        "graph",
        "kernel",
        "name",
        pl.col("label").cast(pl.String),
    )
    return cols, extras


def _light(rp: RankPhases) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Pieces of each top-level phase's span: allreduce sub-phases, the rest forward."""
    inst = rp.instances
    has_gpu = pl.col("gpu_start_ns").is_not_null() & pl.col("gpu_end_ns").is_not_null()
    spans = inst.with_columns(
        pl.when(has_gpu).then(pl.col("gpu_start_ns")).otherwise(pl.col("start_ns")).alias("_s"),
        pl.when(has_gpu).then(pl.col("gpu_end_ns")).otherwise(pl.col("end_ns")).alias("_e"),
    )
    tops = spans.filter((pl.col("depth") == 0) & (pl.col("cycle") >= 0))
    subs = spans.filter((pl.col("depth") > 0) & (pl.col("phase") == "allreduce"))
    sub_by_top: dict[int, list[tuple[int, int]]] = {}
    for t, s, e in subs.select("top", "_s", "_e").iter_rows():
        sub_by_top.setdefault(t, []).append((s, e))
    rows: list[tuple[int, int, int, bool]] = []
    for i, phase, s, e in tops.select("inst", "phase", "_s", "_e").iter_rows():
        if phase == "allreduce":
            rows.append((s, e, i, True))
            continue
        cursor = s
        for cs, ce in sorted(sub_by_top.get(i, [])):
            cs, ce = max(cs, cursor), min(ce, e)
            if ce <= cs:
                continue
            if cs > cursor:
                rows.append((cursor, cs, i, False))
            rows.append((cs, ce, i, True))
            cursor = ce
        if e > cursor:
            rows.append((cursor, e, i, False))
    intervals = pl.DataFrame(
        rows,
        schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "inst": pl.Int64, "comm": pl.Boolean},
        orient="row",
    ).with_columns(
        pl.lit(False).alias("graph"),
        pl.lit(False).alias("kernel"),
        pl.lit(None, dtype=pl.String).alias("name"),
        pl.lit(None, dtype=pl.String).alias("label"),
    )
    replays = spans.group_by("top").agg(pl.col("graph_replays").fill_null(0).sum().alias("_r"))
    extras = replays.select(
        pl.col("top").alias("inst"),
        pl.col("_r").cast(pl.Int64).alias("graph_launches"),
        pl.lit(None, dtype=pl.String).alias("allreduce_impl"),
    )
    return intervals, extras


def rank_intervals(
    run_dir: Path, rp: RankPhases, table: ImplTable
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(device intervals with their instance, per-instance graph launches and allreduce impl).

    Interval columns: start_ns, end_ns, inst, comm, graph, kernel, name, label."""
    return _light(rp) if rp.approximate else _exact(run_dir, rp, table)


def rank_breakdown(
    run_dir: Path,
    rp: RankPhases,
    table: ImplTable,
    intervals: tuple[pl.DataFrame, pl.DataFrame] | None = None,
) -> pl.DataFrame:
    """Breakdown rows (BREAKDOWN_COLUMNS) of one rank's top-level phase instances."""
    top = _top(rp)
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
    ivals, extras = intervals or rank_intervals(run_dir, rp, table)
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
    )
    return out.select(BREAKDOWN_COLUMNS).sort("start_ns")


def _empty_breakdown() -> pl.DataFrame:
    schema = {
        "rank": pl.Int32,
        "cycle": pl.Int64,
        "phase": pl.String,
        "graph_replayed": pl.Boolean,
        "approximate": pl.Boolean,
        "allreduce_impl": pl.String,
        "accept_len": pl.Float64,
        "graph_kernel_frac": pl.Float64,
        "gpu_timed": pl.Boolean,
    }
    return pl.DataFrame(schema={c: schema.get(c, pl.Int64) for c in BREAKDOWN_COLUMNS})


RECORDED_COLUMNS = ["rank", "cycle", "time_ns", "wall_ns", "accept_len", "profiled"]


def recorded_cycles(
    run_dir: Path, rp: RankPhases, table: ImplTable, cycles: pl.DataFrame
) -> pl.DataFrame:
    """Every cycle the rank recorded (RECORDED_COLUMNS). A full-mode rank's trace covers only
    the profiled window; its collector records (light-mode timing) cover every cycle."""
    own = cycles.select(
        "rank",
        "cycle",
        "time_ns",
        "wall_ns",
        "accept_len",
        pl.lit(not rp.approximate).alias("profiled"),
    )
    if rp.approximate:
        return own
    records = _load.read_rank_table(run_dir, "phases", rp.rank)
    if records is None or records.height == 0:
        return own
    light = _from_collector(records, _load.read_rank_table(run_dir, "cycles", rp.rank), rp.rank)
    if _top(light).height == 0:
        return own
    all_cycles = cycle_frame(
        rank_breakdown(run_dir, light, table), light.cycles, outside_cycles(light)
    )
    window = set(own["cycle"].to_list())
    return all_cycles.select(
        "rank",
        "cycle",
        "time_ns",
        "wall_ns",
        "accept_len",
        pl.col("cycle").is_in(list(window)).alias("profiled"),
    )


def collective_rows(rp: RankPhases, intervals: pl.DataFrame) -> pl.DataFrame:
    """The rank's communication activities in order within each phase instance: rank, cycle,
    phase, k (0, 1, ... in start order), dur_ns (the activity's own duration)."""
    top = _top(rp).select("inst", "rank", "cycle", "phase")
    rows: pl.DataFrame = (
        intervals.filter(pl.col("comm") & pl.col("inst").is_not_null())
        .join(top, on="inst", how="inner")
        .sort("start_ns")
        .with_columns(pl.int_range(pl.len()).over("rank", "cycle", "phase").alias("k"))
        .select(
            pl.col("rank").cast(pl.Int32),
            pl.col("cycle").cast(pl.Int64),
            pl.col("phase").cast(pl.String),
            pl.col("k").cast(pl.Int64),
            (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"),
        )
    )
    return rows


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
    cycles' time and stays in it."""
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
    ).drop("_cpu_end", "_gs", "_os")
