"""Bad inputs to `tracekit merge`, the reader of a run's raw collector output: a run directory
from a crashed or damaged run. Each problem is one warning line naming the file (or the rank) and
what became of it, no traceback, exit 0, and every good rank is merged in full.

Merge exits 0 here on purpose: a run with missing or partial ranks is what a crash leaves, and
what survived is the result the user asked for (docs/merge.md). Without a `raw/` directory, or
with a damaged phase map, it stops with exit code 2 (`test_collectors_cli.py`,
`test_unusable_phase_map_is_one_line_exit_2` below).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner

from tests.reliability._programs import launch_cmd, run, server_cmd, write_server
from tracekit.cli import cli
from tracekit.launch.launcher import launch
from tracekit.launch.options import LaunchOptions
from tracekit.store.raw.files import PROCESS_FILE, RECORDS_FILE, SITES_FILE
from tracekit.store.reader import read_table

CYCLES = 20


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 2-rank run (20 cycles a rank) under `tracekit launch`."""
    root = tmp_path_factory.mktemp("merge")
    server = write_server(root / "srv")
    cmd = launch_cmd(server, root / "runs", "good", server_cmd(server, 2, CYCLES))
    res = run(cmd, server, REL_SLEEP="0.005")  # 10 ms a cycle: several 50 ms flushes a rank
    assert res.returncode == 0, res.stderr
    return root / "runs" / "good"


def _rank_dirs(run_dir: Path) -> dict[int, Path]:
    out = {}
    for d in (run_dir / "raw").glob("pid-*"):
        info = json.loads((d / PROCESS_FILE).read_text())
        if "env_rank" in info.get("rank_info", {}):
            out[int(info["rank_info"]["env_rank"])] = d
    return out


def _edit_process(d: Path, **changes: Any) -> None:
    info = json.loads((d / PROCESS_FILE).read_text())
    info.update(changes)
    (d / PROCESS_FILE).write_text(json.dumps(info))


