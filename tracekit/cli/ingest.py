"""`tracekit ingest PATH... -o RUN_DIR`: Kineto traces into a run directory's Parquet store."""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit.cli._options import engine_options, output_option

if TYPE_CHECKING:
    from rich.console import Console

    from tracekit.store.ingest import IngestResult

# Inputs at least this large (or several files) get a progress bar, on a terminal only.
PROGRESS_BYTES = 64 << 20


@click.command(name="ingest")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@output_option(
    dest="run_dir",
    kind="dir",
    required=True,
    help="Run directory to create or add to (its store/events and store/manifests tables).",
)
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    default=None,
    help="Rank of the trace, when it has no `distributedInfo` and no rank in its name (one file only).",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: the number of CPU cores, at most one a file).",
)
@click.option(
    "--phases",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Phase map (TOML) recorded in run.json for the analysis commands.",
)
@engine_options
def command(
    paths: tuple[Path, ...], run_dir: Path, rank: int | None, jobs: int | None, phases: Path | None
) -> None:
    """Read Kineto traces (torch.profiler, SGLang, vLLM; `.json` or `.json.gz`) into RUN_DIR.

    PATHS are trace files or directories (searched recursively). Each file is one rank: from
    `distributedInfo.rank`, else the file name (`rank3`, `-TP-3`, `tp3`), else `--rank`.

    \b
    Example:
        tracekit ingest profiles/ -o run1
        tracekit ingest trace.json.gz --rank 0 -o run1
        tracekit temporal run1
    """
    from tracekit.errors import IngestError, InputError
    from tracekit.store.ingest import find_traces, ingest

    files = find_traces(paths)
    overrides = None
    if rank is not None:
        if len(files) != 1:
            msg = f"--rank needs exactly one trace file, got {len(files)}; ingest files one by one or rename them with `rank<N>`"
            raise InputError(msg)
        overrides = {files[0]: rank}
    started = time.perf_counter()
    total_bytes = sum(f.stat().st_size for f in files)
    with ExitStack() as stack:
        progress = None
        if sys.stderr.isatty() and (len(files) > 1 or total_bytes >= PROGRESS_BYTES):
            from rich.progress import Progress

            bar = stack.enter_context(Progress(transient=True, console=_console()))
            task = bar.add_task("ingest", total=len(files))

            def progress(done: int, total: int) -> None:
                bar.update(task, completed=done, total=total)

        try:
            result = ingest(files, run_dir, rank_overrides=overrides, jobs=jobs, progress=progress)
        except IngestError as exc:
            partial: IngestResult = exc.result
            _report(partial, time.perf_counter() - started, phases)
            raise
    _report(result, time.perf_counter() - started, phases)


def _console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


def _report(result: IngestResult, seconds: float, phases: Path | None) -> None:
    for warning in result.warnings:
        click.echo(f"tracekit: warning: {warning}", err=True)
    if not result.files:
        return
    _write_run_manifest(result, phases)
    ranks = ", ".join(str(r) for r in result.ranks)
    click.echo(
        f"Ingested {len(result.files)} trace(s), {result.events:,} events, rank(s) {ranks} "
        f"in {seconds:.1f} s: {result.run_dir}",
        err=True,
    )
    click.echo(f"Next: tracekit temporal {result.run_dir}", err=True)


def _write_run_manifest(result: IngestResult, phases: Path | None) -> None:
    """A minimal run.json for an ingested run (left alone when launch/merge wrote one)."""
    from tracekit._version import __version__
    from tracekit.store.layout import RunLayout
    from tracekit.store.schema import SCHEMA_VERSION

    layout = RunLayout(result.run_dir)
    if layout.manifest.exists():
        return
    doc = {
        "tracekit_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "source": "ingest",
        "command": sys.argv,
        "inputs": [
            {"path": str(f.path.resolve()), "rank": f.rank, "rank_source": f.rank_source}
            for f in result.files
        ],
        "phases": str(phases.resolve()) if phases else None,
    }
    layout.manifest.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
