"""Merge's cycles: which raw cycles of a rank's records are cycles, their numbers, and the
`phases` rows placed in them (tracekit/store/placement.py decides nesting and membership).

Raw cycle numbers (the recorder's, per process) only say which records a cycle rule groups:
with a cycle target every outermost call is a raw cycle, with `starts_with` a raw cycle starts
at each outermost call of that phase. A raw cycle is a cycle when the map's `require` phase ran
in it (a prefill batch is none). The recorder counts raw cycles in memory, as each starts, so a
raw number names the same step on every rank of a tensor-parallel run whatever records were
lost. Cycle numbers are therefore given run-wide (`CycleIds`): raw numbers in order, counting
those that are cycles on any rank, from the lowest raw number any rank kept; a raw cycle whose
records every rank lost (a damaged segment) keeps its number too, as if it were a cycle, so
the numbers after it do not move. A rank whose cycles several processes recorded (a restarted
rank) numbers its own from 0, in start order. Each phase row then gets its depth, parent and
cycle from placement.py, like a trace's annotation ranges.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

import polars as pl

from tracekit.store.acceptance import StepAccept, step_accept
from tracekit.store.placement import nest, place
from tracekit.store.raw.run import state_of
from tracekit.store.schema import PHASES

# `cycles.source`: how the cycle was found (analyzers/cycles.py adds the trace's kinds)
CycleSource = Literal["cycle_target", "starts_with", "cycle_annotation", "phases", "cycles"]
Row = dict[str, Any]
RawKey = tuple[int, int]  # (pid, raw cycle number); pid 0 unless cycles are per process
MAX_LOST_SPAN = 1_000_000  # raw cycles: a longer "lost" span is not numbered (a damaged value)


def _phase_row_types() -> dict[str, pl.DataType]:
    """The `phases` table's columns (store/schema.py), in its order, names as plain strings."""
    empty = pl.from_arrow(PHASES.empty_table())
    assert isinstance(empty, pl.DataFrame)
    return {n: pl.String() if t == pl.Categorical else t for n, t in empty.schema.items()}


PHASE_ROW_COLUMNS = _phase_row_types()  # the `phases` rows merge writes


def cycle_source(kind: CycleSource, phase: str | None = None) -> str:
    """The `source` value of a cycle found by `kind` (`starts_with:<phase>` for starts_with)."""
    return f"{kind}:{phase}" if kind == "starts_with" else kind


def _valid(v: Any) -> bool:
    return v is not None and v == v


def apply_deltas(rows: list[Row], sources: list[tuple[str, str | None, str]]) -> None:
    """Turn the lengths that accept rules of kind "delta" recorded into tokens per call, in
    place. `sources`: (row kind, phase or None for the cycle rows, state "before" | "after").

    The calls are the outermost ones of those phases (or the cycle-target calls), per process
    in time order. A length "before" a cycle (read from an argument) gets the growth to the
    "after" length read in the same cycle when there is one, else to the next "before" length;
    an "after" length (a return value) the growth from the previous "after" length, unless its
    cycle has a "before" length (which then carries the cycle's tokens). A growth <= 0 (a new
    sequence began) and a call without that neighbour have none (DEFINITIONS.md "acceptance
    rules", "The last cycle")."""
    want = {(kind, phase): state for kind, phase, state in sources}
    calls: dict[Any, list[tuple[Row, str, Any]]] = {}
    for r in rows:
        state = want.get((r["kind"], r["phase"] if r["kind"] == "phase" else None))
        if state is None:
            continue
        if r["depth"] != 0:
            r["accept_len"] = None
            continue
        calls.setdefault(r.get("pid"), []).append((r, state, r["accept_len"]))
    for group in calls.values():
        _deltas(group)


def _deltas(group: list[tuple[Row, str, Any]]) -> None:
    """One process's delta readings (row, state, length), in time order."""
    after = {r["cycle"]: v for r, st, v in group if st == "after" and _valid(v)}
    before_cycles = {r["cycle"] for r, st, v in group if st == "before" and _valid(v)}
    befores = [i for i, (_r, st, _v) in enumerate(group) if st == "before"]
    next_before = {i: group[j][2] for i, j in pairwise(befores)}
    prev_after = None
    for i, (r, st, v) in enumerate(group):
        if st == "before":
            end = after.get(r["cycle"], next_before.get(i))
            grow = end - v if _valid(v) and _valid(end) else None
        else:
            grow = v - prev_after if _valid(v) and _valid(prev_after) else None
            prev_after = v
            if r["cycle"] in before_cycles:
                grow = None  # the cycle's "before" reading carries its tokens
        r["accept_len"] = grow if grow is not None and grow > 0 else None


