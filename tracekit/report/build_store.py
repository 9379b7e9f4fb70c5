"""The report's sections read from the store and side inputs rather than from the analysis:
NVML counters, the manifest, the break-even curve and the acceptance sweep."""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from tracekit.analyzers.sweep import Sweep
from tracekit.report.section_data import (
    Breakeven,
    BreakevenCurve,
    Manifest,
    ManifestRow,
    Nvml,
    NvmlGroup,
    NvmlSeries,
    Section,
)
from tracekit.store import reader

MAX_POINTS = 1500  # per NVML series; longer series are thinned evenly (said in the plot)
NVML_GROUPS = (
    ("clocks", "MHz", ("sm_clock_mhz", "mem_clock_mhz")),
    ("power", "W", ("power_w",)),
    ("temperature", "°C", ("temperature_c",)),
)
CURVE_POINTS = 101
# (section, key) pairs whose values differ between ranks by nature
PER_RANK_KEYS = {
    ("distributed", "rank"),
    ("env", "RANK"),
    ("env", "LOCAL_RANK"),
    ("env", "GROUP_RANK"),
    ("env", "ROLE_RANK"),
    ("env", "CUDA_VISIBLE_DEVICES"),
    ("process", "pid"),
    ("process", "local_rank"),
    ("process", "rank"),
    ("device", "index"),
    ("device", "uuid"),
}


def nvml(run_dir: Path, max_points: int = MAX_POINTS) -> Section:
    """Every (rank, GPU, metric) series of the counters table, thinned to `max_points`."""
    title = "GPU clocks, power and temperature (NVML)"
    if not reader.has_table(run_dir, "counters"):
        return Section(
            "nvml",
            title,
            unavailable="no NVML samples in this run (CPU run, or NVML unavailable where it ran)",
        )
    cnt = (
        reader.read_table(run_dir, "counters")
        .with_columns(pl.col("metric").cast(pl.String))
        .sort("rank", "gpu", "metric", "ts_ns")
    )
    t0 = int(cnt["ts_ns"].min())  # type: ignore[arg-type]
    thinned = False
    groups = []
    for group, unit, metrics in NVML_GROUPS:
        series = []
        sel = cnt.filter(pl.col("metric").is_in(list(metrics)))
        for (rank, gpu, metric), rows in sorted(
            sel.partition_by("rank", "gpu", "metric", as_dict=True, maintain_order=True).items()
        ):
            if rows.height > max_points:
                rows = rows.gather_every(math.ceil(rows.height / max_points))
                thinned = True
            series.append(
                NvmlSeries(
                    rank=int(rank),
                    gpu=int(gpu),
                    metric=str(metric),
                    seconds=((rows["ts_ns"] - t0) / 1e9).to_list(),
                    values=rows["value"].to_list(),
                )
            )
        if series:
            groups.append(NvmlGroup(group, unit, series))
    return Section("nvml", title, Nvml(groups, thinned, max_points))


def breakeven_curve(be: Breakeven | str) -> Section:
    """speedup = L x baseline step / cycle for L from 1 to past the break-even and measured L."""
    title = "Break-even: speedup against acceptance length"
    if isinstance(be, str):
        return Section("breakeven", title, unavailable=be or "unavailable")
    top = max(8.0, math.ceil((be.accept_len or 1) + 2), math.ceil(be.breakeven_accept_len + 1))
    n = CURVE_POINTS - 1
    xs = [round(1 + i * (top - 1) / n, 3) for i in range(CURVE_POINTS)]
    ys = [x * be.baseline_ms / be.cycle_ms for x in xs]
    return Section("breakeven", title, BreakevenCurve(be, xs, ys, top))


def sweep(path: Path) -> Section:
    """The acceptance sweep `tracekit sweep` wrote (its directory or sweep.json)."""
    from tracekit.analyzers.sweep import load_sweep

    return sweep_section(load_sweep(path))


def sweep_section(data: Sweep) -> Section:
    title = "Acceptance sweep: measured tokens/s and cycle cost"
    if not data.sorted_points():
        return Section(
            "sweep",
            title,
            unavailable="no point of the sweep has both a measured acceptance and tokens/s",
        )
    return Section("sweep", title, data)


def manifest(run_dir: Path) -> Section:
    """Every (section, key) with each rank's value; those that differ between ranks first."""
    title = "Manifest"
    if not reader.has_table(run_dir, "manifests"):
        return Section("manifest", title, unavailable="no manifests table in this run")
    man = reader.read_table(run_dir, "manifests")
    ranks = sorted(man["rank"].unique().to_list())
    values: dict[tuple[str, str], dict[int, str]] = {}
    for rank, section, key, value in (
        man.select("rank", "section", "key", "value").sort("section", "key", "rank").iter_rows()
    ):
        values.setdefault((str(section), str(key)), {})[int(rank)] = (
            "" if value is None else str(value)
        )
    differ, per_rank, same = [], [], []
    for (section, key), per in sorted(values.items()):
        row = ManifestRow(section, key, [per.get(r) for r in ranks])
        if len(set(row.values)) <= 1:
            same.append(row)
        elif (section, key) in PER_RANK_KEYS or section == "trace":
            per_rank.append(row)
        else:
            differ.append(row)
    return Section("manifest", title, Manifest(ranks, differ, per_rank, same))
