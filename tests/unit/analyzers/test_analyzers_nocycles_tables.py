"""Runs without cycles end in one line, not a traceback; tables never cut a number (issue 13
items 5 and 7); full-mode summary counts every cycle (item 6)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLE_TRACES
from tests.unit.analyzers.builders import write_rows
from tests.unit.analyzers.test_analyzers_steady import light_run
from tracekit.cli import cli


def no_cycle_run(run_dir: Path) -> Path:
    """3 verify instances with an allreduce inside each, every record outside any cycle (the
    map's cycle rule `starts_with = "draft"` never fired: this program has no draft phase)."""
    rows = []
    for i in range(3):
        t = 1000 * (i + 1)
        common = {"pid": 1, "tid": 1, "ok": True, "cycle": -1, "graph_replays": 0}
        rows.append(
            {
                **common,
                "phase": "verify",
                "depth": 0,
                "seq": 2 * i,
                "start_ns": t,
                "end_ns": t + 500,
            }
        )
        rows.append(
            {
                **common,
                "phase": "allreduce",
                "depth": 1,
                "parent": "verify",
                "seq": 2 * i + 1,
                "start_ns": t + 100,
                "end_ns": t + 200,
            }
        )
    write_rows(run_dir, "phases", 0, rows)
    (run_dir / "run.json").write_text(
        json.dumps({"mode": "light", "cycle_source": "starts_with:draft"}), encoding="utf-8"
    )
    return run_dir


EXPECTED = (
    "6 phase instances (allreduce 3, verify 3) but no cycle: the cycle rule "
    '`starts_with = "draft"` matched nothing; set [cycle] in the phase map'
)


@pytest.mark.parametrize(
    "args", [["summary"], ["summary", "--json"], ["breakdown"], ["breakdown", "--by", "cycle"]]
)
def test_no_cycles_table_commands_say_one_line_13(tmp_path: Path, args: list[str]) -> None:
    run = no_cycle_run(tmp_path)
    res = CliRunner().invoke(cli, [*args[:1], str(run), *args[1:]])
    assert res.exit_code == 2
    assert res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert EXPECTED in lines[0]
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_no_cycles_breakeven_and_diff_13(tmp_path: Path) -> None:
    run = no_cycle_run(tmp_path / "nc")
    other = light_run(tmp_path / "ok", [10, 10, 10])
    for args in (
        ["breakeven", "--baseline", str(other), "--spec", str(run)],
        ["diff", str(other), str(run)],
    ):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 2, res.output
        assert EXPECTED in res.stderr


def test_no_cycles_report_and_perfetto_show_the_phases_13(tmp_path: Path) -> None:
    run = no_cycle_run(tmp_path / "run")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(run), "-o", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "but no cycle" in page
    assert "<td>verify</td><td class=num>3</td>" in page
    trace = tmp_path / "t.pftrace"
    res = CliRunner().invoke(cli, ["perfetto", str(run), "-o", str(trace)])
    assert res.exit_code == 0, res.output
    from tests.pftrace_read import read_back

    names = sorted(s.name for s in read_back(trace).slices)
    assert names == ["allreduce"] * 3 + ["verify"] * 3


def test_no_cycles_subprocess_13(tmp_path: Path) -> None:
    run = no_cycle_run(tmp_path)
    out = subprocess.run(
        [sys.executable, "-m", "tracekit", "summary", str(run)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1
    assert EXPECTED in out.stderr


def _numbers(summary: dict) -> list[str]:
    """Every figure the summary table prints, as the table prints it."""
    from tracekit.cli._output import fmt

    shown = []
    for name, p in summary["phases"].items():
        shown += [
            name,
            str(p["count"]),
            fmt(p["wall_ms_p50"]),
            fmt(p["wall_ms_p90"]),
            fmt(p["wall_ms_mean"]),
            fmt(p["forward_pct"], 1),
            fmt(p["allreduce_pct"], 1),
            fmt(p["overhead_pct"], 1),
        ]
        shown += [f"{k} x{v}" for k, v in p["allreduce_impl"].items()]
    return shown


def test_tables_never_cut_a_number_on_a_pipe_13(tmp_path: Path) -> None:
    # GIVEN a run with a long phase name and long numbers, printed to a pipe 60 columns wide
    run = light_run(
        tmp_path,
        [123456.789, 98765.4321, 111111.111],
        [1, 2, 3],
        phase="verify_with_a_rather_long_phase_name",
    )
    env = {**os.environ, "COLUMNS": "60"}

    def tk(*args: str) -> str:
        res = subprocess.run(
            [sys.executable, "-m", "tracekit", *args],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        return res.stdout

    # WHEN
    data = json.loads(tk("summary", str(run), "--json"))
    text = tk("summary", str(run))
    by_phase = tk("breakdown", str(run), "--by", "phase")
    # THEN every number and name of the JSON is whole in the text, none cut with an ellipsis
    for value in _numbers(data):
        assert value in text, (value, text)
    assert "…" not in text
    assert "…" not in by_phase
    assert "verify_with_a_rather_long_phase_name" in by_phase
    rows = json.loads(tk("breakdown", str(run), "--by", "phase", "--json"))
    assert f"{rows[0]['wall_ns'] / 1e6:.3f}" in by_phase


@pytest.mark.slow
def test_full_mode_summary_counts_every_cycle_13(tmp_path: Path) -> None:
    # GIVEN the 8-rank CPU demo in full mode: 8 cycles, 2-3 profiled, 21 tokens (the server's
    # own count in demo_result.json)
    from tracekit.store.merge import merge

    run = tmp_path / "demo"
    shutil.copytree(SAMPLE_TRACES / "demo_cpu_full_8rank", run)
    merge(run)
    demo = json.loads((run / "demo_result.json").read_text())
    # WHEN
    res = CliRunner().invoke(cli, ["summary", str(run), "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    # THEN the counts and acceptance come from every recorded cycle, shares from the window
    assert s["cycles"] == demo["cycles"] == 8
    assert s["profiled_cycles"] == [2, 3]
    assert s["tokens"] == demo["tokens"] == 21
    assert s["accept_len_mean"] == pytest.approx(demo["accept_len_mean"])  # 2.625
    assert all(p["count"] == 2 * 8 for p in s["phases"].values())  # 2 cycles x 8 ranks


@pytest.mark.slow
def test_full_mode_window_outside_the_cycles_used_gives_its_shares_everywhere(
    tmp_path: Path,
) -> None:
    # GIVEN the full-mode demo (cycles 0-7, profiled 2-3) and cycles 5-6 asked for: none of
    # them was profiled (vLLM's EAGLE full run had its profiled window slowed into the warm-up)
    from tracekit.store.merge import merge

    run = tmp_path / "demo"
    shutil.copytree(SAMPLE_TRACES / "demo_cpu_full_8rank", run)
    merge(run)
    sel = ["--cycles", "5:7"]
    # WHEN summary, breakdown and diff read it
    s = json.loads(CliRunner().invoke(cli, ["summary", str(run), "--json", *sel]).stdout)
    bd = CliRunner().invoke(cli, ["breakdown", str(run), "--json", *sel])
    d = json.loads(CliRunner().invoke(cli, ["diff", str(run), str(run), "--json", *sel]).stdout)
    # THEN each takes the shares from the profiled window, the same rows, and says so
    note = "the profiled cycles lie outside the steady state; shares from them"
    assert s["shares_note"] == note
    rows = json.loads(bd.stdout)
    assert {r["cycle"] for r in rows} == {2, 3}
    assert len(rows) == 2 * 8 * len(s["phases"])  # 2 cycles x 8 ranks x each phase
    assert note in bd.stderr
    assert any((r["allreduce_ns"] or 0) > 0 for r in rows)  # the window's gloo allreduce
    assert f"A: {note}." in d["headline"]
    assert sorted(d["phases"]) == sorted(s["phases"])