class _RawCycles:
    """A rank's records grouped by raw cycle, and the `require` rule over them."""

    def __init__(self, phase_rows: list[Row], cycle_rows: list[Row], cfg: dict[str, Any]) -> None:
        self.require = cfg.get("require")
        # Raw cycle numbers count per process. When several processes of one rank recorded
        # cycles (a restarted rank), a cycle is (pid, number), ordered by its start.
        owners = {r.get("pid") for r in (cycle_rows or [r for r in phase_rows if r["cycle"] >= 0])}
        self.per_pid = len(owners) > 1
        self.groups: dict[RawKey, list[Row]] = {}
        for r in phase_rows:
            self.groups.setdefault(self.key(r), []).append(r)

    def key(self, r: Row) -> RawKey:
        return (r.get("pid") or 0, r["cycle"]) if self.per_pid else (0, r["cycle"])

    def qualifies(self, raw: RawKey) -> bool:
        group = self.groups.get(raw, [])
        return self.require is None or any(r["phase"] == self.require for r in group)

    def phase_accept(self, raw: RawKey) -> float | None:
        """The last outermost phase's tokens in the raw cycle (a phase's accept rule)."""
        vals = [
            r["accept_len"]
            for r in self.groups.get(raw, [])
            if r["accept_len"] is not None and r["depth"] == 0
        ]
        return vals[-1] if vals else None

    def step(self, raw: RawKey, cycle_row: Row | None = None) -> StepAccept | None:
        """The raw cycle's per-request readings (its outermost phases', its cycle target's)
        pooled as the server counts them (tracekit/store/acceptance.py)."""
        rows = [r for r in self.groups.get(raw, []) if r["depth"] == 0]
        if cycle_row is not None:
            rows.append(cycle_row)
        tokens = [r["acc_tokens"] for r in rows if r.get("acc_tokens") is not None]
        drafted = [r["acc_drafted"] for r in rows if r.get("acc_drafted") is not None]
        return step_accept(tokens, drafted)


def _cycle(
    new: int, pid: int, start: int, end: int, accept: float | None, src: str,
    step: StepAccept | None = None,
) -> Row:  # fmt: skip
    """A `cycles` row; with per-request readings (`step`) its acceptance is theirs, pooled."""
    return {
        "cycle": new,
        "start_ns": start,
        "end_ns": end,
        "accept_len": accept if step is None else step.accept_len,
        "source": src,
        "pid": pid,  # the owner, for placement when cycles are per process; not written
        **(step.row() if step is not None else {}),
    }


def _number(ids: CycleIds | None, raw: _RawCycles, k: RawKey, so_far: int) -> int:
    return ids.numbers[k[1]] if ids is not None and not raw.per_pid else so_far


def _target_cycles(raw: _RawCycles, cycle_rows: list[Row], ids: CycleIds | None) -> list[Row]:
    """Cycles of a cycle target: its qualifying calls, spans and accept as recorded."""
    order: Callable[[Row], Any] = (
        (lambda r: (r["start_ns"], r["cycle"])) if raw.per_pid else (lambda r: r["cycle"])
    )
    cycles: list[Row] = []
    seen: set[RawKey] = set()
    for c in sorted(cycle_rows, key=order):
        k = raw.key(c)
        if not raw.qualifies(k) or k in seen:
            continue
        seen.add(k)
        acc = c["accept_len"] if c["accept_len"] is not None else raw.phase_accept(k)
        src = cycle_source("cycle_target")
        n = _number(ids, raw, k, len(cycles))
        step = raw.step(k, c)
        cycles.append(_cycle(n, k[0], c["start_ns"], c["end_ns"], acc, src, step))
    return cycles


def _starts_with_cycles(raw: _RawCycles, starts_with: str, ids: CycleIds | None) -> list[Row]:
    """Cycles of a `starts_with` rule: each qualifying raw cycle's extent of phases."""
    firsts = {k: min(r["start_ns"] for r in group) for k, group in raw.groups.items()}
    started = [k for k in raw.groups if k[1] >= 0]
    order = sorted(started, key=lambda k: (firsts[k], k)) if raw.per_pid else sorted(started)
    cycles: list[Row] = []
    src = cycle_source("starts_with", starts_with)
    for k in order:
        if not raw.qualifies(k):
            continue
        group = raw.groups[k]
        start, end = min(r["start_ns"] for r in group), max(r["end_ns"] for r in group)
        n = _number(ids, raw, k, len(cycles))
        acc, step = raw.phase_accept(k), raw.step(k)
        cycles.append(_cycle(n, k[0], start, end, acc, src, step))
    return cycles


