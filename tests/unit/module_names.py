"""Run by tests/unit/test_package.py in a fresh interpreter: import every module of tracekit,
its collectors and analyzers, then the project imports of each `if TYPE_CHECKING:` block, and
print (JSON) how many project files were loaded, the files loaded under more than one name,
the names outside `tracekit.` that project files were loaded under and the names of the
project's Python modules loaded. Modules named on the command line are imported first (the
test's own check that a module imported under a second name is seen).

The project files are those of the folders `tracekit`, `tracekit.collectors` and
`tracekit.analyzers` were imported from: the checkout's `tracekit/`, `collectors/`,
`analyzers/`, or the install's single `tracekit/`.
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import sys
from pathlib import Path
from types import ModuleType

import tracekit
import tracekit.analyzers
import tracekit.collectors

PACKAGES = (tracekit, tracekit.collectors, tracekit.analyzers)
PROJECT_TOPS = {"tracekit", "collectors", "analyzers"}


def _modules(pkg: ModuleType) -> list[str]:
    """Every module under `pkg`'s own folder (a checkout's `tracekit.__path__` also holds the
    repository root, whose tests/ and bench/ are no part of the package)."""
    found = pkgutil.walk_packages([pkg.__path__[0]], pkg.__name__ + ".")
    return [m.name for m in found if not m.name.endswith(".__main__")]


def _typing_imports(path: Path) -> list[ast.stmt]:
    """The project imports inside the `if TYPE_CHECKING:` blocks of the file at `path`."""
    out: list[ast.stmt] = []
    if path.suffix != ".py":  # a compiled extension (the collectors' native hot path)
        return out
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        test = node.test if isinstance(node, ast.If) else None
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name != "TYPE_CHECKING":
            continue
        for stmt in ast.walk(node):
            if isinstance(stmt, ast.ImportFrom) and stmt.level == 0 and stmt.module:
                tops = {stmt.module.split(".")[0]}
            elif isinstance(stmt, ast.Import):
                tops = {a.name.split(".")[0] for a in stmt.names}
            else:
                continue
            if tops & PROJECT_TOPS:
                out.append(stmt)
    return out


def _roots() -> list[Path]:
    return [Path(p.__path__[0]).resolve() for p in PACKAGES]


def _project_files() -> dict[Path, list[str]]:
    roots = _roots()
    names: dict[Path, list[str]] = {}
    for name, mod in list(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        if any(path.is_relative_to(root) for root in roots):
            names.setdefault(path, []).append(name)
    return names


def main() -> None:
    for name in sys.argv[1:]:
        importlib.import_module(name)
    for pkg in PACKAGES:
        for name in _modules(pkg):
            importlib.import_module(name)
    for path in list(_project_files()):
        stmts = _typing_imports(path)
        if stmts:
            exec(compile(ast.Module(body=stmts, type_ignores=[]), str(path), "exec"), {})
    files = _project_files()
    print(
        json.dumps(
            {
                "roots": [str(r) for r in _roots()],
                "files": len(files),
                "twice": {str(p): sorted(n) for p, n in files.items() if len(n) > 1},
                "outside": sorted(
                    n for ns in files.values() for n in ns if n.split(".")[0] != "tracekit"
                ),
                "typing_imports": sum(len(_typing_imports(p)) for p in files),
                "modules": sorted(n for p, ns in files.items() if p.suffix == ".py" for n in ns),
            }
        )
    )


if __name__ == "__main__":
    main()
