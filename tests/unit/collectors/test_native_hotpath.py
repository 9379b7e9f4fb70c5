"""The native hot path (collectors/recording/native/, the `_native` extension) against the
Python one: the same program under both writes identical records; failures, pass-through and
exceptions behave the same. `make test` runs this file twice: as built, and with
TRACEKIT_NATIVE=0 (the fallback), where the side-by-side tests are skipped."""

from __future__ import annotations

import os
import shutil
import sysconfig
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collectors._enters import count_enters
from tests.unit.collectors._graph_replays import graph_replay
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import native
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.schema import ROW

FORCED_OFF = os.environ.get(native.ENV_NATIVE, "") == "0"
needs_native = pytest.mark.skipif(
    native.NATIVE is None, reason=f"native hot path not loaded: {native.WHY_NOT}"
)


class Out:
    def __init__(self, n: int) -> None:
        self.accept_len = n


def _rows(rec: Recorder) -> list[tuple[Any, ...]]:
    """Every row the recorder wrote or buffered, times zeroed (they differ run to run)."""
    import numpy as np

    from tracekit.store.raw.ipc import read_stream

    out: list[tuple[Any, ...]] = []
    path = rec.dir / "records.arrow"
    if path.exists():
        table, _complete, _err = read_stream(path)
        assert table is not None
        for r in table.to_pylist():
            r["start_ns"] = r["end_ns"] = 0
            out.append(tuple(r[k] for k in list(r)[:11]))
    for r in ROW.iter_unpack(bytes(rec._rows)):
        acc = None if np.isnan(r[9]) else r[9]
        out.append((*r[:6], 0, 0, r[8], acc, r[10]))
    return out


def _program(rec: Recorder) -> dict[str, Any]:
    """Phases nested in cycles, a cycle target that is a phase too, a `starts_with` phase
    outside cycles, acceptance from a return value, graph replays, a call that raises."""
    replay = graph_replay(rec)

    def draft(fail: bool) -> None:
        replay()
        if fail:
            raise ValueError("draft failed")

    def verify(n: int) -> Out:
        ar()
        replay()
        ar(k=1)
        return Out(n)

    def step(n: int) -> Out:
        dr(False)
        return ve(n)

    def decode(n: int) -> int:
        ar()
        return n

    ar = make_wrapper(lambda k=0: k, Site(Target("m", "ar"), phase="allreduce"), rec)
    dr = make_wrapper(draft, Site(Target("m", "dr"), phase="draft", starts_cycle=True), rec)
    ve = make_wrapper(verify, Site(Target("m", "ve"), phase="verify", accept_len="accept_len"), rec)
    st = make_wrapper(step, Site(Target("m", "st"), cycle=True, cycle_accept_len="accept_len"), rec)
    de = make_wrapper(decode, Site(Target("m", "de"), phase="decode", cycle=True), rec)
    return {"ar": ar, "dr": dr, "ve": ve, "st": st, "de": de}


def _run(tmp_path: Path, name: str, *, use_native: bool, cycles: int = 6) -> Recorder:
    # flushes by count only (5 rows), so both runs flush at the same calls however slow
    cfg = RecorderConfig(
        raw_dir=tmp_path / name / "raw", flush_records=5, flush_seconds=1e6, native=use_native
    )
    rec = Recorder(cfg)
    p = _program(rec)
    for n in range(cycles):
        assert p["st"](n).accept_len == n
        assert p["ar"](k=n) == n
        p["dr"](False)  # outside a cycle: starts one
        with pytest.raises(ValueError, match="draft failed"):
            p["dr"](True)
        assert p["de"](n) == n
    rec.close()
    return rec


def test_fallback_is_forced_by_the_environment() -> None:
    if not FORCED_OFF:
        pytest.skip("only under TRACEKIT_NATIVE=0")
    assert native.NATIVE is None
    rec = Recorder(RecorderConfig(raw_dir=Path("/nonexistent")))
    assert rec._native is None
    assert native.note() is None  # turned off on purpose: nothing to say


def test_extension_is_built_where_a_compiler_is() -> None:
    # `make test` builds the extension (pip install -e); only TRACEKIT_NATIVE=0 turns it off
    if FORCED_OFF:
        pytest.skip("TRACEKIT_NATIVE=0")
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}): the Python path is the install's")
    assert native.NATIVE is not None, native.WHY_NOT


