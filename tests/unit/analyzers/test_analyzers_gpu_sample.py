"""Light-mode runs recorded with `--gpu-sample N`: cycles without CUDA-event times use their CPU
ranges and are marked (`gpu_timed` false); per-phase and cycle statistics come from the timed
cycles. Every number below is computed by hand."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.analyzers.builders import write_rows
from tracekit.analyzers.run_analysis import analyze
from tracekit.analyzers.summary import summarize


def _sampled_run(run_dir: Path) -> Path:
    base = {"pid": 1, "tid": 1, "ok": True, "depth": 0, "graph_replays": 0}
    gpu = [
        # cycle 0, GPU-timed (draft's end event shared as verify's start: 1900)
        ("draft", 0, 1000, 2000, 1100, 1900),
        ("verify", 0, 2000, 4000, 1900, 3900),
        # cycle 1, not sampled: CPU times only
        ("draft", 1, 5000, 5600, None, None),
        ("verify", 1, 5600, 7000, None, None),
    ]
    rows = [
        {
            **base,
            "phase": ph,
            "cycle": c,
            "seq": i,
            "start_ns": s,
            "end_ns": e,
            "gpu_start_ns": gs,
            "gpu_end_ns": ge,
        }
        for i, (ph, c, s, e, gs, ge) in enumerate(gpu)
    ]
    write_rows(run_dir, "phases", 0, rows)
    cycles = [
        {"cycle": 0, "start_ns": 1000, "end_ns": 4000, "accept_len": 2.0, "source": "cycle_target"},
        {"cycle": 1, "start_ns": 5000, "end_ns": 7000, "accept_len": 4.0, "source": "cycle_target"},
    ]
    write_rows(run_dir, "cycles", 0, cycles)
    return run_dir


def test_untimed_cycles_use_cpu_times_and_are_marked(tmp_path: Path) -> None:
    run = _sampled_run(tmp_path)
    a = analyze(run)
    got = a.breakdown.select("cycle", "phase", "wall_ns", "forward_ns", "overhead_ns", "gpu_timed")
    # window start 1000: draft 0 = idle 100 + span 800; verify 0 = span [1900, 3900] 2000;
    # draft 1 (CPU [5000, 5600]) = idle 3900..5000 (1100) + 600; verify 1 = CPU span 1400
    assert [tuple(r) for r in got.iter_rows()] == [
        (0, "draft", 900, 800, 100, True),
        (0, "verify", 2000, 2000, 0, True),
        (1, "draft", 1700, 600, 1100, False),
        (1, "verify", 1400, 1400, 0, False),
    ]
    assert a.breakdown["approximate"].to_list() == [True] * 4
    assert a.cycles["gpu_timed"].to_list() == [True, False]


def test_statistics_come_from_the_timed_cycles(tmp_path: Path) -> None:
    s = summarize(_sampled_run(tmp_path)).to_json()
    # cycle times from every cycle, sampled or not (DEFINITIONS "Cycle time"): cycle 0 from its
    # CPU start to its device end, 3900 - 1000 = 2900 ns; cycle 1 from there to its end, 7000 -
    # 3900 = 3100 ns (the 1000 ns host gap before it holds no phase and is shorter than a
    # cycle: the loop's own time, kept); median 3000
    assert s["cycles"] == 2
    assert s["gpu_timed_cycles"] == 1
    assert s["cycle_ms_p50"] == pytest.approx(0.003)
    assert s["accept_len_mean"] == 3.0  # acceptance from every cycle
    draft, verify = s["phases"]["draft"], s["phases"]["verify"]
    assert (draft["count"], draft["gpu_timed_count"]) == (2, 1)
    assert draft["wall_ms_p50"] == 0.0009
    assert draft["overhead_pct"] == 100.0 * 100 / 900
    assert verify["wall_ms_mean"] == 0.002
