"""Every command of the `tracekit` group, taken from the group itself (so a new command is
checked without editing this file): `--help` works, its help text has an example that runs
it, and it has a docs page, docs/<command>.md, that shows it and names each of its options."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from tracekit.cli import cli

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _commands() -> list[str]:
    return list(cli.list_commands(click.Context(cli)))


def _command(name: str) -> click.Command:
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None, f"`tracekit {name}` is listed but cannot be loaded"
    return cmd


def _spelled(text: str, flag: str) -> bool:
    """`flag` (`-o`, `--output`) appears in `text` as a flag, not inside a longer word."""
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text) is not None


def test_the_command_list_is_not_empty() -> None:
    # guards the parametrisation below: an empty list would check nothing
    assert {"demo", "launch", "summary", "report", "perfetto"} <= set(_commands())


@pytest.mark.parametrize("name", _commands())
def test_help_works_and_has_an_example(name: str) -> None:
    res = CliRunner().invoke(cli, [name, "--help"], prog_name="tracekit")
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"Usage: tracekit {name} ")
    # an `Example:` paragraph whose indented lines include one running this command
    m = re.search(r"^ *Examples?:\n((?: {4,}.*\n?)+)", res.output, re.M)
    assert m, f"`tracekit {name} --help` has no `Example:` paragraph:\n{res.output}"
    lines = [ln.strip() for ln in m.group(1).splitlines()]
    assert any(ln.startswith(f"tracekit {name}") for ln in lines), lines


@pytest.mark.parametrize("name", _commands())
def test_docs_page_shows_the_command_and_its_options(name: str) -> None:
    page = DOCS / f"{name}.md"
    assert page.is_file(), f"`tracekit {name}` has no docs page {page}"
    text = page.read_text(encoding="utf-8")
    assert text.startswith(f"# tracekit {name}\n"), text[:80]
    assert f"tracekit {name}" in text.split("\n", 1)[1]  # a usage line or an example
    undocumented = [
        "/".join(p.opts)
        for p in _command(name).params
        if isinstance(p, click.Option)
        and not p.hidden
        and "--help" not in p.opts
        and not any(_spelled(text, f) for f in [*p.opts, *p.secondary_opts])
    ]
    assert not undocumented, f"{page} does not mention {undocumented}"


def test_group_help_lists_every_command_in_a_real_process() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    listed = re.findall(r"^  (\w+)  ", res.stdout.split("Commands:", 1)[1], re.M)
    assert listed == _commands()
