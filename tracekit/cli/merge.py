"""`tracekit merge RUN_DIR`: raw per-rank collector output -> the Parquet store."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command(name="merge")
@click.argument("run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the merge result as JSON on stdout.")
def command(run_dir: Path, as_json: bool) -> None:
    """Turn RUN_DIR/raw (written by `tracekit launch`) into the phases, cycles, manifests,
    counters and events tables. Missing or partial ranks are reported; the rest is merged.

    \b
    Example:
        tracekit launch --no-merge -- python -m tracekit.demo
        tracekit merge tracekit-runs/<run>
    """
    from tracekit.store.merge import merge

    res = merge(run_dir)
    for w in res.warnings:
        click.echo(f"tracekit: warning: {w}", err=True)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "run_dir": str(res.run_dir),
                    "ranks": res.ranks,
                    "phases": res.phases,
                    "cycles": res.cycles,
                    "counters": res.counters,
                    "events": res.events,
                    "missing_ranks": res.missing_ranks,
                    "partial_ranks": res.partial_ranks,
                    "warnings": res.warnings,
                },
                indent=2,
            )
        )
    else:
        click.echo(
            f"Merged {len(res.ranks)} rank(s) of {run_dir}: {res.phases} phase calls, {res.cycles} cycles, "
            f"{res.counters} counter samples, {res.events} events",
            err=True,
        )
        click.echo(f"Next: tracekit summary {run_dir}", err=True)
