from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collectors._graph_replays import graph_replay
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording.hotpath import as_accept_len
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.files import RECORDS_FILE, SITES_FILE
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import decoded


def decode(table: Any, sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded records, one dict a row."""
    rows: list[dict[str, Any]] = decoded(table, sites).to_dicts()
    return rows


class Out:
    def __init__(self, n: int) -> None:
        self.accept_len = n


def _program(rec: Recorder) -> tuple[Any, Any]:
    def allreduce() -> None:
        pass

    def draft() -> None:
        pass

    def verify(n: int) -> Out:
        ar()
        ar()
        return Out(n)

    def step(n: int) -> Out:
        dr()
        return ve(n)

    ar = make_wrapper(allreduce, Site(Target("m", "allreduce"), phase="allreduce"), rec)
    dr = make_wrapper(draft, Site(Target("m", "draft"), phase="draft"), rec)
    ve = make_wrapper(
        verify, Site(Target("m", "verify"), phase="verify", accept_len="accept_len"), rec
    )
    st = make_wrapper(
        step, Site(Target("m", "step"), cycle=True, cycle_accept_len="accept_len"), rec
    )
    return st, ar


def _records(rec: Recorder) -> list[dict[str, Any]]:
    table, _complete, err = read_stream(rec.dir / RECORDS_FILE)
    assert err is None
    assert table is not None
    sites = json.loads((rec.dir / SITES_FILE).read_text())["sites"] if table.num_rows else []
    return decode(table, sites)


def test_records_phases_cycles_depth_parent_accept_len(tmp_path: Path) -> None:
    # GIVEN
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    step, ar = _program(rec)
    # WHEN: one allreduce outside any cycle, then three cycles
    ar()
    for n in (1, 3, 2):
        assert step(n).accept_len == n
    rec.close()
    # THEN
    rows = _records(rec)
    _table, complete, _ = read_stream(rec.dir / RECORDS_FILE)
    assert complete
    cycles = [r for r in rows if r["kind"] == "cycle"]
    assert [(c["cycle"], c["accept_len"]) for c in cycles] == [(0, 1.0), (1, 3.0), (2, 2.0)]
    phases = [r for r in rows if r["kind"] == "phase"]
    assert phases[0]["phase"] == "allreduce"
    assert phases[0]["cycle"] == -1
    assert phases[0]["depth"] == 0
    c1 = [(r["phase"], r["depth"], r["parent"]) for r in phases if r["cycle"] == 1]
    assert sorted(c1) == sorted(
        [
            ("draft", 0, None),
            ("verify", 0, None),
            ("allreduce", 1, "verify"),
            ("allreduce", 1, "verify"),
        ]
    )
    verify = [r for r in phases if r["phase"] == "verify"]
    assert [v["accept_len"] for v in verify] == [1.0, 3.0, 2.0]
    for r in rows:
        assert r["start_ns"] <= r["end_ns"]
        assert r["ok"] is True
        assert r["gpu_start_ns"] is None  # CPU run
        assert r["tid"] == __import__("threading").get_native_id()
    # nesting: each allreduce lies inside its verify
    for v in verify:
        inner = [p for p in phases if p["parent"] == "verify" and p["cycle"] == v["cycle"]]
        assert all(v["start_ns"] <= p["start_ns"] <= p["end_ns"] <= v["end_ns"] for p in inner)
    assert len({r["seq"] for r in rows}) == len(rows)


def test_failed_call_is_recorded_not_ok(tmp_path: Path) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))

    def bad() -> None:
        raise KeyError("k")

    w = make_wrapper(bad, Site(Target("m", "bad"), phase="verify", accept_len="accept_len"), rec)
    with pytest.raises(KeyError):
        w()
    rec.close()
    (row,) = _records(rec)
    assert row["ok"] is False
    assert row["accept_len"] is None


def test_flushes_every_n_records_between_cycles(tmp_path: Path) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=8, flush_seconds=3600))
    step, _ = _program(rec)
    for _ in range(3):
        step(1)  # 5 records a cycle
    # not closed: what a SIGKILL would leave
    rows = _records(rec)
    assert len(rows) == 10  # flushed after cycle 2 (10 >= 8); cycle 3 still buffered
    _table, complete, _ = read_stream(rec.dir / RECORDS_FILE)
    assert not complete
    rec.close()
    assert len(_records(rec)) == 15


def test_time_based_flush(tmp_path: Path) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10**6, flush_seconds=0.0))
    step, _ = _program(rec)
    step(1)
    assert len(_records(rec)) == 5


def test_truncated_stream_keeps_complete_batches(tmp_path: Path) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=5, flush_seconds=3600))
    step, _ = _program(rec)
    for _ in range(3):
        step(2)  # one batch of 5 records a cycle
    path = rec.dir / RECORDS_FILE
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a torn last write
    table, complete, err = read_stream(path)
    assert table is not None
    assert table.num_rows == 10
    assert not complete
    assert err is not None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_child_writes_its_own_stream(tmp_path: Path) -> None:
    rec = Recorder(
        RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10**6, flush_seconds=3600)
    )
    step, _ = _program(rec)
    step(1)  # buffered in the parent, not flushed
    pid = os.fork()
    if pid == 0:  # child
        try:
            rec.after_fork()
            step(3)
            rec.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    rec.close()
    parent_rows = _records(rec)
    child = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    child.pid = pid
    child_rows = _records(child)
    assert [r["accept_len"] for r in parent_rows if r["kind"] == "cycle"] == [1.0]
    assert [r["accept_len"] for r in child_rows if r["kind"] == "cycle"] == [3.0]


def test_accept_len_conversions() -> None:
    assert as_accept_len(3) == 3.0
    assert as_accept_len(2.5) == 2.5
    assert as_accept_len([1, 2, 3]) == 2.0
    assert as_accept_len(True) is None
    assert as_accept_len("3") is None
    assert as_accept_len(None) is None


@pytest.mark.torch
def test_accept_len_from_cpu_tensor() -> None:
    torch = pytest.importorskip("torch")
    assert as_accept_len(torch.tensor(4)) == 4.0
    assert as_accept_len(torch.tensor([1, 3])) == 2.0


@pytest.mark.torch
def test_bypass_while_torch_compile_traces(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    # GIVEN a wrapped phase called inside a function that torch.compile traces
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    calls: list[str] = []

    def inner(x: Any) -> Any:
        return x * 2 + 1

    w = make_wrapper(inner, Site(Target("m", "inner"), phase="verify"), rec)

    def f(x: Any) -> Any:
        return w(x) - 1

    def eager_only(x: Any) -> Any:
        calls.append("eager")
        return w(x)

    compiled = torch.compile(f, backend="eager", fullgraph=True)
    x = torch.ones(3)
    # WHEN the compiled function is traced and run twice, then the wrapper is called eagerly
    first = compiled(x)
    second = compiled(x)
    rec.flush()
    traced_rows = [r for r in _records(rec) if r["kind"] == "phase"]
    eager = eager_only(x)
    rec.close()
    rows = [r for r in _records(rec) if r["kind"] == "phase"]
    # THEN the compiled result is the eager one (fullgraph: no graph break from the wrapper),
    # tracing recorded nothing, and the one eager call is one row of phase `verify`
    expected = torch.tensor([2.0, 2.0, 2.0])
    assert torch.equal(first, expected)
    assert torch.equal(second, expected)
    assert torch.equal(eager, expected + 1)
    assert traced_rows == []
    assert calls == ["eager"]
    assert [r["phase"] for r in rows] == ["verify"]


def test_cuda_graph_replays_are_counted_per_phase(tmp_path: Path) -> None:
    from types import ModuleType

    from tracekit.collectors import phasemap as pm
    from tracekit.collectors.importhook import PostImportHook
    from tracekit.collectors.runtime import Runtime

    # GIVEN a module shaped like torch.cuda.graphs whose CUDAGraph.replay gets hooked
    graphs = ModuleType("fake_graphs")

    class CUDAGraph:
        def replay(self) -> str:
            "Replay the graph."
            return "replayed"

    graphs.CUDAGraph = CUDAGraph  # type: ignore[attr-defined]
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    rt = Runtime(rec, PostImportHook(), pm.parse('[[phase]]\nname = "verify"\ntargets = ["m:f"]\n'))
    rt.patch_graphs(graphs)
    rt.patch_graphs(graphs)  # idempotent
    g = CUDAGraph()

    def verify() -> str:
        g.replay()
        return g.replay()

    def draft() -> None:
        pass

    v = make_wrapper(verify, Site(Target("m", "verify"), phase="verify"), rec)
    d = make_wrapper(draft, Site(Target("m", "draft"), phase="draft"), rec)
    # WHEN
    assert v() == "replayed"
    d()
    rec.close()
    # THEN
    assert CUDAGraph.replay.__doc__ == "Replay the graph."
    got = {r["phase"]: r["graph_replays"] for r in _records(rec)}
    assert got == {"verify": 2, "draft": 0}


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
def test_the_replay_count_passes_the_call_through_and_counts_while_recording(
    tmp_path: Path, native: bool
) -> None:
    from types import ModuleType

    from tracekit.collectors import graphs
    from tracekit.collectors.recording.native import NATIVE

    if native and NATIVE is None:
        pytest.skip("native extension not loaded")
    # GIVEN a CUDAGraph-shaped class hooked by the recorder of either path
    module = ModuleType("fake_graphs")
    seen: list[tuple[Any, ...]] = []

    class CUDAGraph:
        def replay(self, *args: Any, **kwargs: Any) -> Any:
            seen.append((self, args, kwargs))
            return "replayed"

    module.CUDAGraph = CUDAGraph  # type: ignore[attr-defined]
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", native=native))
    graphs.install(module, rec)
    assert type(CUDAGraph.__dict__["replay"]).__name__ == ("ReplayCount" if native else "function")
    g = CUDAGraph()
    ts = rec._thread()
    # WHEN it replays with arguments, recording on, then off
    assert g.replay(1, key=2) == "replayed"
    assert CUDAGraph.replay(g) == "replayed"  # called through the class, unbound
    rec.set_recording(False)
    g.replay()
    # THEN each replay ran with its arguments as they came; the two made while recording counted
    assert seen == [(g, (1,), {"key": 2}), (g, (), {}), (g, (), {})]
    assert ts.replays == 2
    assert CUDAGraph.replay.__wrapped__ is not None  # functools.wraps's attributes
    # AND a count that fails stops recording, said once, and the replay still runs
    rec.set_recording(True)
    rec._thread = None  # type: ignore[assignment,method-assign]
    rec._loc = type(rec._loc)()  # this thread's state gone: the count must make one, and fails
    assert g.replay() == "replayed"
    assert not rec.active
    rec.close()


class _StuckCuda:
    """torch.cuda as the recorder uses it, on a device whose later work never completes (a
    collective waiting for a peer that has exited)."""

    _initialized = True

    def __init__(self, complete: int) -> None:
        self.recorded = 0
        self.complete = complete
        self.synchronized = 0
        cuda = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.n = -1

            def record(self) -> None:
                cuda.recorded += 1
                self.n = cuda.recorded

            def query(self) -> bool:
                return self.n <= cuda.complete

            def synchronize(self) -> None:
                if not self.query():
                    raise AssertionError("would block forever")

            def elapsed_time(self, other: Event) -> float:
                return float(other.n)

        self.Event = Event

    def is_current_stream_capturing(self) -> bool:
        return False

    def synchronize(self) -> None:
        self.synchronized += 1


def test_exit_never_waits_forever_for_the_gpu(tmp_path: Path) -> None:
    import time

    from tracekit.collectors import recorder as recorder_mod

    # GIVEN a recorder on a CUDA device whose events after the 6th never complete, and an exit
    # deadline of 1 s
    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp_path / "raw", flush_records=1000, flush_seconds=60, exit_deadline_s=1.0
        )
    )
    cuda = _StuckCuda(complete=6)
    rec._is_compiling = lambda: False
    rec._cuda = cuda
    st, _ar = _program(rec)
    # WHEN the program runs 5 cycles (2 events each, plus the calibration event) and exits
    for i in range(5):
        st(i)
    t = time.monotonic()
    rec.close()
    waited = time.monotonic() - t
    # THEN the exit waited at most the bound, and every record was written: the first cycles
    # with GPU times, the stuck ones with their CPU times only
    # the event poll gets the deadline less the writing's share; the slack above is for a
    # loaded machine (a stuck GPU without the bound would wait forever)
    assert 0.7 <= waited < 2.0
    assert recorder_mod.EXIT_DEADLINE_S == 3.0
    rows = _records(rec)
    cycles = [r for r in rows if r["kind"] == "cycle"]
    assert len(cycles) == 5
    assert len([r for r in rows if r["phase"] == "allreduce"]) == 10
    outer = [r for r in rows if r["kind"] == "phase" and r["depth"] == 0]
    with_gpu = [r for r in outer if r["gpu_start_ns"] is not None]
    assert len(outer) == 10
    assert 1 <= len(with_gpu) < 10
    assert all(r["start_ns"] < r["end_ns"] for r in rows)


class _PlainHooks:
    """The recorder seen as plain `Hooks` (no `sync_call`): wrappers take the generic path,
    `Recorder.enter` / `Recorder.exit` for every call."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.enter = rec.enter
        self.exit = rec.exit

    @property
    def active(self) -> bool:
        return self.rec.active


def test_inlined_phase_path_records_what_enter_exit_record(tmp_path: Path) -> None:
    # GIVEN the same program twice: wrapped with the recorder's inlined phase path, and wrapped
    # through plain hooks (enter/exit); phases nested in cycles, a `starts_with` phase outside
    # cycles, accept_len, graph replays and a call that raises
    def run(name: str, inlined: bool) -> list[dict[str, Any]]:
        rec = Recorder(RecorderConfig(raw_dir=tmp_path / name / "raw", flush_records=7))
        hooks: Any = rec if inlined else _PlainHooks(rec)
        replay = graph_replay(rec)

        def draft(fail: bool) -> None:
            replay()
            if fail:
                raise ValueError("draft failed")

        def verify(n: int) -> Out:
            ar()
            replay()
            ar()
            return Out(n)

        def step(n: int) -> Out:
            dr(False)
            return ve(n)

        ar = make_wrapper(lambda: None, Site(Target("m", "ar"), phase="allreduce"), hooks)
        dr = make_wrapper(draft, Site(Target("m", "dr"), phase="draft", starts_cycle=True), hooks)
        ve = make_wrapper(
            verify, Site(Target("m", "ve"), phase="verify", accept_len="accept_len"), hooks
        )
        st = make_wrapper(
            step, Site(Target("m", "st"), cycle=True, cycle_accept_len="accept_len"), hooks
        )
        for n in range(4):
            st(n)
            ar()
            dr(False)  # outside a cycle: starts one
            with pytest.raises(ValueError, match="draft failed"):
                dr(True)
        rec.close()
        return _records(rec)

    inlined, plain = run("inlined", True), run("plain", False)
    # THEN both record the same rows, but for their times
    assert len(inlined) == 4 * 8  # a cycle (5 rows), allreduce, draft, failed draft
    strip = ("start_ns", "end_ns")
    assert [{k: v for k, v in r.items() if k not in strip} for r in inlined] == [
        {k: v for k, v in r.items() if k not in strip} for r in plain
    ]
    assert all(r["start_ns"] <= r["end_ns"] for r in inlined)
    assert {r["graph_replays"] for r in inlined if r["phase"] == "verify"} == {1}
    assert [r["ok"] for r in inlined if r["phase"] == "draft"].count(False) == 4


def test_compiling_check_follows_torch_is_compiling() -> None:
    from tracekit.collectors.recording.state import compiling_check

    torch = pytest.importorskip("torch")
    check = compiling_check(torch.compiler)
    assert check() is False
    assert check() == torch.compiler.is_compiling()
    old = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True  # what export and compile sessions set
    try:
        assert check() is True
        assert torch.compiler.is_compiling() is True
    finally:
        torch.compiler._is_compiling_flag = old
    # a torch without the names: its own is_compiling
    from types import SimpleNamespace

    old_api = SimpleNamespace(is_compiling=lambda: False)
    assert compiling_check(old_api) is old_api.is_compiling
