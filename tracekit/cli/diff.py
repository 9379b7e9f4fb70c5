"""`tracekit diff RUN_A RUN_B`: what changed between two runs, biggest significant change first."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli._analysis import echo_json, fmt, json_option, rules_option


def _impl(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in counts.items()) or "-"


def _frac(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def render(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for line in result["headline"]:
        console.print(f"- {line}", highlight=False)
    table = Table(title=f"Phases: A = {result['a']}, B = {result['b']} (median ms)")
    for col in (
        "phase",
        "A",
        "B",
        "delta",
        "95% CI",
        "sig",
        "fwd",
        "allred",
        "ovhd",
        "graph A/B",
        "allreduce A -> B",
    ):
        table.add_column(col, justify="left" if col in ("phase", "allreduce A -> B") else "right")
    for name, p in result["phases"].items():
        ci = p["ci95_ms"]
        table.add_row(
            name,
            fmt(p["a_ms_p50"]),
            fmt(p["b_ms_p50"]),
            "-" if p["delta_ms"] is None else f"{p['delta_ms']:+.3f}",
            "-" if ci is None else f"{ci[0]:+.3f}..{ci[1]:+.3f}",
            "yes" if p["significant"] else "no",
            *[
                "-" if p[f"{k}_delta_ms"] is None else f"{p[f'{k}_delta_ms']:+.3f}"
                for k in ("forward", "allreduce", "overhead")
            ],
            f"{_frac(p['graph_replayed_frac']['a'])}/{_frac(p['graph_replayed_frac']['b'])}",
            f"{_impl(p['allreduce_impl']['a'])} -> {_impl(p['allreduce_impl']['b'])}",
        )
    console.print(table)
    rows = [(s, e) for s, entries in result["manifest"].items() for e in entries]
    if rows:
        mt = Table(title="Manifest changes")
        for col in ("section", "name", "A", "B", "ranks"):
            mt.add_column(col)
        for section, e in rows:
            ranks = ",".join(map(str, e["ranks"])) if "ranks" in e else "all"
            mt.add_row(section, e["name"], fmt(e["a"]), fmt(e["b"]), ranks)
        console.print(mt)


@click.command(name="diff")
@click.argument("run_a", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.argument("run_b", type=click.Path(exists=True, file_okay=False, path_type=Path))
@json_option
@rules_option
def command(
    run_a: Path, run_b: Path, as_json: bool, rules: Path | None, impl_table: Path | None
) -> None:
    """What changed between two runs, biggest significant change first.

    Per phase the median change with a bootstrap 95% interval (fixed seed), split into
    forward / allreduce / overhead, graph replay and allreduce implementation; then the
    manifest: environment per rank, packages and commits, versions, GPU clocks and power.

    \b
    Example:
        tracekit diff runs/good runs/slow
        tracekit diff runs/good runs/slow --json
    """
    from tracekit.analyzers.diff import diff_runs

    result = diff_runs(run_a, run_b, rules=rules, impl_table=impl_table)
    if as_json:
        echo_json(result)
    else:
        render(result)
