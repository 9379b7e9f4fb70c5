"""The demo's A/B clocks (`--ab-blocks`): what the recorder's wrapped calls cost, timed from
their callers, apart from the device and from the work the calls do.

Two clocks, each set by the A/B loop (server.py) and None otherwise:

- `COMM_CLOCK` (`CallClock`, eager only): the host time of the row-parallel layers'
  `all_reduce` calls, summed, as their caller sees them (nested phase calls);
- `BOUNDARY_CLOCK` (`BoundaryClock`): for the cycle's and the phases' top-level calls (`step`,
  `draft`, `verify`, `draft_extend`), the time from the caller's call to the callee's first
  line plus from the callee's last line back to the caller: everything a wrapper does around
  the call (the recorded enter and exit, a sampled cycle's CUDA events), not the call's work
  or its device waits.

With recording off the boundary is the plain Python call (a fraction of a µs); on minus off is
the recorder's cost at those calls (bench/gpu_collector.py `diff_step_boundary_ms`). Beside it,
each call's time from its first line to its last (`inside_ns`): the call's own work, its nested
calls and device waits, on minus off what the recorder costs inside it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class CallClock:
    """Host time (ns) and count of the calls a step made, as their caller saw them."""

    ns: int = 0
    calls: int = 0


@dataclass
class BoundaryClock:
    """Per phase, the host time (ns) a step spent crossing into and back out of its calls."""

    ns: dict[str, int] = field(default_factory=dict)
    inside_ns: dict[str, int] = field(default_factory=dict)  # first line to last, by phase
    first_line: dict[str, int] = field(default_factory=dict)  # the callee's, perf_counter_ns
    last_line: dict[str, int] = field(default_factory=dict)

    def call(self, phase: str, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)`, adding its two crossings to `phase` (`fn`'s body is a `body(phase)`)."""
        t0 = perf_counter_ns()
        out = fn(*args)
        t1 = perf_counter_ns()
        first, last = self.first_line[phase], self.last_line[phase]
        self.ns[phase] = self.ns.get(phase, 0) + (first - t0) + (t1 - last)
        self.inside_ns[phase] = self.inside_ns.get(phase, 0) + (last - first)
        return out

    def reset(self) -> None:
        self.ns.clear()
        self.inside_ns.clear()


COMM_CLOCK: CallClock | None = None
BOUNDARY_CLOCK: BoundaryClock | None = None


def call(phase: str, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, timed by `BOUNDARY_CLOCK` when it is set."""
    clock = BOUNDARY_CLOCK
    return fn(*args) if clock is None else clock.call(phase, fn, *args)


def body(phase: str) -> Callable[[F], F]:
    """Mark `fn`'s first and last line for `BOUNDARY_CLOCK`: the outermost decorator, so that
    only the wrapper a recorder puts around the method lies between the two clocks."""

    def mark(fn: F) -> F:
        @functools.wraps(fn)
        def marked(*args: Any, **kwargs: Any) -> Any:
            clock = BOUNDARY_CLOCK
            if clock is None:
                return fn(*args, **kwargs)
            clock.first_line[phase] = perf_counter_ns()
            out = fn(*args, **kwargs)
            clock.last_line[phase] = perf_counter_ns()
            return out

        return marked  # type: ignore[return-value]

    return mark
