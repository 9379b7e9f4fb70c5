"""`tracekit temporal RUN_DIR`: idle / compute / non-compute GPU time per rank (HTA's definitions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli._console import make_console, new_table, print_table
from tracekit.cli._options import json_option, run_dir_argument
from tracekit.cli._output import echo_json, fmt


def render(rows: list[dict[str, Any]], *, hta_rounding: bool) -> None:
    unit = "whole µs, as HTA rounds" if hta_rounding else "µs, from exact ns"
    columns = [
        "rank",
        "idle µs",
        "compute µs",
        "non-compute µs",
        "span µs",
        "idle %",
        "compute %",
        "non-compute %",
        "GPU events",
        "step filter",
    ]
    table = new_table(f"Temporal breakdown per rank ({unit}; % of the GPU span)", columns)
    for r in rows:
        table.add_row(
            str(r["rank"]),
            fmt(r["idle_us"], 1),
            fmt(r["compute_us"], 1),
            fmt(r["non_compute_us"], 1),
            fmt(r["span_us"], 1),
            fmt(r["idle_pct"], 2),
            fmt(r["compute_pct"], 2),
            fmt(r["non_compute_pct"], 2),
            str(r["gpu_events"]),
            "yes" if r["step_filtered"] else "no",
        )
    print_table(make_console(), table)


@click.command(name="temporal")
@run_dir_argument()
@json_option
@click.option(
    "--hta-rounding",
    is_flag=True,
    help="Round timestamps to whole µs as HTA 0.5.0 does (ceil start, floor end) to reproduce its numbers.",
)
def command(run_dir: Path, as_json: bool, hta_rounding: bool) -> None:
    """Idle / compute / non-compute GPU time per rank, with HTA's definitions.

    GPU span = first GPU event start to last end; idle = span minus the union of all GPU work;
    compute = union of computation kernels; non-compute = the rest (communication, memory).
    With two or more ProfilerStep markers only the steps before the last one count, as in HTA.
    Definitions: docs/DEFINITIONS.md, "Temporal breakdown".

    \b
    Example:
        tracekit ingest traces/ -o run1
        tracekit temporal run1
        tracekit temporal run1 --json --hta-rounding
    """
    from tracekit.analyzers.temporal import temporal

    rows = temporal(run_dir, hta_rounding=hta_rounding).to_dicts()
    if as_json:
        echo_json(rows)
        return
    if not rows:
        click.echo(f"{run_dir}: no events", err=True)
        return
    render(rows, hta_rounding=hta_rounding)
    if any(not r["step_filtered"] for r in rows):
        click.echo(
            "Fewer than two ProfilerStep markers: the whole profile window counts (no step filter).",
            err=True,
        )
