"""`python -m tracekit.demo` as a real subprocess: spawned ranks, printed figures, result JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


@pytest.mark.slow
def test_demo_server_two_ranks_writes_result(tmp_path: Path) -> None:
    # GIVEN
    result = tmp_path / "result.json"
    # WHEN
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit.demo",
            "--ranks",
            "2",
            "--cycles",
            "6",
            "--result",
            str(result),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # THEN
    assert proc.returncode == 0, proc.stderr
    assert "mean acceptance length" in proc.stdout
    assert "tokens/s" in proc.stdout
    data = json.loads(result.read_text())
    assert data["ranks"] == 2
    assert data["cycles"] == 6
    assert len(data["step_ms"]) == 6
    assert 1.0 <= data["accept_len_mean"] <= 4.0
    assert data["tokens"] == round(data["accept_len_mean"] * 6)
    assert data["tokens_per_s"] > 0


@pytest.mark.slow
def test_demo_server_baseline(tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit.demo",
            "--ranks",
            "2",
            "--cycles",
            "4",
            "--baseline",
            "-q",
            "--result",
            str(result),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    data = json.loads(result.read_text())
    assert (data["mode"], data["accept_len_mean"], data["tokens"]) == ("baseline", 1.0, 4)


def test_demo_server_bad_option_is_one_line_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit.demo", "--ranks", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "cannot be split over 3 ranks" in proc.stderr
