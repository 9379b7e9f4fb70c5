"""bench/crossings.py: a wrapped call's crossings, timed from its caller and from the first and
last line of the code the wrapper calls, on code that cannot be edited (known answers: a
wrapper that spends a known time around a slow body)."""

from __future__ import annotations

import functools
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _crossings() -> Any:
    spec = importlib.util.spec_from_file_location("crossings", ROOT / "bench" / "crossings.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _recorder_wrapper(fn: Callable[..., Any], before_s: float, after_s: float) -> Any:
    """A stand-in for tracekit's wrapper: marked with a site, `fn` as `__wrapped__`, and a
    known cost around the call while recording is on."""
    recording = RECORDING

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if recording[0]:
            _busy(before_s)
        out = fn(*args, **kwargs)
        if recording[0]:
            _busy(after_s)
        return out

    wrapper.__tracekit_site__ = object()  # type: ignore[attr-defined]
    return wrapper


RECORDING = [True]


class Generator:
    def draft(self, n: int) -> int:
        time.sleep(0.030)  # the call's own work: in no crossing
        return self.forward(n) + 1

    def forward(self, n: int) -> int:
        time.sleep(0.015)
        return n


def test_cycles_switch_and_each_phase_has_its_wrappers_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a draft (20 ms before its call, recording on) that calls a forward (10 ms after),
    # both wrapped, and recording switched by the watcher in ABBA blocks of 2 cycles
    monkeypatch.setattr(Generator, "draft", _recorder_wrapper(Generator.draft, 0.020, 0.0))
    monkeypatch.setattr(Generator, "forward", _recorder_wrapper(Generator.forward, 0.0, 0.010))
    switched: list[bool] = []

    def switch(on: bool) -> None:
        switched.append(on)
        RECORDING[0] = on

    c = _crossings().Crossings(switch, 2)
    c.watch(Generator, "draft", "draft", starts_cycle=True)
    c.watch(Generator, "forward", "verify")
    c.start()
    try:
        # WHEN 8 cycles run, each a draft and then a forward of its own
        g = Generator()
        for i in range(8):
            c.left_out = i == 0
            assert g.draft(i) == i + 1
            assert g.forward(i) == i
    finally:
        result = c.stop()
    # THEN 8 cycles, on in blocks 1 and 4 of each group of 4, recording left on at the end
    assert result["ab_on"] == [True, True, False, False, False, False, True, True]
    assert switched == [True, False, True, True]
    assert result["after_prefill"] == [True] + [False] * 7
    assert result["boundary_calls"] == {"draft": 8, "verify": 16}
    assert len(result["step_ms"]) == 8
    # and each cycle's crossings are its wrappers' time: the draft 20 ms on, the two forwards
    # 2 x 10 ms on; off, a plain call's; never the 60 ms of the bodies (the draft's crossing
    # with its forward's would be 45 ms; the bounds leave a loaded machine 10-15 ms)
    for on, draft, verify in zip(
        result["ab_on"], result["step_boundary_ms"]["draft"], result["step_boundary_ms"]["verify"],
        strict=True,
    ):  # fmt: skip
        if on:
            assert 20.0 <= draft < 35.0
            assert 20.0 <= verify < 35.0
        else:
            assert 0 < draft < 10.0
            assert 0 < verify < 10.0


def test_only_tracekits_wrapper_is_watched() -> None:
    class Plain:
        def call(self) -> None:
            pass

    with pytest.raises(SystemExit, match=r"Plain\.call is not tracekit's wrapper"):
        _crossings().Crossings(None, 2).watch(Plain, "call", "draft")


def test_the_watch_ends_with_the_run() -> None:
    # GIVEN a watch started and stopped
    c = _crossings().Crossings(None, 2)
    c.start()
    c.stop()
    # THEN nothing watches this thread any more (the tool id is free again on 3.12+)
    assert sys.getprofile() is None
    mon = getattr(sys, "monitoring", None)
    if mon is not None:
        assert mon.get_tool(4) is None
