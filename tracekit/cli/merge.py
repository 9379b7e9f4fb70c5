"""`tracekit merge RUN_DIR`: raw per-rank collector output -> the Parquet store; `tracekit
merge PART... -o RUN`: the parts of a multi-node run joined onto one clock."""

from __future__ import annotations

from pathlib import Path

import click

from tracekit.cli._options import (
    engine_options,
    json_option,
    output_option,
    run_dir_argument,
)
from tracekit.cli._output import echo_json


@click.command(name="merge")
@run_dir_argument("paths", many=True, store=False)
@output_option(
    dest="out",
    kind="dir",
    help="Join the parts PATHS (one a node) into this run directory, on one clock.",
)
@click.option(
    "--nnodes",
    type=click.IntRange(min=1),
    default=None,
    help="Nodes the run had, when the parts do not say (a missing node is reported).",
)
@json_option(help="Print the merge result as JSON on stdout.")
@click.option(
    "-f", "--force", is_flag=True, help="Join into an `-o` directory that holds another run."
)
@engine_options
def command(
    paths: tuple[Path, ...], out: Path | None, nnodes: int | None, as_json: bool, force: bool
) -> None:
    """Turn RUN_DIR/raw (written by `tracekit launch`) into the phases, cycles, manifests,
    counters and events tables. Missing or partial ranks are reported; the rest is merged.

    With several parts (`tracekit launch --node-rank K` on each node) or a run directory that
    holds `parts/node-K/`, join them: each part's clock is aligned on the collectives
    (docs/multinode.md), a missing node is reported and the rest joined.

    \b
    Example:
        tracekit launch --no-merge -- python -m tracekit.demo
        tracekit merge tracekit-runs/<run>
        tracekit merge node0/run node1/run -o run     # parts copied from each node
        tracekit merge tracekit-runs/<name>           # parts on shared storage
    """
    from tracekit.store.join_nodes import part_dirs

    if out is not None or len(paths) > 1 or part_dirs(paths[0]):
        _join(paths, out, nnodes, as_json, force)
        return
    from tracekit.store.merge import merge

    run_dir = paths[0]
    res = merge(run_dir)
    for w in res.warnings:
        click.echo(f"tracekit: warning: {w}", err=True)
    if not res.ranks:
        from tracekit.errors import InputError

        msg = (
            f"{run_dir}: nothing to merge: no process under raw/ recorded a call (see the "
            "warnings above, or what `tracekit launch` said when the run ended)"
        )
        raise InputError(msg)
    if as_json:
        echo_json(
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
            }
        )
    else:
        click.echo(
            f"Merged {len(res.ranks)} rank(s) of {run_dir}: {res.phases} phase calls, {res.cycles} cycles, "
            f"{res.counters} counter samples, {res.events} events",
            err=True,
        )
        click.echo(f"Next: tracekit summary {run_dir}", err=True)


def _join(
    paths: tuple[Path, ...], out: Path | None, nnodes: int | None, as_json: bool, force: bool
) -> None:
    from tracekit.distributed import current_engine
    from tracekit.errors import InputError
    from tracekit.store.join_nodes import join, part_dirs

    if out is None:
        if len(paths) == 1 and part_dirs(paths[0]):
            out = paths[0]
        else:
            msg = "several parts need `-o RUN_DIR`, the run directory to join them into"
            raise InputError(msg)
    engine = current_engine()
    res = join(
        list(paths), out, nnodes=nnodes, map_fn=engine.starmap if engine else None, force=force
    )
    for w in res.warnings:
        click.echo(f"tracekit: warning: {w}", err=True)
    clock = [c.as_dict() for c in res.clock]
    if as_json:
        echo_json(
            {
                "run_dir": str(res.run_dir),
                "ranks": res.ranks,
                "parts": [str(p.path) for p in res.parts],
                "nnodes": res.nnodes,
                "missing_nodes": res.missing_nodes,
                "missing_ranks": res.missing_ranks,
                "clock": clock,
                "rows": res.rows,
                "warnings": res.warnings,
            }
        )
        return
    for c in res.clock:
        if c.method == "collectives":
            how = (
                f"offset {c.offset_ns / 1e3:+.1f} us +- {(c.error_ns or 0) / 1e3:.1f} us "
                f"({c.estimator} over {c.anchors} collectives, "
                f"spread {(c.spread_ns or 0) / 1e3:.1f} us)"
            )
            if c.bound_low_ns is not None and c.bound_high_ns is not None:
                how += (
                    f", within [{c.bound_low_ns / 1e3:+.1f}, {c.bound_high_ns / 1e3:+.1f}] us "
                    "by causality"
                )
        else:
            how = c.method
        click.echo(f"  {c.part} ({c.host or 'host ?'}): {how}", err=True)
    click.echo(
        f"Joined {len(res.parts)} part(s), {len(res.ranks)} rank(s) into {out}: "
        + ", ".join(f"{n} {t} rows" for t, n in sorted(res.rows.items())),
        err=True,
    )
    click.echo(f"Next: tracekit summary {out}", err=True)
