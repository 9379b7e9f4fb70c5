"""The shared options (tracekit/cli/_options.py): every command that takes a run directory
refuses one that is not there the same way: one line naming the path, exit 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.errors import InputError
from tracekit.store.layout import check_run_dir

# (argv before the path, argv after it): the missing path is always `nope`.
RUN_DIR_COMMANDS = [
    (["summary"], []),
    (["breakdown"], []),
    (["temporal"], []),
    (["perfetto"], []),
    (["report"], []),
    (["top"], ["--once"]),
    (["merge"], []),
    (["diff", "EXISTS"], []),
    (["report", "EXISTS", "--baseline"], []),
    (["breakeven", "--baseline", "EXISTS", "--spec"], []),
]


@pytest.mark.parametrize(("before", "after"), RUN_DIR_COMMANDS, ids=lambda v: " ".join(v))
def test_a_missing_run_dir_is_one_line_and_exit_2(
    tmp_path: Path, before: list[str], after: list[str]
) -> None:
    # GIVEN a directory that exists and one that does not
    (tmp_path / "run").mkdir()
    missing = tmp_path / "nope"
    argv = [str(tmp_path / "run") if a == "EXISTS" else a for a in before]
    # WHEN
    res = CliRunner().invoke(cli, [*argv, str(missing), *after])
    # THEN
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith("tracekit: error: "), lines
    assert f"{missing}: no such run directory" in lines[0]
    if "--baseline" in before[-1:] or "--spec" in before[-1:]:
        assert f"{before[-1]} {missing}" in lines[0]  # names the option it came from
    assert "Traceback" not in res.output


def test_top_needs_the_raw_directory(tmp_path: Path) -> None:
    # GIVEN a run directory with a store but no raw/ (an ingested run)
    (tmp_path / "run" / "store").mkdir(parents=True)
    # WHEN
    res = CliRunner().invoke(cli, ["top", str(tmp_path / "run"), "--once"])
    # THEN
    assert res.exit_code == 2
    assert "no `raw/` directory" in res.output


def test_check_run_dir(tmp_path: Path) -> None:
    (tmp_path / "run" / "raw").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    assert check_run_dir(tmp_path / "run", needs="raw") == tmp_path / "run"
    with pytest.raises(InputError, match=r"file is a file; give the run directory that holds"):
        check_run_dir(tmp_path / "file")
    records = tmp_path / "run" / "raw" / "pid-1" / "records.arrow"
    records.parent.mkdir()
    records.write_bytes(b"")
    run = (tmp_path / "run").resolve()
    with pytest.raises(
        InputError, match=f"records.arrow is a file; give the run directory that holds it: {run}$"
    ):
        check_run_dir(records)
    with pytest.raises(InputError, match=r"^--spec .*nope: no such run directory; try X$"):
        check_run_dir(tmp_path / "nope", option="--spec", hint="try X")
    (tmp_path / "bare").mkdir()
    with pytest.raises(InputError, match="no `raw/` directory"):
        check_run_dir(tmp_path / "bare", needs="raw")


@pytest.mark.parametrize("command", ["perfetto", "report"])
def test_an_explicit_output_needs_force_to_be_overwritten(tmp_path: Path, command: str) -> None:
    # GIVEN a run directory and an output file that exists
    (tmp_path / "run").mkdir()
    out = tmp_path / "out.bin"
    out.write_bytes(b"keep")
    # WHEN
    res = CliRunner().invoke(cli, [command, str(tmp_path / "run"), "-o", str(out)])
    # THEN the file is untouched and the message names --force
    assert res.exit_code == 2, res.output
    assert f"will not overwrite without --force: {out}" in res.output
    assert out.read_bytes() == b"keep"
