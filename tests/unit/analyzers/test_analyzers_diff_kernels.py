"""Diff pieces (bootstrap interval, manifest comparison) and top kernels, known answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.unit.analyzers import scenarios
from tests.unit.analyzers.builders import write_rows
from tracekit.analyzers.diff import (
    bootstrap_ci,
    command_change,
    diff_runs,
    manifest_changes,
)
from tracekit.analyzers.headline import headline
from tracekit.analyzers.kernels import kernels_of
from tracekit.analyzers.run_analysis import analyze


def test_bootstrap_ci_is_deterministic_and_brackets_the_shift() -> None:
    a = pl.Series([10.0, 11.0, 12.0, 13.0, 14.0] * 4)
    b = a + 5.0
    lo, hi = bootstrap_ci(a, b)
    assert (lo, hi) == bootstrap_ci(a, b)
    assert lo <= 5.0 <= hi
    assert lo > 0
    # identical samples: every resample pair can differ, but the interval contains 0
    lo0, hi0 = bootstrap_ci(a, a)
    assert lo0 <= 0.0 <= hi0


def test_manifest_changes_per_rank_and_gpu_counters(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for run, v0, v1, torch in ((a, "1", "1", "2.11.0"), (b, "1", "2", "2.13.0")):
        for rank, v in ((0, v0), (1, v1)):
            write_rows(
                run,
                "manifests",
                rank,
                [
                    {"section": "env", "key": "NCCL_ALGO", "value": v},
                    {"section": "versions", "key": "torch", "value": torch},
                    {"section": "trace", "key": "source_file", "value": f"{run}/{rank}.json"},
                ],
            )
    for run, clock in ((a, [1980.0, 1980.0, 1700.0]), (b, [1500.0, 1500.0, 1600.0])):
        write_rows(
            run,
            "counters",
            0,
            [
                {"gpu": 0, "metric": "sm_clock_mhz", "ts_ns": i, "value": v}
                for i, v in enumerate(clock)
            ],
        )
    m = manifest_changes(a, b)
    assert m["env"] == [{"name": "NCCL_ALGO", "a": "1", "b": "2", "ranks": [1]}]
    assert m["versions"] == [{"name": "torch", "a": "2.11.0", "b": "2.13.0"}]
    assert m["packages"] == []
    # counters medians (no gpu section in the manifest): 1980 -> 1500
    assert m["gpu"] == [{"name": "sm_clock_mhz_p50", "a": "1980", "b": "1500"}]


def test_diff_same_run_is_not_significant(tmp_path: Path) -> None:
    run = scenarios.two_rank_gpu(tmp_path)
    d = diff_runs(run, run)
    assert not any(p["significant"] for p in d["phases"].values())
    assert d["headline"][0].startswith("No phase changed significantly")
    assert all(p["delta_ms"] == 0.0 for p in d["phases"].values())


def test_top_kernels(tmp_path: Path) -> None:
    tk = kernels_of(analyze(scenarios.two_rank_gpu(tmp_path)), n=2)
    # verify: gemm 500+700 (rank 0) + 700+800 (rank 1) = 2700 ns, 4 launches; custom AR
    # 500 + 300 = 800; NCCL 500 + 300 = 800 (ties ordered by name)
    verify = tk.filter(pl.col("phase") == "verify")
    assert verify.select("name", "count", "total_ns").rows() == [
        ("gemm", 4, 2700),
        (scenarios.NCCL, 2, 800),
    ]
    assert verify["allreduce_impl"].to_list() == [None, "nccl:RING/LL/bf16"]
    draft = tk.filter(pl.col("phase") == "draft")
    # k3 400 + 400, k1 300 + 200, k2 200 + 300: k3 first, then k1/k2 tie at 500 -> k1
    assert draft.select("name", "total_ns").rows() == [("k3", 800), ("k1", 500)]


def test_breakeven_error_is_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tracekit.cli import cli

    result = CliRunner().invoke(cli, ["breakeven", "--baseline-ms", "-1", "--cycle-ms", "30"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "positive" in result.stderr


def test_diff_phase_only_in_one_run(tmp_path: Path) -> None:
    # A: draft + verify (2 cycles); B: draft, verify and draft_extend (2 cycles), one rank each
    from tests.unit.analyzers.builders import write_events

    a = write_events(tmp_path / "a", {0: scenarios.two_rank_gpu_traces()[0]})
    b = scenarios.sglang_spans(tmp_path / "b")
    d = diff_runs(a, b)
    assert d["ranks"] == 1
    assert "draft_extend appears only in B (2 instances)." in d["headline"]
    de = d["phases"]["draft_extend"]
    assert (de["a_count"], de["b_count"], de["delta_ms"], de["significant"]) == (0, 2, None, False)


def test_diff_of_different_world_sizes_is_refused(tmp_path: Path) -> None:
    from tracekit.errors import InputError

    a = scenarios.two_rank_gpu(tmp_path / "a")
    b = scenarios.sglang_spans(tmp_path / "b")
    with pytest.raises(InputError, match="1 rank"):
        diff_runs(a, b)


def test_too_few_instances_are_never_significant(tmp_path: Path) -> None:
    # one cycle on one rank each (light mode vs the CPU gloo run): 1 instance a phase
    d = diff_runs(scenarios.light_mode(tmp_path / "a"), scenarios.cpu_gloo(tmp_path / "b"))
    verify = d["phases"]["verify"]
    assert verify["delta_ms"] == pytest.approx((7800 - 2000) / 1e6)
    assert not verify["significant"]


def test_command_change_names_the_changed_arguments(tmp_path: Path) -> None:
    # GIVEN two launched runs whose commands differ in one option's value and in a path inside
    # each run's own directory, and whose per-run environment differs as it always does
    runs = {}
    for name, mode in (("a", "extend"), ("b", "graph")):
        run = tmp_path / name
        cmd = ["python", "-m", "srv", "--result", f"/x/{name}/out.json", "--verify-mode", mode]
        run.mkdir()
        (run / "run.json").write_text(json.dumps({"command": cmd}))
        write_rows(
            run,
            "manifests",
            0,
            [
                {"section": "env", "key": "TRACEKIT_RUN_DIR", "value": f"/x/{name}"},
                {"section": "env", "key": "MASTER_PORT", "value": str(len(name) + ord(name))},
            ],
        )
        runs[name] = run
    # WHEN compared
    change = command_change(runs["a"], runs["b"])
    manifest = manifest_changes(runs["a"], runs["b"])
    # THEN only the option that changed is named, with its flag; run paths and the per-run
    # environment are not changes
    assert change == {"a": ["--verify-mode", "extend"], "b": ["--verify-mode", "graph"]}
    assert manifest["env"] == []
    # and a run without run.json (ingested traces) has no command to compare
    (runs["b"] / "run.json").unlink()
    assert command_change(runs["a"], runs["b"]) is None


def test_diff_without_a_common_phase_says_so() -> None:
    # GIVEN a plain-decoding run (decode only) against a speculative one (draft, verify)
    def phase(a: int, b: int) -> dict[str, Any]:
        return {"a_count": a, "b_count": b, "significant": False, "delta_ms": None}

    phases = {"decode": phase(40, 0), "draft": phase(0, 40), "verify": phase(0, 40)}
    # WHEN the headline is written
    lines = headline(phases, {}, env_known=False)
    # THEN it names what each ran instead of "no phase changed" and one line per phase
    assert lines == [
        "A and B have no phase in common: A ran decode, B ran draft, verify (for plain against "
        "speculative decoding, `tracekit breakeven --baseline A --spec B` compares them)."
    ]
