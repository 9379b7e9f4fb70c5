"""Device intervals of a rank, each with the phase instance it belongs to (its `inst`).

Exact mode (the rank's events table has phase ranges): a GPU activity belongs to the phase
instance whose CPU range on the launching thread contains its launching runtime call (matched by
correlation id), which covers every kernel of a graph launch. On CPU-only ranks the device
timeline is the rank's top-level CPU ops (and gloo's worker ranges), attributed by start time.
Light mode (the collector's `phases` records only): the phase's CUDA-event span (CPU clocks when
there is no GPU), allreduce sub-phases being the allreduce part.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tracekit.analyzers._load import GPU_CATS, RUNTIME_CATS, RankInputs
from tracekit.analyzers.allreduce import ImplTable, implementation_labels
from tracekit.analyzers.graphs import GRAPH_LAUNCH
from tracekit.analyzers.phases import RankPhases

INTERVAL_COLUMNS = ["start_ns", "end_ns", "inst", "comm", "graph", "kernel", "name", "label"]


def _labels(names: list[str], table: ImplTable, *, rocm: bool) -> pl.DataFrame:
    return pl.DataFrame(
        {"name": names, "label": [table.classify(n, rocm=rocm) for n in names]},
        schema={"name": pl.String, "label": pl.String},
    )


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


def _exact(
    frame: pl.DataFrame, rp: RankPhases, table: ImplTable
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(intervals, per-instance extras: graph_launches, allreduce_impl) from the events."""
    events = frame.lazy()
    top = rp.tops
    gpu = (
        events.filter(pl.col("cat").is_in(GPU_CATS) & (pl.col("ph") == "X"))
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
        events.filter(pl.col("cat").is_in(RUNTIME_CATS))
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


def _cpu_ranges(events: pl.LazyFrame, cat: str) -> pl.LazyFrame:
    """The complete (`ph: X`) events of category `cat` as name, pid, tid, start_ns, end_ns."""
    return events.filter((pl.col("cat") == cat) & (pl.col("ph") == "X")).select(
        pl.col("name").cast(pl.String),
        "pid",
        "tid",
        "start_ns",
        (pl.col("start_ns") + pl.col("dur_ns")).alias("end_ns"),
    )


def _cpu_intervals(
    events: pl.LazyFrame, top: pl.DataFrame, table: ImplTable
) -> tuple[pl.DataFrame, pl.DataFrame]:
    ops = (
        _cpu_ranges(events, "cpu_op")
        .sort(["pid", "tid", "start_ns", "end_ns"], descending=[False, False, False, True])
        .with_columns(pl.col("end_ns").cum_max().shift(1).over("pid", "tid").alias("_prev"))
        .filter(pl.col("_prev").is_null() | (pl.col("start_ns") >= pl.col("_prev")))
        .drop("_prev")
        .collect()
    )
    ann = _cpu_ranges(events, "user_annotation").collect()
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
    impl = implementation_labels(intervals)
    extras = graph_launches.join(impl, on="inst", how="full", coalesce=True)
    cols = intervals.with_columns(
        pl.col("inst").cast(pl.Int64), pl.col("label").cast(pl.String)
    ).select(INTERVAL_COLUMNS)
    return cols, extras


def light_intervals(rp: RankPhases) -> tuple[pl.DataFrame, pl.DataFrame]:
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
    inputs: RankInputs, rp: RankPhases, table: ImplTable
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(device intervals with their instance, per-instance graph launches and allreduce impl).

    Interval columns: INTERVAL_COLUMNS (`inst` null for work of no instance)."""
    if rp.approximate:
        return light_intervals(rp)
    assert inputs.events is not None  # annotation phases come only from a rank's events
    return _exact(inputs.events, rp, table)


def collective_rows(rp: RankPhases, intervals: pl.DataFrame) -> pl.DataFrame:
    """The rank's communication activities in order within each phase instance: rank, cycle,
    phase, k (0, 1, ... in start order), dur_ns (the activity's own duration)."""
    top = rp.tops.select("inst", "rank", "cycle", "phase")
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
