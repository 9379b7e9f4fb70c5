"""Hand-built records for the rank tables' tests: dict rows in, dict rows out.

Merge keeps records in columns (tracekit/store/rank_tables.py takes a polars frame); tests
write their records as dicts, so these helpers put them in the decoded record's columns
(missing keys are nulls) and give the tables back as one dict a row."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from tracekit.store.cycle_numbers import CycleIds
from tracekit.store.rank_tables import phases_and_cycles as rank_tables
from tracekit.store.raw.records import record_types

Row = dict[str, Any]


def records_frame(rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """Decoded records (store/raw/records.py's columns) from dict rows."""
    types = record_types()
    return pl.DataFrame([{k: r.get(k) for k in types} for r in rows], schema=types)


def phases_and_cycles(
    rows: Iterable[Mapping[str, Any]], cfg: dict[str, Any], ids: CycleIds | None = None
) -> tuple[list[Row], list[Row]]:
    """store/rank_tables.py's `phases_and_cycles` on dict rows: its tables as dict rows."""
    phases, cycles = rank_tables(records_frame(rows), cfg, ids)
    return phases.to_dicts(), cycles.to_dicts()
