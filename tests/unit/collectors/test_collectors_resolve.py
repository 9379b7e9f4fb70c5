from __future__ import annotations

from pathlib import Path

from tracekit.collectors.phasemap import Target
from tracekit.collectors.resolve import (
    FOUND,
    MAIN,
    NO_ATTR,
    NO_MODULE,
    UNKNOWN,
    installed_module_file,
    resolve_all,
)


def _fake_release(root: Path) -> Path:
    """A small package laid out like a server release: inheritance, re-exports, renames."""
    pkg = root / "fakesrv"
    (pkg / "spec").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "spec" / "__init__.py").write_text(
        "from fakesrv.spec.base import BaseProposer as BaseProposer\n"
    )
    (pkg / "spec" / "base.py").write_text(
        "class BaseProposer:\n"
        "    def propose(self):\n        pass\n"
        "    @staticmethod\n    def helper():\n        pass\n"
    )
    (pkg / "spec" / "eagle.py").write_text(
        "import torch\n"
        "from .base import BaseProposer\n"
        "from torch.nn import Module\n"
        "class EagleProposer(BaseProposer):\n"
        "    def load(self):\n        pass\n"
        "    run = load\n"
        "class Wrapped(Module):\n    pass\n"
        "class Nested:\n    class Inner:\n        def go(self):\n            pass\n"
        "def module_function():\n    pass\n"
        "if True:\n    def conditional():\n        pass\n"
    )
    (pkg / "spec" / "broken.py").write_text("def (:\n")
    return root


def _status(root: Path, *targets: str) -> list[str]:
    return [r.status for r in resolve_all([Target.parse(t) for t in targets], [root])]


def test_resolves_defined_inherited_and_nested(tmp_path: Path) -> None:
    root = _fake_release(tmp_path)
    assert (
        _status(
            root,
            "fakesrv.spec.eagle:EagleProposer.load",
            "fakesrv.spec.eagle:EagleProposer.run",
            "fakesrv.spec.eagle:EagleProposer.propose",  # inherited through `from .base import`
            "fakesrv.spec.eagle:EagleProposer.helper",
            "fakesrv.spec.eagle:Nested.Inner.go",
            "fakesrv.spec.eagle:module_function",
            "fakesrv.spec.eagle:conditional",
            "fakesrv.spec:BaseProposer.propose",  # re-exported by the package
        )
        == [FOUND] * 8
    )


def test_reports_missing_module_attribute_and_unknown_base(tmp_path: Path) -> None:
    root = _fake_release(tmp_path)
    res = resolve_all(
        [
            Target.parse("fakesrv.spec.gone:X.y"),
            Target.parse("fakesrv.spec.eagle:EagleProposer.nothere"),
            Target.parse("fakesrv.spec.eagle:Missing.f"),
            Target.parse("fakesrv.spec.eagle:Wrapped.forward"),  # base class outside the sources
            Target.parse("fakesrv.spec.broken:f"),
            Target.parse("__main__:Thing.f"),
        ],
        [root],
    )
    assert [r.status for r in res] == [NO_MODULE, NO_ATTR, NO_ATTR, UNKNOWN, NO_MODULE, MAIN]
    assert res[3].detail == "Module"


def test_installed_module_file_imports_nothing() -> None:
    import sys

    path = installed_module_file("tracekit.demo.speculative")
    assert path is not None
    assert path.name == "speculative.py"
    assert installed_module_file("surely_not_a_module_xyz.sub") is None
    assert "surely_not_a_module_xyz" not in sys.modules
