"""A step's acceptance as the server counts it, from the readings of its accept rules.

vLLM counts a step's speculative decoding per request that drafted: `num_drafts` (requests with
draft tokens), `num_draft_tokens`, `num_accepted_tokens` and `num_accepted_tokens_per_pos`
(vllm/v1/spec_decode/metrics.py); its mean acceptance length is 1 + accepted / drafts, pooled.
`pooled_steps` gives the same numbers for each cycle from what the map read in it
(docs/DEFINITIONS.md "Acceptance length"): each request's tokens (1 + accepted; 0 for a request
whose output was discarded), from a "count" rule with a list value, and each request's draft
tokens, from a "drafted" rule. Merge writes them into the `cycles` table.
"""

from __future__ import annotations

import polars as pl

# the `cycles` columns of a step's counts (tracekit/store/schema.py), and their types
STEP_COLUMNS: dict[str, pl.DataType] = {
    "drafts": pl.Int64(),  # requests that drafted (vLLM's num_drafts)
    "drafted_tokens": pl.Int64(),  # draft tokens (vLLM's num_draft_tokens); null: no rule
    "accepted_tokens": pl.Float64(),  # accepted draft tokens, summed over the requests
    "requests": pl.Int64(),  # requests that emitted tokens in the step
    "accepted_per_pos": pl.List(pl.Int64()),  # requests whose draft position p was accepted
}
_EL = pl.element()


def _per_pos(steps: pl.DataFrame) -> pl.Series:
    """Requests whose position p (0-based, p < `_width`) was accepted: those with more than p
    accepted (`_acc`); null when an accepted count is not a whole number."""
    steps = steps.with_row_index("_s")
    pos = steps.select("_s", pl.int_ranges(0, "_width").alias("p")).explode("p").drop_nulls()
    acc = steps.select("_s", "_acc").explode("_acc").drop_nulls()
    counts = (
        pos.join(acc, on="_s", how="left")
        .group_by("_s", "p")
        .agg((pl.col("_acc") > pl.col("p")).sum().cast(pl.Int64).alias("n"))
        .sort("_s", "p")
        .group_by("_s", maintain_order=True)
        .agg("n")
    )
    whole = steps.select(
        "_s", pl.col("_acc").list.eval((_EL.floor() != _EL).any()).list.first().alias("_frac")
    )
    out = whole.join(counts, on="_s", how="left", maintain_order="left").select(
        pl.when(pl.col("_frac").fill_null(False))
        .then(None)
        .otherwise(pl.col("n").fill_null(pl.lit([], pl.List(pl.Int64))))
        .alias("accepted_per_pos")
    )
    return out.to_series()


def pooled_steps(readings: pl.DataFrame, key: list[str]) -> pl.DataFrame:
    """Each step's counts (`key`, STEP_COLUMNS, `accept_len`) from its per-request readings:
    `readings` has `key`, `acc_tokens` (a "count" rule's list: each request's tokens) and
    `acc_drafted` (a "drafted" rule's list: each request's draft tokens), null where a row
    read none. A step is a `key` with at least one reading.

    With draft tokens: drafts = requests with > 0 of them, accepted = the sum over requests of
    max(tokens - 1, 0) (a request without drafts emits its one token: 0 accepted), requests =
    those with >= 1 token (null without a tokens reading). Without: every request with >= 1
    token drafted, accepted = tokens - 1. accept_len = 1 + accepted / drafts (null when no
    request drafted)."""
    lists = pl.List(pl.Float64)
    read = readings.filter(pl.col("acc_tokens").is_not_null() | pl.col("acc_drafted").is_not_null())
    steps = read.group_by(key, maintain_order=True).agg(
        pl.col("acc_tokens").is_not_null().any().alias("_has_t"),
        pl.col("acc_drafted").is_not_null().any().alias("_has_d"),
        pl.col("acc_tokens")
        .cast(lists)
        .list.explode(keep_nulls=False, empty_as_null=False)
        .alias("_t"),
        pl.col("acc_drafted")
        .cast(lists)
        .list.explode(keep_nulls=False, empty_as_null=False)
        .alias("_d"),
    )
    has_d, t, d = pl.col("_has_d"), pl.col("_t"), pl.col("_d")
    acc = (
        pl.when(has_d)
        .then(t.list.eval(pl.max_horizontal(_EL - 1.0, pl.lit(0.0))))
        .otherwise(t.list.eval(_EL.filter(_EL >= 1) - 1.0))
    )
    steps = steps.with_columns(acc.alias("_acc"))
    top = pl.when(has_d).then(pl.max_horizontal(d.list.max(), pl.col("_acc").list.max()))
    width = top.otherwise(pl.col("_acc").list.max()).fill_null(0).cast(pl.Int64).clip(0)
    steps = steps.with_columns(
        pl.when(has_d)
        .then(d.list.eval(_EL > 0).list.sum())
        .otherwise(pl.col("_acc").list.len())
        .cast(pl.Int64)
        .alias("drafts"),
        pl.when(has_d).then(d.list.sum().cast(pl.Int64)).alias("drafted_tokens"),
        pl.col("_acc").list.sum().cast(pl.Float64).alias("accepted_tokens"),
        pl.when(~has_d)
        .then(pl.col("_acc").list.len())
        .when(pl.col("_has_t"))
        .then(t.list.eval(_EL >= 1).list.sum())
        .cast(pl.Int64)
        .alias("requests"),
        width.alias("_width"),
    )
    steps = steps.with_columns(_per_pos(steps))
    accept = pl.when(pl.col("drafts") > 0).then(1.0 + pl.col("accepted_tokens") / pl.col("drafts"))
    return steps.select(*key, *STEP_COLUMNS, accept.alias("accept_len"))
