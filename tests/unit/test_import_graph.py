"""The import graph points one way: cli -> outputs (report, export, live) -> analysis
(analyzers) -> store; code inside the server (collectors) imports only the raw-format writer
(tracekit.store.raw) and tracekit.errors.

Every module of the package is parsed with `ast` (nothing is imported), and every import it
makes, at module level or inside a function, is checked against the rules below. An import
under `if TYPE_CHECKING:` counts too: it is a dependency of the code's meaning.

Layers, highest first; a module may import its own layer and any lower one:

    cli       tracekit.cli.*, tracekit.__main__
    launch    tracekit.launch.*: launch-side code, in the launcher process (launcher, preflight,
              child supervision, NVML sampler); it merges the run and serves live metrics
    outputs   tracekit.report.*, tracekit.export.*, tracekit.live.*
    analysis  tracekit.analyzers.* (analyzers/ in the checkout)
    store     tracekit.store.*
    neutral   tracekit (the package itself), tracekit.errors, tracekit._version,
              tracekit._checkout, tracekit.distributed: no tracekit imports of their own
              beyond each other (distributed runs per-rank maps for ingest, merge and the
              analysis alike, so it sits below all of them)

Apart from the ladder:

    server    tracekit.collectors.* (collectors/): imported by the cli and launch only; imports
              its own package, tracekit.store.raw(.*) and the neutral modules
    demo      tracekit.demo.*: a workload program (the demo server), imported by the cli only;
              imports its own package and the neutral modules

A module in none of these fails the test: give a new package a layer here first. A private
module (`_name`) is its package's own: only modules of the same subpackage (tracekit.X) import it;
the neutral `tracekit._version` and `tracekit._checkout` excepted.

There are no exceptions: the 15 violations of the start of issue 12 (merge and `tracekit top`
reading raw records through the collectors, the launcher inside collectors/, the export using the
analysis cache) are gone, and any new one fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# where each package's source lives in the checkout (setuptools maps the two at install)
SOURCES = {
    "tracekit": ROOT / "tracekit",
    "tracekit.analyzers": ROOT / "analyzers",
    "tracekit.collectors": ROOT / "collectors",
}

LADDER = ["neutral", "store", "analysis", "outputs", "launch", "cli"]  # lowest first
NEUTRAL = {
    "tracekit",
    "tracekit.errors",
    "tracekit._version",
    "tracekit._checkout",
    "tracekit.distributed",
}
PREFIXES = [  # most specific first
    ("tracekit.cli", "cli"),
    ("tracekit.__main__", "cli"),
    ("tracekit.launch", "launch"),
    ("tracekit.report", "outputs"),
    ("tracekit.export", "outputs"),
    ("tracekit.live", "outputs"),
    ("tracekit.analyzers", "analysis"),
    ("tracekit.store", "store"),
    ("tracekit.collectors", "server"),
    ("tracekit.demo", "demo"),
]
# what the layers apart from the ladder may import, besides their own package and neutral
# (a package named here includes its modules), and which layers may import them
OFF_LADDER = {
    "server": {"tracekit.store.raw"},
    "demo": set(),
}
IMPORTED_BY = {"server": {"cli", "launch"}, "demo": {"cli"}}


def layer(module: str) -> str | None:
    if module in NEUTRAL:
        return "neutral"
    for prefix, name in PREFIXES:
        if module == prefix or module.startswith(prefix + "."):
            return name
    return None


def package_modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    out: dict[str, Path] = {}
    for pkg, src in SOURCES.items():
        for path in sorted(src.rglob("*.py")):
            rel = path.relative_to(src).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if pkg == "tracekit" and (
                name.startswith(("tracekit.analyzers", "tracekit.collectors"))
            ):
                continue  # not in the checkout's tracekit/; listed for completeness
            out[name] = path
    return out


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    """The absolute name of a `from ... import` (relative imports resolved)."""
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The tracekit modules `module` imports (at any depth of its code). `from pkg import name`
    counts as importing `pkg.name` when that is a module, else `pkg`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, node, path.name == "__init__.py")
            for a in node.names:
                sub = f"{base}.{a.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m == "tracekit" or m.startswith("tracekit.")}


def _subpackage(module: str) -> list[str]:
    return module.split(".")[:2]


def allowed(importer: str, imported: str) -> bool:
    src, dst = layer(importer), layer(imported)
    assert src is not None
    assert dst is not None
    private = imported.rsplit(".", 1)[-1].startswith("_") and not imported.endswith("__")
    if private and imported not in NEUTRAL and _subpackage(importer) != _subpackage(imported):
        return False
    if src in OFF_LADDER:
        return (
            dst == "neutral"
            or _subpackage(imported) == _subpackage(importer)
            or any(imported == m or imported.startswith(m + ".") for m in OFF_LADDER[src])
        )
    if dst in OFF_LADDER:
        return src in IMPORTED_BY[dst]
    return LADDER.index(dst) <= LADDER.index(src)


def edges() -> set[tuple[str, str]]:
    modules = package_modules()
    known = set(modules)
    return {
        (name, imp)
        for name, path in modules.items()
        for imp in imports_of(name, path, known)
        if imp != name
    }


def test_every_module_has_a_layer() -> None:
    # GIVEN every module of the package and everything they import
    names = set(package_modules()) | {dst for _, dst in edges()}
    # THEN each is in a layer of the docstring
    missing = sorted(n for n in names if layer(n) is None)
    assert not missing, f"give these modules a layer in {__file__}: {missing}"


def test_imports_only_go_down() -> None:
    # GIVEN the package's import graph
    bad = {(src, dst) for src, dst in edges() if not allowed(src, dst)}
    # THEN every import goes down the layers
    assert not bad, "imports against the layers (docs: this file's docstring):\n" + "\n".join(
        f"  {s} ({layer(s)}) imports {d} ({layer(d)})" for s, d in sorted(bad)
    )


# The checker itself, on hand-made cases: each rule can fail.
@pytest.mark.parametrize(
    ("importer", "imported", "ok"),
    [
        ("tracekit.cli.summary", "tracekit.analyzers.summary", True),
        ("tracekit.cli.launch", "tracekit.collectors.launcher", True),
        ("tracekit.cli.sweep", "tracekit.demo.config", True),
        ("tracekit.report.html", "tracekit.analyzers.run_analysis", True),
        ("tracekit.analyzers.phases", "tracekit.store.reader", True),
        ("tracekit.store.reader", "tracekit.errors", True),
        ("tracekit.store.ingest", "tracekit.distributed", True),
        ("tracekit.collectors.recorder", "tracekit.store.raw", True),
        ("tracekit.collectors.recorder", "tracekit.store.raw.ipc", True),
        ("tracekit.launch.launcher", "tracekit.collectors.phasemap", True),
        ("tracekit.launch.launcher", "tracekit.live.metrics", True),
        ("tracekit.launch.launcher", "tracekit.store.merge", True),
        ("tracekit.cli.launch", "tracekit.launch.launcher", True),
        ("tracekit.store.merge", "tracekit.launch.runjson", False),  # up
        ("tracekit.collectors.recorder", "tracekit.launch.env", False),
        ("tracekit.launch.launcher", "tracekit.demo.server", False),
        ("tracekit.collectors.recorder", "tracekit.collectors.runtime", True),
        ("tracekit.collectors.recorder", "tracekit.errors", True),
        ("tracekit.demo.server", "tracekit.demo.options", True),
        ("tracekit.store.merge", "tracekit.analyzers.cycles", False),  # up
        ("tracekit.analyzers.summary", "tracekit.report.html", False),  # up
        ("tracekit.export.perfetto", "tracekit.cli._output", False),  # up
        ("tracekit.errors", "tracekit.store.schema", False),  # neutral is the bottom
        ("tracekit.collectors.recorder", "tracekit.store.schema", False),  # only raw
        ("tracekit.store.merge", "tracekit.collectors.recorder", False),  # store -> server
        ("tracekit.report.html", "tracekit.demo.config", False),  # the demo is the cli's
        ("tracekit.demo.server", "tracekit.store.raw", False),
        ("tracekit.export.perfetto", "tracekit.analyzers._load", False),  # private
        ("tracekit.cli.summary", "tracekit.cli._options", True),
        ("tracekit.store.writer", "tracekit._version", True),
    ],
)
def test_the_rules(importer: str, imported: str, ok: bool) -> None:
    assert allowed(importer, imported) is ok


def test_imports_are_found_at_every_depth(tmp_path: Path) -> None:
    # GIVEN a module importing at module level, in a function, under TYPE_CHECKING, relatively
    src = tmp_path / "tracekit" / "store"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("")
    mod = src / "m.py"
    mod.write_text(
        "from typing import TYPE_CHECKING\n"
        "import tracekit.errors\n"
        "from tracekit.store import layout\n"
        "from . import reader\n"
        "if TYPE_CHECKING:\n"
        "    from tracekit.analyzers.run_analysis import RunAnalysis\n"
        "def f():\n"
        "    from tracekit.report.html import write_report\n"
        "    import json\n"
    )
    known = {"tracekit.store.layout", "tracekit.store.reader", "tracekit.analyzers.run_analysis"}
    # WHEN
    found = imports_of("tracekit.store.m", mod, known)
    # THEN
    assert found == {
        "tracekit.errors",
        "tracekit.store.layout",
        "tracekit.store.reader",
        "tracekit.analyzers.run_analysis",
        "tracekit.report.html",
    }
