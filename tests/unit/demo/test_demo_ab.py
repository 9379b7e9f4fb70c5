"""The demo's A/B overhead blocks (`--ab-blocks`) and bench/overhead_ab.py's interval math."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tracekit.demo.options import parse_args
from tracekit.demo.server import ab_schedule, recording_switch
from tracekit.errors import InputError

ROOT = Path(__file__).resolve().parents[3]


def _ab() -> Any:
    spec = importlib.util.spec_from_file_location("overhead_ab", ROOT / "bench" / "overhead_ab.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["overhead_ab"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_schedule_is_abba_in_blocks() -> None:
    assert ab_schedule(10, 2) == [True, True, False, False, False, False, True, True, True, True]
    assert ab_schedule(3, 0) == [True] * 3
    assert parse_args(["--ab-blocks", "8"]).ab_blocks == 8
    with pytest.raises(InputError, match="--ab-blocks"):
        parse_args(["--ab-blocks", "-1"])


def test_switch_found_only_under_tracekit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "tracekit.collectors.runtime", raising=False)
    assert recording_switch() is None
    calls: list[bool] = []
    rec = types.SimpleNamespace(set_recording=calls.append)
    fake = types.ModuleType("tracekit.collectors.runtime")
    fake.current = lambda: types.SimpleNamespace(recorder=rec)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tracekit.collectors.runtime", fake)
    switch = recording_switch()
    assert switch is not None
    switch(False)
    assert calls == [False]
    fake.current = lambda: None  # type: ignore[attr-defined]
    assert recording_switch() is None


def test_interval_on_hand_built_numbers() -> None:
    ab = _ab()
    # blocks of 1 cycle, ABBA twice: groups (on 10, off 9) and (on 12, off 10)
    on = ab_schedule(8, 1)
    steps = [10.0, 9.0, 9.0, 10.0, 12.0, 10.0, 10.0, 12.0]
    bl = ab.blocks(steps, on, 1)
    assert bl == [
        (True, 10.0),
        (False, 9.0),
        (False, 9.0),
        (True, 10.0),
        (True, 12.0),
        (False, 10.0),
        (False, 10.0),
        (True, 12.0),
    ]
    assert ab.group_ratios(bl) == [(10.0, 9.0), (12.0, 10.0)]
    with pytest.raises(ValueError, match="mix on and off"):
        ab.blocks(steps, on, 3)
    r = ab.interval([(10.0, 9.0), (12.0, 10.0)])
    # r = 100/9 = 11.111% and 20%: mean 15.556%, sd 6.2854, se 4.4444, t(0.975, 1) = 12.706
    assert r.groups == 2
    assert r.cost_pct == pytest.approx(15.5556, abs=1e-4)
    assert r.t_lo_pct == pytest.approx(15.5556 - 12.706 * 4.4444, abs=1e-3)
    assert r.t_hi_pct == pytest.approx(72.027, abs=1e-3)
    # bootstrap of two groups: means of 11.11, 15.56 or 20 only; 25% of draws are each end
    assert r.boot_lo_pct == pytest.approx(100 / 9)
    assert r.boot_hi_pct == pytest.approx(20.0)
    assert ab.t975(40) == pytest.approx(2.021, abs=1e-3)


def test_analyse_groups_blocks_of_cycles() -> None:
    ab = _ab()
    # blocks of 2 cycles, 3 groups (24 cycles); on cycles cost 1 ms more than off ones at 10 ms,
    # the first group slower (warm-up) and dropped by skip_groups=1
    on = ab_schedule(24, 2)
    steps = [(11.0 if s else 10.0) + (5.0 if i < 8 else 0.0) for i, s in enumerate(on)]
    r = ab.analyse({"step_ms": steps, "ab_on": on, "ab_blocks": 2}, skip_groups=1)
    assert r.groups == 2
    assert r.cost_pct == pytest.approx(10.0)
    assert r.t_lo_pct == pytest.approx(10.0)  # no spread between groups
    assert (r.on_ms, r.off_ms) == (11.0, 10.0)
    with pytest.raises(ValueError, match="ab_on"):
        ab.analyse({"step_ms": steps})


def test_the_step_after_a_prefill_counts_in_neither_state() -> None:
    ab = _ab()
    # blocks of 2 cycles, 3 groups; every "on" cycle costs 1 ms more (11 against 10 ms), and a
    # prefill before cycles 0, 8 and 16 (the first cycle of each group, always "on", as the
    # demo's 64-token baseline requests fall on blocks of 8) makes that step 20 ms slower
    on = ab_schedule(24, 2)
    after = [i % 8 == 0 for i in range(24)]
    steps = [(11.0 if s else 10.0) + (20.0 if a else 0.0) for s, a in zip(on, after)]
    result = {"step_ms": steps, "ab_on": on, "ab_blocks": 2, "after_prefill": after}
    # THEN left out, each group is 11 against 10 ms: +10%
    r = ab.analyse(result, skip_groups=0)
    assert r.cost_pct == pytest.approx(10.0)
    assert (r.on_ms, r.off_ms) == (11.0, 10.0)
    # kept, the first on block of a group averages (31 + 11) / 2 = 21 ms: on (21 + 11) / 2 =
    # 16 ms against 10, +60%
    kept = ab.analyse(result, skip_groups=0, prefill_steps=True)
    assert kept.cost_pct == pytest.approx(60.0)
    with pytest.raises(ValueError, match="prefill marks"):
        ab.blocks(steps, on, 2, left_out=after[:-1])


def test_median_interval_from_order_statistics() -> None:
    ab = _ab()
    # n = 15: P(B <= 3) = (1 + 15 + 105 + 455) / 32768 = 0.0176 <= 0.025, P(B <= 4) = 0.059:
    # k = 4, the interval is the 4th smallest and the 4th largest (12th smallest)
    r = [float(x) for x in range(1, 16)]
    assert ab.median_interval(r) == (4.0, 12.0)
    # n = 6: P(B = 0) = 1/64 = 0.016 <= 0.025, P(B <= 1) = 7/64 > 0.025: the extremes
    assert ab.median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]) == (1.0, 6.0)
    # n = 5: P(B = 0) = 1/32 = 0.031 > 0.025: no interval
    assert ab.median_interval([1.0, 2.0, 3.0, 4.0, 5.0]) is None
    # one outlier group moves the mean, not the median or its interval
    groups = [(10.1, 10.0)] * 14 + [(5.0, 10.0)]
    res = ab.interval(groups)
    assert res.cost_pct == pytest.approx((14 * 1.0 - 50.0) / 15)
    assert res.median_pct == pytest.approx(1.0)
    assert (res.median_lo_pct, res.median_hi_pct) == (pytest.approx(1.0), pytest.approx(1.0))
