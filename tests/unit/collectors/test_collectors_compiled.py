"""The compiled boundary (collectors/compiled.py): torch.compile'd callables that reach a mapped
target are recorded call for call, and Dynamo compiles the same program with and without
tracekit (graphs, graph breaks, recompiles from `torch._dynamo.utils.counters`)."""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collectors._enters import count_enters
from tracekit.collectors import compiled, direct
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import native
from tracekit.collectors.wrappers import install
from tracekit.store.raw.files import RECORDS_FILE, SITES_FILE
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import decoded


def decode(table: Any, sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded records, one dict a row."""
    rows: list[dict[str, Any]] = decoded(table, sites).to_dicts()
    return rows


torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

COUNTED = ("stats", "graph_break", "recompiles", "frames", "unimplemented")


@pytest.fixture
def clean_dynamo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Dynamo's caches and counters empty; the boundary patch undone after the test."""
    import torch._dynamo.eval_frame as ef

    monkeypatch.setattr(ef.OptimizeContext, "__call__", ef.OptimizeContext.__call__)
    monkeypatch.setattr(compiled, "_state", None)
    # wrappers installed in a class start as direct calls (collectors/direct.py), whatever an
    # earlier test of this process compiled
    monkeypatch.setattr(direct, "_shims_only", False)
    monkeypatch.setattr(direct, "_installed", [])
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    yield
    torch._dynamo.reset()


def _counters() -> dict[str, dict[str, int]]:
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items() if v and k in COUNTED}


def _program() -> types.ModuleType:
    """A module the test's phase sites are installed in (fresh each time)."""
    mod = types.ModuleType("prog")

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            return self.lin(x).relu() + 1

    def step(x: Any) -> Any:
        return (x.sin() * 2).sum(-1)

    def allreduce(x: Any) -> Any:
        return x * 1.0

    class Sharded(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x: Any) -> Any:
            return mod.allreduce(self.lin(x)).relu()

    mod.Net, mod.step, mod.allreduce, mod.Sharded = Net, step, allreduce, Sharded
    return mod


def _recorder(tmp_path: Path) -> tuple[Recorder, compiled.Boundaries]:
    import torch._dynamo.eval_frame as ef

    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    bounds = compiled.Boundaries(rec)
    bounds.install()
    compiled.install_boundaries(ef, bounds)
    return rec, bounds


def _phase_rows(rec: Recorder) -> list[dict[str, Any]]:
    rec.close()
    if not (rec.dir / RECORDS_FILE).exists():
        return []
    table, _complete, err = read_stream(rec.dir / RECORDS_FILE)
    assert err is None
    assert table is not None
    sites = json.loads((rec.dir / SITES_FILE).read_text())["sites"] if table.num_rows else []
    return [r for r in decode(table, sites) if r["kind"] == "phase"]


def _compiled(mod: types.ModuleType, form: str, backend: str) -> Callable[..., Any]:
    torch.manual_seed(0)
    net = mod.Net()
    if form == "module":
        return torch.compile(net, backend=backend)  # type: ignore[no-any-return]
    if form == "method":
        return torch.compile(net.forward, backend=backend)  # type: ignore[no-any-return]
    return torch.compile(mod.step, backend=backend)  # type: ignore[no-any-return]


def _run(fn: Callable[..., Any]) -> list[Any]:
    """5 calls, then 3 with another shape (Dynamo recompiles once, for the new shape)."""
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 8, generator=gen), torch.randn(6, 8, generator=gen)
    return [fn(a) for _ in range(5)] + [fn(b) for _ in range(3)]


def _sites(mod: types.ModuleType, rec: Recorder) -> None:
    install(mod, Site(Target("prog", "Net.forward"), phase="verify"), rec)
    install(mod, Site(Target("prog", "step"), phase="draft"), rec)
    install(mod, Site(Target("prog", "allreduce"), phase="allreduce"), rec)