def _other_stream(path: Path) -> None:
    table = pa.table({"x": [1, 2, 3], "y": ["a", "b", "c"]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    path.write_bytes(sink.getvalue().to_pybytes())


# name -> (damage to rank 1's pid directory, words of the one warning about it)
DAMAGE: dict[str, tuple[Callable[[Path], None], tuple[str, ...]]] = {
    "records-garbage": (
        lambda d: (d / RECORDS_FILE).write_bytes(b"this is not an Arrow stream"),
        (RECORDS_FILE, "nothing of rank 1"),
    ),
    "records-empty": (
        lambda d: (d / RECORDS_FILE).write_bytes(b""),
        (RECORDS_FILE, "empty file", "nothing of rank 1"),
    ),
    "records-cut-in-schema": (
        lambda d: (d / RECORDS_FILE).write_bytes((d / RECORDS_FILE).read_bytes()[:300]),
        (RECORDS_FILE, "nothing of rank 1"),
    ),
    "records-other-columns": (
        lambda d: _other_stream(d / RECORDS_FILE),
        (RECORDS_FILE, "not a tracekit record stream", "nothing of rank 1"),
    ),
    "sites-missing": (
        lambda d: (d / SITES_FILE).unlink(),
        (SITES_FILE, "missing", "cannot be named", "nothing of rank 1"),
    ),
    "sites-wrong-types": (
        lambda d: (d / SITES_FILE).write_text('{"sites": [{"code": "0", "kind": 5}]}'),
        (SITES_FILE, "not a tracekit site table", "nothing of rank 1"),
    ),
    "process-not-json": (
        lambda d: (d / PROCESS_FILE).write_text("{not json"),
        (PROCESS_FILE, "not readable JSON", "rank is unknown", "left out"),
    ),
    "process-a-list": (
        lambda d: (d / PROCESS_FILE).write_text("[1, 2]"),
        (PROCESS_FILE, "not an object", "rank is unknown"),
    ),
    "rank-info-wrong-type": (
        lambda d: _edit_process(d, rank_info=5),
        ("rank is unknown", "no RANK variable"),
    ),
    "rank-not-a-number": (
        lambda d: _edit_process(d, rank_info={"env_rank": "abc", "env_world_size": "x"}),
        (PROCESS_FILE, "gives rank 'abc'", "rank is unknown"),
    ),
    "rank-dir-gone": (
        lambda d: shutil.rmtree(d),
        ("ranks [1] of 2 recorded nothing",),
    ),
}


def _merge(run_dir: Path) -> tuple[int, str, Any]:
    res = CliRunner().invoke(cli, ["merge", str(run_dir)])
    return res.exit_code, res.output, res.exception


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_damaged_rank_is_one_warning_and_the_other_rank_merges(
    good: Path, tmp_path: Path, name: str
) -> None:
    # GIVEN a copy of the run whose rank 1 raw output is damaged
    run_dir = tmp_path / "run"
    shutil.copytree(good, run_dir)
    shutil.rmtree(run_dir / "store")
    damage, words = DAMAGE[name]
    damage(run_dir / "raw" / _rank_dirs(good)[1].name)
    # WHEN it is merged
    code, output, exc = _merge(run_dir)
    # THEN exit 0, no exception, and one warning that says what happened, naming the file
    assert code == 0, output
    assert exc is None, output
    warnings = [ln for ln in output.splitlines() if ln.startswith("tracekit: warning:")]
    about = [ln for ln in warnings if all(w in ln for w in words)]
    assert len(about) == 1, warnings
    # and rank 0 is merged in full
    cycles = read_table(run_dir, "cycles")
    assert cycles.filter(cycles["rank"] == 0).height == CYCLES
    assert "Merged 1 rank(s)" in output


def test_partial_rank_keeps_its_complete_batches(good: Path, tmp_path: Path) -> None:
    # GIVEN rank 1's record stream cut in its second batch (a rank killed mid-write)
    run_dir = tmp_path / "run"
    shutil.copytree(good, run_dir)
    shutil.rmtree(run_dir / "store")
    records = run_dir / "raw" / _rank_dirs(good)[1].name / RECORDS_FILE
    assert json.loads((records.parent / PROCESS_FILE).read_text())["flushes"] >= 2
    data = records.read_bytes()
    records.write_bytes(data[: len(data) - 200])
    # WHEN it is merged (a real process: what a user sees)
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "merge", str(run_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    # THEN rank 1 is reported partial once, its cycles before the cut are kept
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    partial = [ln for ln in res.stderr.splitlines() if " is partial: " in ln]
    assert len(partial) == 1
    assert "rank 1" in partial[0]
    cycles = read_table(run_dir, "cycles")
    per_rank = dict(cycles.group_by("rank").len().rows())
    assert per_rank[0] == CYCLES
    assert 0 < per_rank[1] < CYCLES


def test_two_processes_claiming_one_rank_lose_nothing(good: Path, tmp_path: Path) -> None:
    # GIVEN rank 1's process saying it is rank 0 too
    run_dir = tmp_path / "run"
    shutil.copytree(good, run_dir)
    shutil.rmtree(run_dir / "store")
    ranks = _rank_dirs(good)
    info0 = json.loads((ranks[0] / PROCESS_FILE).read_text())
    _edit_process(run_dir / "raw" / ranks[1].name, rank_info=info0["rank_info"])
    # WHEN it is merged
    code, output, exc = _merge(run_dir)
    # THEN both processes' cycles are kept under rank 0, and that is said once
    assert code == 0, output
    assert exc is None
    dup = [ln for ln in output.splitlines() if "each recorded cycles" in ln]
    assert len(dup) == 1, output
    assert "rank 0" in dup[0]
    cycles = read_table(run_dir, "cycles")
    assert cycles.filter(cycles["rank"] == 0).height == 2 * CYCLES
    assert sorted(cycles["cycle"].to_list()) == list(range(2 * CYCLES))
    phases = read_table(run_dir, "phases")
    assert phases.filter(phases["cycle"] < 0).height == 0  # every call inside its cycle


def test_damaged_side_files_are_ignored_or_reported(good: Path, tmp_path: Path) -> None:
    # GIVEN damaged files that are not records: a manifest, the run's run.json, NVML samples
    run_dir = tmp_path / "run"
    shutil.copytree(good, run_dir)
    shutil.rmtree(run_dir / "store")
    d1 = run_dir / "raw" / _rank_dirs(good)[1].name
    (d1 / "manifest.json").write_text("[]")
    _edit_process(d1, patched=[1, {}], unresolved=[3])
    (run_dir / "run.json").write_text("nope")
    nvml = run_dir / "raw" / "nvml"
    nvml.mkdir()
    _other_stream(nvml / "counters.arrow")
    (nvml / "gpus.json").write_text('{"gpus": 3}')
    # WHEN it is merged
    code, output, exc = _merge(run_dir)
    # THEN both ranks merge; run.json (it holds the cycle rule), the NVML file and rank 1's
    # manifest (its device and versions are unknown) are named once each
    assert code == 0, output
    assert exc is None, output
    warnings = [ln for ln in output.splitlines() if ln.startswith("tracekit: warning:")]
    assert len(warnings) == 3, warnings
    assert f"{run_dir / 'run.json'}: not readable JSON" in warnings[0]
    assert "cycle rule is unknown" in warnings[0]
    assert "counters.arrow" in warnings[2]
    assert "not tracekit NVML samples" in warnings[2]
    assert f"{d1 / 'manifest.json'}: a JSON list, not an object" in warnings[1]
    assert "rank 1's manifest" in warnings[1]
    assert "Merged 2 rank(s)" in output
    assert read_table(run_dir, "cycles").height == 2 * CYCLES


def test_unusable_cycle_rule_is_one_line_exit_2(good: Path, tmp_path: Path) -> None:
    # GIVEN a run whose run.json holds a cycle rule merge cannot use (merge reads the rule the
    # launcher wrote there, never raw/phasemap.toml again)
    run_dir = tmp_path / "run"
    shutil.copytree(good, run_dir)
    (run_dir / "raw" / "phasemap.toml").write_text("[[[")  # not read
    run = json.loads((run_dir / "run.json").read_text())
    run["cycle_rule"]["require"] = ["draft"]
    (run_dir / "run.json").write_text(json.dumps(run))
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "merge", str(run_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    (line,) = res.stderr.strip().splitlines()
    assert line.startswith("tracekit: error:")
    assert f"{run_dir / 'run.json'}: `cycle_rule.require` is ['draft']" in line
    assert "launch the run again" in line


def test_a_merge_failure_never_changes_the_commands_exit_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a merge that fails with an unexpected error (a bug)
    def broken(run_dir: Path) -> None:
        raise RuntimeError("merge bug")

    monkeypatch.setattr("tracekit.store.merge.merge", broken)
    for key in ("TRACEKIT_RUN_DIR", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    server = write_server(tmp_path / "srv")
    said: list[str] = []
    # WHEN a command exiting 3 runs under launch
    res = launch(
        LaunchOptions(
            command=server_cmd(server, 1, 3, "exit3"),
            phasemap_path=server / "phases.toml",
            out=tmp_path / "runs",
            name="broken",
            nvml=False,
        ),
        warn=said.append,
    )
    # THEN the exit code is the command's, and the failure is one line keeping the raw data
    assert res.exit_code == 3
    failed = [s for s in said if "could not merge" in s]
    assert len(failed) == 1, said
    assert "RuntimeError: merge bug" in failed[0]
    assert "the raw data is kept" in failed[0]
    assert list((res.run_dir / "raw").glob("pid-*/records.arrow"))
