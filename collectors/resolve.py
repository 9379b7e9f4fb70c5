"""Resolve phase-map targets by reading source (AST), without importing the server.

Used by `tracekit launch` (targets that cannot resolve here are listed once at start-up) and by
`bench/resolve_targets.py` (which target resolves in which SGLang / vLLM release). A method
inherited from a base class is followed through the module's own classes and its
`from x import Base` imports, as long as the base's module is among the scanned sources.
"""

from __future__ import annotations

import ast
import importlib.machinery
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracekit.collectors.phasemap import Target

FOUND = "found"
NO_MODULE = "module not found"
NO_ATTR = "attribute not found"
UNKNOWN = "unknown"  # inherited from a class whose source is not scanned
MAIN = "in __main__"


@dataclass(frozen=True)
class Resolution:
    target: Target
    status: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == FOUND


def module_file(module: str, roots: list[Path]) -> Path | None:
    """The source file of `module` under one of `roots` (a sys.path-like list), or None."""
    parts = module.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                return cand
    return None


def installed_module_file(module: str) -> Path | None:
    """The source file of `module` in this interpreter's environment, importing nothing.

    Asks the import system's finders (so editable installs and path hooks count) for the top
    package, then walks submodules with `PathFinder` over each package's search locations.
    """
    parts = module.split(".")
    spec = None
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(parts[0], None)
        except Exception:
            spec = None
        if spec is not None:
            break
    for i in range(1, len(parts)):
        locations = getattr(spec, "submodule_search_locations", None)
        if spec is None or not locations:
            return None
        spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), list(locations))
    origin = getattr(spec, "origin", None)
    if origin and origin.endswith(".py"):
        return Path(origin)
    return None


class SourceIndex:
    """Parsed modules, cached; found under `roots`, or by `locate` when given."""

    def __init__(
        self, roots: list[Path], locate: Callable[[str], Path | None] | None = None
    ) -> None:
        self.roots = [Path(r) for r in roots if r and Path(r).is_dir()]
        self.locate = locate
        self._trees: dict[str, ast.Module | None] = {}

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.locate(module) if self.locate else module_file(module, self.roots)
            tree = None
            if path is not None:
                try:
                    tree = ast.parse(path.read_bytes(), filename=str(path))
                except (SyntaxError, ValueError, OSError):
                    tree = None
            self._trees[module] = tree
        return self._trees[module]


def _body_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
        elif isinstance(node, (ast.If, ast.Try)):
            # names defined under `if TYPE_CHECKING` / version checks / try-except imports
            for sub in (
                node.body,
                getattr(node, "orelse", []),
                *[h.body for h in getattr(node, "handlers", [])],
            ):
                for k, v in _body_names(sub).items():
                    names.setdefault(k, v)
    return names


def _import_source(node: ast.ImportFrom, name: str, module: str) -> tuple[str, str] | None:
    """(module, name) that `from X import name` in `module` refers to."""
    for alias in node.names:
        if (alias.asname or alias.name) == name:
            if node.level:
                pkg = module.split(".")
                base = pkg[: len(pkg) - node.level] if len(pkg) >= node.level else []
                src = ".".join([*base, node.module] if node.module else base)
            else:
                src = node.module or ""
            return src, alias.name
    return None


class Resolver:
    def __init__(
        self, roots: list[Path], locate: Callable[[str], Path | None] | None = None
    ) -> None:
        self.index = SourceIndex(roots, locate)

    def _lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ast.AST | None, str]:
        """Find top-level `name` in `module`, following `from x import name` re-exports."""
        tree = self.index.tree(module)
        if tree is None:
            return module, None, NO_MODULE
        node = _body_names(tree.body).get(name)
        if isinstance(node, ast.ImportFrom) and depth < 8:
            src = _import_source(node, name, module)
            if src is not None:
                return self._lookup(src[0], src[1], depth + 1)
        if node is None:
            return module, None, NO_ATTR
        return module, node, FOUND

    def _class_attr(
        self, module: str, cls: ast.ClassDef, attr: str, depth: int = 0
    ) -> tuple[str, str]:
        if attr in _body_names(cls.body):
            return FOUND, f"{module}:{cls.name}"
        unknown = ""
        for base in cls.bases:
            if depth > 12:
                break
            bname = base.id if isinstance(base, ast.Name) else None
            bmod = module
            if isinstance(base, ast.Attribute):
                unknown = unknown or ast.unparse(base)
                continue
            if bname is None or bname == "object":
                continue
            found_mod, node, _status = self._lookup(bmod, bname)
            if isinstance(node, ast.ClassDef):
                st, where = self._class_attr(found_mod, node, attr, depth + 1)
                if st == FOUND:
                    return st, where
                if st == UNKNOWN:
                    unknown = unknown or where
            else:
                unknown = unknown or bname
        if unknown:
            return UNKNOWN, unknown
        return NO_ATTR, f"{module}:{cls.name}"

    def resolve(self, target: Target) -> Resolution:
        if target.module == "__main__":
            return Resolution(
                target, MAIN, "targets in __main__ cannot be wrapped; move the code into a module"
            )
        parts = target.qualname.split(".")
        module, node, status = self._lookup(target.module, parts[0])
        if status == NO_MODULE and module == target.module:
            return Resolution(target, NO_MODULE, target.module)
        if node is None:
            return Resolution(target, NO_ATTR, f"{parts[0]} in {module}")
        for i, part in enumerate(parts[1:], start=1):
            if not isinstance(node, ast.ClassDef):
                return Resolution(target, UNKNOWN, f"{'.'.join(parts[:i])} is not a class")
            body = _body_names(node.body)
            if part in body:
                node = body[part]
                continue
            if i == len(parts) - 1:
                st, where = self._class_attr(module, node, part)
                return Resolution(target, st, where if st != FOUND else f"inherited from {where}")
            return Resolution(target, NO_ATTR, f"{'.'.join(parts[: i + 1])} in {module}")
        return Resolution(target, FOUND, module)


def resolve_all(
    targets: list[Target], roots: list[Path], locate: Callable[[str], Path | None] | None = None
) -> list[Resolution]:
    r = Resolver(roots, locate)
    return [r.resolve(t) for t in targets]
