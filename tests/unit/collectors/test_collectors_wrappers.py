from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.wrappers import WRAPPED_MARK, install, make_wrapper


class FakeHooks:
    def __init__(self, *, active: bool = True, bypass: bool = False) -> None:
        self.active = active
        self._bypass = bypass
        self.calls: list[tuple[str, Any]] = []

    def enter(self, site: Site) -> Any:
        if self._bypass:
            return None
        self.calls.append(("enter", site.phase))
        return site.phase

    def exit(self, frame: Any, ok: bool, result: object) -> None:
        self.calls.append(("exit", (frame, ok, result)))


class Boom(Exception):
    pass


def target(a: int, b: int = 2, *, c: str = "x") -> tuple[int, int, str]:
    """Target docstring."""
    if a < 0:
        raise Boom(f"negative {a}")
    return a, b, c


target.custom_attr = "kept"  # type: ignore[attr-defined]
SITE = Site(target=Target("m", "target"), phase="verify")


def test_wrapper_is_transparent() -> None:
    # GIVEN
    hooks = FakeHooks()
    # WHEN
    w = make_wrapper(target, SITE, hooks)
    # THEN
    assert w.__name__ == "target"
    assert w.__qualname__ == target.__qualname__
    assert w.__doc__ == "Target docstring."
    assert inspect.signature(w) == inspect.signature(target)
    assert w.custom_attr == "kept"  # type: ignore[attr-defined]
    assert w.__wrapped__ is target  # type: ignore[attr-defined]
    assert w(1, c="z") == (1, 2, "z")
    assert hooks.calls == [("enter", "verify"), ("exit", ("verify", True, (1, 2, "z")))]


def test_wrapper_reraises_the_same_exception() -> None:
    hooks = FakeHooks()
    w = make_wrapper(target, SITE, hooks)
    with pytest.raises(Boom, match="negative -1") as info:
        w(-1)
    assert info.traceback[-1].name == "target"  # raised where it was, unchanged
    assert hooks.calls[-1] == ("exit", ("verify", False, None))


@pytest.mark.parametrize(("active", "bypass"), [(False, False), (True, True)])
def test_wrapper_passes_through_when_inactive_or_bypassed(active: bool, bypass: bool) -> None:
    hooks = FakeHooks(active=active, bypass=bypass)
    w = make_wrapper(target, SITE, hooks)
    assert w(3) == (3, 2, "x")
    assert hooks.calls == []


def test_async_wrapper() -> None:
    async def coro(x: int) -> int:
        return x * 2

    hooks = FakeHooks()
    w = make_wrapper(coro, SITE, hooks)
    assert inspect.iscoroutinefunction(w)
    assert asyncio.run(w(4)) == 8
    assert [c[0] for c in hooks.calls] == ["enter", "exit"]


class Owner:
    def method(self, x: int) -> int:
        return x + 1

    @staticmethod
    def static(x: int) -> int:
        return x + 2

    @classmethod
    def klass(cls, x: int) -> str:
        return f"{cls.__name__}{x}"


class Child(Owner):
    pass


def test_install_on_methods_static_class_and_inherited() -> None:
    hooks = FakeHooks()
    mod = SimpleNamespace(Owner=Owner, Child=Child)
    installed = []
    for q in ("Owner.method", "Owner.static", "Owner.klass"):
        installed.append(install(mod, Site(Target("m", q), phase=q), hooks))
    try:
        assert Owner().method(1) == 2
        assert Owner.static(1) == 3
        assert Child.klass(1) == "Child1"
        assert isinstance(Owner.__dict__["static"], staticmethod)
        assert isinstance(Owner.__dict__["klass"], classmethod)
        assert [c[1] for c in hooks.calls if c[0] == "enter"] == [
            "Owner.method",
            "Owner.static",
            "Owner.klass",
        ]
        # wrapping twice is a no-op
        assert install(mod, Site(Target("m", "Owner.method"), phase="x"), hooks) is None
        assert getattr(Owner.method, WRAPPED_MARK).phase == "Owner.method"
    finally:
        for inst in installed:
            assert inst is not None
            setattr(inst.owner, inst.attr, inst.original)  # the class as it was
    assert not hasattr(Owner.method, WRAPPED_MARK)


def test_install_missing_attribute_raises_attribute_error() -> None:
    with pytest.raises(AttributeError):
        install(
            SimpleNamespace(Owner=Owner), Site(Target("m", "Owner.nothere"), phase="x"), FakeHooks()
        )
    with pytest.raises(AttributeError):
        install(SimpleNamespace(), Site(Target("m", "Nope.f"), phase="x"), FakeHooks())


def test_recorder_failure_disables_itself_and_says_so_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a recorder whose output cannot be written (raw dir is a file)
    bad = tmp_path / "raw"
    bad.write_text("not a directory")
    rec = Recorder(RecorderConfig(raw_dir=bad, flush_records=1))
    w = make_wrapper(target, SITE, rec)
    # WHEN the program keeps calling the wrapped function
    results = [w(i) for i in range(5)]
    # THEN the program is unaffected, the recorder is off, and it said so once
    assert results == [(i, 2, "x") for i in range(5)]
    assert rec.active is False
    err = capsys.readouterr().err
    assert err.count("tracekit: recorder failed") == 1
    assert "recording is disabled in this process" in err


def test_recorder_exception_inside_enter_never_reaches_the_program(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    rec._nvtx_ready = True
    rec._nvtx = SimpleNamespace(
        push_range=lambda a: (_ for _ in ()).throw(RuntimeError("nvtx exploded")),
        get_event_attributes=lambda **k: None,
    )
    w = make_wrapper(target, SITE, rec)
    assert w(7) == (7, 2, "x")
    assert w(8) == (8, 2, "x")
    assert rec.active is False
    assert capsys.readouterr().err.count("nvtx exploded") == 1