@needs_native
def test_native_and_python_paths_write_identical_records(tmp_path: Path) -> None:
    # GIVEN the same program under a native and a Python recorder
    nat = _run(tmp_path, "native", use_native=True)
    py = _run(tmp_path, "python", use_native=False)
    assert nat._native is not None
    assert py._native is None
    # THEN the same rows, byte for byte but for the times, and the same site table
    rows_n, rows_p = _rows(nat), _rows(py)
    assert len(rows_n) == 6 * 11  # cycle (5 rows), allreduce, draft, failed draft, decode (3)
    assert rows_n == rows_p
    assert nat._sites == py._sites
    assert nat.flushes == py.flushes
    # known answers: the verify rows carry accept_len n and 1 replay; the failed drafts ok False
    verify = [r for r in rows_n if r[0] == nat._codes[id(_site_of(nat, "verify"))]]
    assert [r[9] for r in verify] == [float(n) for n in range(6)]
    assert {r[8] for r in verify} == {1}


class Ids:
    def __init__(self, n: int) -> None:
        self.n = n


ARGS_MAP = """
[[phase]]
name = "draft"
targets = ["tk_args_prog:Drafter.propose"]
accept = { from = "arg:ids", value = "n" }

[[phase]]
name = "accept"
targets = ["tk_args_prog:update"]
accept = { from = "arg:ids", value = "n", kind = "delta", state = "after" }

[cycle]
starts_with = "draft"
"""


def _args_run(tmp_path: Path, name: str, use_native: bool) -> tuple[Recorder, list[Any], int]:
    """Rules that read an argument: a method (a class attribute: the direct call on the native
    path) called by position and by keyword, and a module function; 4 cycles. Returns the
    recorder, its sites and how many calls went through the generic `enter`."""
    import types

    from tracekit.collectors.phasemap import parse
    from tracekit.collectors.wrappers import install

    mod = types.ModuleType("tk_args_prog")

    class Drafter:
        def propose(self, ids: Ids, extra: int = 0) -> int:
            return ids.n + extra

    def update(ids: Ids) -> None:
        return None

    mod.Drafter, mod.update = Drafter, update  # type: ignore[attr-defined]
    cfg = RecorderConfig(raw_dir=tmp_path / name / "raw", flush_records=10**6, native=use_native)
    rec = Recorder(cfg)
    entered = count_enters(rec)
    sites = parse(ARGS_MAP).sites()["tk_args_prog"]
    for site in sites:
        install(mod, site, rec)
    d = mod.Drafter()
    for n in range(4):
        if n % 2:
            assert d.propose(Ids(n)) == n
        else:
            assert d.propose(ids=Ids(n), extra=1) == n + 1
        mod.update(Ids(10 * (n + 1)))
    return rec, sites, len(entered)


@pytest.mark.parametrize("use_native", [True, False])
def test_rules_reading_an_argument_run_on_the_native_path(tmp_path: Path, use_native: bool) -> None:
    if use_native and native.NATIVE is None:
        pytest.skip(native.WHY_NOT)
    # GIVEN a program whose two phases' acceptance rules read an argument, on either hot path
    rec, _sites, entered = _args_run(tmp_path, "run", use_native)
    rows = _rows(rec)
    # THEN the draft rows carry the ids' n (by position and by keyword), the accept rows the
    # length their delta rule reads (the growth is the analysis's: DEFINITIONS.md)
    code = {p: rec._codes[id(_site_of(rec, p))] for p in ("draft", "accept")}
    assert [r[9] for r in rows if r[0] == code["draft"]] == [0.0, 1.0, 2.0, 3.0]
    assert [r[9] for r in rows if r[0] == code["accept"]] == [10.0, 20.0, 30.0, 40.0]
    # and on the native path only each site's first two calls went through the generic `enter`
    # (the first registers the site, the second finds its code), on the Python path all 8
    assert entered == (4 if use_native else 8)
    rec.close()


@needs_native
def test_rules_reading_an_argument_write_the_python_paths_rows(tmp_path: Path) -> None:
    # GIVEN the program above on a native and a Python recorder
    nat, _, _ = _args_run(tmp_path, "native", True)
    py, _, _ = _args_run(tmp_path, "python", False)
    # THEN the same rows but for the times
    rows = _rows(nat)
    assert len(rows) == 8
    assert rows == _rows(py)
    nat.close()
    py.close()


