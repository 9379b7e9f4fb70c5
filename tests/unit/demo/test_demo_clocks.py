"""The demo's A/B clocks: a call's crossings timed from its caller and its body (clocks.py)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tracekit.demo import clocks


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _wrapper(before_s: float, after_s: float) -> Callable[[Callable[..., Any]], Any]:
    """A recorder's wrapper that spends known time before and after the call it wraps."""

    def wrap(fn: Callable[..., Any]) -> Any:
        @functools.wraps(fn)
        def wrapped(*args: Any) -> Any:
            _busy(before_s)
            out = fn(*args)
            _busy(after_s)
            return out

        return wrapped

    return wrap


@pytest.fixture
def boundary() -> Iterator[clocks.BoundaryClock]:
    clocks.BOUNDARY_CLOCK = clocks.BoundaryClock()
    yield clocks.BOUNDARY_CLOCK
    clocks.BOUNDARY_CLOCK = None


def test_crossings_are_the_wrapper_not_the_body(boundary: clocks.BoundaryClock) -> None:
    # GIVEN a 60 ms body wrapped by 2 ms before and 3 ms after, called twice
    @clocks.body("verify")
    def verify(x: int) -> int:
        time.sleep(0.060)
        return x + 1

    wrapped = _wrapper(0.002, 0.003)(verify)
    # WHEN the caller calls it through the clock
    assert clocks.call("verify", wrapped, 1) == 2
    assert clocks.call("verify", wrapped, 2) == 3
    # THEN the phase has the two calls' crossings, 2 x 5 ms, and none of the 120 ms of body
    # (the bound leaves a loaded machine 30 ms)
    crossed_ms = boundary.ns["verify"] / 1e6
    assert 10.0 <= crossed_ms < 40.0
    # and the 120 ms of body are inside the calls, the wrapper's 10 ms are not
    assert 120.0 <= boundary.inside_ns["verify"] / 1e6 < 130.0 + 30.0
    # and a step's figures start again from nothing
    boundary.reset()
    assert boundary.ns == boundary.inside_ns == {}


def test_nested_calls_keep_their_own_crossings(boundary: clocks.BoundaryClock) -> None:
    # GIVEN a step (wrapped by 10 ms after it) that calls a draft (20 ms before it, a 60 ms body)
    @clocks.body("draft")
    def draft() -> None:
        time.sleep(0.060)

    slow_draft = _wrapper(0.020, 0.0)(draft)

    @clocks.body("step")
    def step() -> None:
        clocks.call("draft", slow_draft)

    # WHEN the step is called through the clock
    clocks.call("step", _wrapper(0.0, 0.010)(step))
    # THEN each phase has its own wrapper's time, neither the other's (the step would have 30
    # ms with the draft's) nor the draft's body (the bounds leave a loaded machine 15 ms)
    assert 20.0 <= boundary.ns["draft"] / 1e6 < 35.0
    assert 10.0 <= boundary.ns["step"] / 1e6 < 25.0
    # and inside the step: the whole draft call (its 20 ms wrapper and 60 ms body)
    assert 80.0 <= boundary.inside_ns["step"] / 1e6 < 95.0
    assert 60.0 <= boundary.inside_ns["draft"] / 1e6 < 75.0


def test_without_a_clock_calls_are_plain() -> None:
    # GIVEN no A/B loop (the clock unset)
    clocks.BOUNDARY_CLOCK = None

    @clocks.body("draft")
    def draft(x: int, *, y: int = 0) -> int:
        return x + y

    # THEN the marked body and the caller's call are the plain call
    assert draft(1, y=2) == 3
    assert draft.__name__ == "draft"
    assert clocks.call("draft", draft, 4) == 4
