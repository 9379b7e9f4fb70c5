from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracekit.collectors.launcher import _python_flags_warning, create_run_dir, default_name

from tracekit.cli import cli


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["launch", "--adapter", "nope", "--", "true"], "unknown adapter `nope`"),
        (
            ["launch", "--adapter", "demo", "--phases", __file__, "--", "true"],
            "--adapter and --phases cannot be used together",
        ),
        (
            ["launch", "--adapter", "demo", "--", "surely-not-a-command-xyz"],
            "command not found: 'surely-not-a-command-xyz'",
        ),
        (
            ["launch", "--mode", "full", "--profile-cycles", "x:1", "--", "true"],
            "expected START:COUNT",
        ),
        (["launch", "--phases", __file__, "--", "true"], "not valid TOML"),
    ],
)
def test_launch_bad_input_is_one_line_exit_2(tmp_path: Path, args: list[str], needle: str) -> None:
    res = CliRunner().invoke(cli, [*args[:1], "--out", str(tmp_path / "runs"), *args[1:]])
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.splitlines() if ln.startswith("tracekit: error:")]
    assert len(lines) == 1
    # nothing was started, no run directory was left behind
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_merge_of_a_directory_without_raw(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["merge", str(tmp_path)])
    assert res.exit_code == 2
    assert "no `raw/` directory" in res.output


def test_launch_and_merge_help() -> None:
    for cmd in ("launch", "merge"):
        res = CliRunner().invoke(cli, [cmd, "--help"])
        assert res.exit_code == 0
        assert "Example:" in res.output


def test_two_launches_never_share_a_run_directory(tmp_path: Path) -> None:
    dirs = [create_run_dir(tmp_path, "same") for _ in range(3)]
    assert [d.name for d in dirs] == ["same", "same-1", "same-2"]
    assert all(d.is_dir() for d in dirs)


def test_default_name_and_interpreter_flags() -> None:
    assert default_name([sys.executable, "-m", "sglang.launch_server", "--tp", "8"]).endswith(
        "-sglang.launch_server"
    )
    assert default_name(["vllm", "serve", "m"]).endswith("-vllm")
    assert _python_flags_warning(["python", "-I", "x.py"]) is not None
    assert _python_flags_warning(["python3", "-u", "x.py"]) is None
    assert _python_flags_warning(["vllm", "-E"]) is None
