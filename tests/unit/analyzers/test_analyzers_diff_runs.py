"""The gate that knows noise (issue 23 deliverable 4): several baselines give the run-to-run
interval, one says the noise is unknown, temporary paths are no command change, full-mode runs
compare like cycles. Hand-built runs with known answers (docs/DEFINITIONS.md, "Diff")."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.analyzers.builders import write_rows
from tests.unit.analyzers.test_analyzers_steady import light_run
from tracekit.analyzers.diff import command_change, diff_runs
from tracekit.analyzers.diffstats import RunsInterval, like_cycles, t975
from tracekit.analyzers.gate import regressions
from tracekit.cli import cli


def test_student_t_quantiles_23() -> None:
    assert t975(1) == 12.706
    assert t975(2) == 4.303
    assert t975(30) == 2.042
    assert t975(60) == pytest.approx(2.000, abs=2e-3)  # tables: 2.000
    assert t975(120) == pytest.approx(1.980, abs=2e-3)  # tables: 1.980


def test_runs_interval_known_answer_23() -> None:
    # GIVEN baseline medians 10, 11, 12 ms (mean 11, s = 1) and a run at 13 ms
    iv = RunsInterval((10.0, 11.0, 12.0), 13.0, within_half_ms=0.1)
    # THEN the half-width is t(0.975, 2) x 1 x sqrt(1 + 1/3) = 4.303 x 1.1547 = 4.969
    assert iv.half_ms == pytest.approx(4.303 * math.sqrt(4 / 3))
    lo, hi = iv.ci95()
    assert (lo, hi) == pytest.approx((2 - 4.9687, 2 + 4.9687), abs=1e-4)
    # and never narrower than one run's own sampling noise
    assert RunsInterval((10.0, 10.0, 10.0), 13.0, within_half_ms=0.5).ci95() == (2.5, 3.5)


def _runs(tmp_path: Path, medians: list[float], run_ms: float) -> list[Path]:
    """Baselines of 10 cycles each, verify constant at each median, then the run's."""
    return [
        light_run(tmp_path / f"r{i}", [ms] * 10, [2.0] * 10)
        for i, ms in enumerate([*medians, run_ms])
    ]


def test_several_baselines_use_the_run_to_run_spread_23(tmp_path: Path) -> None:
    # GIVEN three baselines with verify at 10, 11, 12 ms and a run at 13 ms (+18% on 11)
    runs = _runs(tmp_path, [10.0, 11.0, 12.0], 13.0)
    # WHEN diffed
    d = diff_runs(*runs)
    v = d["phases"]["verify"]
    # THEN the interval is the prediction interval: 2 +- 4.969 ms, not significant, and the
    # gate at 5% does not fire: 18% slower, but within the run-to-run noise
    assert (d["noise"], v["noise"]) == ("runs", "runs")
    assert v["a_runs_ms_p50"] == [10.0, 11.0, 12.0]
    assert (v["a_ms_p50"], v["b_ms_p50"], v["delta_ms"]) == pytest.approx((11.0, 13.0, 2.0))
    assert v["ci95_ms"] == pytest.approx([2 - 4.9687, 2 + 4.9687], abs=1e-4)
    assert not v["significant"]
    assert regressions(d["phases"], 5) == []
    assert any(line.startswith("Noise from 3 baseline runs") for line in d["headline"])
    assert d["baselines"] == [str(r) for r in runs[:3]]
    # a run at 20 ms (+82%): 9 +- 4.969 ms, above the noise: the gate fires
    slow = light_run(tmp_path / "slow", [20.0] * 10, [2.0] * 10)
    d = diff_runs(*runs[:3], slow)
    (r,) = regressions(d["phases"], 5)
    assert r.line() == (
        "verify regressed 81.8% (11.00 -> 20.00 ms median, 95% CI +4.0 to +14.0 ms, "
        "run-to-run noise of 3 baselines)"
    )


