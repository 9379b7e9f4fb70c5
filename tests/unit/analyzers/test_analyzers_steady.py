"""Steady state, throughput from totals, runs without cycles (issue 13 items 2, 3, 5).

Stores are hand-built light-mode records (CPU clocks, one phase a cycle, gaps of 0), so a
cycle's time is exactly its phase's range and every expected figure is computed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.unit.analyzers.builders import write_rows
from tracekit.analyzers.breakeven import breakeven_runs
from tracekit.analyzers.steady import CycleChoice, decide, warmup_length
from tracekit.analyzers.summary import summarize
from tracekit.cli import cli
from tracekit.errors import InputError

MS = 1_000_000


def light_run(
    run_dir: Path,
    cycle_ms: list[float],
    accept: list[float] | None = None,
    *,
    phase: str = "verify",
    ranks: int = 1,
) -> Path:
    """One `phase` instance a cycle, back to back from t=0, on every rank (same times)."""
    for rank in range(ranks):
        phases, cycles, t = [], [], 0
        for c, ms in enumerate(cycle_ms):
            end = t + round(ms * MS)
            phases.append(
                {
                    "pid": 1,
                    "tid": 1,
                    "ok": True,
                    "cycle": c,
                    "phase": phase,
                    "depth": 0,
                    "seq": c,
                    "start_ns": t,
                    "end_ns": end,
                    "graph_replays": 0,
                }
            )
            cycles.append(
                {
                    "cycle": c,
                    "start_ns": t,
                    "end_ns": end,
                    "accept_len": None if accept is None else accept[c],
                    "source": "cycle_target",
                }
            )
            t = end
        write_rows(run_dir, "phases", rank, phases)
        write_rows(run_dir, "cycles", rank, cycles)
    return run_dir


# ---- the rule ---------------------------------------------------------------------------------


def test_warmup_half_the_run_13() -> None:
    # later half [6, 7, 6.5, 6]: median 6.25, threshold 12.5; cycles 0-3 are above it
    assert warmup_length([40, 44, 48, 44, 6, 7, 6.5, 6]) == 4


def test_no_warmup_excludes_nothing_13() -> None:
    assert warmup_length([12.7, 10.3, 10.2, 10.1, 9.9, 10.0]) == 0  # 12.7 < 2 x 10.05
    assert warmup_length([5.0]) == 0
    assert warmup_length([]) == 0


def test_warmup_stops_at_first_normal_cycle_13() -> None:
    # 30 > 2 x 10 but 15 is not: the warm-up is cycle 0 only, the late slow cycle 4 stays
    assert warmup_length([30, 15, 10, 10, 90, 10]) == 1


def test_decide_uses_cycle_numbers_across_ranks_13() -> None:
    # rank 1 is slow in cycle 1 only; the median over ranks (20 + 4) / 2 = 12 ms is still
    # above 2 x the later half's median (4 ms): cycles 0-1 excluded on both ranks
    times = pl.DataFrame(
        {
            "rank": [0, 0, 0, 0, 1, 1, 1, 1],
            "cycle": [0, 1, 2, 3, 0, 1, 2, 3],
            "time_ns": [v * MS for v in (50, 4, 4, 4, 50, 20, 4, 4)],
        }
    )
    st = decide(times)
    assert st.warmup == (0, 1)
    assert st.kept == (2, 3)
    assert st.warmup_ms_p50 == pytest.approx((50 + 12) / 2)
    assert st.steady_ms_p50 == pytest.approx(4.0)


def test_overrides_13() -> None:
    times = pl.DataFrame(
        {"rank": [0] * 6, "cycle": list(range(6)), "time_ns": [90, 80, 10, 10, 11, 10]}
    )
    assert decide(times).kept == (2, 3, 4, 5)
    assert decide(times, CycleChoice.parse(all_cycles=True)).excluded == ()
    st = decide(times, CycleChoice.parse(cycles="1:4"))
    assert (st.kept, st.excluded, st.warmup) == ((1, 2, 3), (0, 4, 5), ())
    assert decide(times, CycleChoice.parse(cycles="4:")).kept == (4, 5)
    assert decide(times, CycleChoice.parse(cycles=":2")).kept == (0, 1)
    for bad in ("3", "a:b", "4:2", "-1:3"):
        with pytest.raises(InputError):
            CycleChoice.parse(cycles=bad)
    with pytest.raises(InputError, match="not both"):
        CycleChoice.parse(all_cycles=True, cycles="1:2")
    with pytest.raises(InputError, match="selects no recorded cycle"):
        decide(times, CycleChoice.parse(cycles="10:"))


# ---- summary: the steady state and throughput from totals -------------------------------------


def test_summary_half_run_warmup_13(tmp_path: Path) -> None:
    # GIVEN 8 cycles: 4 warm-up (40, 44, 48, 44 ms, 1 token each), then 6, 7, 6.5, 6 ms
    run = light_run(tmp_path, [40, 44, 48, 44, 6, 7, 6.5, 6], [1, 1, 1, 1, 2, 3, 2, 3])
    # WHEN
    s = summarize(run).to_json()
    # THEN the warm-up is left out and said so
    assert s["cycles"] == 8
    assert s["excluded"] == 4
    assert s["warmup_cycles"] == [0, 3]
    assert s["steady_cycles"] == [4, 7]
    assert s["steady_note"].startswith(
        "cycles 0-3 excluded as warm-up: median 44 ms against 6.25 ms after"
    )
    # and the figures are the steady cycles' totals: 10 tokens in 25.5 ms
    assert s["cycle_ms_mean"] == pytest.approx(25.5 / 4)
    assert s["cycle_ms_p50"] == pytest.approx(6.25)
    assert s["accept_len_mean"] == pytest.approx(10 / 4)
    assert s["tokens_per_s"] == pytest.approx(10 / 0.0255)
    assert s["phases"]["verify"]["count"] == 4
    # --all-cycles: every cycle, 14 tokens in 201.5 ms
    a = summarize(run, choice=CycleChoice("all")).to_json()
    assert (a["excluded"], a["steady_note"]) == (0, None)
    assert a["tokens_per_s"] == pytest.approx(14 / 0.2015)


def test_summary_tokens_per_s_from_totals_not_medians_13(tmp_path: Path) -> None:
    # cycles of unequal length, 39 to 125 ms: mean 66.5 ms, median 51 ms
    run = light_run(tmp_path, [39, 45, 57, 125], [2, 2, 3, 5])
    s = summarize(run).to_json()
    assert s["excluded"] == 0  # 39 < 2 x 91 (median of 57, 125)
    assert s["cycle_ms_mean"] == pytest.approx(66.5)
    assert s["cycle_ms_p50"] == pytest.approx(51.0)
    assert s["tokens_per_s"] == pytest.approx(12 / 0.266)  # 45.11, not 3 / 51 ms = 58.8


def test_breakeven_runs_unequal_cycles_13(tmp_path: Path) -> None:
    # GIVEN a plain run (10, 10, 10, 14 ms: mean 11, median 10) and a speculative run
    # (39, 40, 41, 125 ms: mean 61.25, median 40.5; 2 + 3 + 3 + 4 = 12 tokens)
    base = light_run(tmp_path / "base", [10, 10, 10, 14], [1, 1, 1, 1], phase="decode")
    spec = light_run(tmp_path / "spec", [39, 40, 41, 125], [2, 3, 3, 4])
    # WHEN
    r = breakeven_runs(base, spec)
    # THEN break-even = mean cycle / mean step, speedup from the same totals
    assert r["baseline_ms"] == pytest.approx(11.0)
    assert r["cycle_ms"] == pytest.approx(61.25)
    assert r["accept_len"] == pytest.approx(3.0)
    assert r["breakeven_accept_len"] == pytest.approx(61.25 / 11)  # 5.568
    assert r["speedup"] == pytest.approx(3 * 11 / 61.25)  # 0.5388
    # which is the ratio of the two runs' tokens/s: 12 / 245 ms against 4 / 44 ms
    assert r["speedup"] == pytest.approx((12 / 0.245) / (4 / 0.044))
    assert r["spec_tokens_per_s"] / r["baseline_tokens_per_s"] == pytest.approx(r["speedup"])
    # the medians stay, as description
    assert (r["baseline_ms_p50"], r["cycle_ms_p50"]) == (pytest.approx(10.0), pytest.approx(40.5))


def test_breakeven_runs_leave_out_warmup_13(tmp_path: Path) -> None:
    base = light_run(tmp_path / "base", [30, 30, 10, 10, 10, 10], [1] * 6, phase="decode")
    spec = light_run(tmp_path / "spec", [90, 25, 25, 25], [1, 2, 2, 2])
    r = breakeven_runs(base, spec)
    assert r["steady"]["baseline"]["warmup_cycles"] == [0, 1]
    assert r["steady"]["spec"]["warmup_cycles"] == [0, 0]
    assert r["breakeven_accept_len"] == pytest.approx(2.5)
    assert r["speedup"] == pytest.approx(2 * 10 / 25)


def test_cli_overrides_and_note_13(tmp_path: Path) -> None:
    run = light_run(tmp_path, [40, 44, 48, 44, 6, 7, 6.5, 6], [1, 1, 1, 1, 2, 3, 2, 3])
    runner = CliRunner()
    res = runner.invoke(cli, ["summary", str(run), "--json"])
    assert res.exit_code == 0, res.output
    assert "note: cycles 0-3 excluded as warm-up" in res.stderr
    assert json.loads(res.stdout)["excluded"] == 4
    res = runner.invoke(cli, ["summary", str(run), "--json", "--all-cycles"])
    assert json.loads(res.stdout)["excluded"] == 0
    res = runner.invoke(cli, ["summary", str(run), "--json", "--cycles", "6:"])
    data = json.loads(res.stdout)
    assert (data["steady_cycles"], data["excluded"]) == ([6, 7], 6)
    assert data["tokens_per_s"] == pytest.approx(5 / 0.0125)
    res = runner.invoke(cli, ["breakdown", str(run), "--json", "--by", "phase"])
    assert json.loads(res.stdout)[0]["wall_ns"] == 25_500_000
    res = runner.invoke(cli, ["breakdown", str(run), "--json", "--by", "phase", "--all-cycles"])
    assert json.loads(res.stdout)[0]["wall_ns"] == 201_500_000
    res = runner.invoke(cli, ["summary", str(run)])
    assert "Cycles 0-3 excluded as warm-up" in res.stdout
    res = runner.invoke(cli, ["summary", str(run), "--cycles", "9:3"])
    assert res.exit_code == 2
    assert res.stderr.startswith("tracekit: error: --cycles")
    assert "Traceback" not in res.output


def test_diff_compares_steady_states_13(tmp_path: Path) -> None:
    a = light_run(tmp_path / "a", [50, 50, 10, 10, 10, 10])
    b = light_run(tmp_path / "b", [12, 12, 12, 12, 12, 12])
    res = CliRunner().invoke(cli, ["diff", str(a), str(b), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["steady"]["a"]["warmup_cycles"] == [0, 1]
    assert d["phases"]["verify"]["a_ms_p50"] == pytest.approx(10.0)
    assert d["phases"]["verify"]["delta_ms"] == pytest.approx(2.0)
    assert any("A: cycles 0-1 excluded as warm-up" in h for h in d["headline"])
    d_all = json.loads(
        CliRunner().invoke(cli, ["diff", str(a), str(b), "--json", "--all-cycles"]).stdout
    )
    assert d_all["phases"]["verify"]["a_ms_p50"] == pytest.approx(10.0)  # 4 of 6 are 10 ms
    assert d_all["phases"]["verify"]["a_count"] == 6
