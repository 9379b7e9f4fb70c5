"""Hugging Face's static-cache `generate`, compiled by transformers itself (`get_compiled_call`,
forced on CPU with `CompileConfig._compile_all_devices`), under `tracekit launch` with the
natural map (a `decode` phase on `LlamaForCausalLM.forward`, cycles starting with it).

Checked call for call against the program's own count (bench/hf_static_compile.py): every
forward call (the eager prefill and each compiled decode step) is one `decode` instance and one
cycle, in light and in full mode; the generated tokens and Dynamo's graphs, graph breaks and
recompiles are those of the program run without tracekit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("transformers")

from tracekit.analyzers.run_analysis import analyze
from tracekit.store.reader import read_table

pytestmark = [pytest.mark.slow, pytest.mark.torch]

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = ROOT / "bench" / "hf_static_compile.py"
ARGS = ["--backend", "eager", "--rounds", "2", "--new-tokens", "6"]


def _program_result(tmp_path: Path, name: str, launch: list[str] | None) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    cmd = [sys.executable, str(PROGRAM), *ARGS, "--out", str(out)]
    if launch is not None:
        cmd = [sys.executable, "-m", "tracekit", "launch", *launch, "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    result["stderr"] = proc.stderr
    return result


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _program_result(tmp_path_factory.mktemp("alone"), "alone", None)


@pytest.mark.parametrize("mode", ["light", "full"])
def test_hf_static_cache_compiled_generate_recorded_call_for_call(
    mode: str, alone: dict[str, Any], tmp_path: Path
) -> None:
    # GIVEN the natural map for HF's compiled decode
    sys.path.insert(0, str(PROGRAM.parent))
    from hf_static_compile import PHASES_TOML

    phases = tmp_path / "phases.toml"
    phases.write_text(PHASES_TOML)
    launch = ["--phases", str(phases), "--mode", mode, "--out", str(tmp_path), "--name", "run"]
    if mode == "full":
        launch += ["--profile-cycles", "2:3"]
    # WHEN two generates of 6 new tokens run under tracekit
    traced = _program_result(tmp_path, "traced", launch)
    run = analyze(tmp_path / "run")
    # THEN the program is the same program: tokens, graphs, graph breaks and recompiles
    assert traced["outputs"] == alone["outputs"]
    assert traced["dynamo"] == alone["dynamo"]
    assert traced["recompiles"] == alone["recompiles"]
    assert alone["dynamo"]["stats"]["unique_graphs"] == 1
    # and every forward call (2 eager prefills + 10 compiled decode steps) is one decode
    # instance, one cycle each (starts_with = "decode")
    assert traced["forward_calls"] == 12
    assert traced["decode_calls"] == 10
    phases = read_table(tmp_path / "run", "phases")
    assert phases["phase"].to_list() == ["decode"] * traced["forward_calls"]
    assert run.recorded.filter(run.recorded["cycle"] >= 0).height == traced["forward_calls"]
    # (full mode: the analysis reads the profiled window's ranges, 3 cycles of one decode each)
    assert run.instances == {"decode": 3 if mode == "full" else traced["forward_calls"]}
    # and launch says the target was recorded at the compiled boundary
    assert "recorded at the compiled boundary" in traced["stderr"]
    assert "LlamaForCausalLM.__call__" in traced["stderr"]
