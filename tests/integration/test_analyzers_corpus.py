"""The analysis commands on real foreign traces from the shared corpus (skipped without it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _tk(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", *args], check=True, capture_output=True, text=True
    )
    return out.stdout


def test_h200_graph_replay_vs_extend_with_user_rules(corpus: Path, tmp_path: Path) -> None:
    # 4 cycles: 18 kernels replayed from a CUDA graph under `decode_graph`, then the same 18
    # kernels eagerly under `verify_extend` (corpus README); world size 1, so no NCCL kernel
    run = tmp_path / "run"
    _tk("ingest", str(corpus / "h200" / "graph_replay_vs_extend.json.gz"), "-o", str(run))
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[rule]]\npattern = "decode_graph"\nphase = "draft"\n\n'
        '[[rule]]\npattern = "verify_extend"\nphase = "verify"\n'
    )
    bd = json.loads(_tk("breakdown", str(run), "--json", "--rules", str(rules), "--all-cycles"))
    assert [(r["cycle"], r["phase"]) for r in bd] == [
        (c, p) for c in range(4) for p in ("draft", "verify")
    ]
    # cycle 0 (3.25 ms of device timeline, the first launches) is over twice the later half's
    # median (0.87 ms): warm-up, so the default steady state is cycles 1-3
    steady = json.loads(_tk("breakdown", str(run), "--json", "--rules", str(rules)))
    assert sorted({r["cycle"] for r in steady}) == [1, 2, 3]
    for r in bd:
        assert r["kernels"] == 18
        assert r["forward_ns"] + r["allreduce_ns"] + r["overhead_ns"] == r["wall_ns"]
        assert r["allreduce_ns"] == 0
        assert r["graph_replayed"] is (r["phase"] == "draft")
        assert r["graph_kernel_frac"] == (1.0 if r["phase"] == "draft" else 0.0)
    s = json.loads(_tk("summary", str(run), "--json", "--rules", str(rules)))
    assert s["phases"]["draft"]["graph_replayed_frac"] == 1.0
    assert s["phases"]["verify"]["graph_replayed_frac"] == 0.0


def test_sglang_decode_trace_builtin_rules(corpus: Path, tmp_path: Path) -> None:
    # SGLang's `step[DECODE bs=32]` span around one hipGraphLaunch (ROCm)
    trace = (
        corpus / "tracelens" / "tracelens_sglang_qwen3_8b_decode" / "sglang_Qwen3-8B_decode.json.gz"
    )
    run = tmp_path / "run"
    _tk("ingest", str(trace), "-o", str(run))
    bd = json.loads(_tk("breakdown", str(run), "--json"))
    assert [(r["phase"], r["graph_replayed"], r["graph_launches"]) for r in bd] == [
        ("decode", True, 1)
    ]
    assert bd[0]["graph_kernel_frac"] > 0.99
    assert bd[0]["allreduce_impl"] is None
    s = json.loads(_tk("summary", str(run), "--json"))
    assert set(s) >= {
        "ranks",
        "cycles",
        "cycle_ms_p50",
        "accept_len_mean",
        "tokens_per_s",
        "phases",
    }


def test_trace_without_phases_says_how_to_fix(corpus: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    _tk("ingest", str(corpus / "nccl_parser_config" / "nccl_data.json.gz"), "-o", str(run))
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(run)], capture_output=True, text=True
    )
    assert out.returncode == 2
    assert "--rules" in out.stderr
    assert "Traceback" not in out.stderr
