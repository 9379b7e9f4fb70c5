"""List the functions of tracekit/, collectors/ and analyzers/ that only tests use.

The package and the tools around it (bench/, scripts/) count as users; tests/ do not.

- A module-level function `f` of module `M` is used where `M` imports nothing but reads `f`,
  or another file reads it through `M`: `from M import f`, `M.f` (`M` imported under any
  name), or a `M:f` target in a string, a TOML file (phase maps) or a build file (entry
  points).
- A method is matched by name: used where any attribute of that name is read (`x.name`,
  `getattr(x, "name")`), so a method that shares its name with a used one counts as used:
  the list errs towards missing one, never towards naming a used one.
- Not listed: dunder methods, methods of a class with a base outside the project (the base
  may call them: `Thread.run`, `JSONEncoder.default`) or overriding a project base's method,
  functions behind a decorator (click commands, properties, registrations).

    python scripts/test_only.py            # path:line name  [tests: N], then a count
    python scripts/test_only.py --unused   # also those that nothing reads, tests included
    python scripts/test_only.py --check    # exit status 1 when it lists any (for CI)
"""

from __future__ import annotations

import argparse
import ast
import importlib
import re
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ("tracekit", "collectors", "analyzers")
TOOLS = ("bench", "scripts")
TESTS = ("tests",)
TARGET = re.compile(r"([A-Za-z_][\w.]*):([A-Za-z_][\w.]*)")
PLAIN = ("staticmethod", "classmethod")
# methods a base outside the project calls by a name it builds (http.server's `do_GET`,
# ast.NodeVisitor's `visit_Name`)
DISPATCHED = ("do_", "visit_")


@dataclass(frozen=True)
class Definition:
    path: Path
    line: int
    module: str
    cls: str | None  # None: a module-level function
    name: str


def _files(tops: tuple[str, ...], pattern: str = "*.py") -> list[Path]:
    return [p for top in tops for p in sorted((ROOT / top).rglob(pattern))]


