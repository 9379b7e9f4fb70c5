"""The acceptance sweep in HTML: one report section, and the sweep's own page.

The sweep's model is the `tracekit.analyzers.sweep.Sweep` itself (plain data, already
computed); `render_sweep(sweep)` renders it as a section of the run report: a plotly chart of
measured tokens/s and tracekit's cycle time against the measured acceptance length, the
baseline's tokens/s as a line, the measured break-even marked, and a table of the points.
`write_sweep_page` renders that section alone with the report's renderer (same escaping, same
embedded plotly.js).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.analyzers.sweep import Sweep
from tracekit.report.html_blocks import Rendered, esc, fmt, rnd, table

TPS_COLOR = "#4C78A8"
CYCLE_COLOR = "#F58518"
BASE_COLOR = "#888888"
CROSS_COLOR = "#E45756"


def render_sweep(sweep: Sweep) -> Rendered:
    """The sweep's section (a sweep with at least one usable point: build_store.sweep_section)."""
    return Rendered(intro=_intro(sweep), body=_table(sweep), figures=[_figure(sweep)])


def _intro(sweep: Sweep) -> str:
    be = sweep.breakeven
    base = sweep.baseline
    parts = [
        f"{len(sweep.points)} runs with acceptance held by the {sweep.knob} knob"
        + (
            f", plus a plain-decoding baseline at {fmt(base.tokens_per_s, 1)} tokens/s."
            if base
            else "."
        )
    ]
    if be.status == "measured":
        parts.append(
            f"Measured break-even acceptance length: {be.accept_len:.2f} ({be.method}; {be.note})."
        )
    else:
        parts.append(f"Measured break-even: not in the measured range ({be.note}).")
    if sweep.model_breakeven_accept_len is not None:
        parts.append(
            f"The model's break-even (DEFINITIONS.md): {sweep.model_breakeven_accept_len:.2f}, "
            f"{sweep.model_breakeven_note}."
        )
    return " ".join(parts)


def _figure(sweep: Sweep) -> dict[str, Any]:
    points = sweep.sorted_points()
    xs = rnd([p.accept_len for p in points])
    labels = [f"held at {p.accept_target:g}" for p in points]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "tokens/s (measured)",
            "x": xs,
            "y": rnd([p.tokens_per_s for p in points], 3),
            "text": labels,
            "line": {"color": TPS_COLOR},
        },
        {
            "type": "scatter",
            "mode": "lines+markers",
            "name": "cycle ms (tracekit, mean)",
            "x": xs,
            "y": rnd([p.cycle_ms_mean for p in points], 4),
            "text": labels,
            "yaxis": "y2",
            "line": {"color": CYCLE_COLOR, "dash": "dash"},
        },
    ]
    lo, hi = min(x for x in xs if x is not None), max(x for x in xs if x is not None)
    base = sweep.baseline
    if base is not None and base.tokens_per_s is not None:
        data.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "baseline tokens/s (plain decoding)",
                "x": [lo, hi],
                "y": [round(base.tokens_per_s, 3)] * 2,
                "line": {"color": BASE_COLOR, "dash": "dot"},
            }
        )
        be = sweep.breakeven
        if be.status == "measured" and be.accept_len is not None:
            data.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"measured break-even {be.accept_len:.2f}",
                    "x": [round(be.accept_len, 4)],
                    "y": [round(base.tokens_per_s, 3)],
                    "marker": {"size": 14, "color": CROSS_COLOR, "symbol": "x"},
                }
            )
    return {
        "id": "fig-sweep",
        "title": "tokens/s and cycle time vs measured acceptance length",
        "data": data,
        "layout": {
            "xaxis": {"title": {"text": "acceptance length (measured, tokens per cycle)"}},
            "yaxis": {"title": {"text": "tokens/s"}, "rangemode": "tozero"},
            "yaxis2": {
                "title": {"text": "cycle ms"},
                "overlaying": "y",
                "side": "right",
                "rangemode": "tozero",
            },
            "legend": {"orientation": "h", "y": -0.25},
            "height": 380,
        },
    }


def _table(sweep: Sweep) -> str:
    rows: list[list[object]] = []
    for p in sorted(sweep.points, key=lambda p: p.accept_target):
        rows.append(
            [
                fmt(p.accept_target, 2),
                fmt(p.accept_len, 3),
                fmt(p.tokens_per_s, 1),
                p.tokens_per_s_source or "n/a",
                fmt(p.cycle_ms_mean, 3),
                fmt(p.cycle_ms_p50, 3),
                fmt(p.model_breakeven_accept_len, 2),
                p.run_dir,
            ]
        )
    base = sweep.baseline
    if base is not None:
        rows.append(
            [
                "baseline",
                "1",
                fmt(base.tokens_per_s, 1),
                base.tokens_per_s_source or "n/a",
                fmt(base.step_ms_mean, 3),
                fmt(base.step_ms_p50, 3),
                "",
                base.run_dir,
            ]
        )
    headers = [
        "held at",
        "measured accept",
        "tokens/s",
        "tokens/s from",
        "cycle ms mean",
        "cycle ms p50",
        "model break-even",
        "run",
    ]
    cmd = " ".join(sweep.command)
    return table(headers, rows, numeric={0, 1, 2, 4, 5, 6}) + (
        f"<p class=intro>Command: <code>{esc(cmd)}</code></p>" if cmd else ""
    )


def write_sweep_page(sweep: Sweep, sweep_dir: Path, out_path: Path, *, cdn: bool = False) -> Path:
    """The sweep's own HTML page: the sweep section alone, rendered like a report."""
    from tracekit.report.build_store import sweep_section
    from tracekit.report.render import render
    from tracekit.report.section_data import ReportModel

    model = ReportModel(
        title=f"tracekit sweep: {sweep_dir.resolve().name}",
        run_dir=str(sweep_dir),
        baseline_dir=None,
        sections=[sweep_section(sweep)],
    )
    return render(model, out_path, cdn=cdn)
