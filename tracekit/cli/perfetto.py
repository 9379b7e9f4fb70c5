"""`tracekit perfetto RUN_DIR [-o FILE.pftrace] [--flows]`."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.errors import InputError


@click.command(name="perfetto")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Trace file to write [default: RUN_DIR/tracekit.pftrace].",
)
@click.option(
    "--flows", is_flag=True, help="Draw an arrow from each runtime call to each kernel it launched."
)
@click.option("-f", "--force", is_flag=True, help="Overwrite an existing output file.")
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

    if not run_dir.is_dir():
        msg = f"{run_dir}: no such run directory; give the directory `tracekit demo`, `launch` or `ingest -o` wrote"
        raise InputError(msg)
    out = output if output is not None else RunLayout(run_dir).perfetto
    if out.exists() and not force and output is not None:
        msg = f"file already exists, will not overwrite without --force: {out}"
        raise InputError(msg)
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
