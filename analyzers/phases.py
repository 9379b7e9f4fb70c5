"""Phase instances: outermost ranges of one phase name on a rank's host thread.

Sources, per rank: the events table's annotation ranges (`tracekit/<phase>`, `tracekit/cycle`
and the rule table's names), else the collector's `phases` table (light mode). A phase range
nested in another phase range on the same thread belongs to the outer one and is kept as a
sub-phase (depth > 0, `parent` its immediately enclosing phase, `top` the outermost instance).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from tracekit.analyzers import _load
from tracekit.analyzers.cycles import assign_cycles, cycles_from_collector
from tracekit.analyzers.rules import CYCLE, RuleTable, load_rules
from tracekit.errors import StoreError
from tracekit.store.reader import has_table

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
    `cycles`: rank, cycle, start_ns, end_ns (CPU range), accept_len, source.
    `approximate`: True when the phases came from the collector's light-mode records.
    """

    rank: int
    instances: pl.DataFrame
    cycles: pl.DataFrame
    approximate: bool


def nest(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add depth, parent and top to ranges (pid, tid, phase, start_ns, end_ns, ...).

    A range is nested in the ranges on its (pid, tid) that started before it (or at the same
    time and end later) and end after its start. Returns the rows sorted by start, with `inst`.

    The rule is that of a stack walked in that order (pop while the top ended at or before the
    new start, then push); `_nest_loop` is that walk. Its result has a closed form, computed
    here on whole columns: the range's parent is the LAST earlier range on its thread that ends
    after its start (every later one ended before it and was popped; that one never can be), its
    depth the parent's plus one and its top the parent's top.
    """
    df = ranges.sort(["pid", "tid", "start_ns", "end_ns"], descending=[False, False, False, True])
    df = df.with_row_index("inst").with_columns(pl.col("inst").cast(pl.Int64))
    if df.height == 0 or df["start_ns"].has_nulls() or df["end_ns"].has_nulls():
        return _nest_loop(df)  # nulls: the walk's own behaviour
    key = pl.col("pid").ne_missing(pl.col("pid").shift(1)) | pl.col("tid").ne_missing(
        pl.col("tid").shift(1)
    )
    first = df.select(key.fill_null(True).arg_true()).to_series().to_numpy()
    starts = df["start_ns"].to_numpy()
    ends = df["end_ns"].to_numpy()
    n = len(starts)
    lo = np.repeat(first, np.diff(np.append(first, n)))  # first row of each row's thread
    parent = _last_ending_after(ends, starts, lo)
    depth, top = _chain(parent)
    of = pl.Series("_of", np.maximum(parent, 0))
    return df.with_columns(
        pl.Series("depth", depth, dtype=pl.Int32),
        pl.when(pl.Series(parent >= 0))
        .then(pl.col("phase").cast(pl.String).gather(of))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("parent"),
        pl.Series("top", top, dtype=pl.Int64),
    )


def _last_ending_after(ends: np.ndarray, starts: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """For each row i: the largest k in [lo[i], i) with ends[k] > starts[i], else -1.

    Binary lifting over a sparse table of range maxima of `ends`: move a bound left from i by
    2^j rows while those rows all end at or before the start (the test is monotone in the
    bound), largest steps first; the row just left of the final bound is the answer if it is
    in the thread and ends after the start."""
    n = len(ends)
    idx = np.arange(n, dtype=np.int64)
    table = [ends]  # table[j][x] = max(ends[x : x + 2**j])
    while (1 << len(table)) <= n:
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[: len(prev) - half], prev[half:]))
    pos = idx.copy()  # exclusive bound: rows [pos, i) all end at or before starts[i]
    for j in range(len(table) - 1, -1, -1):
        step = 1 << j
        cand = pos - step
        ok = cand >= lo
        row = np.flatnonzero(ok)
        if row.size == 0:
            continue
        fits = table[j][cand[row]] <= starts[row]
        pos[row[fits]] = cand[row[fits]]
    k = pos - 1
    found = (k >= lo) & (ends[np.maximum(k, 0)] > starts)
    return np.where(found, k, -1)


def _chain(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depth (number of ancestors) and top (the outermost ancestor, itself at depth 0) of each
    row of a forest given by parent indices (-1: a root), by pointer doubling."""
    n = len(parent)
    idx = np.arange(n, dtype=np.int64)
    jump = np.where(parent < 0, idx, parent)
    dist = (parent >= 0).astype(np.int64)
    while True:
        nxt = jump[jump]
        if np.array_equal(nxt, jump):
            return dist.astype(np.int32), jump
        dist = dist + dist[jump]
        jump = nxt


def _nest_loop(df: pl.DataFrame) -> pl.DataFrame:
    """`nest`'s rule as the stack walk itself, on rows already sorted and numbered."""
    pids = df["pid"].to_list()
    tids = df["tid"].to_list()
    starts = df["start_ns"].to_list()
    ends = df["end_ns"].to_list()
    phases = df["phase"].to_list()
    depth: list[int] = []
    parent: list[str | None] = []
    top: list[int] = []
    stack: list[int] = []
    key: tuple[object, object] | None = None
    for i in range(len(starts)):
        k = (pids[i], tids[i])
        if k != key:
            stack = []
            key = k
        while stack and ends[stack[-1]] <= starts[i]:
            stack.pop()
        depth.append(len(stack))
        parent.append(phases[stack[-1]] if stack else None)
        top.append(stack[0] if stack else i)
        stack.append(i)
    return df.with_columns(
        pl.Series("depth", depth, dtype=pl.Int32),
        pl.Series("parent", parent, dtype=pl.String),
        pl.Series("top", top, dtype=pl.Int64),
    )


def _named_ranges(ann: pl.DataFrame, rules: RuleTable) -> pl.DataFrame:
    names = ann["name"].unique().to_list()
    mapping = {n: rules.match(n) for n in names}
    lookup = pl.DataFrame(
        {"name": list(mapping), "phase": list(mapping.values())},
        schema={"name": pl.String, "phase": pl.String},
    )
    return ann.join(lookup, on="name", how="inner").filter(pl.col("phase").is_not_null())


def rank_phases(run_dir: Path, rank: int, rules: RuleTable | None = None) -> RankPhases | None:
    """Phase instances and cycles of one rank, or None when the rank has no phases at all."""
    rules = rules or load_rules()
    collector_cycles = _load.read_rank_table(run_dir, "cycles", rank)
    events = _load.scan_events(run_dir, rank)
    if events is not None:
        ann = _named_ranges(_load.annotation_rows(events), rules)
        ph = ann.filter(pl.col("phase") != CYCLE)
        if ph.height:
            src = pl.when(pl.col("name").str.starts_with("tracekit/"))
            ph = ph.with_columns(
                src.then(pl.lit("annotation")).otherwise(pl.lit("rule")).alias("source")
            )
            inst = nest(ph.select("pid", "tid", "phase", "start_ns", "end_ns", "source"))
            marks = ann.filter(pl.col("phase") == CYCLE).select("pid", "tid", "start_ns", "end_ns")
            inst, cycles = assign_cycles(inst, marks, collector_cycles, rank)
            return RankPhases(rank, _finish(inst, rank), cycles, approximate=False)
    table = _load.read_rank_table(run_dir, "phases", rank)
    if table is not None and table.height:
        return _from_collector(table, collector_cycles, rank)
    return None


def _from_collector(
    table: pl.DataFrame, collector_cycles: pl.DataFrame | None, rank: int
) -> RankPhases:
    base = table.with_columns(
        pl.col("phase").cast(pl.String),
        pl.col("pid").fill_null(0),
        pl.col("tid").fill_null(0),
        pl.lit("collector").alias("source"),
    )
    inst = nest(base.drop("depth", "parent", "rank", strict=False))
    # Sub-phases take the cycle of their outermost phase.
    tops = inst.select(pl.col("inst").alias("top"), pl.col("cycle").alias("_c"))
    inst = inst.join(tops, on="top", how="left").with_columns(
        pl.col("_c").fill_null(-1).alias("cycle")
    )
    cycles = cycles_from_collector(inst, collector_cycles, rank)
    return RankPhases(rank, _finish(inst.drop("_c"), rank), cycles, approximate=True)


def _finish(inst: pl.DataFrame, rank: int) -> pl.DataFrame:
    return inst.with_columns(pl.lit(rank, dtype=pl.Int32).alias("rank")).select(
        list(INSTANCE_COLUMNS) + [c for c in inst.columns if c not in INSTANCE_COLUMNS]
    )


def iter_rank_phases(run_dir: Path, rules: RuleTable | None = None) -> Iterator[RankPhases]:
    """RankPhases of every rank that has phases, one at a time (so a caller can finish with a
    rank before the next is read); StoreError when no rank has any phase."""
    run_dir = Path(run_dir)
    found = False
    for r in _load.run_ranks(run_dir):
        p = rank_phases(run_dir, r, rules)
        if p is not None:
            found = True
            yield p
    if not found:
        raise _no_phases(run_dir)


def all_rank_phases(run_dir: Path, rules: RuleTable | None = None) -> list[RankPhases]:
    """RankPhases of every rank; StoreError when no rank has any phase."""
    return list(iter_rank_phases(run_dir, rules))


def _no_phases(run_dir: Path) -> StoreError:
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


def phase_instances(run_dir: Path, *, rules: Path | None = None) -> pl.DataFrame:
    """Every phase instance of the run (sub-phases included), one row each."""
    table = load_rules(rules)
    frames = [p.instances.select(INSTANCE_COLUMNS) for p in all_rank_phases(run_dir, table)]
    return pl.concat(frames, how="vertical_relaxed").sort("rank", "start_ns")
