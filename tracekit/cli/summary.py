"""`tracekit summary RUN_DIR`: cycle time, acceptance length and per-phase shares."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli._console import make_console, new_table, print_table
from tracekit.cli._options import analysis_options, json_option, run_dir_argument
from tracekit.cli._output import echo_json, echo_note, fmt

if TYPE_CHECKING:
    from rich.table import Table

    from tracekit.analyzers.steady import CycleChoice


def _steady_line(summary: dict[str, Any]) -> str:
    note = summary.get("steady_note")
    parts = [note] if note else []
    if summary.get("profiled_cycles"):
        a, b = summary["profiled_cycles"]
        parts.append(f"device-timeline shares from the profiled cycles {a}-{b}")
    if summary.get("shares_note"):
        parts.append(summary["shares_note"])
    return "; ".join(parts)


def render(summary: dict[str, Any]) -> None:
    console = make_console()
    approx = " (approximate: light-mode CUDA events / CPU clocks)" if summary["approximate"] else ""
    used = summary["cycles"] - summary.get("excluded", 0)
    cycles = f"{summary['cycles']} cycle(s)" + (
        f", {used} used" if used != summary["cycles"] else ""
    )
    console.print(
        f"{summary['ranks']} rank(s), {cycles}; "
        f"cycle p50 {fmt(summary['cycle_ms_p50'])} ms, mean {fmt(summary['cycle_ms_mean'])} ms; "
        f"acceptance length {fmt(summary['accept_len_mean'], 2)}; "
        f"{fmt(summary['tokens_per_s'], 1)} tokens/s per sequence{approx}"
    )
    line = _steady_line(summary)
    if line:
        console.print(line[0].upper() + line[1:] + ".")
    if summary.get("accept"):
        console.print(accept_line(summary["accept"]))
    print_table(console, _phase_table(summary))
    if summary.get("allreduce_note"):
        console.print(summary["allreduce_note"])
    for name, p in summary["phases"].items():
        if p.get("allreduce_note") and summary.get("allreduce_measured", True):
            console.print(f"{name} allreduce: {p['allreduce_note']}")
    skew = summary.get("skew") or {}
    if skew and max(p["ranks"] for p in skew.values()) > 1:
        print_table(console, _skew_table(skew))
    unknown = summary.get("unknown_comm_kernels") or []
    if unknown:
        console.print(
            "Communication-looking kernels no implementation entry matches (counted as "
            f"allreduce, label `unknown`; add an entry with --impl-table): {', '.join(unknown)}"
        )


def accept_line(acc: dict[str, Any]) -> str:
    """The pooled acceptance's line (DEFINITIONS.md "Acceptance length")."""
    pos = acc.get("accept_rate_per_pos")
    parts = [
        f"Acceptance pooled over {acc['drafts']} drafting request(s) in {acc['steps']} step(s): "
        f"1 + {fmt(acc['accepted_tokens'], 0)} accepted / {acc['drafts']} drafts",
    ]
    if acc.get("accept_rate") is not None:
        parts.append(f"rate {fmt(acc['accept_rate'], 3)} of {acc['drafted_tokens']} drafted")
    if pos:
        parts.append("per position " + " ".join(fmt(p, 3) for p in pos))
    if acc.get("requests_per_step") is not None:
        parts.append(f"{fmt(acc['requests_per_step'], 2)} requests a step")
    return "; ".join(parts) + "."


def _phase_table(summary: dict[str, Any]) -> Table:
    table = new_table(
        "Phases (device-timeline shares)",
        [
            "phase",
            "count",
            "p50 ms",
            "p90 ms",
            "mean ms",
            "forward %",
            "allreduce %",
            "overhead %",
            "graph replayed",
            "allreduce impl",
        ],
        text={"phase", "allreduce impl"},
    )
    for name, p in summary["phases"].items():
        impls = ", ".join(f"{k} x{v}" for k, v in p["allreduce_impl"].items()) or "-"
        table.add_row(
            name,
            str(p["count"]),
            fmt(p["wall_ms_p50"]),
            fmt(p["wall_ms_p90"]),
            fmt(p["wall_ms_mean"]),
            fmt(p["forward_pct"], 1),
            fmt(p["allreduce_pct"], 1)
            if summary.get("allreduce_measured", True) and p.get("allreduce_note") is None
            else "not measured",
            fmt(p["overhead_pct"], 1),
            "-" if p["graph_replayed_frac"] is None else f"{100 * p['graph_replayed_frac']:.0f}%",
            impls,
        )
    return table


def _skew_table(skew: dict[str, Any]) -> Table:
    st = new_table(
        "Rank skew (work = wall - allreduce wait)",
        [
            "phase",
            "ranks",
            "spread p50 ms",
            "spread max ms",
            "slowest rank",
            "allreduce wait ms",
        ],
        text={"phase"},
    )
    for name, p in skew.items():
        st.add_row(
            name,
            str(p["ranks"]),
            fmt(p["spread_ms_p50"]),
            fmt(p["spread_ms_max"]),
            f"{p['slowest_rank']} ({p['slowest_rank_frac']:.0%} of cycles)",
            fmt(p["allreduce_wait_ms_mean"]),
        )
    return st


@click.command(name="summary")
@run_dir_argument()
@json_option
@analysis_options
def command(
    run_dir: Path,
    as_json: bool,
    rules: Path | None,
    impl_table: Path | None,
    choice: CycleChoice,
) -> None:
    """Cycle time, acceptance length and per-phase shares of a run.

    \b
    Example:
        tracekit summary runs/demo
        tracekit summary runs/demo --json
        tracekit summary runs/demo --cycles 64:
    """
    from tracekit.analyzers.summary import summarize

    result = summarize(run_dir, rules=rules, impl_table=impl_table, choice=choice)
    if as_json:
        echo_note(result.get("steady_note"))
        echo_json(result)
    else:
        render(result)