def _same_program(form: str, backend: str, tmp_path: Path) -> None:
    # GIVEN the program compiled and run alone, then under tracekit (same inputs, same weights)
    alone = _run(_compiled(_program(), form, backend))
    counts_alone = _counters()
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    mod = _program()
    rec, bounds = _recorder(tmp_path)
    _sites(mod, rec)
    # WHEN
    traced = _run(_compiled(mod, form, backend))
    counts_traced = _counters()
    rows = _phase_rows(rec)
    # THEN the outputs, graphs, graph breaks and recompiles are the program's own, and each of
    # the 8 compiled calls is one record of the target's phase at depth 0
    assert all(torch.equal(x, y) for x, y in zip(alone, traced, strict=True))
    assert counts_traced == counts_alone
    assert counts_alone["stats"]["unique_graphs"] == 2
    phase = "draft" if form == "function" else "verify"
    assert [(r["phase"], r["depth"]) for r in rows] == [(phase, 0)] * 8
    (row,) = bounds.report["boundaries"]
    assert row["phase"] == phase
    assert row["traced"] == 2
    assert bounds.report["unattached"] == []
    assert bounds.report["inner"] == []


@pytest.mark.parametrize("form", ["module", "method", "function"])
def test_compiled_forms_recorded_and_compiled_alike_eager(
    form: str, tmp_path: Path, clean_dynamo: None
) -> None:
    _same_program(form, "eager", tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("form", ["module", "method", "function"])
def test_compiled_forms_recorded_and_compiled_alike_inductor(
    form: str, tmp_path: Path, clean_dynamo: None
) -> None:
    _same_program(form, "inductor", tmp_path)


def test_allreduce_inside_a_compiled_forward_is_inner_and_said_once(
    tmp_path: Path, clean_dynamo: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a compiled module whose forward reaches the mapped allreduce, which alone is mapped
    mod = _program()
    rec, bounds = _recorder(tmp_path)
    _sites(mod, rec)
    net = torch.compile(mod.Sharded(), backend="eager")
    # WHEN it runs 3 times
    for _ in range(3):
        net(torch.ones(2, 8))
    rows = _phase_rows(rec)
    # THEN no call is recorded as allreduce (a compiled forward is no collective), and the
    # allreduce traced inside it is said once on stderr and kept in the report
    assert rows == []
    assert bounds.report["boundaries"] == []
    (inner,) = bounds.report["inner"]
    assert inner["target"] == "prog:allreduce"
    assert inner["traced"] == 1
    assert inner["compiled"].endswith("Sharded.__call__")
    assert capsys.readouterr().err.count("is traced inside the torch.compile'd") == 1


def test_compiled_caller_takes_the_outermost_target_it_reaches(
    tmp_path: Path, clean_dynamo: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN an unmapped compiled function calling a mapped `draft` function, which calls the
    # mapped module (`verify`) inside
    mod = _program()
    net = mod.Net()

    def drafting(x: Any) -> Any:
        return net(x) * 2

    def outer(x: Any) -> Any:
        return mod.drafting(x) + 0

    mod.drafting = drafting
    rec, bounds = _recorder(tmp_path)
    _sites(mod, rec)
    install(mod, Site(Target("prog", "drafting"), phase="draft"), rec)
    c = torch.compile(outer, backend="eager")
    # WHEN it is called twice
    for _ in range(2):
        c(torch.ones(2, 8))
    rows = _phase_rows(rec)
    # THEN each compiled call is one `draft` (the outermost target); `verify`, traced inside
    # draft's call, is its sub-phase, which the compiled call hides: said once
    assert [(r["phase"], r["depth"]) for r in rows] == [("draft", 0), ("draft", 0)]
    (top,) = bounds.report["boundaries"]
    assert top["target"] == "prog:drafting"
    assert top["compiled"].endswith(":" + outer.__qualname__)
    (inner,) = bounds.report["inner"]
    assert inner["target"] == "prog:Net.forward"
    assert capsys.readouterr().err.count("prog:Net.forward (phase verify) is traced inside") == 1


def test_target_traced_without_a_compiled_caller_is_said_once(
    tmp_path: Path, clean_dynamo: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a function compiled BEFORE tracekit wrapped torch.compile (so no boundary wraps it)
    mod = _program()
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    bounds = compiled.Boundaries(rec)
    bounds.install()
    _sites(mod, rec)
    c = torch.compile(mod.step, backend="eager")
    # WHEN it is traced twice (two shapes) and run 4 times
    for n in (2, 2, 3, 3):
        c(torch.ones(n, 8))
    rows = _phase_rows(rec)
    # THEN nothing is recorded, the target is named once on stderr, its traces counted
    assert rows == []
    (row,) = bounds.report["unattached"]
    assert row == {"target": "prog:step", "phase": "draft", "traced": 2}
    assert capsys.readouterr().err.count("prog:step (phase draft) runs inside code") == 1
    on_disk = json.loads((rec.dir / "process.json").read_text())
    assert on_disk["compiled"]["unattached"] == [row]


def test_graph_break_inside_the_target_counts_each_call_once(
    tmp_path: Path, clean_dynamo: None
) -> None:
    # GIVEN a compiled module whose mapped forward graph-breaks (a print) in the middle
    mod = _program()

    def forward(self: Any, x: Any) -> Any:
        y = self.lin(x)
        torch._dynamo.graph_break()
        return y.relu()

    mod.Net.forward = forward
    rec, _bounds = _recorder(tmp_path)
    _sites(mod, rec)
    net = torch.compile(mod.Net(), backend="eager")
    # WHEN it is called 4 times
    for _ in range(4):
        net(torch.ones(2, 8))
    rows = _phase_rows(rec)
    # THEN 4 outermost records of verify; any record nested in one (an eager piece of the same
    # target) lies inside its time range
    top = [r for r in rows if r["depth"] == 0]
    assert len(top) == 4
    for r in rows:
        if r["depth"] > 0:
            assert any(t["start_ns"] <= r["start_ns"] and r["end_ns"] <= t["end_ns"] for t in top)


def test_boundary_keeps_dynamo_attributes_and_unwraps_like_torch(
    tmp_path: Path, clean_dynamo: None
) -> None:
    from torch._dynamo.eval_frame import innermost_fn

    # GIVEN a function compiled under tracekit
    mod = _program()
    _rec, _bounds = _recorder(tmp_path)
    c = torch.compile(mod.step, backend="eager")
    # THEN torch finds the original callable through the boundary, as without tracekit, and
    # the compiled callable's attributes are there
    assert getattr(c, compiled._BOUNDARY) is not None
    assert innermost_fn(c) is mod.step
    assert c._is_torch_compile is True  # type: ignore[attr-defined]
    assert c.__wrapped__ is not None  # type: ignore[attr-defined]
    assert c.__name__ == "step"


def test_wrapper_made_before_torch_was_imported(
    tmp_path: Path, clean_dynamo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch._dynamo.eval_frame as ef

    # GIVEN a target wrapped while torch was not imported yet (its gate checks torch late)
    mod = _program()
    torch_dyn = compiled._torch_dyn
    monkeypatch.setattr(compiled, "_dyn", None)
    monkeypatch.setattr(compiled, "_torch_dyn", lambda: None)
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    bounds = compiled.Boundaries(rec)
    bounds.install()
    install(mod, Site(Target("prog", "step"), phase="draft"), rec)
    # and torch._dynamo imported afterwards (the import hook installs the boundaries)
    monkeypatch.setattr(compiled, "_torch_dyn", torch_dyn)
    compiled.install_boundaries(ef, bounds)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    # WHEN compiled and called 3 times
    c = torch.compile(mod.step, backend="eager", fullgraph=True)
    outs = [c(x) for _ in range(3)]
    rows = _phase_rows(rec)
    # THEN the output, one graph, no recompile, 3 records
    assert all(torch.equal(o, (x.sin() * 2).sum(-1)) for o in outs)
    assert _counters()["stats"]["unique_graphs"] == 1
    assert [r["phase"] for r in rows] == ["draft"] * 3


def test_acceptance_read_at_the_compiled_boundary(tmp_path: Path, clean_dynamo: None) -> None:
    from tracekit.collectors.phasemap import parse

    # GIVEN a mapped module forward whose accept rule reads its argument (`self` first: the
    # compiled module's call passes no `self`, the boundary adds it)
    pmap = parse(
        """
        [[phase]]
        name = "verify"
        targets = ["prog:Net.forward"]
        accept = { from = "arg:x", value = "shape[0]" }
        """
    )
    (site,) = pmap.sites()["prog"]
    mod = _program()
    rec, _bounds = _recorder(tmp_path)
    install(mod, site, rec)
    net = torch.compile(mod.Net(), backend="eager")
    # WHEN called with 2 then 5 rows (a new shape: one recompile)
    for n in (2, 5):
        net(torch.ones(n, 8))
    rows = _phase_rows(rec)
    # THEN each compiled call carries its acceptance, read from its argument
    assert [(r["phase"], r["accept_len"]) for r in rows] == [("verify", 2.0), ("verify", 5.0)]


def test_compiled_while_recording_is_off_finds_its_caller(
    tmp_path: Path, clean_dynamo: None
) -> None:
    # GIVEN recording switched off while the compiled module is traced (its first call)
    mod = _program()
    rec, bounds = _recorder(tmp_path)
    _sites(mod, rec)
    net = torch.compile(mod.Net(), backend="eager")
    rec.set_recording(False)
    net(torch.ones(2, 8))
    # WHEN recording is on again for 2 calls
    rec.set_recording(True)
    for _ in range(2):
        net(torch.ones(2, 8))
    rows = _phase_rows(rec)
    # THEN the target was attached to its compiled caller (not said unattached) and the 2
    # calls made while recording are recorded
    assert bounds.report["unattached"] == []
    assert [r["phase"] for r in rows] == ["verify", "verify"]


def test_boundary_calls_take_the_native_hot_path_once_the_site_is_known(
    tmp_path: Path, clean_dynamo: None
) -> None:
    # GIVEN a compiled function reaching a mapped phase (no cycle target, no accept rule), with
    # the recorder's generic `enter` counted
    mod = _program()
    rec, _bounds = _recorder(tmp_path)
    _sites(mod, rec)
    entered = count_enters(rec)
    fn = torch.compile(mod.step, backend="eager")
    # WHEN it is called 8 times (a compile on the first and on the 6th: a new shape)
    _run(fn)
    rows = _phase_rows(rec)
    # THEN every call is one record; on the native hot path only the compiling call and the
    # site's first known call go through `enter` (PhaseCall records the others in C), on the
    # Python fallback every call does
    assert [r["phase"] for r in rows] == ["draft"] * 8
    assert len(entered) == (8 if rec._native is None else 2)
    # and the thread's current compiled call (set while each call ran) is none again
    assert rec._this_thread().boundary is None


@pytest.mark.skipif(native.NATIVE is None, reason="direct calls need the native hot path")
def test_a_compile_that_starts_without_the_boundary_hook_finds_the_shims(
    tmp_path: Path, clean_dynamo: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN Net.forward installed as a direct call (collectors/direct.py), and only the hook
    # on Dynamo's compile start (no boundary hook: torch.compile'd callables are not wrapped)
    import torch._dynamo.callback as cb

    handler = type(cb.callback_handler)
    monkeypatch.setattr(handler, "run_start_callbacks", handler.run_start_callbacks)
    direct.install_compile_start(cb)
    mod = _program()
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    compiled.Boundaries(rec).install()
    install(mod, Site(Target("prog", "Net.forward"), phase="verify"), rec)
    assert vars(mod.Net)["forward"].is_direct
    net = mod.Net()

    def outer(x: Any) -> Any:
        return net(x) * 2

    # WHEN a function that calls it is compiled and run
    fn = torch.compile(outer, backend="eager")
    x = torch.randn(4, 8)
    assert torch.equal(fn(x), outer(x))
    # THEN the compile found the shim there: one graph, no graph break
    assert direct._shims_only
    assert "forward" in vars(mod.Net)
    assert not hasattr(vars(mod.Net)["forward"], "is_direct")
    counts = _counters()
    assert "graph_break" not in counts, counts
    assert counts["stats"]["unique_graphs"] == 1
