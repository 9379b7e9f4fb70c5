"""Temporal breakdown per rank: idle / compute / non-compute GPU time, HTA 0.5.0's definitions.

Definitions (docs/DEFINITIONS.md, "Temporal breakdown"):

- GPU events: every complete event that runs on a device stream (kernels, memcpy, memset,
  stream syncs), i.e. HTA's rows with `args.stream`; `gpu_user_annotation` spans are not work.
- Step filtering (HTA's `_filter_irrelevant_gpu_kernels`): when the run has two or more distinct
  `ProfilerStep#N` names, each rank keeps only the host events that start before the start of
  its last `ProfilerStep`, and the GPU events whose correlation id is one of theirs.
- span = end of the last merged GPU interval - start of the first; idle = span - |union of all
  GPU intervals|; compute = |union of COMPUTATION kernels| (HTA 0.5.0's name regexes);
  non_compute = span - compute - idle. Percentages are of the span, rounded to 2 decimals.

tracekit keeps nanoseconds; `hta_rounding=True` reproduces HTA's whole-µs rounding
(`ts = ceil(ts)`, `end = floor(ts + dur)` in float µs, on traces with fractional µs).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.store.reader import has_table, read_table, scan_table

if TYPE_CHECKING:
    import polars as pl

# HTA 0.5.0 hta/utils/utils.py (re.match, i.e. anchored at the start).
HTA_COMM_RE = re.compile(r"^nccl.*Kernel")
HTA_MEMORY_RE = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
HTA_NOT_COMPUTE_RE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
HTA_SYNC_NAMES = ("Event Sync", "Context Sync")
NOT_WORK_CATS = ("gpu_user_annotation",)

COLUMNS = [
    "rank",
    "idle_us",
    "compute_us",
    "non_compute_us",
    "span_us",
    "idle_pct",
    "compute_pct",
    "non_compute_pct",
    "gpu_events",
    "step_filtered",
]


def hta_kernel_type(name: str) -> str:
    """HTA 0.5.0 `get_kernel_type`: COMMUNICATION, MEMORY, COMPUTATION or OTHER."""
    if HTA_COMM_RE.match(name):
        return "COMMUNICATION"
    if HTA_MEMORY_RE.match(name):
        return "MEMORY"
    if not HTA_NOT_COMPUTE_RE.match(name):
        return "COMPUTATION"
    return "OTHER"


def merge_intervals(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """HTA's `merge_kernel_intervals`: sort by start, merge overlapping/touching-later runs.

    A new group starts where `start > max(previous ends)`; each group spans (min start, max end).
    """
    if len(start) == 0:
        return start, end
    order = np.argsort(start, kind="stable")
    s = start[order]
    e = end[order]
    prev_max = np.maximum.accumulate(e)[:-1]
    new_group = np.concatenate(([True], s[1:] > prev_max))
    group_id = np.cumsum(new_group) - 1
    n_groups = int(group_id[-1]) + 1
    g_start = s[new_group]
    g_end = np.full(n_groups, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(g_end, group_id, e)
    return g_start, g_end


def busy_stats(start: np.ndarray, end: np.ndarray) -> tuple[int, int]:
    """(span, union length) of the intervals, as HTA computes them."""
    gs, ge = merge_intervals(start, end)
    if len(gs) == 0:
        return 0, 0
    return int(ge[-1] - gs[0]), int(ge.sum() - gs.sum())


def _base_times(run_dir: Path) -> dict[int, int]:
    """rank -> baseTimeNanoseconds for traces with relative (fractional-µs) timestamps."""
    import polars as pl

    if not has_table(run_dir, "manifests"):
        return {}
    m = read_table(run_dir, "manifests").filter(
        (pl.col("section") == "trace") & (pl.col("key") == "base_time_ns")
    )
    return {int(r): int(v) for r, v in zip(m["rank"].to_list(), m["value"].to_list())}


def _hta_round(
    start_ns: np.ndarray, dur_ns: np.ndarray, base: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """HTA's `round_down_time_stamps` on µs floats: (ceil(ts), floor(ts + dur)) in ns."""
    if base is None:
        # Absolute integer-µs traces: pandas keeps int64 and HTA does not round. (Whole µs are
        # unchanged by the rounding anyway; fractional absolute µs are rounded in integers.)
        ts_us = -((-start_ns) // 1000)
        end_us = (start_ns + dur_ns) // 1000
        return ts_us * 1000, end_us * 1000
    ts_f = (start_ns - base).astype(np.float64) / 1000.0
    dur_f = dur_ns.astype(np.float64) / 1000.0
    ts_us = np.ceil(ts_f).astype(np.int64)
    end_us = np.floor(ts_f + dur_f).astype(np.int64)
    return ts_us * 1000 + base, end_us * 1000 + base


def temporal(run_dir: Path, *, hta_rounding: bool = False) -> pl.DataFrame:
    """One row a rank: DESIGN's temporal fields plus `gpu_events` and `step_filtered`."""
    import polars as pl

    run_dir = Path(run_dir)
    lf = scan_table(run_dir, "events")
    events = (
        lf.filter((pl.col("ph") == "X") & pl.col("cat").is_not_null() & (pl.col("cat") != "Trace"))
        .select("rank", "cat", "name", "start_ns", "dur_ns", "stream", "correlation")
        .collect()
    )
    names = events["name"].cast(pl.String)
    steps = sorted({n for n in names.unique().to_list() if n is not None and "ProfilerStep" in n})
    filtered = len(steps) >= 2
    bases = _base_times(run_dir) if hta_rounding else {}

    comp_names = {
        n for n in names.unique().to_list() if n is not None and hta_kernel_type(n) == "COMPUTATION"
    }
    events = events.with_columns(
        name=names,
        cat=pl.col("cat").cast(pl.String),
        # HTA's stream column: args.stream, -1 when absent; annotation spans are not GPU work.
        hta_stream=pl.when(pl.col("cat").cast(pl.String).is_in(NOT_WORK_CATS))
        .then(pl.lit(-1, dtype=pl.Int64))
        .otherwise(pl.col("stream").fill_null(-1)),
        hta_corr=pl.col("correlation").fill_null(-1),
    )

    rows: list[dict[str, Any]] = []
    for (rank,), df in sorted(events.partition_by("rank", as_dict=True).items()):
        start = df["start_ns"].to_numpy().astype(np.int64)
        dur = np.maximum(df["dur_ns"].to_numpy().astype(np.int64), 0)
        if hta_rounding:
            start, end = _hta_round(start, dur, bases.get(int(rank)))
        else:
            end = start + dur
        stream = df["hta_stream"].to_numpy()
        corr = df["hta_corr"].to_numpy()
        name_list = df["name"].to_list()
        keep = np.ones(len(df), dtype=bool)
        rank_filtered = False
        if filtered:
            is_sync = np.fromiter(
                (n in HTA_SYNC_NAMES for n in name_list), dtype=bool, count=len(df)
            )
            gpu_like = ((stream >= 0) & (corr >= 0)) | is_sync
            cpu = ~gpu_like
            is_step = np.fromiter(
                (n is not None and "ProfilerStep" in n for n in name_list),
                dtype=bool,
                count=len(df),
            ) & np.isin(np.array(name_list, dtype=object), steps)
            step_starts = start[cpu & is_step]
            if len(step_starts):
                last = step_starts.max()
                kept_cpu = cpu & (start < last)
                kept_gpu = gpu_like & np.isin(corr, np.unique(corr[kept_cpu]))
                keep = kept_cpu | kept_gpu
                rank_filtered = True
        gpu = keep & (stream != -1)
        gs, ge = start[gpu], end[gpu]
        span, busy = busy_stats(gs, ge)
        is_comp = np.fromiter((n in comp_names for n in name_list), dtype=bool, count=len(df))[gpu]
        _, compute = busy_stats(gs[is_comp], ge[is_comp])
        idle = span - busy
        rows.append(
            _row(
                int(rank), idle, compute, span - compute - idle, span, int(gpu.sum()), rank_filtered
            )
        )
    return (
        pl.DataFrame(rows, schema=_schema(), orient="row")
        if rows
        else pl.DataFrame(schema=_schema())
    )


def _row(
    rank: int, idle: int, compute: int, non_compute: int, span: int, n: int, filtered: bool
) -> dict[str, Any]:
    def pct(x: int) -> float | None:
        # As HTA: round(100 * (x / span), 2) with numpy's rounding.
        return float(np.round(100 * (x / span), 2)) if span else None

    return {
        "rank": rank,
        "idle_us": idle / 1000.0,
        "compute_us": compute / 1000.0,
        "non_compute_us": non_compute / 1000.0,
        "span_us": span / 1000.0,
        "idle_pct": pct(idle),
        "compute_pct": pct(compute),
        "non_compute_pct": pct(non_compute),
        "gpu_events": n,
        "step_filtered": filtered,
    }


def _schema() -> dict[str, Any]:
    import polars as pl

    return {
        "rank": pl.Int32,
        "idle_us": pl.Float64,
        "compute_us": pl.Float64,
        "non_compute_us": pl.Float64,
        "span_us": pl.Float64,
        "idle_pct": pl.Float64,
        "compute_pct": pl.Float64,
        "non_compute_pct": pl.Float64,
        "gpu_events": pl.Int64,
        "step_filtered": pl.Boolean,
    }
