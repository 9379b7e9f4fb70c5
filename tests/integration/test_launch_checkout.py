"""A source checkout imports as it stands: `tracekit launch` started from the repository root.

Python started in the repository root imports the checkout's `tracekit/` ahead of any install;
`collectors/` and `analyzers/` sit beside it, not inside it. These tests run Python with `-S`
(no site-packages processing, so no editable-install finder can paper over a missing mapping) and
only the environment's libraries on PYTHONPATH, the way a server venv with a regular install sees
a checkout it was started in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from tracekit.store.reader import read_table

REPO = Path(__file__).resolve().parents[2]

PROGRAM = """
import json


def work(i):
    return json.dumps({"i": i, "sq": i * i})


def cycle(i):
    return work(i)


def main():
    for i in range(6):
        print(cycle(i))
"""
MAP = """
[adapter]
name = "checkout"
package = "prog"

[[phase]]
name = "work"
targets = ["prog:work"]

[cycle]
targets = ["prog:cycle"]
"""


def _bare_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["PYTHONPATH"] = sysconfig.get_paths()["purelib"]
    return env


def test_checkout_subpackages_import_from_the_repository_root() -> None:
    res = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import tracekit.collectors as c, tracekit.analyzers as a;"
            "print(c.__file__); print(a.__file__)",
        ],
        cwd=REPO,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == [
        str(REPO / "collectors" / "__init__.py"),
        str(REPO / "analyzers" / "__init__.py"),
    ]


def test_launch_from_the_repository_root(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAM)
    (tmp_path / "map.toml").write_text(MAP)
    out = tmp_path / "runs"
    res = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "tracekit",
            "launch",
            "--phases",
            str(tmp_path / "map.toml"),
            "--out",
            str(out),
            "--name",
            "root",
            "--",
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import prog; prog.main()",
        ],
        cwd=REPO,
        env=_bare_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[-1] == '{"i": 5, "sq": 25}'
    cycles = read_table(out / "root", "cycles")
    assert cycles["cycle"].sort().to_list() == list(range(6))
    assert read_table(out / "root", "phases").height >= 6
