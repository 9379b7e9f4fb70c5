"""`tracekit top RUN_DIR`: a live terminal view of a running server's phases."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli._options import run_dir_argument


@click.command(name="top")
@run_dir_argument(needs="raw")
@click.option("--once", is_flag=True, help="Print one frame and exit (scripts, tests).")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="How often the records are read again and the view redrawn.",
)
@click.option(
    "--window",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Figures are over the records of the last SECONDS (ending at the latest record).",
)
@click.option(
    "--baseline",
    type=click.FloatRange(min=0.1),
    default=120.0,
    show_default=True,
    metavar="SECONDS",
    help="Change is measured against the first SECONDS of the run.",
)
@click.option("--width", type=click.IntRange(min=40), default=None, help="Screen width (--once).")
def command(
    run_dir: Path, once: bool, interval: float, window: float, baseline: float, width: int | None
) -> None:
    """Show cycles/s, acceptance, per-phase p50/p99 and shares per rank, the lagging rank and
    the change against the first minutes, refreshed as the ranks flush their records.

    RUN_DIR is the run directory `tracekit launch` printed (its `raw/` is read; a finished
    run's works too). Ctrl-C leaves.

    \b
    Example:
        tracekit top tracekit-runs/20261129-083120-sglang.launch_server
        tracekit top RUN_DIR --once --window 60
    """
    from rich.console import Console
    from rich.live import Live

    from tracekit.live.top import TopView

    view = TopView(run_dir, window_s=window, baseline_s=baseline)
    console = Console(width=width) if width else Console()
    if once:
        console.print(view.frame())
        return
    try:
        with Live(view.frame(), console=console, refresh_per_second=4, screen=False) as live:
            while True:
                live.update(view.frame(wait=interval))
    except KeyboardInterrupt:
        pass
