"""bench/hf_static_compile.py `--assisted --crossings B` under `tracekit launch`, on CPU: HF
assisted generation's wrapped calls timed from their callers (bench/crossings.py) while the
recording is switched at the cycles' starts. The watcher counts the program's own calls, and
the recorder records exactly the cycles switched on."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.integration.hf_maps import SPEC_MAP

pytestmark = [pytest.mark.slow, pytest.mark.torch]

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "bench" / "hf_static_compile.py"


def test_assisted_crossings_count_every_cycle_and_record_the_on_ones(tmp_path: Path) -> None:
    # GIVEN assisted generation watched in ABBA blocks of 2 cycles under launch
    phases = tmp_path / "phases.toml"
    phases.write_text(SPEC_MAP)
    result = tmp_path / "r.json"
    program = [sys.executable, str(PROGRAM), "--assisted", "--rounds", "3", "--new-tokens", "12"]
    cmd = [
        *(sys.executable, "-m", "tracekit", "launch", "--phases", str(phases)),
        *("--out", str(tmp_path), "--name", "cx", "--"),
        *(*program, "--crossings", "2", "--out", str(result)),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(result.read_text())
    # THEN one draft (get_candidates) and one accept (update_candidate_strategy) a cycle, and
    # the target's forward in each, the draft model's first forward in each but the last of a
    # generate (no room left to draft into)
    cycles = len(r["ab_on"])
    assert cycles >= 6
    assert r["boundary_calls"]["draft"] == r["boundary_calls"]["accept"] == cycles
    assert r["boundary_calls"]["verify"] >= 2 * cycles - 3
    assert len(r["step_ms"]) == cycles
    assert all(len(s) == cycles for s in r["step_boundary_ms"].values())
    # the first generate's cycles left out, the others in
    assert r["after_prefill"][0] is True
    assert r["after_prefill"][-1] is False
    assert r["ab_on"][:8] == [True, True, False, False, False, False, True, True][: min(8, cycles)]
    # and the recorder recorded exactly the cycles switched on
    s = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(tmp_path / "cx"), "--json",
         "--all-cycles"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(s.stdout)["cycles"] == sum(r["ab_on"])
