"""`tracekit summary RUN_DIR`: cycle time, acceptance length and per-phase shares."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.analyzers.summary_fields import NOT_MEASURED_CELL
from tracekit.cli._console import make_console, new_table, print_table
from tracekit.cli._options import analysis_options, json_option, run_dir_argument
from tracekit.cli._output import echo_json, echo_note, fmt

if TYPE_CHECKING:
    from rich.table import Table

    from tracekit.analyzers.steady import CycleChoice
    from tracekit.analyzers.summary_fields import Acceptance, SkewSummary, Stat, Summary


def _steady_line(summary: Summary) -> str:
    parts = [summary.steady_note] if summary.steady_note else []
    if summary.profiled_cycles:
        a, b = summary.profiled_cycles
        parts.append(f"device-timeline shares from the profiled cycles {a}-{b}")
    if summary.shares_note:
        parts.append(summary.shares_note)
    return "; ".join(parts)


def _lead(s: Summary) -> str:
    """The first line: the fields `Stat.show == "lead"` names (analyzers/summary_fields.py)."""
    approx = " (approximate: light-mode CUDA events / CPU clocks)" if s.approximate else ""
    used = s.cycles - s.excluded
    cycles = f"{s.cycles} cycle(s)" + (f", {used} used" if used != s.cycles else "")
    return (
        f"{s.ranks} rank(s), {cycles}; "
        f"cycle p50 {fmt(s.cycle_ms_p50)} ms, mean {fmt(s.cycle_ms_mean)} ms; "
        f"acceptance length {fmt(s.accept_len_mean, 2)}; "
        f"{fmt(s.tokens_per_s, 1)} tokens/s per sequence{approx}"
    )


def cell(st: Stat, value: Any) -> str:
    """A summary field's value as the terminal shows it, by its declared format."""
    if st.counts:
        return ", ".join(f"{k} x{v}" for k, v in value.items()) or "-"
    if value == NOT_MEASURED_CELL:
        return str(value)
    return fmt(st.scaled(value), st.digits)


def render(summary: Summary) -> None:
    console = make_console()
    console.print(_lead(summary))
    figures = summary.run_stats()
    if figures:
        console.print("; ".join(f"{st.label} {cell(st, v)} {st.unit}".strip() for st, v in figures))
    line = _steady_line(summary)
    if line:
        console.print(line[0].upper() + line[1:] + ".")
    if summary.accept is not None:
        console.print(accept_line(summary.accept))
    print_table(console, _phase_table(summary))
    if summary.allreduce_note:
        console.print(summary.allreduce_note)
    for name, p in summary.phases.items():
        if p.allreduce_note and summary.allreduce_measured:
            console.print(f"{name} allreduce: {p.allreduce_note}")
    skew = summary.skew
    if skew and max(p.ranks for p in skew.values()) > 1:
        print_table(console, _skew_table(skew))
    unknown = summary.unknown_comm_kernels
    if unknown:
        console.print(
            "Communication-looking kernels no implementation entry matches (counted as "
            f"allreduce, label `unknown`; add an entry with --impl-table): {', '.join(unknown)}"
        )


def accept_line(acc: Acceptance) -> str:
    """The pooled acceptance's line (DEFINITIONS.md "Acceptance length")."""
    pos = acc.accept_rate_per_pos
    parts = [
        f"Acceptance pooled over {acc.drafts} drafting request(s) in {acc.steps} step(s): "
        f"1 + {fmt(acc.accepted_tokens, 0)} accepted / {acc.drafts} drafts",
    ]
    if acc.accept_rate is not None:
        parts.append(f"rate {fmt(acc.accept_rate, 3)} of {acc.drafted_tokens} drafted")
    if pos:
        parts.append("per position " + " ".join(fmt(p, 3) for p in pos))
    if acc.requests_per_step is not None:
        parts.append(f"{fmt(acc.requests_per_step, 2)} requests a step")
    return "; ".join(parts) + "."


def _phase_table(summary: Summary) -> Table:
    """One row a phase, one column a shown phase field (`Summary.phase_columns`)."""
    cols = summary.phase_columns()
    headers = ["phase", *(c.header for c in cols)]
    text = {"phase", *(c.header for c in cols if c.counts)}
    table = new_table("Phases (device-timeline shares)", headers, text=text)
    for name, cells in summary.phase_rows():
        table.add_row(name, *(cell(c, v) for c, v in zip(cols, cells)))
    return table


def _skew_table(skew: dict[str, SkewSummary]) -> Table:
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
            str(p.ranks),
            fmt(p.spread_ms_p50),
            fmt(p.spread_ms_max),
            f"{p.slowest_rank} ({p.slowest_rank_frac:.0%} of cycles)",
            fmt(p.allreduce_wait_ms_mean),
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
        echo_note(result.steady_note)
        echo_json(result.to_json())
    else:
        render(result)
