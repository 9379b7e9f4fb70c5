"""Accept rules of kind "delta": the lengths they recorded turned into tokens per call.

The calls are the outermost ones of those phases (or the cycle-target calls), per process in
time order. A length "before" a cycle (read from an argument) gets the growth to the "after"
length read in the same cycle when there is one, else to the next "before" length; an "after"
length (a return value) the growth from the previous "after" length, unless its cycle has a
"before" length (which then carries the cycle's tokens). A growth <= 0 (a new sequence began)
and a call without that neighbour have none; a nested call of such a phase has none either
(docs/DEFINITIONS.md "acceptance rules", "The last cycle"). Whole columns, no row objects.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tracekit.store.raw.cycle_rule import state_of

_GROUP = pl.col("pid").fill_null(-1).alias("_g")  # the process (records without one: together)
_V = pl.col("accept_len").fill_nan(None).alias("_v")  # a length, NaN read as none


def _states(cfg: dict[str, Any]) -> tuple[dict[str, str], str | None]:
    phases = {str(k): state_of(v) for k, v in (cfg.get("delta_phases") or {}).items()}
    cycle = cfg.get("cycle_delta")
    return phases, state_of(cycle) if cycle else None


def _growth(calls: pl.DataFrame) -> pl.DataFrame:
    """(_row, _grow) of the outermost calls (`_row` time order, `_st`, `_g`, cycle, `_v`)."""
    key = ["_g", "cycle"]
    after = (
        calls.filter((pl.col("_st") == "after") & pl.col("_v").is_not_null())
        .group_by(key)
        .agg(pl.col("_v").last().alias("_after"))
    )
    before_cycles = (
        calls.filter((pl.col("_st") == "before") & pl.col("_v").is_not_null())
        .select(key)
        .unique()
        .with_columns(pl.lit(True).alias("_has_before"))
    )
    before = (
        calls.filter(pl.col("_st") == "before")
        .with_columns(pl.col("_v").shift(-1).over("_g").alias("_next"))
        .join(after, on=key, how="left", maintain_order="left")
        .select("_row", (pl.coalesce("_after", "_next") - pl.col("_v")).alias("_grow"))
    )
    grow_after = pl.col("_v") - pl.col("_v").shift(1).over("_g")
    after_rows = (
        calls.filter(pl.col("_st") == "after")
        .join(before_cycles, on=key, how="left", maintain_order="left")
        .select("_row", pl.when(pl.col("_has_before").is_null()).then(grow_after).alias("_grow"))
    )
    both = pl.concat([before, after_rows])
    return both.with_columns(pl.when(pl.col("_grow") > 0).then(pl.col("_grow")).alias("_grow"))


def apply_deltas(
    phases: pl.DataFrame, cycle_rows: pl.DataFrame, cfg: dict[str, Any]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The phase rows (nested: `depth` is placement's) and cycle rows with the `accept_len`
    of the map's delta rules (`cfg`: `delta_phases`, `cycle_delta`) turned into tokens; rows
    keep their order. Both frames carry `_row` (time order) and `pid`."""
    by_phase, cycle_state = _states(cfg)
    if not by_phase and cycle_state is None:
        return phases, cycle_rows
    state = pl.col("phase").replace_strict(by_phase, default=None, return_dtype=pl.String)
    cols = ("_row", _GROUP, "cycle", "depth", _V)
    calls = (
        pl.concat(
            [
                phases.select(*cols, state.alias("_st")),
                cycle_rows.select(*cols, pl.lit(cycle_state, pl.String).alias("_st")),
            ]
        )
        .filter(pl.col("_st").is_not_null())
        .sort("_row")
    )
    grown = calls.select("_row").join(
        _growth(calls.filter(pl.col("depth") == 0)), on="_row", how="left"
    )
    grown = grown.with_columns(pl.lit(True).alias("_hit"))

    def apply(frame: pl.DataFrame) -> pl.DataFrame:
        joined = frame.join(grown, on="_row", how="left", maintain_order="left")
        new = pl.when(pl.col("_hit")).then(pl.col("_grow")).otherwise(pl.col("accept_len"))
        return joined.with_columns(new.alias("accept_len")).drop("_grow", "_hit")

    return apply(phases), apply(cycle_rows)
