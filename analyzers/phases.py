"""Phase instances: outermost ranges of one phase name on a rank's host thread.

Sources, per rank: the events table's annotation ranges (`tracekit/<phase>`, `tracekit/cycle`
and the rule table's names), else the collector's `phases` table (light mode). A phase range
nested in another phase range on the same thread belongs to the outer one and is kept as a
sub-phase (depth > 0, `parent` its immediately enclosing phase, `top` the outermost instance).
Nesting and cycle membership are tracekit/store/placement.py's: applied here to annotation
ranges, read from the `phases` table (merge applied them) for the collector's records.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import polars as pl

from tracekit.analyzers._load import RankInputs, annotation_rows
from tracekit.analyzers.cycles import assign_cycles, cycles_from_collector
from tracekit.analyzers.rules import CYCLE, RuleTable
from tracekit.errors import StoreError
from tracekit.store.placement import nest, nesting_order
from tracekit.store.reader import has_table

# `source` of an instance: a `tracekit/<phase>` annotation, a range the rule table named, or
# the collector's record
PhaseSource = Literal["annotation", "rule", "collector"]
ANNOTATION: PhaseSource = "annotation"
RULE: PhaseSource = "rule"
COLLECTOR: PhaseSource = "collector"

INSTANCE_COLUMNS = [
    "rank",
    "cycle",
    "phase",
    "start_ns",
    "end_ns",
    "depth",
    "parent",
    "source",
    "pid",
    "tid",
    "inst",
    "top",
]


@dataclass(frozen=True)
class RankPhases:
    """One rank's phase instances and cycles.

    `instances`: INSTANCE_COLUMNS, one row a phase range (sub-phases included); `inst` numbers
    the rows, `top` is the `inst` of the outermost instance containing it (itself at depth 0).
    `cycles`: CYCLE_COLUMNS (analyzers/cycles.py): rank, cycle, start_ns, end_ns (CPU range),
    accept_len, source. `approximate`: True when the phases came from the collector's
    light-mode records.
    """

    rank: int
    instances: pl.DataFrame
    cycles: pl.DataFrame
    approximate: bool

    @property
    def tops(self) -> pl.DataFrame:
        """The top-level instances that belong to a cycle (the breakdown's rows)."""
        top: pl.DataFrame = self.instances.filter((pl.col("depth") == 0) & (pl.col("cycle") >= 0))
        return top


def _named_ranges(ann: pl.DataFrame, rules: RuleTable) -> pl.DataFrame:
    names = ann["name"].unique().to_list()
    mapping = {n: rules.match(n) for n in names}
    lookup = pl.DataFrame(
        {"name": list(mapping), "phase": list(mapping.values())},
        schema={"name": pl.String, "phase": pl.String},
    )
    return ann.join(lookup, on="name", how="inner").filter(pl.col("phase").is_not_null())


def rank_phases(inputs: RankInputs, rules: RuleTable) -> RankPhases | None:
    """Phase instances and cycles of one rank, or None when the rank has no phases at all:
    from its annotation ranges when it has any, else from the collector's records."""
    return annotation_phases(inputs, rules) or collector_phases(inputs)


def annotation_phases(inputs: RankInputs, rules: RuleTable) -> RankPhases | None:
    """The rank's phases from its events table's annotation ranges (placed here), or None."""
    if inputs.events is None:
        return None
    ann = _named_ranges(annotation_rows(inputs.events), rules)
    ph = ann.filter(pl.col("phase") != CYCLE)
    if ph.height == 0:
        return None
    src = pl.when(pl.col("name").str.starts_with("tracekit/"))
    ph = ph.with_columns(src.then(pl.lit(ANNOTATION)).otherwise(pl.lit(RULE)).alias("source"))
    inst = nest(ph.select("pid", "tid", "phase", "start_ns", "end_ns", "source"))
    marks = ann.filter(pl.col("phase") == CYCLE).select("pid", "tid", "start_ns", "end_ns")
    inst, cycles = assign_cycles(inst, marks, inputs.cycles, inputs.rank)
    return RankPhases(inputs.rank, _finish(inst, inputs.rank), cycles, approximate=False)


def collector_phases(inputs: RankInputs) -> RankPhases | None:
    """The rank's phases from the collector's `phases` table, or None without records.

    Nesting (`inst`, `depth`, `parent`, `top`) and cycle are the table's: merge computed them
    once (store/placement.py) and wrote them; the rows are taken in `inst` order. A store
    merged before merge wrote `inst`/`top` has the same depth and parent: only those two are
    derived here then (nesting order; the last depth-0 row before a row on its thread); a
    table whose depth has nulls is nested again."""
    table = inputs.phases
    if table is None or table.height == 0:
        return None
    base = table.drop("rank", strict=False).with_columns(
        pl.col("phase").cast(pl.String),
        pl.col("parent").cast(pl.String),
        pl.col("pid").fill_null(0),
        pl.col("tid").fill_null(0),
        pl.lit(COLLECTOR).alias("source"),
    )
    if _has_nesting(base):
        inst = base.sort("inst")
    elif base["depth"].has_nulls():
        inst = nest(base.drop("depth", "parent", "inst", "top", strict=False))
    else:
        inst = _derived_nesting(base.drop("inst", "top", strict=False))
    cycles = cycles_from_collector(inst, inputs.cycles, inputs.rank)
    return RankPhases(inputs.rank, _finish(inst, inputs.rank), cycles, approximate=True)


def _has_nesting(table: pl.DataFrame) -> bool:
    """Merge wrote the rows' nesting (`inst`, `top`) into the table."""
    return all(c in table.columns and not table[c].has_nulls() for c in ("inst", "top"))


def _derived_nesting(base: pl.DataFrame) -> pl.DataFrame:
    """`inst` and `top` of a table from before merge wrote them (its depth taken as it is)."""
    inst = nesting_order(base).with_row_index("inst").with_columns(pl.col("inst").cast(pl.Int64))
    top = pl.when(pl.col("depth") == 0).then(pl.col("inst")).forward_fill().over("pid", "tid")
    return inst.with_columns(top.fill_null(pl.col("inst")).alias("top"))


def _finish(inst: pl.DataFrame, rank: int) -> pl.DataFrame:
    return inst.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")).select(
        list(INSTANCE_COLUMNS) + [c for c in inst.columns if c not in INSTANCE_COLUMNS]
    )


def no_phases(run_dir: Path) -> StoreError:
    """The error of a run in which no rank has any phase."""
    if not (has_table(run_dir, "events") or has_table(run_dir, "phases")):
        msg = (
            f"{run_dir}: not a run directory (no `events` or `phases` table in its store); "
            "create one with `tracekit ingest TRACES -o RUN_DIR` or `tracekit merge RUN_DIR`"
        )
        return StoreError(msg)
    msg = (
        f"{run_dir}: no phases found (no `tracekit/<phase>` or known annotation ranges in the "
        "events table, no collector `phases` table); map your trace's range names to phases "
        "with `--rules FILE.toml`"
    )
    return StoreError(msg)
