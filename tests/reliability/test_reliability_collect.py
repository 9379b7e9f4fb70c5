"""Faults during collection: the server's output and exit code are unchanged, data up to the
last flush survives and merges, every problem is reported once in plain words.

Each test runs the small multi-rank server of `_programs.py` under `tracekit launch` in a real
subprocess (the way a user runs it) and, where the comparison matters, without tracekit too.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import polars as pl
import pytest

from tests.reliability._programs import (
    clean_env,
    launch_cmd,
    program_lines,
    run,
    server_cmd,
    tracekit_lines,
    wait_for,
    write_server,
)
from tracekit.store.reader import read_table


def _cycles_per_rank(run_dir: Path) -> dict[int, int]:
    cycles = read_table(run_dir, "cycles")
    counts = cycles.group_by("rank").len().sort("rank")
    return dict(zip(counts["rank"].to_list(), counts["len"].to_list()))


@pytest.fixture
def server(tmp_path: Path) -> Path:
    return write_server(tmp_path / "srv")


def test_rank_killed_with_sigkill_keeps_every_flushed_cycle(server: Path, tmp_path: Path) -> None:
    # GIVEN a 2-rank server whose rank 1 kills itself with SIGKILL after cycle 10
    cmd = server_cmd(server, 2, 40, "kill1@10")
    plain = run(cmd, server)
    # WHEN it runs under tracekit
    traced = run(launch_cmd(server, tmp_path / "runs", "killed", cmd), server)
    # THEN the server's exit code and output are unchanged
    assert traced.returncode == plain.returncode == 1, traced.stderr
    assert program_lines(traced.stdout) == program_lines(plain.stdout)
    assert "Traceback" not in traced.stderr
    # and the killed rank's cycles up to its last flush are merged: the 10 before its pause of
    # two flush intervals (the timer thread flushed them), cycle 10 too when a flush followed it
    run_dir = tmp_path / "runs" / "killed"
    per_rank = _cycles_per_rank(run_dir)
    assert per_rank[0] == 40
    assert per_rank[1] in (10, 11)
    # and the problem is reported once, in plain words
    partial = [ln for ln in tracekit_lines(traced.stderr) if "partial" in ln]
    assert len(partial) == 1
    assert "rank 1" in partial[0]
    assert "killed" in partial[0]


def test_child_exit_code_passes_through_and_data_merges(server: Path, tmp_path: Path) -> None:
    cmd = server_cmd(server, 2, 10, "exit3")
    plain = run(cmd, server)
    traced = run(launch_cmd(server, tmp_path / "runs", "exit3", cmd), server)
    assert traced.returncode == plain.returncode == 3
    assert program_lines(traced.stdout) == program_lines(plain.stdout)
    assert _cycles_per_rank(tmp_path / "runs" / "exit3") == {0: 10, 1: 10}
    manifest = json.loads((tmp_path / "runs" / "exit3" / "run.json").read_text())
    assert manifest["exit_code"] == 3
    assert not [ln for ln in tracekit_lines(traced.stderr) if "warning" in ln]


def test_hook_target_that_raises_raises_unchanged_and_is_recorded(
    server: Path, tmp_path: Path
) -> None:
    # GIVEN `verify` raising ValueError at cycle 5 (the program catches and prints it)
    cmd = server_cmd(server, 2, 10, "raise@5")
    plain = run(cmd, server)
    traced = run(launch_cmd(server, tmp_path / "runs", "raises", cmd), server)
    # THEN the program saw the very same exception (type and message) and exit code
    assert traced.returncode == plain.returncode == 0
    assert program_lines(traced.stdout) == program_lines(plain.stdout)
    assert "caught ValueError('verify failed at cycle 5')" in traced.stdout
    # and the failed call is recorded as not ok, on each rank, in its cycle
    phases = read_table(tmp_path / "runs" / "raises", "phases")
    failed = phases.filter(~pl.col("ok")).sort("rank")
    assert failed.select("rank", "cycle", "phase").rows() == [(0, 5, "verify"), (1, 5, "verify")]
    assert _cycles_per_rank(tmp_path / "runs" / "raises") == {0: 10, 1: 10}


def test_server_that_never_imports_the_targets(server: Path, tmp_path: Path) -> None:
    cmd = server_cmd(server, 2, 10, "noimport")
    plain = run(cmd, server)
    traced = run(launch_cmd(server, tmp_path / "runs", "noimport", cmd), server)
    assert traced.returncode == plain.returncode == 0
    assert program_lines(traced.stdout) == program_lines(plain.stdout)
    assert "Traceback" not in traced.stderr
    # said once, in plain words, naming the targets that never got a chance
    never = [ln for ln in tracekit_lines(traced.stderr) if "never imported" in ln]
    assert len(never) == 1, traced.stderr
    assert "work:Worker.verify" in never[0]
    manifest = json.loads((tmp_path / "runs" / "noimport" / "run.json").read_text())
    assert "work:Worker.step" in manifest["targets"]["module_never_imported"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_launcher_signalled_forwards_stops_and_merges(
    server: Path, tmp_path: Path, signum: int
) -> None:
    # GIVEN a server that runs until stopped
    out = tmp_path / "runs"
    cmd = launch_cmd(server, out, "sig", server_cmd(server, 2, 0, "forever"))
    proc = subprocess.Popen(
        cmd, cwd=server, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # WHEN both ranks have flushed records, the launcher gets the signal
        def flushed() -> bool:
            files = list((out / "sig" / "raw").glob("pid-*/records.arrow"))
            return len(files) == 2 and all(f.stat().st_size > 2000 for f in files)

        assert wait_for(flushed, 60)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # THEN it exits as the server did (128 + N), after forwarding the signal to the ranks
    assert proc.returncode == 128 + signum, stderr
    manifest = json.loads((out / "sig" / "run.json").read_text())
    assert manifest["signals_forwarded"] == [signal.Signals(signum).name]
    assert manifest["exit_code"] == 128 + signum
    # and both ranks flushed on their way out: complete, merged
    counts = _cycles_per_rank(out / "sig")
    assert sorted(counts) == [0, 1]
    assert min(counts.values()) > 0
    assert not [ln for ln in tracekit_lines(stderr) if "partial" in ln], stderr
    assert "tracekit: error" not in stderr
    assert stdout.count("server: rank exit codes") <= 1


def test_two_launches_at_once_get_their_own_run_directories(server: Path, tmp_path: Path) -> None:
    # GIVEN two launches started together with the same --out and --name
    out = tmp_path / "runs"
    procs = [
        subprocess.Popen(
            launch_cmd(server, out, "same", server_cmd(server, 2, cycles)),
            cwd=server,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for cycles in (12, 17)
    ]
    results = [p.communicate(timeout=120) for p in procs]
    # THEN both succeed, each in a directory of its own with only its own data
    assert [p.returncode for p in procs] == [0, 0], results
    dirs = sorted(p.name for p in out.iterdir())
    assert dirs == ["same", "same-1"]
    seen = {}
    for d in dirs:
        manifest = json.loads((out / d / "run.json").read_text())
        cycles = int(manifest["command"][-2])
        seen[cycles] = _cycles_per_rank(out / d)
    assert seen == {12: {0: 12, 1: 12}, 17: {0: 17, 1: 17}}
