"""The analysis commands on real runs of the embedded demo (2 CPU ranks, gloo)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")


def _tk(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "tracekit", *args], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"tracekit {' '.join(args)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return out.stdout


@pytest.fixture(scope="module")
def demo_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("runs")
    runs = {}
    plan = (("light", "light", []), ("full", "full", []), ("base", "light", ["--baseline"]))
    for name, mode, extra in plan:
        _tk(
            *("launch", "--adapter", "demo", "--mode", mode, "--profile-cycles", "1:3"),
            *("--out", str(out), "--name", name, "--", sys.executable, "-m", "tracekit.demo"),
            *("--ranks", "2", "--cycles", "5", *extra),
        )
        runs[name] = out / name
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["light", "full"])
def test_demo_summary_and_breakdown(demo_runs: dict[str, Path], mode: str) -> None:
    run = demo_runs[mode]
    s = json.loads(_tk("summary", str(run), "--json"))
    assert s["ranks"] == 2
    assert s["approximate"] is (mode == "light")
    assert set(s["phases"]) == {"draft", "verify", "draft_extend"}
    assert s["accept_len_mean"] >= 1.0
    for p in s["phases"].values():
        assert p["forward_pct"] + p["allreduce_pct"] + p["overhead_pct"] == pytest.approx(100.0)
        assert p["allreduce_pct"] > 0  # CPU tensor parallelism: gloo allreduces in every phase
    bd = json.loads(_tk("breakdown", str(run), "--json"))
    for row in bd:
        assert row["forward_ns"] + row["allreduce_ns"] + row["overhead_ns"] == row["wall_ns"]
    by_cycle = json.loads(_tk("breakdown", str(run), "--json", "--by", "cycle"))
    for c in by_cycle:
        assert c["wall_ns"] == c["span_ns"]  # the phases add up to the cycle
        assert c["accept_len"] is not None
    if mode == "full":
        assert {r["allreduce_impl"] for r in bd} == {"gloo"}
        assert sorted({c["cycle"] for c in by_cycle}) == [1, 2, 3]


@pytest.mark.slow
def test_demo_diff_light_vs_full(demo_runs: dict[str, Path]) -> None:
    d = json.loads(_tk("diff", str(demo_runs["light"]), str(demo_runs["full"]), "--json"))
    assert set(d["phases"]) == {"draft", "verify", "draft_extend"}
    assert d["headline"]
    assert "manifest" in d


@pytest.mark.slow
def test_demo_breakeven_from_runs(demo_runs: dict[str, Path]) -> None:
    base = json.loads(_tk("summary", str(demo_runs["base"]), "--json"))
    spec = json.loads(_tk("summary", str(demo_runs["light"]), "--json"))
    assert set(base["phases"]) == {"decode"}
    r = json.loads(
        _tk(
            "breakeven",
            "--baseline",
            str(demo_runs["base"]),
            "--spec",
            str(demo_runs["light"]),
            "--json",
        )
    )
    assert r["baseline_ms"] == pytest.approx(base["cycle_ms_p50"])
    assert r["cycle_ms"] == pytest.approx(spec["cycle_ms_p50"])
    assert r["accept_len"] == pytest.approx(spec["accept_len_mean"])
    assert r["breakeven_accept_len"] == pytest.approx(r["cycle_ms"] / r["baseline_ms"])
    assert r["speedup"] == pytest.approx(r["accept_len"] * r["baseline_ms"] / r["cycle_ms"])
