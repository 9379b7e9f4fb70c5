"""Phase instances and cycles from raw records as they arrive: the live side of merge + breakdown.

The rules are merge's and light-mode breakdown's (docs/DEFINITIONS.md), applied one record
batch at a time, so `tracekit top` and the Prometheus metrics agree with `tracekit breakdown`
on a light-mode run:

- a **phase instance** is a top-level (depth 0) phase record inside a cycle (raw cycle >= 0);
  records are decoded (tracekit/store/raw/records.py) and nested (tracekit/store/placement.py
  `nest`) as merge does; a record whose enclosing call has not been flushed yet (the collector
  recorded it at depth > 0) waits for it in the next batch;
- its device interval is its CUDA-event span, or its CPU range on a CPU-only run; the spans of
  its `allreduce` sub-phases are **allreduce**, the rest **forward**; the idle time
  since the previous top-level phase of the same thread ended (for the first one: since the
  first cycle record's start) is **overhead**; `wall = forward + allreduce + overhead`;
- a **cycle** is a cycle-target record (dropped when the map's `require` phase did not run in
  it), or, with `starts_with`, each raw cycle number; its acceptance length is the cycle
  record's, else the last top-level phase's in the cycle. With cycle targets a phase recorded
  after its cycle's record (between two cycles: a new request's prefill) is in no cycle. Acceptance rules of kind `delta`
  give tokens only at merge (they need the next call); live, such cycles have none.

State is bounded: per thread a cursor, per process the records waiting for their enclosing call
and the last few raw cycles.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from tracekit.errors import InputError
from tracekit.store.placement import nest
from tracekit.store.raw.cycle_rule import CycleRule, read_cycle_rule
from tracekit.store.raw.files import read_json

if TYPE_CHECKING:
    import pyarrow as pa

    from tracekit.live.tail import ProcessTail

RECENT_CYCLES = 64  # raw cycles remembered per process (require checks, phase acceptance)


@dataclass(frozen=True)
class Instance:
    rank: int
    phase: str
    cycle: int  # raw cycle number of its process
    end_ns: int
    wall_ns: int
    forward_ns: int
    allreduce_ns: int
    overhead_ns: int
    cpu_ns: int
    graph_replayed: bool


@dataclass(frozen=True)
class Cycle:
    rank: int
    cycle: int
    end_ns: int
    accept_len: float | None


Span = tuple[int, int]


@dataclass
class _ThreadState:
    cursor: int | None = None  # end of the previous top-level phase's device interval


@dataclass
class _ProcState:
    threads: dict[int, _ThreadState] = field(default_factory=dict)
    with_require: deque[int] = field(default_factory=lambda: deque(maxlen=RECENT_CYCLES))
    phase_accept: dict[int, float] = field(default_factory=dict)
    last_cycle: int = -1  # starts_with: highest raw cycle seen
    closed_cycle: int = -1  # cycle targets: highest raw cycle whose cycle record was read
    window_ns: int | None = None  # the first cycle record's start (breakdown's window start)
    last_end: int = 0
    # top-level rows of the first cycle read before its cycle record (a timer flush in the
    # middle of cycle 0): their overhead counts from the window start, known with that record
    deferred: list[tuple[_ThreadState, dict[str, Any], str, int, list[Span]]] = field(
        default_factory=list
    )
    # phase records whose enclosing call is in a later batch (flushed before it ended)
    waiting: list[dict[str, Any]] = field(default_factory=list)


# without a readable run.json (not written yet, or damaged): the default maps' rule
DEFAULT_RULE = CycleRule(
    targets=[], starts_with="draft", require=None, delta_phases={}, cycle_delta=None
)


def run_cycle_rule(run_json: Path) -> CycleRule:
    """The map's cycle rule as merge reads it from the run's run.json (store/raw/cycle_rule.py
    `read_cycle_rule`: the `cycle_rule` the launcher wrote at start, or an older run's
    `cycle_source`); without a readable one, DEFAULT_RULE (a cycle at each outermost `draft`)."""
    run, why = read_json(run_json)
    try:
        rule, _warning = read_cycle_rule(run, run_json, why)
    except InputError:
        return DEFAULT_RULE
    return DEFAULT_RULE if rule is None else rule


def _span(r: dict[str, Any]) -> Span:
    g0, g1 = r.get("gpu_start_ns"), r.get("gpu_end_ns")
    if g0 is not None and g1 is not None:
        return int(g0), int(g1)
    return int(r["start_ns"]), int(r["end_ns"])


_NEST_COLUMNS = {
    "pid": pl.Int64,
    "tid": pl.Int64,
    "phase": pl.String,
    "seq": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
}


def nested(
    waiting: list[dict[str, Any]], rows: list[dict[str, Any]], pid: int
) -> tuple[dict[int, list[Span]], list[dict[str, Any]]]:
    """Nest a process's decoded phase records (`rows`, after those `waiting` from earlier
    batches) with merge's rule (placement.nest). Returns, keyed by `id(row)`, each top-level
    record's `allreduce` sub-phase spans, and the records still waiting: those nested in (or
    being) a record of depth 0 here that the collector recorded at depth > 0, whose enclosing
    call comes in a later batch. A waiting record that ended before a top-level record of its
    thread started never gets one (calls on a thread nest) and is dropped."""
    window = waiting + rows
    if not window:
        return {}, []
    frame = pl.DataFrame(
        {c: [pid if c == "pid" else r[c] for r in window] for c in _NEST_COLUMNS},
        schema=_NEST_COLUMNS,
    ).with_row_index("_row")
    inst = nest(frame)
    row_of: list[int] = inst["_row"].to_list()  # nesting order -> window index
    depth: list[int] = inst["depth"].to_list()
    top: list[int] = inst["top"].to_list()  # position (inst) of the outermost range
    tops: dict[int, list[Span]] = {}
    last_top: dict[int, int] = {}  # tid -> latest start of a top-level record
    for i, w in enumerate(row_of):
        if depth[i] == 0 and window[w]["depth"] == 0:
            tops[w] = []
            tid = window[w]["tid"]
            last_top[tid] = max(last_top.get(tid, window[w]["start_ns"]), window[w]["start_ns"])
    still: list[dict[str, Any]] = []
    for i, w in enumerate(row_of):
        r, t = window[w], row_of[top[i]]
        if t not in tops:
            if r["end_ns"] > last_top.get(r["tid"], r["end_ns"] - 1):
                still.append(r)
        elif depth[i] > 0 and r["phase"] == "allreduce":
            tops[t].append(_span(r))
    return {id(window[w]): subs for w, subs in tops.items()}, still


class LiveModel:
    """Feed it record batches (`feed`); it returns the phase instances and cycles completed."""

    def __init__(self, rule: CycleRule) -> None:
        self.rule = rule
        self._procs: dict[int, _ProcState] = {}

    def feed(
        self, proc: ProcessTail, batch: pa.RecordBatch, rank: int
    ) -> tuple[list[Instance], list[Cycle]]:
        st = self._procs.setdefault(proc.pid, _ProcState())
        rows = proc.decode(batch)
        instances = self._open_window(st, rows, rank) if st.window_ns is None else []
        cycles: list[Cycle] = []
        starts_with, require = self.rule["starts_with"], self.rule["require"]
        subs, st.waiting = nested(st.waiting, [r for r in rows if r["kind"] == "phase"], proc.pid)
        for r in rows:
            cyc = r["cycle"]
            st.last_end = max(st.last_end, r["end_ns"])
            if r["kind"] == "cycle":
                st.closed_cycle = max(st.closed_cycle, cyc)
                if starts_with is None and (require is None or cyc in st.with_require):
                    acc = _num(r["accept_len"])
                    if acc is None:
                        acc = st.phase_accept.get(cyc)
                    cycles.append(Cycle(rank, cyc, r["end_ns"], acc))
                continue
            if starts_with is None and cyc <= st.closed_cycle:
                cyc = -1  # after its cycle's record: between two cycles (a new request's prefill)
            top_subs = subs.get(id(r))
            if top_subs is None:
                continue  # a sub-phase (or waiting for its enclosing call)
            phase = r["phase"]
            if phase == require and cyc >= 0 and cyc not in st.with_require:
                st.with_require.append(cyc)
            acc = _num(r["accept_len"])
            if acc is not None and cyc >= 0:
                st.phase_accept[cyc] = acc
                if len(st.phase_accept) > RECENT_CYCLES:
                    st.phase_accept.pop(next(iter(st.phase_accept)))
            if starts_with is not None and cyc > st.last_cycle:
                if st.last_cycle >= 0:
                    cycles.extend(self._starts_with_cycle(st, rank, st.last_cycle))
                st.last_cycle = cyc
            ts = st.threads.setdefault(r["tid"], _ThreadState())
            if ts.cursor is None and cyc >= 0 and st.window_ns is None and starts_with is None:
                st.deferred.append((ts, r, phase, cyc, top_subs))
                continue  # its cycle record (the window start) comes in a later batch
            if ts.cursor is None and cyc >= 0 and st.window_ns is not None:
                ts.cursor = st.window_ns  # idle from the cycle's start: the first phase's overhead
            inst = self._instance(ts, r, rank, phase, cyc, top_subs)
            if inst is not None:
                instances.append(inst)
        return instances, cycles

    def _open_window(self, st: _ProcState, rows: list[dict[str, Any]], rank: int) -> list[Instance]:
        """Set the window start (the first cycle record's start) when this batch has one, and
        give the deferred top-level rows of the first cycle their instances."""
        starts = [r["start_ns"] for r in rows if r["kind"] == "cycle"]
        st.window_ns = min(starts) if starts else None
        if st.window_ns is None:
            return []
        instances: list[Instance] = []
        for d_ts, d_row, d_phase, d_cyc, d_subs in st.deferred:
            if d_ts.cursor is None:
                d_ts.cursor = st.window_ns
            inst = self._instance(d_ts, d_row, rank, d_phase, d_cyc, d_subs)
            if inst is not None:
                instances.append(inst)
        st.deferred.clear()
        return instances

    def _starts_with_cycle(self, st: _ProcState, rank: int, cyc: int) -> list[Cycle]:
        if self.rule["require"] is not None and cyc not in st.with_require:
            return []
        return [Cycle(rank, cyc, st.last_end, st.phase_accept.get(cyc))]

    def finish(self, proc: ProcessTail, rank: int) -> list[Cycle]:
        """The last cycle of a `starts_with` process, once it has finished."""
        st = self._procs.get(proc.pid)
        if st is None or self.rule["starts_with"] is None or st.last_cycle < 0:
            return []
        out = self._starts_with_cycle(st, rank, st.last_cycle)
        st.last_cycle = 2**62  # said once
        return out

    @staticmethod
    def _instance(
        ts: _ThreadState,
        r: dict[str, Any],
        rank: int,
        phase: str,
        cyc: int,
        subs: list[Span],
    ) -> Instance | None:
        s, e = _span(r)
        cpu0, cpu1 = int(r["start_ns"]), int(r["end_ns"])
        if cyc < 0:
            return None  # outside any cycle: its time is idle, overhead of the next phase
        cursor = ts.cursor
        ts.cursor = e if cursor is None else max(cursor, e)
        overhead = max(0, s - cursor) if cursor is not None else 0
        if phase == "allreduce":
            allreduce, forward = max(0, e - s), 0
        else:
            allreduce = 0
            at = s
            for a, b in sorted(subs):
                a, b = max(a, at), min(b, e)
                if b <= a:
                    continue
                allreduce += b - a
                at = b
            forward = max(0, e - s) - allreduce
        replays = r.get("graph_replays") or 0
        return Instance(
            rank=rank,
            phase=phase,
            cycle=cyc,
            end_ns=cpu1,
            wall_ns=forward + allreduce + overhead,
            forward_ns=forward,
            allreduce_ns=allreduce,
            overhead_ns=overhead,
            cpu_ns=cpu1 - cpu0,
            graph_replayed=replays > 0,
        )


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f
