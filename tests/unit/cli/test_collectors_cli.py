from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

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
