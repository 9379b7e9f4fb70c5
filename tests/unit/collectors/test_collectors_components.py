"""`[[component]]` probes: name the class in use at the first call, and the map's targets that
cover it; parse errors; the runtime's messages for targets that are missing or inherited."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from tracekit.collectors import components, runtime
from tracekit.collectors.phasemap import ComponentSpec, Site, Target, parse
from tracekit.collectors.wrappers import install
from tracekit.errors import CollectorError

MAP = """
[[phase]]
name = "draft"
targets = ["m:Base.propose"]

[[component]]
name = "drafter"
at = "m:Runner.step"
value = "self.drafter"
"""


class Hooks:
    active = False  # wrappers pass straight through

    def enter(self, site: Site) -> Any:
        return None

    def exit(self, frame: Any, ok: bool, result: object) -> None:
        pass


def _module() -> types.ModuleType:
    mod = types.ModuleType("tkcomp_mod")

    class Base:
        def propose(self) -> int:
            return 1

    class Ngram(Base):
        pass

    class Other:
        def propose(self) -> int:
            return 2

    class Runner:
        def __init__(self, drafter: object) -> None:
            self.drafter = drafter

        def step(self, x: int) -> int:
            return x + 1

    for cls in (Base, Ngram, Other, Runner):
        cls.__module__, cls.__qualname__ = "tkcomp_mod", cls.__name__
        setattr(mod, cls.__name__, cls)
    return mod


def test_parse_components() -> None:
    pm = parse(MAP)
    assert pm.components == (ComponentSpec("drafter", Target("m", "Runner.step"), "self.drafter"),)
    call = MAP.replace('"self.drafter"', '"pkg.mod:get_group().device_communicator"')
    assert parse(call).components[0].value == "pkg.mod:get_group().device_communicator"


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('name = "d"\nat = "m:R.s"', "needs exactly"),
        ('name = "d"\nat = "m:R.s"\nvalue = "self.x()"', "`value` must be"),
        ('name = "d"\nat = "nope"\nvalue = "self.x"', "not of the form"),
        ('name = "d d"\nat = "m:R.s"\nvalue = "self.x"', "`name` must be"),
    ],
)
def test_bad_component(body: str, needle: str) -> None:
    text = '[[phase]]\nname = "draft"\ntargets = ["m:f"]\n\n[[component]]\n' + body
    with pytest.raises(CollectorError, match=needle) as err:
        parse(text, source="map.toml")
    assert str(err.value).startswith("map.toml: [[component]] #1")


def test_probe_names_the_class_once_and_removes_itself() -> None:
    mod = _module()
    hooks = Hooks()
    install(mod, Site(Target("tkcomp_mod", "Base.propose"), phase="draft"), hooks)
    seen: list[tuple[str, dict[str, Any]]] = []
    spec = ComponentSpec("drafter", Target("tkcomp_mod", "Runner.step"), "self.drafter")
    original = mod.Runner.step
    assert components.install_probe(mod, spec, lambda n, i: seen.append((n, i)))
    assert mod.Runner.step is not original
    runner = mod.Runner(mod.Ngram())
    assert runner.step(1) == 2  # the call goes through, result unchanged
    assert mod.Runner.step is original  # the probe removed itself
    assert runner.step(2) == 3
    assert len(seen) == 1
    name, info = seen[0]
    assert name == "drafter"
    assert info["class"] == "tkcomp_mod:Ngram"
    # covered through the inherited, wrapped Base.propose
    assert info["covered"] is True
    assert info["covered_by"] == ["Base.propose (draft)"]
    assert "covered by the map" in components.line(name, info)


def test_probe_uncovered_class_and_none() -> None:
    mod = _module()
    seen: list[dict[str, Any]] = []
    spec = ComponentSpec("drafter", Target("tkcomp_mod", "Runner.step"), "self.drafter")
    components.install_probe(mod, spec, lambda n, i: seen.append(i))
    mod.Runner(mod.Other()).step(0)
    assert seen[0]["covered"] is False
    assert seen[0]["covered_by"] == []
    assert "NOT covered" in components.line("drafter", seen[0])
    components.install_probe(mod, spec, lambda n, i: seen.append(i))
    mod.Runner(None).step(0)
    assert seen[1]["class"] is None
    assert components.line("drafter", seen[1]) == "drafter: none"


def test_probe_failure_never_reaches_the_program() -> None:
    mod = _module()
    seen: list[dict[str, Any]] = []
    spec = ComponentSpec("drafter", Target("tkcomp_mod", "Runner.step"), "self.missing")
    components.install_probe(mod, spec, lambda n, i: seen.append(i))
    assert mod.Runner(None).step(4) == 5
    assert seen[0]["error"].startswith("AttributeError")


def test_value_from_a_module_function(monkeypatch: pytest.MonkeyPatch) -> None:
    grp = types.ModuleType("tkcomp_grp")

    class Comm:
        pass

    class Group:
        device_communicator = Comm()

    grp.get_group = lambda: Group()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "tkcomp_grp", grp)
    got = components.read_value("tkcomp_grp:get_group().device_communicator", lambda: None, (), {})
    assert isinstance(got, Comm)


def test_not_found_names_the_missing_part_without_blaming_a_circular_import() -> None:
    pkg = types.ModuleType("tkpkg")
    pkg.__path__ = []  # a package

    class A:
        pass

    pkg.A = A  # type: ignore[attr-defined]
    assert runtime._not_found(pkg, "EagleSpeculator.propose") == (
        "package tkpkg has no attribute 'EagleSpeculator' in this release"
    )
    assert (
        runtime._not_found(pkg, "A.propose") == "class A has no attribute 'propose' in this release"
    )


def test_inherited_target_is_reported_via_its_base(tmp_path: Path) -> None:
    """EagleProposer.propose inherited from SpecDecodeBaseProposer.propose, whose own target
    was wrapped first: patched, via the base class (was: never imported)."""
    mod = _module()

    class Rec(Hooks):
        def __init__(self) -> None:
            self.patched: list[str] = []
            self.unresolved: dict[str, str] = {}
            self.process_info: dict[str, Any] = {}
            self.opened = True
            self.active = False

    rec = Rec()
    rt = runtime.Runtime.__new__(runtime.Runtime)
    rt.recorder = rec  # type: ignore[assignment]
    base = Site(Target("tkcomp_mod", "Base.propose"), phase="draft")
    sub = Site(Target("tkcomp_mod", "Ngram.propose"), phase="draft")
    gone = Site(Target("tkcomp_mod", "Missing.propose"), phase="draft")
    rt.patch_module([base, sub, gone], mod)
    assert rec.patched == ["tkcomp_mod:Base.propose", "tkcomp_mod:Ngram.propose"]
    assert rec.process_info["via_base"] == {"tkcomp_mod:Ngram.propose": "tkcomp_mod:Base.propose"}
    assert "circular" not in rec.unresolved["tkcomp_mod:Missing.propose"]