@needs_native
def test_cycle_targets_run_in_c_and_write_the_generic_rows(tmp_path: Path) -> None:
    # GIVEN a cycle-only target with a cycle acceptance rule, and a site that is both a phase
    # and the cycle target (the demo's SpeculativeDecoder.step and BaselineDecoder.step),
    # past their first calls (which register them through `generic`)
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10**6, flush_seconds=1e6))
    p = _program(rec)
    for n in range(3):
        p["st"](n)
        p["de"](n)
    calls = {"enter": 0, "exit": 0}
    enter, leave = rec.enter, rec.exit

    def counted_enter(site: Any) -> Any:
        calls["enter"] += 1
        return enter(site)

    def counted_exit(*args: Any, **kwargs: Any) -> None:
        calls["exit"] += 1
        leave(*args, **kwargs)

    rec.enter, rec.exit = counted_enter, counted_exit  # type: ignore[method-assign]
    st_native = p["st"].__tracekit_native__
    assert st_native.cycle_code >= 0
    assert st_native.code == -1  # no phase
    assert p["de"].__tracekit_native__.cycle_code >= 0
    assert p["de"].__tracekit_native__.code >= 0
    rows_before = len(rec._buf)
    cycle_before = rec.cycle
    # WHEN two more cycles of each run
    for n in (7, 8):
        assert p["st"](n).accept_len == n
        assert p["de"](n) == n
    # THEN no call went through the Python enter / exit, 4 cycles were opened, and the rows
    # are the generic path's: `st` a cycle row (seq, its acceptance) after its phases' rows;
    # `de` a decode row (seq) and a cycle row (-seq), the same times, an allreduce inside
    assert calls == {"enter": 0, "exit": 0}
    assert rec.cycle == cycle_before + 4
    new = rec._buf[rows_before:]
    st_code, de_cycle_code = st_native.cycle_code, p["de"].__tracekit_native__.cycle_code
    cycle_rows = [r for r in new if r[0] in (st_code, de_cycle_code)]
    assert [(r[0], r[9]) for r in cycle_rows] == [
        (st_code, 7.0), (de_cycle_code, None), (st_code, 8.0), (de_cycle_code, None),
    ]  # fmt: skip
    decode = [r for r in new if r[0] == p["de"].__tracekit_native__.code]
    for d, c in zip(decode, [r for r in cycle_rows if r[0] == de_cycle_code], strict=True):
        assert c[5] == -d[5]  # seq, -seq
        assert (c[6], c[7], c[1]) == (d[6], d[7], d[1])  # start, end, cycle
        assert (c[2], c[3]) == (0, -1)  # depth 0, no parent
    assert all(r[10] for r in new)
    rec.close()


def _site_of(rec: Recorder, phase: str) -> Any:
    for info in rec._info.values():
        if info[5].phase == phase and not info[5].cycle:
            return info[5]
    raise AssertionError(phase)


@needs_native
def test_native_times_are_the_record_clock(tmp_path: Path) -> None:
    import time

    t0 = time.time_ns()
    rec = _run(tmp_path, "t", use_native=True, cycles=2)
    t1 = time.time_ns()
    from tracekit.store.raw.ipc import read_stream

    table, _c, _e = read_stream(rec.dir / "records.arrow")
    assert table is not None
    for r in table.to_pylist():
        assert t0 <= r["start_ns"] <= r["end_ns"] <= t1


@needs_native
def test_native_wrapper_keeps_the_call_and_its_exception(tmp_path: Path) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    err = KeyError("k")

    def f(a: int, *, b: int = 0) -> tuple[int, int]:
        if a < 0:
            raise err
        return a, b

    w = make_wrapper(f, Site(Target("m", "f"), phase="p"), rec)
    assert getattr(w, "__tracekit_native__", None) is not None
    for _ in range(3):  # the first calls register the site through `generic`
        assert w(1, b=2) == (1, 2)
    with pytest.raises(KeyError) as info:
        w(-1)
    assert info.value is err
    assert info.traceback[-1].name == "f"
    rec.close()


@pytest.mark.parametrize("use_native", [True, False])
def test_a_failing_hot_path_disables_itself_and_says_so_once(
    tmp_path: Path, use_native: bool, capfd: pytest.CaptureFixture[str]
) -> None:
    if use_native and native.NATIVE is None:
        pytest.skip(native.WHY_NOT)
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", native=use_native))
    w = make_wrapper(lambda x: x + 1, Site(Target("m", "g"), phase="p"), rec)
    assert [w(i) for i in range(3)] == [1, 2, 3]
    rec._rows = None  # type: ignore[assignment]  # the exit's row append now fails
    assert [w(i) for i in range(5)] == [1, 2, 3, 4, 5]  # the program never sees it
    assert rec.active is False
    err = capfd.readouterr().err
    assert err.count("recorder failed") == 1
    assert "during exit" in err


