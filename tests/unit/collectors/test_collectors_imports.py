"""The import direction the architecture promises (docs/ARCHITECTURE.md): code inside the server
(collectors/) imports only itself, the raw format (tracekit/store/raw/) and tracekit.errors;
the raw format imports only itself and tracekit.errors; the store never imports collectors/;
nothing heavy is loaded when the server imports the collectors."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _imports(path: Path) -> set[str]:
    """Every `tracekit...` module a file imports, at module level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
    return {m for m in out if m == "tracekit" or m.startswith("tracekit.")}


def _allowed(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize(
    ("folder", "allowed"),
    [
        (
            "collectors",
            ("tracekit.collectors", "tracekit.store.raw", "tracekit.errors", "tracekit._version"),
        ),
        ("tracekit/store/raw", ("tracekit.store.raw", "tracekit.errors")),
    ],
)
def test_inside_the_server_only_the_raw_format_and_errors(
    folder: str, allowed: tuple[str, ...]
) -> None:
    bad = {
        str(p.relative_to(REPO)): sorted(m for m in _imports(p) if not _allowed(m, allowed))
        for p in sorted((REPO / folder).rglob("*.py"))
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_store_never_imports_the_collectors_or_the_launcher() -> None:
    bad = {
        str(p.relative_to(REPO)): sorted(
            m for m in _imports(p) if _allowed(m, ("tracekit.collectors", "tracekit.launch"))
        )
        for p in sorted((REPO / "tracekit" / "store").rglob("*.py"))
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_the_server_pays_for_nothing_heavy_at_import() -> None:
    code = (
        "import sys\n"
        "import tracekit.collectors.runtime, tracekit.collectors.recorder\n"
        "import tracekit.collectors.wrappers, tracekit.collectors.importhook\n"
        "heavy = ('pyarrow', 'numpy', 'polars', 'plotly', 'torch', 'msgspec', 'rich', 'click')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert res.stdout.strip() == "[]", res.stderr
