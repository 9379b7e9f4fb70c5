from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tracekit.collectors.importhook import PostImportHook


@pytest.fixture
def pkg(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "src"
    (root / "tkhookpkg").mkdir(parents=True)
    (root / "tkhookpkg" / "__init__.py").write_text("")
    (root / "tkhookpkg" / "mod.py").write_text("VALUE = 41\ndef f():\n    return VALUE\n")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [n for n in sys.modules if n.startswith("tkhookpkg")]:
        del sys.modules[name]


def test_callback_runs_after_the_module_executes(pkg: Path) -> None:
    # GIVEN
    hook = PostImportHook()
    seen: list[ModuleType] = []

    def cb(m: ModuleType) -> None:
        seen.append(m)
        m.VALUE = 42  # type: ignore[attr-defined]

    hook.register("tkhookpkg.mod", cb)
    hook.install()
    try:
        assert "tkhookpkg.mod" not in sys.modules  # nothing imported eagerly
        # WHEN
        mod = importlib.import_module("tkhookpkg.mod")
    finally:
        sys.meta_path.remove(hook)
    # THEN
    assert seen == [mod]
    assert mod.f() == 42
    assert hook.pending == []
    # the real loader is back on the module
    assert type(mod.__loader__).__name__ == "SourceFileLoader"
    assert mod.__spec__ is not None
    assert type(mod.__spec__.loader).__name__ == "SourceFileLoader"


def test_already_imported_module_is_handled_at_once(pkg: Path) -> None:
    mod = importlib.import_module("tkhookpkg.mod")
    hook = PostImportHook()
    seen: list[ModuleType] = []
    hook.register("tkhookpkg.mod", seen.append)
    assert seen == [mod]


def test_unrelated_imports_are_untouched(pkg: Path) -> None:
    hook = PostImportHook()
    hook.register("tkhookpkg.never", lambda m: None)
    hook.install()
    try:
        mod = importlib.import_module("tkhookpkg.mod")
    finally:
        sys.meta_path.remove(hook)
    assert type(mod.__loader__).__name__ == "SourceFileLoader"
    assert hook.pending == ["tkhookpkg.never"]
