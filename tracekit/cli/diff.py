"""`tracekit diff BASELINE... RUN`: what changed against one or more baseline runs, biggest
significant change first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli._console import make_console, new_table, print_table
from tracekit.cli._options import cycles_option, json_option, rules_option, run_dir_argument
from tracekit.cli._output import echo_json, echo_note, fmt

if TYPE_CHECKING:
    from tracekit.analyzers.steady import CycleChoice


def _impl(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in counts.items()) or "-"


def _frac(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def render(result: dict[str, Any]) -> None:
    console = make_console()
    for line in result["headline"]:
        console.print(f"- {line}", highlight=False)
    columns = [
        "phase",
        "A",
        "B",
        "delta",
        "95% CI",
        "noise",
        "sig",
        "fwd",
        "allred",
        "ovhd",
        "graph A/B",
        "allreduce A -> B",
    ]
    table = new_table(
        f"Phases: A = {result['a']}, B = {result['b']} (median ms)",
        columns,
        text={"phase", "noise", "allreduce A -> B"},
    )
    for name, p in result["phases"].items():
        ci = p["ci95_ms"]
        table.add_row(
            name,
            fmt(p["a_ms_p50"]),
            fmt(p["b_ms_p50"]),
            "-" if p["delta_ms"] is None else f"{p['delta_ms']:+.3f}",
            "-" if ci is None else f"{ci[0]:+.3f}..{ci[1]:+.3f}",
            p["noise"],
            "yes" if p["significant"] else "no",
            *[
                "-" if p[f"{k}_delta_ms"] is None else f"{p[f'{k}_delta_ms']:+.3f}"
                for k in ("forward", "allreduce", "overhead")
            ],
            f"{_frac(p['graph_replayed_frac']['a'])}/{_frac(p['graph_replayed_frac']['b'])}",
            f"{_impl(p['allreduce_impl']['a'])} -> {_impl(p['allreduce_impl']['b'])}",
        )
    print_table(console, table)
    rows = [(s, e) for s, entries in result["manifest"].items() for e in entries]
    if rows:
        cols = ["section", "name", "A", "B", "ranks"]
        mt = new_table("Manifest changes", cols, text=set(cols))
        for section, e in rows:
            ranks = ",".join(map(str, e["ranks"])) if "ranks" in e else "all"
            mt.add_row(section, e["name"], fmt(e["a"]), fmt(e["b"]), ranks)
        print_table(console, mt)


@click.command(name="diff")
@run_dir_argument("runs", many=True)
@json_option
@rules_option
@cycles_option
@click.option(
    "--fail-on-regression",
    "fail_pct",
    type=click.FloatRange(min=0),
    default=None,
    metavar="PCT",
    help="Exit 3 when a phase's steady-state median is slower in RUN by more than PCT percent "
    "beyond the noise (the whole 95% interval of the change above PCT percent; one line a "
    "phase on stderr): a CI or cron gate. Give "
    "several baselines so that the noise is the run-to-run spread.",
)
def command(
    runs: tuple[Path, ...],
    as_json: bool,
    rules: Path | None,
    impl_table: Path | None,
    choice: CycleChoice,
    fail_pct: float | None,
) -> None:
    """What changed between one or more baseline runs and RUN (the last), biggest significant
    change first.

    Each run's steady-state cycles are compared (warm-up left out, see docs/DEFINITIONS.md;
    --all-cycles / --cycles A:B apply to every run; full-mode runs compare the profiled
    cycles they all have). Per phase the median change with a 95% interval: from the
    run-to-run spread of the baselines' medians when there are several, else a bootstrap over
    the instances of each run (run-to-run noise unknown); split into forward / allreduce /
    overhead, graph replay and allreduce implementation; then the manifest against the first
    baseline: environment per rank, packages and commits, versions, GPU clocks and power.

    \b
    Example:
        tracekit diff runs/good runs/slow
        tracekit diff runs/good runs/slow --json
        tracekit diff runs/base1 runs/base2 runs/base3 runs/nightly --fail-on-regression 5
    """
    from tracekit.analyzers.diff import diff_runs

    if len(runs) < 2:
        from tracekit.errors import InputError

        msg = "tracekit diff needs at least two run directories: BASELINE... RUN"
        raise InputError(msg)
    result = diff_runs(*runs, rules=rules, impl_table=impl_table, choice=choice)
    found = None
    if fail_pct is not None:
        from tracekit.analyzers.gate import regressions

        found = regressions(result["phases"], fail_pct)
        result["regressions"] = [r.line() for r in found]
    if as_json:
        for w in ("a", "b"):
            note = result["steady"][w]["steady_note"]
            echo_note(None if note is None else f"{w.upper()}: {note}")
        if result["noise"] == "within-run":
            echo_note("run-to-run noise is unknown (one baseline)")
        echo_json(result)
    else:
        render(result)
    if found:
        import sys

        from tracekit.analyzers.gate import REGRESSION_EXIT_CODE

        for r in found:
            click.echo(f"tracekit: regression: {r.line()}", err=True)
        sys.exit(REGRESSION_EXIT_CODE)
    if fail_pct is not None:
        click.echo(f"tracekit: no phase regressed by more than {fail_pct:g}%", err=True)