def module_of(path: Path) -> str:
    """`tracekit.analyzers.skew` for analyzers/skew.py (the installed name)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "tracekit":
        parts.insert(0, "tracekit")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _canonical(module: str) -> str:
    top = module.split(".")[0]
    return f"tracekit.{module}" if top in ("collectors", "analyzers") else module


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def _methods_by_class() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for path in _files(PACKAGE):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef):
                names = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
                out.setdefault(node.name, set()).update(names)
    return out


def _outside_base(base: ast.expr, imports: dict[str, str]) -> object | None:
    """The class a base outside the project names, when it imports (the standard library's:
    `importlib.abc.MetaPathFinder`, `Thread` from `from threading import Thread`), else None."""
    dotted = ast.unparse(base).split("[")[0]
    head, _, rest = dotted.partition(".")
    dotted = f"{imports[head]}.{rest}".rstrip(".") if head in imports else dotted
    module, _, attr = dotted.rpartition(".")
    if not module or module.split(".")[0] in ("tracekit", "collectors", "analyzers"):
        return None
    try:
        return getattr(importlib.import_module(module), attr, None)
    except Exception:  # anything an import may raise: unknown, so kept
        return None


def _imports(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name it was imported as."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                out[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
    return out


def _called_by_base(
    cls: ast.ClassDef, name: str, project: dict[str, set[str]], imports: dict[str, str]
) -> bool:
    """Whether a base of `cls` may call its method `name`: a project base that has a method
    of that name, or a base outside the project that has that attribute or cannot be read."""
    for base in cls.bases:
        b = ast.unparse(base).rsplit(".", 1)[-1].split("[")[0]
        if b in ("object", "Protocol", "Generic"):
            continue
        if b in project:
            if name in project[b]:
                return True
            continue
        outside = _outside_base(base, imports)
        if outside is None or hasattr(outside, name) or name.startswith(DISPATCHED):
            return True
    return False


def definitions() -> list[Definition]:
    """The package's functions and methods, less those a framework or a base class calls."""
    project = _methods_by_class()
    out: list[Definition] = []
    for path in _files(PACKAGE):
        module = module_of(path)
        tree = _parse(path)
        imports = _imports(tree)
        scopes: list[tuple[ast.AST, ast.ClassDef | None]] = [(tree, None)]
        scopes += [(n, n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for scope, cls in scopes:
            for fn in getattr(scope, "body", []):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if fn.name.startswith("__") and fn.name.endswith("__"):
                    continue
                if any(ast.unparse(d) not in PLAIN for d in fn.decorator_list):
                    continue
                if cls is not None and _called_by_base(cls, fn.name, project, imports):
                    continue
                name = cls.name if cls is not None else None
                out.append(Definition(path, fn.lineno, module, name, fn.name))
    return out


@dataclass
class Uses:
    functions: Counter[tuple[str, str]]  # (module, name) of module-level functions
    attributes: Counter[str]  # attribute names read (methods)

    def add(self, other: Uses) -> None:
        self.functions.update(other.functions)
        self.attributes.update(other.attributes)


def _module_aliases(tree: ast.Module, modules: set[str]) -> dict[str, str]:
    """Local name -> module, for every import of a project module in the file."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                name = _canonical(a.name)
                if a.asname:
                    out[a.asname] = name
                else:  # `import tracekit.x.y` binds `tracekit`; chains are read in full
                    out[a.name.split(".")[0]] = _canonical(a.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                full = f"{_canonical(node.module)}.{a.name}"
                if full in modules:
                    out[a.asname or a.name] = full
    return out


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The module a `Name` or `Name.attr...` chain names, if any."""
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, aliases)
        return f"{base}.{node.attr}" if base else None
    return None


def uses_in(path: Path, modules: set[str]) -> Uses:
    tree = _parse(path)
    aliases = _module_aliases(tree, modules)
    own = module_of(path)
    uses = Uses(Counter(), Counter())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                uses.functions[(_canonical(node.module), a.name)] += 1
        elif isinstance(node, ast.Attribute):
            uses.attributes[node.attr] += 1
            mod = _dotted(node.value, aliases)
            if mod is not None:
                uses.functions[(mod, node.attr)] += 1
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.functions[(own, node.id)] += 1
            uses.attributes[node.id] += 1  # a method named in its class's body
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("getattr", "hasattr") and len(node.args) > 1:
                arg = node.args[1]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    uses.attributes[arg.value] += 1
                    mod = _dotted(node.args[0], aliases)
                    if mod is not None:
                        uses.functions[(mod, arg.value)] += 1
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            uses.add(_targets(node.value))
    return uses


def _targets(text: str) -> Uses:
    """`module:function` and `module:Class.method` targets in a text."""
    uses = Uses(Counter(), Counter())
    for module, attr in TARGET.findall(text):
        parts = attr.split(".")
        uses.functions[(_canonical(module), parts[0])] += 1
        uses.attributes.update(parts[1:])
    return uses


def _used(d: Definition, uses: Uses) -> int:
    if d.cls is None:
        return uses.functions[(d.module, d.name)]
    return uses.attributes[d.name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], allow_abbrev=False
    )
    parser.add_argument("--unused", action="store_true", help="also list what nothing reads")
    parser.add_argument("--check", action="store_true", help="exit 1 when any is listed (CI)")
    parser.add_argument("--root", type=Path, default=None, help="the checkout [this one]")
    args = parser.parse_args(argv)
    global ROOT
    ROOT = (args.root or ROOT).resolve()
    modules = {module_of(p) for p in _files(PACKAGE)}
    used = Uses(Counter(), Counter())
    for path in _files(PACKAGE + TOOLS):
        used.add(uses_in(path, modules))
    build = [p for p in (ROOT / "pyproject.toml", ROOT / "setup.py") if p.is_file()]
    for path in [*_files(PACKAGE, "*.toml"), *build]:
        used.add(_targets(path.read_text()))
    tested = Uses(Counter(), Counter())
    for path in _files(TESTS):
        tested.add(uses_in(path, modules))
    found = 0
    for d in definitions():
        if _used(d, used) or not (_used(d, tested) or args.unused):
            continue
        found += 1
        name = f"{d.cls}.{d.name}" if d.cls else d.name
        print(f"{d.path.relative_to(ROOT)}:{d.line} {name}  [tests: {_used(d, tested)}]")
    print(f"{found} functions read only by tests" + (" or by nothing" if args.unused else ""))
    return 1 if args.check and found else 0


if __name__ == "__main__":
    sys.exit(main())
