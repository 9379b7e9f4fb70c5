"""Direct calls (collectors/direct.py): a phase method's wrapper is the native PhaseCall itself,
recording what the Python shim records, binding as a function does, until Dynamo runs."""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Any

import pytest

from tracekit.collectors import direct
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import native
from tracekit.collectors.wrappers import WRAPPED_MARK, install

pytestmark = pytest.mark.skipif(
    native.NATIVE is None, reason=f"native hot path not loaded: {native.WHY_NOT}"
)

SOURCE = """
class Worker:
    def draft(self, x: int, *, k=1) -> int:
        "Draft k tokens."
        if x < 0:
            raise ValueError("negative")
        return x + k

    @staticmethod
    def verify(x):
        return 2 * x

    @classmethod
    def accept(cls, x):
        return (cls.__name__, x)

    def step(self, x):
        self.draft(x)
        self.verify(x)
        return self.accept(x)
"""
SITES = (("Worker.draft", "draft"), ("Worker.verify", "verify"), ("Worker.accept", "accept"))


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Direct calls allowed, whatever an earlier test of this process compiled."""
    monkeypatch.setattr(direct, "_shims_only", False)
    monkeypatch.setattr(direct, "_installed", [])


def _program(rec: Recorder) -> types.ModuleType:
    mod = types.ModuleType("dprog")
    exec(SOURCE, mod.__dict__)
    for qual, phase in SITES:
        install(mod, Site(Target("dprog", qual), phase=phase), rec)
    install(mod, Site(Target("dprog", "Worker.step"), cycle=True), rec)
    return mod


def _run(mod: types.ModuleType) -> list[Any]:
    w = mod.Worker()
    out = [w.step(i) for i in range(3)]
    out += [w.draft(5, k=2), mod.Worker.draft(w, 1), mod.Worker.verify(4), w.accept(7)]
    with pytest.raises(ValueError, match="negative"):
        w.draft(-1)
    return out


def _rows(rec: Recorder) -> list[tuple[Any, ...]]:
    """(code, cycle, depth, parent, seq, replays, ok) of each buffered row."""
    return [(r[0], r[1], r[2], r[3], r[5], r[8], r[10]) for r in rec._buf]


def test_a_phase_method_is_its_native_call_and_records_what_the_shim_records(
    tmp_path: Path, fresh: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the same program wrapped with direct calls, and with the Python shims
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "a", flush_records=10**6))
    mod = _program(rec)
    monkeypatch.setattr(direct, "_shims_only", True)
    rec_shim = Recorder(RecorderConfig(raw_dir=tmp_path / "b", flush_records=10**6))
    mod_shim = _program(rec_shim)
    # THEN the class holds the C object (in a staticmethod / classmethod where it was one)
    # in the first, the shims' Python functions in the second
    attrs = vars(mod.Worker)
    assert attrs["draft"].is_direct
    assert isinstance(attrs["verify"], staticmethod)
    assert attrs["verify"].__func__.is_direct
    assert isinstance(attrs["accept"], classmethod)
    assert attrs["accept"].__func__.is_direct
    assert inspect.isfunction(vars(mod_shim.Worker)["draft"])
    # WHEN both run the same calls (methods, bound and unbound, keywords, one that raises)
    # THEN the results and the rows are the same
    assert _run(mod) == _run(mod_shim)
    assert _rows(rec) == _rows(rec_shim)
    assert len(_rows(rec)) == 3 * 4 + 4 + 1
    assert _rows(rec)[-1][-1] is False  # the call that raised: recorded, not ok


def test_a_direct_call_looks_like_the_function_it_wraps(tmp_path: Path, fresh: None) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    mod = _program(rec)
    w = mod.Worker()
    # its name, text, signature (through `__wrapped__`) and site mark are the function's
    assert mod.Worker.draft.__name__ == "draft"
    assert mod.Worker.draft.__qualname__ == "Worker.draft"
    assert mod.Worker.draft.__doc__ == "Draft k tokens."
    assert str(inspect.signature(mod.Worker.draft)) == "(self, x: 'int', *, k=1) -> 'int'"
    assert str(inspect.signature(w.draft)) == "(x: 'int', *, k=1) -> 'int'"
    assert mod.Worker.draft.__annotations__ == {"x": "int", "return": "int"}
    assert inspect.unwrap(mod.Worker.draft).__code__.co_name == "draft"
    assert getattr(mod.Worker.draft, WRAPPED_MARK).phase == "draft"
    # it binds to an instance as a function does, and not to None
    assert isinstance(w.draft, types.MethodType)
    assert w.draft.__self__ is w
    assert mod.Worker.__dict__["draft"].__get__(None, mod.Worker) is mod.Worker.__dict__["draft"]


def test_to_shims_puts_every_installed_shim_back_and_later_wrappers_are_shims(
    tmp_path: Path, fresh: None
) -> None:
    # GIVEN a program with direct calls, one of them replaced by the program itself
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10**6))
    mod = _program(rec)

    def own(self: Any, x: int) -> int:
        return -x

    mod.Worker.draft_own = own
    before = _run(mod)
    patched = mod.Worker.__dict__["verify"]
    mod.Worker.verify = staticmethod(lambda x: 2 * x)  # the program's own patch
    # WHEN the process goes back to the shims (a compile starts)
    direct.to_shims()
    # THEN the wrappers in the class are the shims, static / class kinds kept, the program's
    # own patch left alone, and the calls give the same results
    attrs = vars(mod.Worker)
    assert inspect.isfunction(attrs["draft"])
    assert isinstance(attrs["accept"], classmethod)
    assert inspect.isfunction(attrs["accept"].__func__)
    assert attrs["verify"] is not patched
    assert attrs["verify"].__func__(3) == 6
    mod.Worker.verify = patched
    assert _run(mod) == before
    # and a wrapper installed from now on is a shim
    mod2 = _program(rec)
    assert inspect.isfunction(vars(mod2.Worker)["draft"])
    assert direct._shims_only


def test_a_method_bound_before_the_swap_is_handed_to_torch_compile_as_its_shim(
    tmp_path: Path, fresh: None
) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    mod = _program(rec)
    w = mod.Worker()
    bound = w.draft  # `torch.compile(w.draft)` binds before it compiles
    direct.to_shims()
    got = direct.traceable(bound)
    assert isinstance(got, types.MethodType)
    assert got.__self__ is w
    assert inspect.isfunction(got.__func__)
    assert got(1) == 2
    assert direct.traceable(mod.Worker.__dict__["step"]) is mod.Worker.__dict__["step"]
    assert direct.traceable(len) is len


def test_a_subclass_reaches_a_direct_call_through_super(tmp_path: Path, fresh: None) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10**6))
    mod = _program(rec)

    class Sub(mod.Worker):  # type: ignore[name-defined,misc]
        def draft(self, x: int, *, k: int = 1) -> int:
            return 10 * super().draft(x, k=k)

    # the base's direct call, reached through super(), records its call once
    assert Sub().draft(2) == 30
    assert len(_rows(rec)) == 1
