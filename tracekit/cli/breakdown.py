"""`tracekit breakdown RUN_DIR`: forward / allreduce / overhead of every phase instance."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli._console import make_console, new_table, print_table
from tracekit.cli._options import analysis_options, json_option, run_dir_argument
from tracekit.cli._output import echo_json, echo_note, fmt, ms

if TYPE_CHECKING:
    import polars as pl

    from tracekit.analyzers.run_analysis import RunAnalysis
    from tracekit.analyzers.steady import CycleChoice, Steady

# an instance's row: where it is, DESIGN's fields (analyzers/breakdown.py), tracekit's extras
INSTANCE_KEYS = ("rank", "cycle", "phase", "start_ns")
INSTANCE_EXTRAS = (
    "approximate",
    "accept_len",
    "cpu_ns",
    "unattributed_ns",
    "graph_launches",
    "allreduce_measured",
)
_SUMS = ("wall_ns", "forward_ns", "allreduce_ns", "overhead_ns")
_LABELS = {
    "allreduce_ns": "allred",
    "overhead_ns": "ovhd",
    "forward_ns": "fwd",
    "graph_replayed": "graph",
    "graph_kernel_frac": "graph frac",
    "graph_replayed_frac": "graph frac",
    "allreduce_impl": "impl",
}


def grouped(
    analysis: RunAnalysis,
    by: str | None,
    steady: Steady | None = None,
    bd: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The rows `tracekit breakdown` prints: instances, or sums per cycle, phase or rank, over
    `bd` (default: the breakdown rows `steady` keeps for the shares, all when None)."""
    import polars as pl

    from tracekit.analyzers.breakdown import DESIGN_FIELDS

    if bd is None:
        bd = analysis.breakdown if steady is None else steady.keep_shares(analysis.breakdown)[0]
    if by is None:
        instances: pl.DataFrame = bd.select(*INSTANCE_KEYS, *DESIGN_FIELDS, *INSTANCE_EXTRAS)
        return instances
    if by == "cycle":
        cyc = analysis.cycles.select("rank", "cycle", "span_ns", "accept_len")
        per_cycle: pl.DataFrame = (
            bd.group_by("rank", "cycle")
            .agg(
                pl.len().alias("phases"),
                *[pl.col(c).sum() for c in _SUMS],
                pl.col("graph_replayed").any(),
                pl.col("approximate").any(),
            )
            .join(cyc, on=["rank", "cycle"], how="left")
            .sort("rank", "cycle")
        )
        return per_cycle
    keys = ["phase"] if by == "phase" else ["rank"]
    grouped_rows: pl.DataFrame = (
        bd.group_by(keys)
        .agg(
            pl.len().alias("instances"),
            pl.col("cycle").n_unique().alias("cycles"),
            *[pl.col(c).sum() for c in _SUMS],
            pl.col("graph_replayed").cast(pl.Float64).mean().alias("graph_replayed_frac"),
            pl.col("allreduce_impl").drop_nulls().unique().sort().str.join("+").alias("_impl"),
            pl.col("approximate").any(),
        )
        .with_columns(
            pl.when(pl.col("_impl") == "")
            .then(None)
            .otherwise(pl.col("_impl"))
            .alias("allreduce_impl")
        )
        .drop("_impl")
        .sort(keys)
    )
    return grouped_rows


def render(rows: pl.DataFrame, by: str | None, note: str | None = None) -> None:
    title = "Breakdown per phase instance" if by is None else f"Breakdown by {by}"
    ms_cols = {"start_ns"} | set(_SUMS) | {"cpu_ns", "unattributed_ns", "span_ns"}
    hidden = {
        "start_ns",
        "approximate",
        "cpu_ns",
        "unattributed_ns",
        "graph_launches",
        "accept_len",
    }
    cols = [c for c in rows.columns if c not in hidden or (by is not None and c == "accept_len")]
    labels = [_LABELS.get(c, c.removesuffix("_ns")) + (" ms" if c in ms_cols else "") for c in cols]
    text = {_LABELS.get(c, c) for c in ("phase", "allreduce_impl")}
    table = new_table(f"{title} (ms of the device timeline)", labels, text=text)
    for row in rows.iter_rows(named=True):
        table.add_row(*[ms(row[c]) if c in ms_cols else fmt(row[c]) for c in cols])
    console = make_console()
    if note:
        console.print(note[0].upper() + note[1:] + ".")
    print_table(console, table)
    if rows.height and bool(rows["approximate"].any()):
        console.print("Approximate: light-mode records (CUDA events / CPU clocks), not a trace.")


@click.command(name="breakdown")
@run_dir_argument()
@json_option
@click.option(
    "--by",
    type=click.Choice(["cycle", "phase", "rank"]),
    default=None,
    help="Sum per cycle (per rank), per phase name or per rank instead of one row an instance.",
)
@analysis_options
def command(
    run_dir: Path,
    as_json: bool,
    by: str | None,
    rules: Path | None,
    impl_table: Path | None,
    choice: CycleChoice,
) -> None:
    """Forward / allreduce / overhead of every phase instance.

    Each phase's wall time is its share of the device timeline: forward (compute) +
    allreduce (communication kernels) + overhead (idle before its work), so the phases of a
    cycle add up to the cycle. See docs/DEFINITIONS.md.

    \b
    Example:
        tracekit breakdown runs/demo
        tracekit breakdown runs/demo --by phase --json
        tracekit breakdown runs/demo --by phase --all-cycles
    """
    from tracekit.analyzers.run_analysis import analyze
    from tracekit.analyzers.steady import decide

    analysis = analyze(run_dir, rules=rules, impl_table=impl_table)
    steady = decide(analysis.recorded, choice)
    bd, shares_note = steady.keep_shares(analysis.breakdown)
    rows = grouped(analysis, by, bd=bd)
    note = "; ".join(n for n in (steady.note, shares_note) if n) or None
    if as_json:
        echo_note(note)
        payload: list[dict[str, Any]] = rows.to_dicts()
        echo_json(payload)
    else:
        render(rows, by, note)
