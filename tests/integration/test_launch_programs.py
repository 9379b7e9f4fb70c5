"""`tracekit launch` on small real programs that are not the demo (subprocesses, real files)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tracekit.store.reader import read_table

# A real program: fuzzy-matches lines with difflib and prints JSON. One `process_line` call is a
# cycle; SequenceMatcher.ratio ("match") and JSONEncoder.encode ("encode") are its phases;
# `check` raises for one line and the program catches it.
PROGRAM = """
import difflib
import json


class BadLine(ValueError):
    pass


def check(line):
    if line.startswith("bad"):
        raise BadLine(f"rejected {line!r}")
    return line


def process_line(i, line, lines):
    try:
        check(line)
    except BadLine as exc:
        return json.dumps({"line": i, "error": str(exc)})
    scores = [round(difflib.SequenceMatcher(None, line, other).ratio(), 4) for other in lines if other is not line]
    return json.dumps({"line": i, "best": max(scores), "sum": round(sum(scores), 4)})
"""
RUNNER = """
import sys
import tkprog

LINES = [f"speculative decoding line {i} " + "abc"[: i % 4] for i in range(12)] + ["bad input"]
for i, line in enumerate(LINES):
    print(tkprog.process_line(i, line, LINES))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""
MAP = """
[adapter]
name = "tkprog"
package = "tkprog"

[[phase]]
name = "match"
targets = ["difflib:SequenceMatcher.ratio"]

[[phase]]
name = "encode"
targets = ["json.encoder:JSONEncoder.encode"]

[[phase]]
name = "check"
targets = ["tkprog:check"]

[cycle]
targets = ["tkprog:process_line"]
"""
N_LINES = 13


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}


def _launch(cwd: Path, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", "launch", "--out", str(cwd / "runs"), *args],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        check=check,
        timeout=120,
    )


@pytest.fixture
def prog(tmp_path: Path) -> Path:
    (tmp_path / "tkprog.py").write_text(PROGRAM)
    (tmp_path / "run.py").write_text(RUNNER)
    (tmp_path / "map.toml").write_text(MAP)
    return tmp_path


def _only_run(prog: Path) -> Path:
    (run,) = list((prog / "runs").iterdir())
    return run


def test_user_map_output_identical_and_phases_counted(prog: Path) -> None:
    # GIVEN the program's output without tracekit
    plain = subprocess.run(
        [sys.executable, "run.py"], cwd=prog, env=_env(), capture_output=True, text=True, check=True
    )
    # WHEN it runs under tracekit launch with a user phase map
    res = _launch(prog, "--phases", "map.toml", "--", sys.executable, "run.py", check=True)
    # THEN the output is byte-identical
    assert res.stdout == plain.stdout
    assert "error" in plain.stdout  # the raising target's exception reached the program unchanged
    run = _only_run(prog)
    phases = read_table(run, "phases")
    cycles = read_table(run, "cycles")
    assert cycles["cycle"].sort().to_list() == list(range(N_LINES))
    counts = dict(phases.group_by("phase").len().iter_rows())
    good = N_LINES - 1
    assert counts["match"] == good * (N_LINES - 1)  # each good line against every other line
    assert counts["encode"] == N_LINES  # one json.dumps a line
    assert counts["check"] == N_LINES
    failed = phases.filter(~pl.col("ok"))
    assert failed["phase"].cast(str).to_list() == ["check"]
    assert failed["cycle"].to_list() == [N_LINES - 1]
    assert set(phases["rank"].to_list()) == {0}
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["exit_code"] == 0
    assert [p["via"] for p in manifest["processes"]["instrumented"]] == ["sitecustomize"]
    assert manifest["processes"]["not_instrumented"] == []
    assert sorted(manifest["targets"]["patched"]) == sorted(
        [
            "difflib:SequenceMatcher.ratio",
            "json.encoder:JSONEncoder.encode",
            "tkprog:check",
            "tkprog:process_line",
        ]
    )


