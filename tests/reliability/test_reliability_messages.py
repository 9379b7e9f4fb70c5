"""Messages that name the user's mistake, and parser traps (issue 24): a file given for a run
directory, a run not merged yet, joining parts into a directory that holds another run, the
shipped samples merging without "launch again", argparse prefix matching, and `launch` saying
that the command's own failure is why nothing was recorded."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLE_TRACES
from tests.outputs_synth import make_run
from tests.reliability._programs import (
    launch_cmd,
    run,
    server_cmd,
    tracekit_lines,
    write_server,
)
from tracekit.cli import cli

REPO = Path(__file__).resolve().parents[2]


def _one_error(argv: list[str]) -> str:
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit), res.exception
    lines = [ln for ln in res.output.splitlines() if ln.startswith("tracekit: error:")]
    assert len(lines) == 1, res.output
    return lines[0]


def test_a_file_given_for_a_run_directory_names_the_run(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    make_run(run_dir, ranks=1, cycles=2)
    (part,) = (run_dir / "store" / "cycles" / "rank=0").glob("*.parquet")
    line = _one_error(["summary", str(part)])
    assert f"{part} is a file; give the run directory that holds it: {run_dir.resolve()}" in line


def test_an_unmerged_run_says_merge_first(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "raw" / "pid-1").mkdir(parents=True)
    (run_dir / "run.json").write_text("{}")
    for command in ("summary", "report"):
        line = _one_error([command, str(run_dir)])
        assert "not merged yet" in line
        assert f"run `tracekit merge {run_dir}` first" in line


def test_joining_into_a_directory_holding_another_run_needs_force(tmp_path: Path) -> None:
    # GIVEN two node parts, and an -o directory that holds another run
    parts = []
    for node in (0, 1):
        part = tmp_path / f"node{node}"
        make_run(part, ranks=1, cycles=2)
        for d in (part / "store").glob("*/rank=0"):
            d.rename(d.with_name(f"rank={node}"))  # node K holds rank K
        (part / "run.json").write_text(json.dumps({"node_rank": node, "nnodes": 2}))
        parts.append(part)
    other = tmp_path / "other"
    make_run(other, ranks=1, cycles=3)
    argv = ["merge", *map(str, parts), "-o", str(other)]
    # WHEN merged into it THEN one line, and the other run is untouched
    line = _one_error(argv)
    assert f"{other} already holds another run" in line
    assert "--force" in line
    assert (other / "store").is_dir()
    # WHEN forced, or into a new directory THEN joined
    new = tmp_path / "joined"
    assert CliRunner().invoke(cli, [*argv[:-1], str(new)]).exit_code == 0
    again = CliRunner().invoke(cli, [*argv[:-1], str(new)])  # the same parts again: rewritten
    assert again.exit_code == 0, again.output
    assert CliRunner().invoke(cli, [*argv, "--force"]).exit_code == 0


@pytest.mark.parametrize("sample", ["gpu_h200_light/extend", "gpu_h200_full/graph"])
def test_shipped_samples_merge_without_launch_again(tmp_path: Path, sample: str) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(SAMPLE_TRACES / sample, run_dir)
    res = CliRunner().invoke(cli, ["merge", str(run_dir)])
    assert res.exit_code == 0, res.output
    assert "again" not in res.output, res.output
    assert "warning" not in res.output, res.output


def _parsers(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", getattr(node.func, "id", "")) == "ArgumentParser"
    ]


def test_every_argparse_parser_refuses_abbreviations() -> None:
    files = [
        p
        for d in ("tracekit", "collectors", "analyzers", "bench", "scripts", "tests")
        for p in (REPO / d).rglob("*.py")
    ]
    calls = [(f, c) for f in files for c in _parsers(f)]
    assert len(calls) >= 10  # the scan finds them (the demo's, bench's, the tests' own)
    allowing = [
        f"{f.relative_to(REPO)}:{c.lineno}"
        for f, c in calls
        if not any(
            k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant) and k.value.value is False
            for k in c.keywords
        )
    ]
    assert not allowing, f"ArgumentParser without allow_abbrev=False: {allowing}"


def test_demo_does_not_read_mode_as_model_size() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "tracekit.demo", "--mode", "light"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert res.returncode == 2
    assert "unrecognized arguments: --mode light" in res.stderr
    assert "Traceback" not in res.stderr


def test_launch_says_the_command_failed_before_nothing_was_recorded(tmp_path: Path) -> None:
    # GIVEN a server that exits 2 on its arguments, before importing any target module
    server = write_server(tmp_path / "srv")
    cmd = launch_cmd(server, tmp_path / "runs", "usage", server_cmd(server, 2, 3, "usage"))
    # WHEN launched
    res = run(cmd, server)
    # THEN its exit status, and that this is why nothing was recorded, in one line
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    lines = tracekit_lines(res.stderr)
    failed = [ln for ln in lines if "exited with status 2" in ln]
    assert len(failed) == 1, lines
    assert "that is why nothing was recorded" in failed[0]
    assert not [ln for ln in lines if ln.startswith("tracekit: nothing was recorded")], lines
    assert "Next: tracekit summary" not in res.stderr


def test_merging_a_run_that_recorded_nothing_is_one_line(tmp_path: Path) -> None:
    # GIVEN a run whose one process recorded no call (the launcher's own, say)
    pid = tmp_path / "run" / "raw" / "pid-7"
    pid.mkdir(parents=True)
    (pid / "process.json").write_text(json.dumps({"pid": 7, "records": 0}))
    # WHEN merged THEN one line saying so, exit 2, and no "Next: tracekit summary"
    line = _one_error(["merge", str(tmp_path / "run")])
    assert "nothing to merge: no process under raw/ recorded a call" in line
