"""Rendering of the report's plotted sections from the model: per-cycle components,
distributions, rank skew (table and heatmap), NVML series and the break-even curve."""

from __future__ import annotations

from typing import Any

from tracekit.report.html_blocks import Rendered, cycle_axis, figure, fmt, plot_text, rnd, table
from tracekit.report.section_data import (
    COMPONENTS,
    BreakevenCurve,
    Distributions,
    Nvml,
    OverTime,
    Skew,
)

COLORS = {"forward": "#4C78A8", "allreduce": "#F58518", "overhead": "#B8B8B8"}


def over_time(o: OverTime) -> Rendered:
    figures: list[dict[str, Any]] = []
    for p in o.phases:
        data = [
            {
                "type": "bar",
                "name": c,
                "x": p.cycles,
                "y": rnd(p.ms[c]),
                "marker": {"color": COLORS[c]},
                "hovertemplate": f"cycle %{{x}}<br>{c} %{{y:.3f}} ms<extra></extra>",
            }
            for c in COMPONENTS
        ]
        layout = {
            "barmode": "stack",
            "bargap": 0.05,
            "xaxis": cycle_axis(p.cycles),
            "yaxis": {"title": {"text": "ms"}},
            "height": 280,
        }
        figures.append(
            figure(f"fig-over-time-{len(figures)}", f"{p.phase}: ms per cycle", data, layout)
        )
    return Rendered(figures=figures)


def distributions(d: Distributions) -> Rendered:
    data = [
        {
            "type": "box",
            "name": plot_text(p.phase),
            "x": [f"rank {r}" for r in p.ranks],
            "y": rnd(p.wall_ms),
            "boxpoints": False,
        }
        for p in d.phases
    ]
    layout = {"boxmode": "group", "yaxis": {"title": {"text": "ms"}}, "height": 320}
    return Rendered(
        figures=[figure("fig-distributions", "phase wall time (ms) by rank", data, layout)]
    )


SKEW_HEADERS = [
    "phase",
    "cycles",
    "spread p50 µs",
    "spread p90 µs",
    "max allreduce wait p50 µs",
    "slowest rank most often",
]


def skew(s: Skew) -> Rendered:
    z = [[None if v is None else round(v, 1) for v in row] for row in s.lag_us]
    heat = {
        "type": "heatmap",
        "x": s.cycles,
        "y": [f"rank {r}" for r in s.ranks],
        "z": z,
        "colorscale": "Viridis",
        "colorbar": {"title": {"text": "µs"}},
        "hovertemplate": "%{y}, cycle %{x}: %{z} µs<extra></extra>",
    }
    layout = {"xaxis": cycle_axis(s.cycles), "height": 140 + 26 * len(s.ranks)}
    fig = figure(
        "fig-skew", "work beyond the least-loaded rank (µs), by rank and cycle", [heat], layout
    )
    rows: list[list[object]] = [
        [
            p.phase,
            fmt(p.cycles),
            fmt(p.spread_us_p50, 1),
            fmt(p.spread_us_p90, 1),
            fmt(p.wait_us_p50, 1),
            "n/a"
            if p.slowest_rank is None or p.slowest_frac is None
            else f"rank {p.slowest_rank} ({100 * p.slowest_frac:.0f} % of cycles)",
        ]
        for p in s.phases
    ]
    return Rendered(body=table(SKEW_HEADERS, rows, numeric={1, 2, 3, 4}), figures=[fig])


def nvml(n: Nvml) -> Rendered:
    figures: list[dict[str, Any]] = []
    for g in n.groups:
        data = [
            {
                "type": "scatter",
                "mode": "lines",
                "name": plot_text(f"rank {s.rank} GPU {s.gpu} {s.metric}"),
                "x": rnd(s.seconds, 4),
                "y": rnd(s.values, 2),
            }
            for s in g.series
        ]
        layout = {
            "xaxis": {"title": {"text": "seconds since first sample"}},
            "yaxis": {"title": {"text": g.unit}},
            "height": 260,
        }
        figures.append(figure(f"fig-nvml-{g.group}", f"{g.group} ({g.unit})", data, layout))
    intro = (
        f"Series longer than {n.max_points} samples are thinned evenly for the plot."
        if n.thinned
        else ""
    )
    return Rendered(intro=intro, figures=figures)


def breakeven(c: BreakevenCurve) -> Rendered:
    be = c.point
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "speedup = L x baseline / cycle",
            "x": c.accept_len,
            "y": rnd(c.speedup, 4),
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "no speedup",
            "x": [1, c.top],
            "y": [1, 1],
            "line": {"dash": "dot", "color": "#888"},
        },
    ]
    if be.accept_len is not None and be.speedup is not None:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "measured",
                "x": [round(be.accept_len, 3)],
                "y": [round(be.speedup, 3)],
                "marker": {"size": 12, "color": "#E45756"},
            }
        )
    intro = (
        f"Cycle {be.cycle_ms:.3f} ms, plain decode step {be.baseline_ms:.3f} ms: speculation pays off above an acceptance length of "
        f"{be.breakeven_accept_len:.2f}."
    )
    layout = {
        "xaxis": {"title": {"text": "acceptance length (tokens per cycle)"}},
        "yaxis": {"title": {"text": "speedup"}},
        "height": 320,
    }
    fig = figure("fig-breakeven", "speedup vs acceptance length", data, layout)
    return Rendered(intro=intro, figures=[fig])
