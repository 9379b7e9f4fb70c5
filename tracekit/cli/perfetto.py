"""`tracekit perfetto RUN_DIR [-o FILE.pftrace] [--flows]`."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli._options import check_overwrite, force_option, output_option, run_dir_argument


@click.command(name="perfetto")
@run_dir_argument()
@output_option(help="Trace file to write [default: RUN_DIR/tracekit.pftrace].")
@click.option(
    "--flows", is_flag=True, help="Draw an arrow from each runtime call to each kernel it launched."
)
@force_option
def command(run_dir: Path, output: Path | None, flows: bool, force: bool) -> None:
    """Write a native Perfetto trace (protobuf) of a run: one process a rank.

    Each rank gets its cycles and phases (with their forward / allreduce / overhead breakdown
    as arguments), a track a GPU stream (overlapping kernels on lane tracks), its CPU threads
    and its NVML counters, all on one time base. Open it with `tracekit view`.

    \b
    Example:
        tracekit perfetto runs/demo-001
        tracekit perfetto runs/demo-001 -o demo.pftrace --flows
        tracekit view runs/demo-001/tracekit.pftrace
    """
    from tracekit.export.perfetto import export_run
    from tracekit.store.layout import RunLayout

    check_overwrite(output, force=force)
    out = output if output is not None else RunLayout(run_dir).perfetto
    stats = export_run(run_dir, out, flows=flows)
    for note in stats.notes:
        click.echo(f"note: {note}", err=True)
    size = out.stat().st_size
    click.echo(
        f"Wrote {out} ({size / 1e6:.1f} MB: {len(stats.ranks)} ranks, {stats.slices} events, "
        f"{stats.kernel_lanes} extra kernel lanes, {stats.flows} flows, {stats.counters} counter samples)",
        err=True,
    )
    click.echo(f"Open it with: tracekit view {out}", err=True)
