"""`python -m tracekit.demo --ab-blocks N` under `tracekit launch`: the off blocks record
nothing, and bench/overhead_ab.py reads the result (CPU, one rank)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_off_blocks_record_nothing(tmp_path: Path) -> None:
    # GIVEN 16 cycles in blocks of 2 (on, off, off, on, twice): cycles 0-1, 6-9, 14-15 recorded
    result = tmp_path / "r.json"
    cmd = [
        *(sys.executable, "-m", "tracekit", "launch", "--gpu-sample", "2", "--out", str(tmp_path)),
        *("--name", "ab", "--", sys.executable, "-m", "tracekit.demo", "--ranks", "1"),
        *("--cycles", "16", "--ab-blocks", "2", "-q", "--result", str(result)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    demo = json.loads(result.read_text())
    assert demo["ab_recorder"] is True
    assert demo["ab_on"] == [(i // 2) % 4 in (0, 3) for i in range(16)]
    # one request (64 tokens by default): only the first step follows a prefill
    assert demo["after_prefill"] == [i == 0 for i in range(16)]
    # each step's host time inside its row-parallel all_reduce calls, timed from their caller
    # (the same number of calls every step: the draft chain and one verify forward)
    assert len(demo["step_comm_ms"]) == 16
    assert all(ms > 0 for ms in demo["step_comm_ms"])
    assert demo["comm_calls"] > 0
    assert demo["comm_calls"] % 16 == 0
    # and each step's crossings into its four top-level calls and back, by phase
    crossings = demo["step_boundary_ms"]
    assert sorted(crossings) == ["draft", "draft_extend", "step", "verify"]
    assert all(len(ms) == 16 and min(ms) > 0 for ms in crossings.values())
    inside = demo["step_inside_ms"]  # each call's own time, first line to last
    assert sorted(inside) == sorted(crossings)
    assert all(i > c for i, c in zip(inside["step"], crossings["step"], strict=True))
    # THEN the rank recorded exactly the 8 on cycles (16 ran)
    procs = list((tmp_path / "ab" / "raw").glob("pid-*/process.json"))
    info = [json.loads(p.read_text()) for p in procs]
    rank = [i for i in info if i.get("records")]
    assert len(rank) == 1
    assert rank[0]["gpu_sample"] == 2
    s = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(tmp_path / "ab"), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    summary = json.loads(s.stdout)
    assert summary["cycles"] == 8
    assert summary["gpu_timed_cycles"] == 0  # a CPU run: no CUDA events
    # and the A/B analysis runs on the result (the CPU figures mean nothing)
    ab = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "overhead_ab.py"), str(result), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(ab.stdout)[str(result)]["groups"] == 2
