"""`tracekit demo` end to end: launch, merge, summary, report, Perfetto, printed next steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli

pytest.importorskip("torch")


@pytest.mark.slow
def test_tracekit_demo_two_ranks_full_mode(tmp_path: Path) -> None:
    # GIVEN a short full-mode demo on 2 CPU ranks
    cmd = [
        sys.executable, "-m", "tracekit", "demo", "--ranks", "2", "--cycles", "5",
        "--profile-cycles", "1:2", "--out", str(tmp_path), "--name", "run",
    ]  # fmt: skip
    # WHEN
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    # THEN it succeeds and the run directory has the store, the result, report and trace
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run = tmp_path / "run"
    assert (run / "store").is_dir()
    result = json.loads((run / "demo_result.json").read_text())
    assert (result["ranks"], result["cycles"]) == (2, 5)
    assert "Run directory:" in proc.stdout
    assert f"tracekit summary {run}" in proc.stdout
    assert "USDT:" not in proc.stderr
    for line in proc.stdout.splitlines():
        if line.strip().startswith("not done:"):
            pytest.fail(f"a part was skipped: {line}")
    assert (run / "tracekit.pftrace").stat().st_size > 0
    assert (run / "tracekit-report-run.html").stat().st_size > 0
    # AND the recorded phases are the demo's
    summary = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(run), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    phases = json.loads(summary.stdout)["phases"]
    assert {"draft", "verify", "draft_extend"} <= set(phases)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--ranks", "3"], "cannot be split over 3 ranks"),
        (["--cycles", "0"], "--cycles must be at least 1"),
        (["--verify-mode", "graph"], "needs --device cuda"),
        (["--profile-cycles", "x"], "expected START:COUNT"),
    ],
)
def test_tracekit_demo_bad_options_exit_2(tmp_path: Path, args: list[str], match: str) -> None:
    result = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path), *args])
    assert result.exit_code == 2, result.output
    assert match in result.output
    assert not any(tmp_path.iterdir())


def test_tracekit_demo_refuses_an_existing_run_dir(tmp_path: Path) -> None:
    (tmp_path / "taken").mkdir()
    result = CliRunner().invoke(cli, ["demo", "--out", str(tmp_path), "--name", "taken"])
    assert result.exit_code == 2
    assert "already exists" in result.output
