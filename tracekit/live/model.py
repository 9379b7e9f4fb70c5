"""Phase instances and cycles from raw records as they arrive: the live side of merge + breakdown.

The rules are merge's and light-mode breakdown's (docs/DEFINITIONS.md), applied one record
batch at a time, so `tracekit top` and the Prometheus metrics agree with `tracekit breakdown`
on a light-mode run:

- a **phase instance** is a top-level (depth 0) phase record inside a cycle (raw cycle >= 0);
- its device interval is its CUDA-event span, or its CPU range on a CPU-only run; the spans of
  its `allreduce` sub-phases inside it are **allreduce**, the rest **forward**; the idle time
  since the previous top-level phase of the same thread ended (for the first one: since the
  first cycle record's start) is **overhead**; `wall = forward + allreduce + overhead`;
- a **cycle** is a cycle-target record (dropped when the map's `require` phase did not run in
  it), or, with `starts_with`, each raw cycle number; its acceptance length is the cycle
  record's, else the last top-level phase's in the cycle. With cycle targets a phase recorded
  after its cycle's record (between two cycles: a new request's prefill) is in no cycle. Acceptance rules of kind `delta`
  give tokens only at merge (they need the next call); live, such cycles have none.

State is bounded: per thread a cursor and the sub-phases of the phase still open, per process
the last few raw cycles.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.errors import InputError

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


@dataclass
class _ThreadState:
    cursor: int | None = None  # end of the previous top-level phase's device interval
    subs: list[tuple[int, int]] = field(default_factory=list)  # allreduce sub-phase spans


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
    deferred: list[tuple[_ThreadState, dict[str, Any], str, int, list[tuple[int, int]]]] = field(
        default_factory=list
    )


@dataclass(frozen=True)
class CycleRule:
    """The map's `[cycle]`: `require` phase, `starts_with` phase (None: cycle targets)."""

    require: str | None = None
    starts_with: str | None = None

    @classmethod
    def from_run(cls, run_json: Path) -> CycleRule:
        """The rule the launcher wrote into the run's run.json at start (`cycle_rule`); a run
        without one (an older tracekit, or run.json not written yet) counts a cycle at each
        outermost `draft`, the default maps' rule."""
        from tracekit.store.raw.files import read_json
        from tracekit.store.raw.run import CYCLE_RULE_KEY, parse_cycle_rule

        run, _why = read_json(run_json)
        if CYCLE_RULE_KEY not in run:
            return cls(starts_with="draft")
        try:
            rule = parse_cycle_rule(run[CYCLE_RULE_KEY], run_json)
        except InputError:
            return cls(starts_with="draft")
        return cls(require=rule["require"], starts_with=rule["starts_with"])


def _span(r: dict[str, Any]) -> tuple[int, int]:
    g0, g1 = r.get("gpu_start_ns"), r.get("gpu_end_ns")
    if g0 is not None and g1 is not None:
        return int(g0), int(g1)
    return int(r["start_ns"]), int(r["end_ns"])


