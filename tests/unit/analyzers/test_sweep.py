"""The sweep's measured break-even (linear interpolation of measured points) on hand-built points."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.analyzers.sweep import (
    Baseline,
    SweepPoint,
    build_sweep,
    load_sweep,
    measured_breakeven,
    read_program_result,
    write_sweep,
)
from tracekit.errors import InputError

CURVE = [(1.0, 80.0), (1.5, 95.0), (2.0, 110.0), (2.5, 125.0)]


def test_crossing_is_interpolated_between_the_two_points_around_it() -> None:
    # 95 at 1.5, 110 at 2.0: 100 is a third of the way, 1.5 + 5 x 0.5 / 15 = 1.6667
    c = measured_breakeven(CURVE, 100.0)
    assert c.status == "measured"
    assert c.accept_len == pytest.approx(1.5 + 1 / 6)
    assert c.between == (1, 2)
    assert "linear interpolation" in c.method


def test_order_of_the_points_does_not_matter() -> None:
    c = measured_breakeven(list(reversed(CURVE)), 100.0)
    assert c.accept_len == pytest.approx(1.5 + 1 / 6)


def test_a_point_exactly_at_the_baseline_is_the_crossing() -> None:
    assert measured_breakeven(CURVE, 95.0).accept_len == pytest.approx(1.5)


def test_first_upward_crossing_wins_on_a_noisy_curve() -> None:
    # 80 -> 105 crosses 100 at 1 + 20 x 0.5 / 25 = 1.4; the later dip to 99 does not count
    noisy = [(1.0, 80.0), (1.5, 105.0), (2.0, 99.0), (2.5, 120.0)]
    c = measured_breakeven(noisy, 100.0)
    assert (c.status, c.between) == ("measured", (0, 1))
    assert c.accept_len == pytest.approx(1.4)


@pytest.mark.parametrize(
    ("baseline", "status"),
    [(70.0, "below_range"), (80.0, "below_range"), (130.0, "above_range"), (None, "no_baseline")],
)
def test_outside_the_measured_range_there_is_no_number(baseline: float | None, status: str) -> None:
    c = measured_breakeven(CURVE, baseline)
    assert (c.status, c.accept_len) == (status, None)


def test_one_point_is_too_few() -> None:
    assert measured_breakeven([(2.0, 110.0)], 100.0).status == "too_few_points"


def _point(target: float, accept: float, tps: float, cycle_ms: float) -> SweepPoint:
    return SweepPoint(
        accept_target=target,
        run_dir=f"accept-{target}",
        accept_len=accept,
        tokens_per_s=tps,
        tokens_per_s_source="program",
        cycle_ms_mean=cycle_ms,
        cycle_ms_p50=cycle_ms,
    )


def test_build_sweep_fills_model_breakevens_and_round_trips(tmp_path: Path) -> None:
    # GIVEN a 12.2 ms baseline step (81.967 tokens/s) and cycles of 30 ms and 31 ms
    base = Baseline("base", 1000 / 12.2, "program", 12.2, 12.2)
    points = [_point(2.0, 2.0, 2000 / 30, 30.0), _point(3.0, 3.0, 3000 / 31, 31.0)]
    # WHEN the sweep is built
    sweep = build_sweep(knob="demo", command=["x"], points=points, baseline=base)
    # THEN each point's model break-even is its cycle / the step (30 / 12.2 = 2.459)
    assert points[0].model_breakeven_accept_len == pytest.approx(30 / 12.2)
    assert points[1].model_breakeven_accept_len == pytest.approx(31 / 12.2)
    # AND the measured crossing is interpolated: 66.67 at 2, 96.77 at 3, 81.97 at
    # 2 + (81.967 - 66.667) / (96.774 - 66.667) = 2.508
    y0, y1, b = 2000 / 30, 3000 / 31, 1000 / 12.2
    assert sweep.breakeven.accept_len == pytest.approx(2 + (b - y0) / (y1 - y0))
    # AND the sweep-level model figure is the one nearest the crossing (held at 3: |3 - 2.508|
    # < |2 - 2.508|)
    assert sweep.model_breakeven_accept_len == pytest.approx(31 / 12.2)
    # AND sweep.json reads back equal
    write_sweep(sweep, tmp_path)
    back = load_sweep(tmp_path)
    assert back == sweep
    assert json.loads((tmp_path / "sweep.json").read_text())["breakeven"]["between"] == [0, 1]


def test_points_without_tokens_per_s_are_left_out_of_the_crossing() -> None:
    base = Baseline("base", 100.0, "program", 10.0, 10.0)
    broken = _point(1.5, 1.5, 0.0, 20.0)
    broken.tokens_per_s = None
    points = [_point(1.0, 1.0, 80.0, 12.5), broken, _point(2.0, 2.0, 120.0, 16.7)]
    sweep = build_sweep(knob="demo", command=[], points=points, baseline=base)
    # 80 at 1, 120 at 2 -> 1.5
    assert sweep.breakeven.accept_len == pytest.approx(1.5)


def test_load_sweep_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"sweep\.json: no such file"):
        load_sweep(tmp_path)
    (tmp_path / "sweep.json").write_text('{"points": []}')
    with pytest.raises(InputError, match="not a tracekit sweep"):
        load_sweep(tmp_path)


def test_program_result(tmp_path: Path) -> None:
    f = tmp_path / "r.json"
    assert read_program_result(f, "tokens_per_s") == {"tokens_per_s": None, "accept_len_mean": None}
    f.write_text('{"tokens_per_s": 12.5, "accept_len_mean": 2, "tps": true}')
    assert read_program_result(f, "tokens_per_s") == {"tokens_per_s": 12.5, "accept_len_mean": 2.0}
    assert read_program_result(f, "tps")["tokens_per_s"] is None
    f.write_text("not json")
    with pytest.raises(InputError, match="not JSON"):
        read_program_result(f, "tokens_per_s")
