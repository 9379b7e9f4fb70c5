"""Acceptance as the server counts it, over a run's kept cycles (docs/DEFINITIONS.md
"Acceptance length").

Merge writes each cycle's counts into the `cycles` table when the phase map read each request's
numbers (tracekit/store/acceptance.py): requests that drafted (`drafts`), draft tokens,
accepted tokens, requests, and requests accepted at each draft position. Pooled over the
cycles, as vLLM's counters are: mean acceptance length = 1 + accepted / drafts, acceptance rate
= accepted / draft tokens, position p's rate = requests accepted at p / drafts. A cycle with a
count but no per-request numbers (one sequence a cycle: the demo, a delta rule) is one request
that drafted: (accept_len - 1) accepted of 1 draft. Each cycle counted once, from its lowest
rank (all TP ranks run the same steps).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from tracekit.store.reader import has_table, read_table

DETAIL = ("drafts", "drafted_tokens", "accepted_tokens", "requests", "accepted_per_pos")


def step_counts(run_dir: Path) -> pl.DataFrame | None:
    """One row a cycle (its lowest rank's): cycle, accept_len and the DETAIL columns; None
    when the store's cycles carry no per-request counts (a store written before them, a map
    that reads one number a cycle, a foreign trace)."""
    if not has_table(run_dir, "cycles"):
        return None
    cyc = read_table(run_dir, "cycles")
    if "drafts" not in cyc.columns or cyc["drafts"].null_count() == cyc.height:
        return None
    return (
        cyc.sort("rank", "cycle")
        .unique("cycle", keep="first", maintain_order=True)
        .select("cycle", "accept_len", *DETAIL)
    )


def pooled(steps: pl.DataFrame) -> dict[str, Any] | None:
    """The pooled figures of `steps` (rows of `step_counts`, already the kept cycles): None
    when no cycle has a count."""
    al = pl.col("accept_len")
    has = pl.col("drafts").is_not_null()
    rows = steps.filter(has | al.is_not_null()).with_columns(
        pl.when(has).then(pl.col("drafts")).otherwise(1).alias("_d"),
        pl.when(has).then(pl.col("accepted_tokens")).otherwise(al - 1.0).alias("_a"),
    )
    drafts = int(rows["_d"].sum()) if rows.height else 0
    if drafts == 0:
        return None
    accepted = float(rows["_a"].sum())
    detail = steps.filter(has)
    tokens = detail.filter(pl.col("drafted_tokens").is_not_null())
    drafted = int(tokens["drafted_tokens"].sum()) if tokens.height else None
    # position rates over the cycles that counted positions (with their own drafts)
    pos = detail.filter(pl.col("accepted_per_pos").is_not_null())
    per_pos: list[float] | None = None
    pos_drafts = int(pos["drafts"].sum()) if pos.height else 0
    if pos_drafts:
        width = max((len(p) for p in pos["accepted_per_pos"].to_list()), default=0)
        sums = [0] * width
        for p in pos["accepted_per_pos"].to_list():
            for i, n in enumerate(p):
                sums[i] += n
        per_pos = [n / pos_drafts for n in sums]
    req = detail["requests"].drop_nulls()
    return {
        "accept_len_mean": 1.0 + accepted / drafts,
        "drafts": drafts,
        "accepted_tokens": accepted,
        "drafted_tokens": drafted,
        "accept_rate": accepted / drafted if drafted else None,
        "accept_rate_per_pos": per_pos,
        "requests_per_step": float(req.mean()) if req.len() else None,  # type: ignore[arg-type]
        "steps": rows.height,
    }


def kept_acceptance(run_dir: Path, steady: Any) -> dict[str, Any] | None:
    """`pooled` over the cycles `steady` keeps (analyzers/steady.py `Steady.keep`); None
    when the run has no per-request counts (then the mean is summary.cycle_totals')."""
    steps = step_counts(run_dir)
    return None if steps is None else pooled(steady.keep(steps))
