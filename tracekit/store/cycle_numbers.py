"""The run's cycle numbers: which raw cycles of a rank are cycles, and their numbers, run-wide.

Raw cycle numbers (the recorder's, per process) only say which records a cycle rule groups:
with a cycle target every outermost call is a raw cycle, with `starts_with` a raw cycle starts
at each outermost call of that phase. A raw cycle is a cycle when the map's `require` phase ran
in it (a prefill batch is none). The recorder counts raw cycles in memory, as each starts, so a
raw number names the same step on every rank of a tensor-parallel run whatever records were
lost. Cycle numbers are therefore given run-wide (`CycleIds`): raw numbers in order, counting
those that are cycles on any rank, from the lowest raw number any rank kept; a raw cycle whose
records every rank lost (a damaged segment) keeps its number too, as if it were a cycle, so
the numbers after it do not move. A rank whose cycles several processes recorded (a restarted
rank) numbers its own from 0, in start order (store/rank_tables.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

MAX_LOST_SPAN = 1_000_000  # raw cycles: a longer "lost" span is not numbered (a damaged value)


def raw_cycle_status(records: pl.DataFrame, cfg: dict[str, Any]) -> dict[int, bool] | None:
    """Raw cycle number -> whether it is a cycle (the `require` rule), for one rank's decoded
    records (with `pid`); None when several of its processes recorded cycles (their raw
    numbers are per process)."""
    started = records.filter(pl.col("cycle") >= 0)
    cycle_rows = started.filter(pl.col("kind") == "cycle")
    phase_rows = started.filter(pl.col("kind") == "phase")
    if (cycle_rows if cycle_rows.height else phase_rows)["pid"].n_unique() > 1:
        return None
    if cycle_rows.height:
        keys = cycle_rows["cycle"].unique().to_list()
    elif cfg.get("starts_with"):
        keys = phase_rows["cycle"].unique().to_list()
    else:
        return {}
    require = cfg.get("require")
    if require is None:
        return dict.fromkeys(keys, True)
    ran = set(phase_rows.filter(pl.col("phase") == require)["cycle"].unique().to_list())
    return {k: k in ran for k in keys}


@dataclass
class CycleIds:
    """The run's cycle numbers: raw cycle number -> cycle number, the same on every rank."""

    numbers: dict[int, int] = field(default_factory=dict)
    disagree: list[int] = field(default_factory=list)  # raw numbers the ranks count differently

    def frame(self) -> pl.DataFrame:
        """`numbers` as columns: cycle (raw), _number."""
        return pl.DataFrame(
            {"cycle": list(self.numbers), "_number": list(self.numbers.values())},
            schema={"cycle": pl.Int64, "_number": pl.Int64},
        )


def _merged(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(s for s in spans if 0 <= s[1] - s[0] <= MAX_LOST_SPAN):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _within(raw: int, spans: list[tuple[int, int]]) -> bool:
    return any(lo <= raw <= hi for lo, hi in spans)


def cycle_ids(ranks: list[tuple[dict[int, bool], list[tuple[int, int]]]]) -> CycleIds:
    """The run's cycle numbers from each rank's `raw_cycle_status` and the raw cycles it may
    have lost (inclusive spans around each damage: the raw cycles on either side of one may
    be partial). A raw number is a cycle when it is one on any rank; one that no rank read
    whole (inside every lost span that touches it, and certain nowhere else) counts as one,
    its number kept free. Ranks count a raw number differently (`disagree`) only where both
    read it whole."""
    true_any: set[int] = set()
    certain: dict[int, set[bool]] = {}
    for status, spans in ranks:
        for raw, is_cycle in status.items():
            if is_cycle:
                true_any.add(raw)
            if not spans or not _within(raw, spans):
                certain.setdefault(raw, set()).add(is_cycle)
    ids = CycleIds(disagree=sorted(r for r, s in certain.items() if len(s) > 1))
    every = {raw for status, _ in ranks for raw in status}
    if not every:
        return ids
    first = min(every)
    lost = _merged(span for _, spans in ranks for span in spans)
    unsure = {r for lo, hi in lost for r in range(max(lo, first), hi + 1) if r not in certain}
    n = 0
    for raw in sorted(every | unsure):
        if raw in true_any or raw in unsure:
            ids.numbers[raw] = n
            n += 1
    return ids
