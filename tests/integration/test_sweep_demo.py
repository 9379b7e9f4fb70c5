"""`tracekit sweep --demo` end to end: held runs and a baseline under launch, sweep.json, HTML,
and `tracekit report --sweep`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.analyzers.sweep import load_sweep, measured_breakeven
from tracekit.cli import cli

pytest.importorskip("torch")


@pytest.mark.slow
def test_sweep_demo_two_points_and_report(tmp_path: Path) -> None:
    # GIVEN a 1-rank demo sweep at acceptance 2 and 4 (K=3), 8 cycles a run
    args = [
        "sweep", "--demo", "--accept", "2,4", "--ranks", "1", "--cycles", "8",
        "--out", str(tmp_path), "--name", "sw",
    ]  # fmt: skip
    # WHEN it runs
    res = CliRunner().invoke(cli, args)
    # THEN it succeeds and says where everything is
    assert res.exit_code == 0, res.output
    sw = tmp_path / "sw"
    assert f"Sweep directory: {sw}" in res.output
    data = json.loads((sw / "sweep.json").read_text())
    assert data["knob"] == "demo"
    # AND each point held its acceptance exactly (8 x 2 = 16 and 8 x 4 = 32 tokens), measured
    # by the demo itself, with tracekit's cycle time and the same acceptance seen by tracekit
    points = {p["accept_target"]: p for p in data["points"]}
    assert sorted(points) == [2.0, 4.0]
    for x, p in points.items():
        assert p["accept_len"] == x
        assert p["accept_len_tracekit"] == pytest.approx(x)
        assert p["tokens_per_s_source"] == "program"
        assert p["tokens_per_s"] > 0
        assert p["cycle_ms_mean"] > 0
        assert p["cycles"] == 8
        # the model's break-even is this point's mean cycle / the baseline's mean step
        assert p["model_breakeven_accept_len"] == pytest.approx(
            p["cycle_ms_mean"] / data["baseline"]["step_ms_mean"]
        )
        # the demo's own tokens/s and the demo's result agree
        result = json.loads((sw / "results" / f"{p['run_dir']}.json").read_text())
        assert p["tokens_per_s"] == result["tokens_per_s"]
        assert (sw / p["run_dir"] / "store").is_dir()
    base = data["baseline"]
    assert base["tokens_per_s_source"] == "program"
    assert base["tokens_per_s"] > 0
    # AND the break-even in sweep.json is the one its points give
    sweep = load_sweep(sw)
    again = measured_breakeven(
        [(p.accept_len, p.tokens_per_s) for p in sweep.sorted_points()], base["tokens_per_s"]
    )
    assert again == sweep.breakeven
    assert sweep.breakeven.status in {"measured", "below_range", "above_range"}
    if sweep.breakeven.status == "measured":
        assert 2.0 <= sweep.breakeven.accept_len <= 4.0
    # AND the HTML page has the chart
    page = (sw / "sweep.html").read_text()
    assert "fig-sweep" in page
    assert "Acceptance sweep" in page
    # AND the run report takes the sweep as a section
    out = tmp_path / "r.html"
    rep = CliRunner().invoke(
        cli, ["report", str(sw / "accept-4"), "--sweep", str(sw), "-o", str(out)]
    )
    assert rep.exit_code == 0, rep.output
    html = out.read_text()
    assert 'id="sweep"' in html
    assert "fig-sweep" in html


def test_report_with_a_bad_sweep_is_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    res = CliRunner().invoke(cli, ["report", str(run), "--sweep", str(tmp_path / "nope")])
    assert res.exit_code == 2
    assert "nope: no such file; give the directory `tracekit sweep` wrote" in res.output