@needs_native
def test_native_passes_through_while_compiling_flag_is_set(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    w = make_wrapper(lambda x: x, Site(Target("m", "h"), phase="p"), rec)
    for i in range(3):
        w(i)
    n = rec.records
    old = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True  # export / a compile session
    try:
        assert w(5) == 5
    finally:
        torch.compiler._is_compiling_flag = old
    assert rec.records == n
    w(6)
    assert rec.records == n + 1
    rec.close()


@needs_native
def test_dynamo_traces_the_native_wrapper_without_a_graph_break(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    w = make_wrapper(lambda x: x * 2, Site(Target("m", "d"), phase="p"), rec)
    for _ in range(3):
        w(torch.ones(2))  # registered: the native body is live

    def prog(x: Any) -> Any:
        return w(x) + 1

    n = rec.records
    compiled = torch.compile(prog, backend="eager", fullgraph=True)  # a graph break raises
    assert torch.equal(compiled(torch.ones(2)), torch.full((2,), 3.0))
    assert rec.records == n  # traced code reaches neither the C object nor the recorder
    rec.close()


@needs_native
def test_threads_and_interleaved_recorders_keep_their_own_state(tmp_path: Path) -> None:
    def config(name: str) -> RecorderConfig:  # no flush: every row stays in the buffer
        return RecorderConfig(raw_dir=tmp_path / name / "raw", flush_records=10**6,
                              flush_seconds=1e6)  # fmt: skip

    a, b = Recorder(config("a")), Recorder(config("b"))
    wa = make_wrapper(lambda: 1, Site(Target("m", "a"), phase="pa"), a)
    wb = make_wrapper(lambda: 2, Site(Target("m", "b"), phase="pb"), b)
    tids: list[int] = []

    def work() -> None:
        tids.append(threading.get_native_id())
        for i in range(50):
            wa()
            wb()  # the thread-state cache switches recorder every call
            if i % 7 == 0:
                time.sleep(0)  # the threads' calls interleave: the last thread's state changes

    threads = [threading.Thread(target=work) for _ in range(3)]
    work()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for rec in (a, b):
        rows = list(ROW.iter_unpack(bytes(rec._rows)))
        assert len(rows) == 200
        assert len({r[5] for r in rows}) == len(rows)  # seq unique
        assert all(r[2] == 0 and r[3] == -1 for r in rows)  # depth 0, no parent
        assert Counter(r[4] for r in rows) == dict.fromkeys(tids, 50)  # each thread's own state
        rec.close()


@needs_native
def test_driver_events_fall_back_to_torch_where_the_driver_is_missing(tmp_path: Path) -> None:
    # GIVEN no CUDA driver on this machine (where one is, the device script measures it)
    assert native.NATIVE is not None
    why = native.NATIVE.driver_error()
    if why is None:
        pytest.skip("a CUDA driver is here")
    assert "libcuda" in why
    with pytest.raises(RuntimeError, match="driver API unavailable"):
        native.NATIVE.CudaEvent(lambda d: 0, lambda: 0)
    # WHEN a recorder asked for driver events calibrates on a (fake) CUDA device
    from tests.unit.collectors.test_collectors_gpu_events import FakeCuda

    cuda = FakeCuda()
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", driver_events=True))
    rec._is_compiling = lambda: False
    rec._cuda = cuda
    w = make_wrapper(lambda: 1, Site(Target("m", "e"), phase="p"), rec)
    for _ in range(4):
        w()
    # THEN it uses torch's events and says why in process.json
    assert rec.process_info["gpu_events"].startswith("torch (")
    assert cuda.records >= 2
    rec.close()


@needs_native
def test_the_native_path_keeps_the_event_bookkeeping_in_c(tmp_path: Path) -> None:
    # GIVEN the demo-shaped cycle (draft, verify, draft_extend) on a fake CUDA device, with
    # the Python event methods counted
    from tests.unit.collectors import test_collectors_gpu_events as gpu_test

    cuda = gpu_test.FakeCuda()
    rec = gpu_test._recorder(tmp_path, cuda, share_gap_ns=10**9)
    calls = {"begin": 0, "end": 0}
    begin, end = rec._gpu_begin, rec._gpu_end

    def counted_begin(*args: Any) -> Any:
        calls["begin"] += 1
        return begin(*args)

    def counted_end(*args: Any) -> None:
        calls["end"] += 1
        end(*args)

    rec._gpu_begin = counted_begin  # type: ignore[method-assign]
    rec._gpu_end = counted_end  # type: ignore[method-assign]
    step = gpu_test._spec_program(rec)
    for _ in range(2):  # a site's first two calls go through `generic` (registration)
        step()
    before = dict(calls)
    records = cuda.records
    # WHEN 5 more cycles run
    for _ in range(5):
        step()
    rec.close()
    # THEN their 4 events a cycle were recorded without a call into the Python methods
    assert cuda.records - records == 5 * 4
    assert calls == before


def test_a_missing_extension_is_said_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN an install where the extension did not load (no compiler at install)
    monkeypatch.setattr(native, "NATIVE", None)
    monkeypatch.setattr(native, "WHY_NOT", "the C extension did not load (No module named x)")
    monkeypatch.setattr(native, "_said", False)
    # THEN the first note names why and what runs instead; later ones say nothing
    line = native.note()
    assert line is not None
    assert "No module named x" in line
    assert "Python path" in line
    assert native.note() is None