class LiveModel:
    """Feed it record batches (`feed`); it returns the phase instances and cycles completed."""

    def __init__(self, rule: CycleRule) -> None:
        self.rule = rule
        self._procs: dict[int, _ProcState] = {}

    def feed(
        self, proc: ProcessTail, batch: pa.RecordBatch, rank: int
    ) -> tuple[list[Instance], list[Cycle]]:
        st = self._procs.setdefault(proc.pid, _ProcState())
        instances: list[Instance] = []
        cycles: list[Cycle] = []
        rule = self.rule
        rows = batch.to_pylist()
        if st.window_ns is None:
            starts = [
                int(r["start_ns"])
                for r in rows
                if r.get("code") is not None
                and r.get("start_ns") is not None
                and proc.site(int(r["code"]))[0] == "cycle"
            ]
            st.window_ns = min(starts) if starts else None
            if st.window_ns is not None and st.deferred:
                for d_ts, d_row, d_phase, d_cyc, d_subs in st.deferred:
                    if d_ts.cursor is None:
                        d_ts.cursor = st.window_ns
                    inst = self._instance(d_ts, d_row, rank, d_phase, d_cyc, d_subs)
                    if inst is not None:
                        instances.append(inst)
                st.deferred.clear()
        for r in rows:
            code = r.get("code")
            if code is None or r.get("start_ns") is None or r.get("end_ns") is None:
                continue
            kind, phase = proc.site(int(code))
            cyc = int(r.get("cycle") if r.get("cycle") is not None else -1)
            st.last_end = max(st.last_end, int(r["end_ns"]))
            if kind == "cycle":
                st.closed_cycle = max(st.closed_cycle, cyc)
                if rule.starts_with is None and (rule.require is None or cyc in st.with_require):
                    acc = _num(r.get("accept_len"))
                    if acc is None:
                        acc = st.phase_accept.get(cyc)
                    cycles.append(Cycle(rank, cyc, int(r["end_ns"]), acc))
                continue
            if rule.starts_with is None and cyc <= st.closed_cycle:
                cyc = -1  # after its cycle's record: between two cycles (a new request's prefill)
            depth = int(r.get("depth") or 0)
            ts = st.threads.setdefault(int(r.get("tid") or 0), _ThreadState())
            if depth > 0:
                if phase == "allreduce":
                    ts.subs.append(_span(r))
                continue
            if phase == rule.require and cyc >= 0 and cyc not in st.with_require:
                st.with_require.append(cyc)
            acc = _num(r.get("accept_len"))
            if acc is not None and cyc >= 0:
                st.phase_accept[cyc] = acc
                if len(st.phase_accept) > RECENT_CYCLES:
                    st.phase_accept.pop(next(iter(st.phase_accept)))
            if rule.starts_with is not None and cyc > st.last_cycle:
                if st.last_cycle >= 0:
                    cycles.extend(self._starts_with_cycle(st, rank, st.last_cycle))
                st.last_cycle = cyc
            if ts.cursor is None and cyc >= 0 and st.window_ns is None and rule.starts_with is None:
                st.deferred.append((ts, r, phase or "?", cyc, self._take_subs(ts, r)))
                continue  # its cycle record (the window start) comes in a later batch
            if ts.cursor is None and cyc >= 0 and st.window_ns is not None:
                ts.cursor = st.window_ns  # idle from the cycle's start: the first phase's overhead
            inst = self._instance(ts, r, rank, phase or "?", cyc, self._take_subs(ts, r))
            if inst is not None:
                instances.append(inst)
        return instances, cycles

    def _starts_with_cycle(self, st: _ProcState, rank: int, cyc: int) -> list[Cycle]:
        if self.rule.require is not None and cyc not in st.with_require:
            return []
        return [Cycle(rank, cyc, st.last_end, st.phase_accept.get(cyc))]

    def finish(self, proc: ProcessTail, rank: int) -> list[Cycle]:
        """The last cycle of a `starts_with` process, once it has finished."""
        st = self._procs.get(proc.pid)
        if st is None or self.rule.starts_with is None or st.last_cycle < 0:
            return []
        out = self._starts_with_cycle(st, rank, st.last_cycle)
        st.last_cycle = 2**62  # said once
        return out

    @staticmethod
    def _take_subs(ts: _ThreadState, r: dict[str, Any]) -> list[tuple[int, int]]:
        """The allreduce sub-phases inside top-level row `r`; earlier ones are done with."""
        cpu0, cpu1 = int(r["start_ns"]), int(r["end_ns"])
        subs = [(a, b) for a, b in ts.subs if a >= cpu0 and b <= cpu1]
        ts.subs.clear()
        return subs

    @staticmethod
    def _instance(
        ts: _ThreadState,
        r: dict[str, Any],
        rank: int,
        phase: str,
        cyc: int,
        subs: list[tuple[int, int]],
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
