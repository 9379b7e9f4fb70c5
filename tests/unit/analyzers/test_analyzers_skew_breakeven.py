"""Rank skew and break-even, known answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.analyzers import scenarios
from tracekit.analyzers.breakeven import breakeven, breakeven_runs
from tracekit.analyzers.run_analysis import analyze
from tracekit.analyzers.skew import skew_of
from tracekit.cli import cli
from tracekit.errors import InputError


def test_skew_two_ranks(tmp_path: Path) -> None:
    run = scenarios.two_rank_gpu(tmp_path)
    sk = skew_of(analyze(run))
    cols = [
        "cycle",
        "phase",
        "spread_ns",
        "slowest_rank",
        "collectives",
        "allreduce_transfer_ns",
        "allreduce_wait_ns_max",
    ]
    # verify0: NCCL 500 ns on rank 0, 300 on rank 1 -> transfer 300, rank 0 waits 200;
    #   work = wall - wait: rank 0 1600-200 = 1400, rank 1 1500 -> rank 1 lags by 100
    # verify1: custom AR 500 vs 300 -> transfer 300, wait 200; work 1500 vs 1700
    # draft: no collectives; walls 700/800 then 2300/2300 (tie -> lowest rank)
    assert [tuple(r) for r in sk.select(cols).iter_rows()] == [
        (0, "draft", 100, 1, 0, 0, 0),
        (0, "verify", 100, 1, 1, 300, 200),
        (1, "draft", 0, 0, 0, 0, 0),
        (1, "verify", 200, 1, 1, 300, 200),
    ]


def test_breakeven_seed_case() -> None:
    r = breakeven(baseline_ms=12.2, cycle_ms=30.0)
    assert round(r["breakeven_accept_len"], 2) == 2.46
    assert r["speedup"] is None
    r = breakeven(baseline_ms=12.2, cycle_ms=30.0, accept_len=3.05, verify_faster_ms=6.0)
    assert r["speedup"] == pytest.approx(3.05 * 12.2 / 30.0)
    assert r["what_if"]["cycle_ms"] == 24.0
    assert r["what_if"]["breakeven_accept_len"] == pytest.approx(24.0 / 12.2)


def test_breakeven_rejects_nonsense() -> None:
    with pytest.raises(InputError, match="positive"):
        breakeven(baseline_ms=0, cycle_ms=30)
    with pytest.raises(InputError, match="verify-faster-ms"):
        breakeven(baseline_ms=12.2, cycle_ms=30, verify_faster_ms=31)


def test_breakeven_cli_numbers() -> None:
    result = CliRunner().invoke(
        cli, ["breakeven", "--baseline-ms", "12.2", "--cycle-ms", "30", "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) >= {"breakeven_accept_len", "speedup", "accept_len", "baseline_ms", "cycle_ms"}
    assert round(data["breakeven_accept_len"], 2) == 2.46
    result = CliRunner().invoke(cli, ["breakeven", "--baseline-ms", "12.2"])
    assert result.exit_code == 2
    assert "--cycle-ms" in result.stderr


def test_breakeven_from_runs(tmp_path: Path) -> None:
    # baseline: the light-mode run, one cycle of 2900 ns; spec: the SGLang-span run, cycles of
    # 2400 and 3000 ns -> median 2700 ns; acceptance length from the spec run's cycles (none)
    base = scenarios.light_mode(tmp_path / "base")
    spec = scenarios.sglang_spans(tmp_path / "spec")
    r = breakeven_runs(base, spec, accept_len=2.0)
    assert r["baseline_ms"] == pytest.approx(0.0029)
    assert r["cycle_ms"] == pytest.approx(0.0027)
    assert r["breakeven_accept_len"] == pytest.approx(2700 / 2900)
    assert r["speedup"] == pytest.approx(2.0 * 2900 / 2700)
    result = CliRunner().invoke(
        cli, ["breakeven", "--baseline", str(base), "--spec", str(spec), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["accept_len"] is None


def test_collectives_and_rank_waits(tmp_path: Path) -> None:
    # the public pieces the HTML report uses
    from tracekit.analyzers.skew import rank_waits

    a = analyze(scenarios.two_rank_gpu(tmp_path))
    bd, comm = a.breakdown, a.collectives
    assert comm.sort("rank", "cycle").select("rank", "cycle", "phase", "k", "dur_ns").rows() == [
        (0, 0, "verify", 0, 500),
        (0, 1, "verify", 0, 500),
        (1, 0, "verify", 0, 300),
        (1, 1, "verify", 0, 300),
    ]
    waits = rank_waits(bd, comm).sort("rank", "cycle")
    assert waits.select("rank", "cycle", "allreduce_wait_ns", "allreduce_transfer_ns").rows() == [
        (0, 0, 200, 300),
        (0, 1, 200, 300),
        (1, 0, 0, 300),
        (1, 1, 0, 300),
    ]
