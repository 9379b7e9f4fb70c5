"""`tracekit report RUN_DIR [-o FILE.html] [--baseline RUN] [--sweep SWEEP_DIR] [--cdn]`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit.cli._options import (
    check_overwrite,
    cycles_option,
    force_option,
    output_option,
    run_dir_argument,
    run_dir_option,
)

if TYPE_CHECKING:
    from tracekit.analyzers.steady import CycleChoice


@click.command(name="report")
@run_dir_argument()
@output_option(help="HTML file to write [default: RUN_DIR/tracekit-report.html].")
@run_dir_option(
    "--baseline",
    help="A run to compare with (the report then leads with the differences); a plain-decoding run also gives the break-even.",
)
@click.option(
    "--cdn",
    is_flag=True,
    help="Link plotly.js from cdn.plot.ly instead of embedding it (smaller file, needs network).",
)
@click.option(
    "--sweep",
    type=click.Path(path_type=Path),
    default=None,
    help="A `tracekit sweep` directory (or its sweep.json): adds the acceptance sweep's section.",
)
@force_option
@cycles_option
def command(
    run_dir: Path,
    output: Path | None,
    baseline: Path | None,
    cdn: bool,
    sweep: Path | None,
    force: bool,
    choice: CycleChoice,
) -> None:
    """Write the self-contained HTML report of a run.

    Headline numbers, where each phase's time goes cycle by cycle (forward / allreduce /
    overhead; every cycle, warm-up included), distributions per rank, rank skew, CUDA graphs and allreduce implementations,
    top kernels, NVML clocks/power/temperature, the break-even curve and the manifest. Works
    offline (plotly.js is embedded once). Aggregates use the steady-state cycles (the
    headline says which were left out as warm-up).

    \b
    Example:
        tracekit report runs/demo-001
        tracekit report runs/spec --baseline runs/plain -o spec-vs-plain.html
        tracekit report runs/sweep-1/accept-2.5 --sweep runs/sweep-1
    """
    from tracekit.report.build import build_model
    from tracekit.report.render import render
    from tracekit.store.layout import RunLayout

    check_overwrite(output, force=force)
    out = output if output is not None else RunLayout(run_dir).report
    # the model first (a bad --sweep or run fails before anything is written), then the page
    model = build_model(run_dir, baseline=baseline, choice=choice, sweep=sweep)
    render(model, out, cdn=cdn)
    click.echo(f"Wrote {out} ({out.stat().st_size / 1e6:.1f} MB)", err=True)
    click.echo(f"Open it in a browser: file://{out.resolve()}", err=True)