def test_one_baseline_says_the_noise_is_unknown_23(tmp_path: Path) -> None:
    # GIVEN one baseline at 11 ms and a run at 13 ms, every instance equal
    base, run = _runs(tmp_path, [11.0], 13.0)
    # WHEN diffed
    d = diff_runs(base, run)
    v = d["phases"]["verify"]
    # THEN the within-run interval (every resample gives 2.0) calls it significant, and the
    # gate's line and the headline say that run-to-run noise is unknown
    assert (d["noise"], v["noise"], v["ci95_ms"]) == ("within-run", "within-run", [2.0, 2.0])
    (r,) = regressions(d["phases"], 5)
    assert r.line().endswith("10 instances each; run-to-run noise unknown (one baseline))")
    assert any(line.startswith("Run-to-run noise is unknown") for line in d["headline"])


def test_cli_takes_several_baselines_and_exit_codes_23(tmp_path: Path) -> None:
    runs = _runs(tmp_path, [10.0, 11.0, 12.0], 13.0)
    slow = light_run(tmp_path / "slow", [20.0] * 10, [2.0] * 10)
    args = ["diff", *map(str, runs), "--fail-on-regression", "5"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert "no phase regressed by more than 5%" in res.stderr
    res = CliRunner().invoke(cli, ["diff", *map(str, runs[:3]), str(slow), "--json", "-f", "5"])
    assert res.exit_code == 0 or res.exit_code == 2  # -f is not an option of diff
    res = CliRunner().invoke(
        cli, ["diff", *map(str, runs[:3]), str(slow), "--json", "--fail-on-regression", "5"]
    )
    assert res.exit_code == 3, res.output
    assert json.loads(res.stdout)["phases"]["verify"]["significant"] is True
    res = CliRunner().invoke(cli, ["diff", str(runs[0])])
    assert res.exit_code == 2
    assert "needs at least two run directories" in res.stderr


def test_temporary_paths_are_no_command_change_23(tmp_path: Path) -> None:
    # GIVEN the demo's command twice: its result file lies in a fresh temporary directory
    runs = []
    for name, tmp in (("a", "tracekit-demo-k3j_x9a2"), ("b", "tracekit-demo-0qz7wplm")):
        run = tmp_path / name
        cmd = ["python", "-m", "tracekit.demo", "--result", f"/tmp/{tmp}/demo_result.json"]
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"command": cmd}))
        write_rows(run, "manifests", 0, [{"section": "env", "key": "X", "value": "1"}])
        runs.append(run)
    # THEN no change; a path a user chose under /tmp still is one
    assert command_change(runs[0], runs[1]) is None
    (runs[1] / "run.json").write_text(json.dumps({"command": ["python", "--model", "/tmp/m2"]}))
    (runs[0] / "run.json").write_text(json.dumps({"command": ["python", "--model", "/tmp/m1"]}))
    assert command_change(runs[0], runs[1]) == {
        "a": ["--model", "/tmp/m1"],
        "b": ["--model", "/tmp/m2"],
    }


def test_like_cycles_of_full_mode_runs_23() -> None:
    import polars as pl

    def rows(cycles: list[int]) -> pl.DataFrame:
        return pl.DataFrame({"cycle": cycles})

    # GIVEN profiled windows 4-6 in both runs, A's steady state from 5 on
    a, b = rows([5, 6]), rows([4, 5, 6])
    every = [rows([4, 5, 6]), rows([4, 5, 6])]
    # THEN the like cycles are 5-6, said so; light-mode runs are not restricted
    like = like_cycles([a, b], every, windowed=True)
    assert like.cycles == (5, 6)
    assert like.note == (
        "full mode: forward / allreduce / overhead compared over the 2 profiled cycle(s) 5-6 "
        "that every run has"
    )
    assert like_cycles([a, b], every, windowed=False).cycles is None
    # windows that share no steady cycle: the windows' common cycles, noted
    like = like_cycles([rows([6]), rows([4])], every, windowed=True)
    assert like.cycles == (4, 5, 6)
    assert like.note is not None
    assert "outside some run's steady state" in like.note
    # no common cycle at all: each run's own, and how to fix it
    like = like_cycles([rows([6]), rows([9])], [rows([6]), rows([9])], windowed=True)
    assert like.cycles is None
    assert like.note is not None
    assert like.note.endswith("give the runs one --profile-cycles")
