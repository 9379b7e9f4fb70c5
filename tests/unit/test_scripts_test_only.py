"""scripts/test_only.py on a hand-built checkout whose test-only functions are known."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test_only.py"

TREE = {
    "tracekit/__init__.py": "",
    "tracekit/a.py": (
        "def used() -> None: ...\n"
        "def only_tested() -> None: ...\n"
        "def unused() -> None: ...\n"
        "def by_target() -> None: ...\n"
        "class K:\n"
        "    def m_used(self) -> None: ...\n"
        "    def m_tested(self) -> None: ...\n"
        "    def __repr__(self) -> str: return ''\n"
    ),
    # a function of the same name in another module, used: a.only_tested stays test-only
    "tracekit/d.py": "def only_tested() -> None: ...\nonly_tested()\n",
    "collectors/__init__.py": "",
    "collectors/b.py": (
        "from tracekit import a\n"
        "from tracekit.a import K\n"
        "def f() -> None:\n"
        "    a.used()\n"
        "    K().m_used()\n"
    ),
    "collectors/phasemaps/x.toml": 'target = "tracekit.a:by_target"\n',
    "analyzers/__init__.py": "",
    "analyzers/c.py": "from tracekit.collectors.b import f\n",
    "tests/test_x.py": (
        "from tracekit.a import K, only_tested\nonly_tested()\nK().m_tested()\nK().m_used()\n"
    ),
}


def _run(root: Path, *args: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root), *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return proc.stdout.splitlines()


def test_lists_the_functions_only_tests_read(tmp_path: Path) -> None:
    for rel, text in TREE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert _run(tmp_path) == [
        "tracekit/a.py:2 only_tested  [tests: 1]",
        "tracekit/a.py:7 K.m_tested  [tests: 1]",
        "2 functions read only by tests",
    ]
    assert _run(tmp_path, "--unused") == [
        "tracekit/a.py:2 only_tested  [tests: 1]",
        "tracekit/a.py:3 unused  [tests: 0]",
        "tracekit/a.py:7 K.m_tested  [tests: 1]",
        "3 functions read only by tests or by nothing",
    ]
