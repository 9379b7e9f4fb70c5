"""`tracekit summary RUN_DIR`: cycle time, acceptance length and per-phase shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from tracekit.cli._analysis import echo_json, fmt, json_option, rules_option, run_dir_argument


def render(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    approx = " (approximate: light-mode CUDA events / CPU clocks)" if summary["approximate"] else ""
    console.print(
        f"{summary['ranks']} rank(s), {summary['cycles']} cycle(s); "
        f"cycle p50 {fmt(summary['cycle_ms_p50'])} ms, mean {fmt(summary['cycle_ms_mean'])} ms; "
        f"acceptance length {fmt(summary['accept_len_mean'], 2)}; "
        f"{fmt(summary['tokens_per_s'], 1)} tokens/s per sequence{approx}"
    )
    table = Table(title="Phases (device-timeline shares)")
    for col in (
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
    ):
        table.add_column(col, justify="left" if col in ("phase", "allreduce impl") else "right")
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
            if summary.get("allreduce_measured", True)
            else "not measured",
            fmt(p["overhead_pct"], 1),
            "-" if p["graph_replayed_frac"] is None else f"{100 * p['graph_replayed_frac']:.0f}%",
            impls,
        )
    console.print(table)
    if summary.get("allreduce_note"):
        console.print(summary["allreduce_note"])
    skew = summary.get("skew") or {}
    if skew and max(p["ranks"] for p in skew.values()) > 1:
        st = Table(title="Rank skew (work = wall - allreduce wait)")
        for col in (
            "phase",
            "ranks",
            "spread p50 ms",
            "spread max ms",
            "slowest rank",
            "allreduce wait ms",
        ):
            st.add_column(col, justify="left" if col == "phase" else "right")
        for name, p in skew.items():
            st.add_row(
                name,
                str(p["ranks"]),
                fmt(p["spread_ms_p50"]),
                fmt(p["spread_ms_max"]),
                f"{p['slowest_rank']} ({p['slowest_rank_frac']:.0%} of cycles)",
                fmt(p["allreduce_wait_ms_mean"]),
            )
        console.print(st)
    unknown = summary.get("unknown_comm_kernels") or []
    if unknown:
        console.print(
            "Communication-looking kernels no implementation entry matches (counted as "
            f"allreduce, label `unknown`; add an entry with --impl-table): {', '.join(unknown)}"
        )


@click.command(name="summary")
@run_dir_argument
@json_option
@rules_option
def command(run_dir: Path, as_json: bool, rules: Path | None, impl_table: Path | None) -> None:
    """Cycle time, acceptance length and per-phase shares of a run.

    \b
    Example:
        tracekit summary runs/demo
        tracekit summary runs/demo --json
    """
    from tracekit.analyzers.summary import summarize

    result = summarize(run_dir, rules=rules, impl_table=impl_table)
    if as_json:
        echo_json(result)
    else:
        render(result)
