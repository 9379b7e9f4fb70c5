"""The summary and breakdown commands through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.analyzers import scenarios
from tracekit.cli import cli


def test_breakdown_json_fields(tmp_path: Path) -> None:
    run = scenarios.two_rank_gpu(tmp_path)
    result = CliRunner().invoke(cli, ["breakdown", str(run), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    design = {
        "rank",
        "cycle",
        "phase",
        "start_ns",
        "wall_ns",
        "forward_ns",
        "allreduce_ns",
        "overhead_ns",
        "graph_replayed",
        "graph_kernel_frac",
        "allreduce_impl",
        "kernels",
    }
    assert len(data) == 8
    assert design <= set(data[0])
    assert data[1]["allreduce_impl"] == "nccl:RING/LL/bf16"
    assert data[1]["wall_ns"] == 1600


def test_breakdown_by_phase_and_rank(tmp_path: Path) -> None:
    run = scenarios.two_rank_gpu(tmp_path)
    result = CliRunner().invoke(cli, ["breakdown", str(run), "--json", "--by", "phase"])
    assert result.exit_code == 0, result.output
    by_phase = {r["phase"]: r for r in json.loads(result.stdout)}
    # verify walls: 1600 + 1700 + 1500 + 1700
    assert by_phase["verify"]["wall_ns"] == 6500
    assert by_phase["verify"]["allreduce_impl"] == "custom_ar+nccl:RING/LL/bf16"
    result = CliRunner().invoke(cli, ["breakdown", str(run), "--json", "--by", "cycle"])
    by_cycle = json.loads(result.stdout)
    assert [(r["rank"], r["cycle"], r["wall_ns"], r["span_ns"]) for r in by_cycle] == [
        (0, 0, 2300, 2300),
        (0, 1, 4000, 4000),
        (1, 0, 2300, 2300),
        (1, 1, 4000, 4000),
    ]
    result = CliRunner().invoke(cli, ["breakdown", str(run), "--by", "rank"])
    assert result.exit_code == 0, result.output
    assert "Breakdown by rank" in result.output


def test_summary_json(tmp_path: Path) -> None:
    run = scenarios.two_rank_gpu(tmp_path)
    result = CliRunner().invoke(cli, ["summary", str(run), "--json"])
    assert result.exit_code == 0, result.output
    s = json.loads(result.stdout)
    assert (s["ranks"], s["cycles"]) == (2, 2)
    # cycle walls 2300, 4000, 2300, 4000 ns -> median 3150 ns
    assert s["cycle_ms_p50"] == pytest.approx(0.00315, abs=1e-15)
    draft = s["phases"]["draft"]
    # draft walls 700, 2300, 800, 2300 -> p50 1550, mean 1525; fwd 1900 of 6100
    assert draft["count"] == 4
    assert draft["wall_ms_p50"] == pytest.approx(0.00155, abs=1e-15)
    assert draft["wall_ms_mean"] == pytest.approx(0.001525, abs=1e-15)
    assert abs(draft["forward_pct"] - 100 * 1900 / 6100) < 1e-9
    assert draft["graph_replayed_frac"] == 0.5
    assert s["phases"]["verify"]["allreduce_impl"] == {"custom_ar": 2, "nccl:RING/LL/bf16": 2}
    assert s["accept_len_mean"] is None
    # skew per phase: verify's slowest rank is 1 in both cycles; spreads 100 and 200 ns;
    # rank 0 waits 200 ns in each verify
    assert s["skew"]["verify"]["slowest_rank"] == 1
    assert s["skew"]["verify"]["slowest_rank_frac"] == 1.0
    assert s["skew"]["verify"]["spread_ms_p50"] == pytest.approx(0.00015)
    assert s["skew"]["verify"]["allreduce_wait_ms_mean"] == pytest.approx(0.0002)
    assert s["skew"]["draft"]["slowest_rank"] == 0  # once each: the lowest rank
    result = CliRunner().invoke(cli, ["summary", str(run)])
    assert "Rank skew" in result.output


def test_summary_table_and_light_mode(tmp_path: Path) -> None:
    run = scenarios.light_mode(tmp_path)
    result = CliRunner().invoke(cli, ["summary", str(run)])
    assert result.exit_code == 0, result.output
    assert "approximate" in result.output
    result = CliRunner().invoke(cli, ["summary", str(run), "--json"])
    s = json.loads(result.stdout)
    # one cycle of 2900 ns emitting 3 tokens: 3 / 2.9e-6 s
    assert s["accept_len_mean"] == 3.0
    assert abs(s["tokens_per_s"] - 3 / 2.9e-6) < 1e-3


def test_missing_store_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["summary", str(tmp_path)])
    assert result.exit_code == 2
    assert "tracekit: error:" in result.stderr
    assert "Traceback" not in result.output
