"""A wrapped call's crossings, timed from its caller and from its own first and last line, in a
program tracekit did not write (transformers): what the recorder's wrapper costs a call, apart
from the call's work and its device waits (the demo's `clocks.BoundaryClock`, for code that
cannot be edited).

`Crossings.watch(owner, attr, phase)` puts a timing wrapper around the callable at
`owner.attr` (tracekit's wrapper, once `tracekit launch` has installed it) and watches the code
of the callable tracekit wraps: its first instruction and its return (`sys.monitoring` on
Python >= 3.12, scoped to those code objects; `sys.setprofile` before, every call of the thread
then pays for it, in both arms). A call's crossing is (callee's start - caller's call) +
(caller's next line - callee's return). With `starts_cycle`, each call of that attribute
starts a cycle: cycles are switched between recording on and off in ABBA blocks (`block`
cycles) and each cycle's crossings summed by phase, the series written as the demo's A/B writes
them (`ab_on`, `ab_blocks`, `after_prefill`: the cycles left out, `step_boundary_ms`), for
bench/overhead_ab.py `step_difference`.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

TOOL_ID = 4  # sys.monitoring's ids 0-2 and 5 are named (debugger, coverage, profiler, optimizer)
WRAPPED_MARK = "__tracekit_site__"


class Crossings:
    def __init__(self, switch: Callable[[bool], None] | None, block: int) -> None:
        self.switch, self.block = switch, block
        self._stack: list[list[int]] = []  # [callee's start, callee's return] of open calls
        self._codes: set[Any] = set()
        self._state: bool | None = None
        self.left_out = True  # the cycles begun from now on are left out (warm-up)
        self.on: list[bool] = []
        self.after_prefill: list[bool] = []
        self.by_phase: dict[str, list[float]] = {}
        self.cycle_ms: list[float] = []
        self._cycle_t0: int | None = None
        self.calls: dict[str, int] = {}

    # -- set-up -----------------------------------------------------------------------------

    def watch(self, owner: Any, attr: str, phase: str, *, starts_cycle: bool = False) -> None:
        wrapper = owner.__dict__[attr]
        if not hasattr(wrapper, WRAPPED_MARK):
            raise SystemExit(f"crossings: {owner.__name__}.{attr} is not tracekit's wrapper")
        self._codes.add(wrapper.__wrapped__.__code__)
        self.by_phase.setdefault(phase, [])
        self.calls.setdefault(phase, 0)
        setattr(owner, attr, functools.wraps(wrapper)(self._timed(wrapper, phase, starts_cycle)))

    def start(self) -> None:
        """Begin watching the codes (after every `watch`)."""
        mon = getattr(sys, "monitoring", None)
        if mon is None:
            sys.setprofile(self._profile)
            return
        mon.use_tool_id(TOOL_ID, "tracekit-bench-crossings")
        mon.register_callback(TOOL_ID, mon.events.PY_START, self._on_start)
        mon.register_callback(TOOL_ID, mon.events.PY_RETURN, self._on_return)
        for code in self._codes:
            mon.set_local_events(TOOL_ID, code, mon.events.PY_START | mon.events.PY_RETURN)

    def stop(self) -> dict[str, Any]:
        """Stop watching (recording left on) and return the series (`result`)."""
        self._close_cycle()
        if self.switch is not None:
            self.switch(True)
        mon = getattr(sys, "monitoring", None)
        if mon is None:
            sys.setprofile(None)
        else:
            for code in self._codes:
                mon.set_local_events(TOOL_ID, code, 0)
            mon.free_tool_id(TOOL_ID)
        return self.result()

    # -- the callee's side ------------------------------------------------------------------

    def _on_start(self, _code: Any, _offset: int) -> None:
        t = perf_counter_ns()
        if self._stack and not self._stack[-1][0]:
            self._stack[-1][0] = t

    def _on_return(self, _code: Any, _offset: int, _value: Any) -> None:
        t = perf_counter_ns()
        if self._stack:
            self._stack[-1][1] = t

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in self._codes:
            self._on_start(frame.f_code, 0)
        elif event == "return" and frame.f_code in self._codes:
            self._on_return(frame.f_code, 0, arg)

    # -- the caller's side ------------------------------------------------------------------

    def _timed(self, wrapper: Any, phase: str, starts_cycle: bool) -> Callable[..., Any]:
        series = self.by_phase[phase]

        def timed(*args: Any, **kwargs: Any) -> Any:
            if starts_cycle:
                self._new_cycle()
            mark = [0, 0]
            self._stack.append(mark)
            t0 = perf_counter_ns()
            try:
                out = wrapper(*args, **kwargs)
            finally:
                t1 = perf_counter_ns()
                self._stack.pop()
            if series and mark[0] and mark[1]:
                series[-1] += ((mark[0] - t0) + (t1 - mark[1])) / 1e6
                self.calls[phase] += 1
            return out

        return timed

    def _new_cycle(self) -> None:
        t = perf_counter_ns()
        self._close_cycle(t)
        on = (len(self.on) // self.block) % 4 in (0, 3)
        if self.switch is not None and on != self._state:
            self.switch(on)  # before the cycle's first call: outside every crossing
            self._state = on
        self.on.append(on)
        self.after_prefill.append(self.left_out)
        for series in self.by_phase.values():
            series.append(0.0)
        self._cycle_t0 = perf_counter_ns()

    def _close_cycle(self, t: int | None = None) -> None:
        if self._cycle_t0 is not None:
            self.cycle_ms.append(((t or perf_counter_ns()) - self._cycle_t0) / 1e6)
        self._cycle_t0 = None

    def end_generate(self) -> None:
        """A generate ended: its last cycle ends here (not at the next generate's start)."""
        self._close_cycle()

    def result(self) -> dict[str, Any]:
        return {
            "ab_on": self.on,
            "ab_blocks": self.block,
            "after_prefill": self.after_prefill,
            "step_ms": self.cycle_ms,
            "step_boundary_ms": self.by_phase,
            "boundary_calls": self.calls,
        }
