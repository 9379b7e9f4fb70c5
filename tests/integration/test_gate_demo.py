"""The regression gate on real demo runs, as a new user would use it (issue 23, deliverables 4
and 5): three baseline runs and a fourth identical one pass, a run whose verify is several
times slower (`--model-size small`) fails with exit 3; one tokens/s in the demo's closing
lines, `summary`, `--json` and the report's headline card.

Five full-mode demo runs (2 CPU ranks, 30 cycles; about a minute each on 2 shared cores) are
made once for the module.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")

# The identical run must fall inside the baselines' run-to-run spread: run alone, after the
# parallel suite (`make test`), not beside another worker's demo runs, whose load the baselines
# would not have seen (a fresh-clone CI run under that load gave draft +77% on an identical run).
pytestmark = pytest.mark.serial

DEMO = ["--ranks", "2", "--cycles", "30"]
GATE_PCT = "10"


def _demo(out: Path, name: str, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tracekit", "demo", *DEMO, *extra, "--out", str(out)]
    proc = subprocess.run(
        [*cmd, "--name", name], capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return proc


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("gate")
    procs = {n: _demo(out, n) for n in ("base1", "base2", "base3", "same")}
    procs["small"] = _demo(out, "small", "--model-size", "small")
    (out / "base1.stdout").write_text(procs["base1"].stdout)
    return {n: out / n for n in procs} | {"out": out}


def _diff(*runs: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "tracekit", "diff", *map(str, runs), "--json"]
    return subprocess.run(
        [*cmd, "--fail-on-regression", GATE_PCT],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_identical_run_passes_the_gate_of_three_baselines_23(demo_runs: dict[str, Path]) -> None:
    # GIVEN three baseline runs and a fourth of the same command
    bases = [demo_runs[n] for n in ("base1", "base2", "base3")]
    # WHEN gated at 10%
    proc = _diff(*bases, demo_runs["same"])
    if proc.returncode == 3:
        # A shared CI machine now and then runs one whole demo 50-80% slower, every phase
        # alike (a fresh-clone CI run: draft +56%, verify +60%, draft_extend +70%): a true
        # regression of that run, beyond what three baselines can bound. One more identical
        # run decides; two false alarms in a row fail the test.
        note = f"gate fired on an identical run; one more run decides: {proc.stderr}"
        warnings.warn(note, stacklevel=1)
        _demo(demo_runs["out"], "same2")
        proc = _diff(*bases, demo_runs["out"] / "same2")
    # THEN exit 0: whatever the fourth run's medians, they are within the baselines' spread
    assert proc.returncode == 0, proc.stderr + proc.stdout
    d = json.loads(proc.stdout)
    assert d["noise"] == "runs"
    assert all(p["noise"] == "runs" for p in d["phases"].values())
    assert d["command"] is None  # the demo's temporary --result path is no change
    # full mode: the phase times come from every cycle steady in all four runs, said so
    assert d["timed_cycles"] >= 10
    assert any("steady in every run" in line for line in d["headline"])


@pytest.mark.slow
def test_slower_verify_fails_the_gate_23(demo_runs: dict[str, Path]) -> None:
    # GIVEN the same baselines and a run of the larger model (verify several times slower)
    bases = [demo_runs[n] for n in ("base1", "base2", "base3")]
    # WHEN gated
    proc = _diff(*bases, demo_runs["small"])
    if proc.returncode == 0:
        # The twin of the identical run's second look: a shared CI machine that ran a baseline
        # 50-80% slow widens the noise past the larger model's verify (a fresh-clone CI run:
        # verify +21 ms, not significant against three such baselines). One more run of the
        # larger model decides; two misses in a row fail the test.
        note = f"gate missed the slower run; one more run decides: {proc.stderr}"
        warnings.warn(note, stacklevel=1)
        _demo(demo_runs["out"], "small2", "--model-size", "small")
        proc = _diff(*bases, demo_runs["out"] / "small2")
    # THEN exit 3, verify named, above the run-to-run noise
    assert proc.returncode == 3, proc.stderr + proc.stdout
    assert "tracekit: regression: verify regressed" in proc.stderr
    assert "run-to-run noise of 3 baselines" in proc.stderr
    verify = json.loads(proc.stdout)["phases"]["verify"]
    assert verify["significant"]
    assert verify["ci95_ms"][0] > 0


@pytest.mark.slow
def test_one_baseline_says_noise_is_unknown_23(demo_runs: dict[str, Path]) -> None:
    proc = _diff(demo_runs["base1"], demo_runs["small"])
    assert proc.returncode == 3, proc.stderr + proc.stdout
    assert "run-to-run noise unknown (one baseline)" in proc.stderr
    assert json.loads(proc.stdout)["noise"] == "within-run"


@pytest.mark.slow
def test_one_tokens_per_s_everywhere_23(demo_runs: dict[str, Path]) -> None:
    # GIVEN a demo run's closing lines, `summary`, `summary --json` and the report
    run = demo_runs["base1"]
    closing = (demo_runs["out"] / "base1.stdout").read_text()
    summary = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(run), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    text = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(run)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    tps = json.loads(summary.stdout)["tokens_per_s"]
    shown = f"{tps:.1f}"
    # THEN each shows the same figure, to the digit shown
    assert re.search(rf"^  tokens/s {re.escape(shown)} \(steady-state cycles", closing, re.M)
    assert f"{shown} tokens/s per sequence" in text.stdout
    html = (run / f"tracekit-report-{run.name}.html").read_text()
    card = re.search(r"<div class=value>([^<]*)</div><div class=label>tokens / s</div>", html)
    assert card is not None
    assert card.group(1) == shown
    # and the demo server's own figure is labelled by what it covers
    assert "the demo server's own clock:" in closing
    assert "warm-up and profiled ones included" in closing