def _nested(phase_rows: list[Row]) -> pl.DataFrame:
    """The phase rows' ranges nested by placement.py (`_row`: the row's index); the rows take
    its depth and parent (the delta and accept rules below count outermost calls by them)."""
    keys = ("phase", "pid", "tid", "seq", "start_ns", "end_ns")
    frame = pl.DataFrame(
        {c: [r.get(c) for r in phase_rows] for c in keys},
        schema={c: PHASE_ROW_COLUMNS[c] for c in keys},
    ).with_row_index("_row")
    inst = nest(frame)
    for i, depth, parent in inst.select("_row", "depth", "parent").iter_rows():
        phase_rows[i]["depth"] = depth
        phase_rows[i]["parent"] = parent
    return inst


def _placed(
    phase_rows: list[Row], inst: pl.DataFrame, cycles: list[Row], per_pid: bool
) -> list[Row]:
    """The `phases` rows: the phase rows with their cycle from placement.py."""
    spans = pl.DataFrame(
        {k: [c[k] for c in cycles] for k in ("cycle", "start_ns", "end_ns", "pid")},
        schema={"cycle": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64, "pid": pl.Int64},
    )
    placed = place(inst, spans, by="pid" if per_pid else None).sort("_row")["cycle"]
    return [
        {c: (cycle if c == "cycle" else r.get(c)) for c in PHASE_ROW_COLUMNS}
        for r, cycle in zip(phase_rows, placed.to_list(), strict=True)
    ]


def phases_and_cycles(
    records: list[Row], cfg: dict[str, Any], ids: CycleIds | None = None
) -> tuple[list[Row], list[Row]]:
    """A rank's `phases` and `cycles` rows from its decoded records (with `pid`).

    `cfg`: the map's cycle rule (`require`, `starts_with`) and its accept rules of kind
    "delta" (`delta_phases`: phase -> "before" | "after", `cycle_delta`; run.py). `ids`: the
    run's cycle numbers (`cycle_ids`); without, the rank's cycles are numbered from 0."""
    rows = sorted(records, key=lambda r: (r["start_ns"], r["seq"]))
    phase_rows = [r for r in rows if r["kind"] == "phase"]
    inst = _nested(phase_rows)
    sources = [
        ("phase", name, state_of(src)) for name, src in (cfg.get("delta_phases") or {}).items()
    ]
    if cfg.get("cycle_delta"):
        sources.append(("cycle", None, state_of(cfg["cycle_delta"])))
    if sources:
        apply_deltas(rows, sources)
    cycle_rows = [r for r in rows if r["kind"] == "cycle"]
    raw = _RawCycles(phase_rows, cycle_rows, cfg)
    if cycle_rows:
        cycles = _target_cycles(raw, cycle_rows, ids)
    elif cfg.get("starts_with"):
        cycles = _starts_with_cycles(raw, cfg["starts_with"], ids)
    else:
        cycles = []
    phases = _placed(phase_rows, inst, cycles, raw.per_pid)
    return phases, [{k: v for k, v in c.items() if k != "pid"} for c in cycles]


def raw_cycle_status(records: list[Row], cfg: dict[str, Any]) -> dict[int, bool] | None:
    """Raw cycle number -> whether it is a cycle (the `require` rule), for one rank's records;
    None when several of its processes recorded cycles (their raw numbers are per process)."""
    cycle_rows = [r for r in records if r["kind"] == "cycle" and r["cycle"] >= 0]
    phase_rows = [r for r in records if r["kind"] == "phase" and r["cycle"] >= 0]
    if len({r.get("pid") for r in (cycle_rows or phase_rows)}) > 1:
        return None
    if cycle_rows:
        keys = {r["cycle"] for r in cycle_rows}
    elif cfg.get("starts_with"):
        keys = {r["cycle"] for r in phase_rows}
    else:
        return {}
    require = cfg.get("require")
    ran = {r["cycle"] for r in phase_rows if r["phase"] == require}
    return {k: require is None or k in ran for k in keys}


@dataclass
class CycleIds:
    """The run's cycle numbers: raw cycle number -> cycle number, the same on every rank."""

    numbers: dict[int, int] = field(default_factory=dict)
    disagree: list[int] = field(default_factory=list)  # raw numbers the ranks count differently


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
            if not _within(raw, spans):
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
