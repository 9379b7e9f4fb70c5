"""`tracekit demo --compile` end to end on CPU, light and full mode (issue 22): the target model
under torch.compile (inductor) on 2 ranks. Its phases stay eager methods around the compiled
target, so every cycle still has one verify; the allreduce hook point runs inside the compiled
forward, which the collector and `tracekit launch` say once each; Dynamo compiles the demo as it
would without tracekit (no recompile from the wrappers: the target compiles once a shape)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.store.reader import read_table

pytest.importorskip("torch")

pytestmark = [pytest.mark.slow, pytest.mark.torch]


@pytest.mark.parametrize("mode", ["light", "full"])
def test_tracekit_demo_compile(mode: str, tmp_path: Path) -> None:
    # GIVEN a short demo whose target runs under torch.compile, on 2 CPU ranks
    cmd = [
        sys.executable, "-m", "tracekit", "demo", "--compile", "--ranks", "2", "--cycles", "6",
        "--mode", mode, "--profile-cycles", "3:2", "--out", str(tmp_path), "--name", "run",
    ]  # fmt: skip
    # WHEN
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    # THEN it succeeds, every cycle of every rank has one verify, and the program made one
    # target call a cycle plus its prefill
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-2000:]
    run = tmp_path / "run"
    result = json.loads((run / "demo_result.json").read_text())
    assert result["compiled"] is True
    assert result["target_calls"] == result["cycles"] + result["requests"]
    phases = read_table(run, "phases")
    top = phases.filter(phases["depth"] == 0)
    for rank in (0, 1):
        mine = top.filter(top["rank"] == rank)
        assert mine.filter(mine["phase"] == "verify").height == 6
    # AND the allreduce inside the compiled forward is said, by the collector (each rank) and
    # by launch (once)
    hidden = "TensorParallelGroup.all_reduce (phase allreduce) runs inside the torch.compile'd"
    assert proc.stderr.count(hidden) == 1
    manifest = json.loads((run / "run.json").read_text())
    assert any("TargetModel.__call__" in line for line in manifest["targets"]["compiled"])