def test_targets_that_do_not_exist_are_listed_once_and_skipped(prog: Path) -> None:
    bad_map = prog / "bad.toml"
    bad_map.write_text(
        MAP.replace(
            '"tkprog:check"', '"tkprog:check", "tkprog:NoSuchClass.method", "nosuchpkg_xyz.mod:f"'
        )
    )
    plain = subprocess.run(
        [sys.executable, "run.py", "3"],
        cwd=prog,
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    res = _launch(prog, "--phases", "bad.toml", "--", sys.executable, "run.py", "3")
    # the program ran normally and its exit code came through
    assert plain.returncode == 3
    assert res.returncode == 3
    assert res.stdout == plain.stdout
    assert res.stderr.count("tkprog:NoSuchClass.method") == 1
    assert res.stderr.count("nosuchpkg_xyz") == 1
    assert "Traceback" not in res.stderr
    run = _only_run(prog)
    manifest = json.loads((run / "run.json").read_text())
    assert [u["target"] for u in manifest["targets"]["unresolved"]] == ["tkprog:NoSuchClass.method"]
    assert manifest["targets"]["module_never_imported"] == ["nosuchpkg_xyz.mod:f"]
    assert read_table(run, "cycles").height == N_LINES


def test_an_accept_rule_that_fails_is_said_by_merge_once(prog: Path) -> None:
    # GIVEN a map whose cycle reads acceptance from an attribute the return value (a str) lacks
    bad_map = prog / "accept.toml"
    bad_map.write_text(
        MAP.replace(
            'targets = ["tkprog:process_line"]',
            'targets = ["tkprog:process_line"]\naccept = { from = "return", value = "tokens" }',
        )
    )
    res = _launch(prog, "--phases", "accept.toml", "--", sys.executable, "run.py", check=True)
    # THEN the program is untouched, the server's stderr says it once, and so does merge
    assert res.stderr.count("tracekit: accept rule") == 1
    merged = [line for line in res.stderr.splitlines() if "accept rule(s) switched off" in line]
    assert len(merged) == 1, res.stderr
    assert "on tkprog:process_line on rank 0: AttributeError" in merged[0]
    assert f"({prog / 'accept.toml'}: [cycle] key `accept`)" in merged[0]  # the user's file
    cycles = read_table(_only_run(prog), "cycles")
    assert cycles.height == N_LINES
    assert cycles["accept_len"].null_count() == N_LINES


WORKERS = """
import multiprocessing as mp
import os
import signal
import sys
import time

import tkworker


def worker(rank, cycles, die_after):
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = "2"
    w = tkworker.Worker()
    i = 0
    while cycles < 0 or i < cycles:
        w.step(i)
        i += 1
        if die_after is not None and rank == 1 and i == die_after:
            time.sleep(0.3)  # let the flush interval pass, then die without any clean-up
            w.step(i)
            os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    method, cycles = sys.argv[1], int(sys.argv[2])
    die_after = int(sys.argv[3]) if len(sys.argv) > 3 else None
    ctx = mp.get_context(method)
    procs = [ctx.Process(target=worker, args=(r, cycles, die_after)) for r in range(2)]
    for p in procs:
        p.start()
    print("started", flush=True)
    for p in procs:
        p.join()
    print("exit codes", [p.exitcode for p in procs], flush=True)
"""
WORKER_MOD = """
import time


class Worker:
    def draft(self):
        time.sleep(0.002)

    def verify(self):
        time.sleep(0.002)
        return 2

    def step(self, i):
        self.draft()
        return self.verify()
"""
WORKER_MAP = """
[[phase]]
name = "draft"
targets = ["tkworker:Worker.draft"]
[[phase]]
name = "verify"
targets = ["tkworker:Worker.verify"]
[cycle]
targets = ["tkworker:Worker.step"]
"""


@pytest.fixture
def workers(tmp_path: Path) -> Path:
    (tmp_path / "workers.py").write_text(WORKERS)
    (tmp_path / "tkworker.py").write_text(WORKER_MOD)
    (tmp_path / "map.toml").write_text(WORKER_MAP)
    return tmp_path


def _wait_for_records(run_parent: Path, n_pids: int, timeout: float = 60) -> Path:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        runs = list(run_parent.glob("*/raw"))
        if runs:
            files = [f for f in runs[0].glob("pid-*/records.arrow") if f.stat().st_size > 2000]
            if len(files) >= n_pids:
                return runs[0].parent
        time.sleep(0.1)
    pytest.fail("the workers never flushed records")


def test_sigterm_to_launcher_is_forwarded_and_ranks_flush(workers: Path) -> None:
    # GIVEN two spawned ranks running forever
    launcher = subprocess.Popen(
        [sys.executable, "-m", "tracekit", "launch", "--phases", "map.toml", "--out", "runs", "--flush-seconds", "0.1",
         "--", sys.executable, "workers.py", "spawn", "-1"],
        cwd=workers, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        run = _wait_for_records(workers / "runs", 2)
        # WHEN the launcher gets SIGTERM
        launcher.send_signal(signal.SIGTERM)
        _out, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    # THEN the signal reached the whole group, every rank flushed, the run was merged
    assert launcher.returncode == 128 + signal.SIGTERM, err
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["signals_forwarded"] == ["SIGTERM"]
    ranks = [p for p in manifest["processes"]["instrumented"] if p["records"]]
    assert len(ranks) == 2
    assert all(p["finished"] for p in ranks)
    cycles = read_table(run, "cycles")
    assert sorted(cycles["rank"].unique().to_list()) == [0, 1]
    assert "partial" not in err


def test_sigkill_of_a_rank_loses_at_most_a_flush_interval(workers: Path) -> None:
    # GIVEN two forked ranks; rank 1 is SIGKILLed after 20 cycles (+1 more, after a flush interval)
    res = _launch(
        workers,
        "--phases",
        "map.toml",
        "--flush-seconds",
        "0.1",
        "--",
        sys.executable,
        "workers.py",
        "fork",
        "40",
        "20",
    )
    # THEN the launcher exits with the command's code, rank 1 is reported partial, rank 0 is whole
    assert res.returncode == 0, res.stderr
    assert "exit codes [0, -9]" in res.stdout
    assert "rank 1 (pid" in res.stderr
    assert "is partial" in res.stderr
    run = _only_run(workers)
    cycles = read_table(run, "cycles")
    per_rank = dict(cycles.group_by("rank").len().iter_rows())
    assert per_rank[0] == 40
    assert 20 <= per_rank[1] <= 21  # everything up to the last flush before the kill
    man = read_table(run, "manifests").filter(
        pl.col("section") == "process", pl.col("key") == "finished"
    )
    assert dict(zip(man["rank"].to_list(), man["value"].to_list())) == {0: "true", 1: "false"}
