"""Where a phase range sits: its nesting (depth, parent, top) and its cycle. The one definition.

Every phase range comes through here, whatever recorded it: merge places the collector's records
before it writes the `phases` table (tracekit/store/rank_tables.py), the analyzers place a
trace's annotation ranges (full mode, foreign traces: analyzers/phases.py) and trust the
`phases` table for the records. docs/DEFINITIONS.md ("Phase instance", "Cycle") states the
rules; tests/unit/store/test_placement.py checks them.

Nesting (`nest`): on one (pid, tid), a range is nested in the ranges that started before it (or
at the same time and end later; equal ranges: the first recorded, `seq`, is the outer) and end
after its start: the rule of a call stack. `depth` counts its enclosing ranges, `parent` is the
phase of the innermost one, `top` the `inst` of the outermost (itself at depth 0).

Cycle membership (`place`): a top-level range belongs to the cycle whose span [start_ns,
end_ns] holds its midpoint; its sub-phases take its cycle; a range in no cycle gets -1 (a new
request's prefill between two cycles). The midpoint, not the start: a profiler range and the
collector's record of the same call differ by microseconds at either end (two clocks, the range
opened around or inside the record), which must not move the call to another cycle.
"""

from __future__ import annotations

import numpy as np
import polars as pl

OUTSIDE = -1  # the cycle of a range in no cycle


def nesting_order(df: pl.DataFrame) -> pl.DataFrame:
    """Rows in nesting order: by thread, start, longer first, then record order (`seq`)."""
    keys = ["pid", "tid", "start_ns", "end_ns"]
    desc = [False, False, False, True]
    if "seq" in df.columns:
        keys.append("seq")
        desc.append(False)
    return df.sort(keys, descending=desc, maintain_order=True)


def nest(ranges: pl.DataFrame) -> pl.DataFrame:
    """Add inst, depth, parent and top to ranges (pid, tid, phase, start_ns, end_ns[, seq], ...).

    Returns the rows in nesting order (`nesting_order`), `inst` numbering them from 0.

    The rule is that of a stack walked in that order (pop while the top ended at or before the
    new start, then push); `_nest_loop` is that walk. Its result has a closed form, computed
    here on whole columns: the range's parent is the LAST earlier range on its thread that ends
    after its start (every later one ended before it and was popped; that one never can be), its
    depth the parent's plus one and its top the parent's top.
    """
    df = nesting_order(ranges).with_row_index("inst").with_columns(pl.col("inst").cast(pl.Int64))
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
    """`nest`'s rule as the stack walk itself, on rows already in nesting order and numbered."""
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


def place(inst: pl.DataFrame, cycles: pl.DataFrame, *, by: str | None = None) -> pl.DataFrame:
    """`inst` (nested: inst, depth, top, start_ns, end_ns) with `cycle`: the cycle (of `cycles`:
    cycle, start_ns, end_ns) whose span holds its top-level range's midpoint, else OUTSIDE.

    `by`: a column of both frames that must match too (merge passes `pid` when several
    processes of one rank each numbered their own cycles, which may overlap in time)."""
    keys = [by] if by else []
    lookup = cycles.select(
        *keys,
        pl.col("start_ns").cast(pl.Int64).alias("_cs"),
        pl.col("end_ns").cast(pl.Int64).alias("_ce"),
        pl.col("cycle").cast(pl.Int64).alias("_c"),
    ).sort("_cs")
    mid = ((pl.col("start_ns") + pl.col("end_ns")) // 2).alias("_mid")
    tops = (
        inst.filter(pl.col("depth") == 0)
        .select("inst", *keys, mid)
        .filter(pl.col("_mid").is_not_null())
        .sort("_mid")
        .join_asof(
            lookup,
            left_on="_mid",
            right_on="_cs",
            by=by,
            check_sortedness=False,  # sorted by time; polars cannot check it per group
        )
        .select(
            pl.col("inst").alias("top"),
            pl.when(pl.col("_c").is_not_null() & (pl.col("_mid") <= pl.col("_ce")))
            .then(pl.col("_c"))
            .otherwise(OUTSIDE)
            .alias("_placed"),
        )
    )
    return (
        inst.drop("cycle", strict=False)
        .join(tops, on="top", how="left", maintain_order="left")
        .with_columns(pl.col("_placed").fill_null(OUTSIDE).cast(pl.Int64).alias("cycle"))
        .drop("_placed")
    )
