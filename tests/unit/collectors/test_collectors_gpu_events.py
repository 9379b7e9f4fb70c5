"""CUDA events of light mode: one event per phase boundary, none for cycle-only targets, and GPU
timing on every N-th cycle (`--gpu-sample N`), with a fake `torch.cuda` that counts records."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import gpu as gpu_events
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.files import RECORDS_FILE, SITES_FILE
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import decoded


def decode(table: Any, sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded records, one dict a row."""
    rows: list[dict[str, Any]] = decoded(table, sites).to_dicts()
    return rows


class FakeCuda:
    """`torch.cuda` as the recorder uses it: an event's device time is the host clock at its
    record plus `lag_ns` (a device that runs behind the host), and every event is complete."""

    _initialized = True

    def __init__(self, lag_ns: int = 5_000) -> None:
        self.records = 0
        self.created = 0
        self.lag_ns = lag_ns
        cuda = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                cuda.created += 1
                self.t: int | None = None

            def record(self) -> None:
                cuda.records += 1
                self.t = time.time_ns() + cuda.lag_ns

            def query(self) -> bool:
                return self.t is not None

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, other: Event) -> float:
                assert self.t is not None
                assert other.t is not None
                return (other.t - self.t) / 1e6

        self.Event = Event

    def is_current_stream_capturing(self) -> bool:
        return False

    def synchronize(self) -> None:
        pass

    def current_device(self) -> int:
        return 0


def _recorder(tmp_path: Path, cuda: FakeCuda, **kw: Any) -> Recorder:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_seconds=60, **kw))
    rec._is_compiling = lambda: False
    rec._cuda = cuda
    return rec


def _spec_program(rec: Any, inside_verify: Any = None) -> Any:
    """A cycle target `step` calling draft, verify (two nested allreduce calls) and
    draft_extend: three top-level phases a cycle, as the demo's speculative decoder."""

    def ar_fn() -> None:
        pass

    def verify_fn() -> int:
        ar()
        if inside_verify is not None:
            inside_verify()
        ar()
        return 2

    def step_fn() -> int:
        dr()
        n = ve()
        de()
        return n

    ar = make_wrapper(ar_fn, Site(Target("m", "ar"), phase="allreduce"), rec)
    dr = make_wrapper(lambda: None, Site(Target("m", "dr"), phase="draft"), rec)
    ve = make_wrapper(verify_fn, Site(Target("m", "ve"), phase="verify"), rec)
    de = make_wrapper(lambda: None, Site(Target("m", "de"), phase="draft_extend"), rec)
    return make_wrapper(step_fn, Site(Target("m", "st"), cycle=True), rec)


def _rows(rec: Recorder) -> list[dict[str, Any]]:
    table, _complete, err = read_stream(rec.dir / RECORDS_FILE)
    assert err is None
    assert table is not None
    sites = json.loads((rec.dir / SITES_FILE).read_text())["sites"]
    return decode(table, sites)


def _per_cycle_events(
    tmp_path: Path, cycles: int, gap_ns: int, **kw: Any
) -> tuple[FakeCuda, Recorder]:
    cuda = FakeCuda()
    rec = _recorder(tmp_path, cuda, flush_records=5, share_gap_ns=gap_ns, **kw)
    step = _spec_program(rec)
    step()  # first cycle: site registration, calibration (one reference event)
    before = cuda.records
    for _ in range(cycles):
        step()
    rec.close()
    cuda.records -= before
    return cuda, rec


def test_one_event_per_phase_boundary(tmp_path: Path) -> None:
    # GIVEN cycles of draft, verify (2 nested allreduce) and draft_extend, adjacent on the host
    # WHEN 10 cycles run after the first
    cuda, rec = _per_cycle_events(tmp_path, 10, 10**9)
    # THEN each cycle records 4 events (start of draft, draft|verify, verify|draft_extend, end
    # of draft_extend), not 8 (2 a top-level phase, 2 for the cycle target)
    assert cuda.records == 10 * 4
    rows = _rows(rec)
    tops = [r for r in rows if r["kind"] == "phase" and r["depth"] == 0]
    assert len(tops) == 11 * 3
    # the shared boundary: each phase's GPU start is the previous phase's GPU end
    for c in range(11):
        d, v, e = (r for r in tops if r["cycle"] == c)
        assert (d["phase"], v["phase"], e["phase"]) == ("draft", "verify", "draft_extend")
        assert d["gpu_end_ns"] == v["gpu_start_ns"]
        assert v["gpu_end_ns"] == e["gpu_start_ns"]
        assert d["gpu_start_ns"] <= d["gpu_end_ns"] <= v["gpu_end_ns"] <= e["gpu_end_ns"]
    # cycle rows and nested phases carry no GPU times
    assert all(r["gpu_start_ns"] is None for r in rows if r["kind"] == "cycle" or r["depth"])
    # events are pooled, not created a call: the pool refills after each flush
    assert cuda.created < 20


def test_no_sharing_past_the_gap(tmp_path: Path) -> None:
    # GIVEN a share gap of -1 ns (never share) WHEN 10 cycles run
    cuda, rec = _per_cycle_events(tmp_path, 10, -1)
    # THEN 2 events a top-level phase, still none for the cycle target: 6 a cycle
    assert cuda.records == 10 * 6
    tops = [r for r in _rows(rec) if r["kind"] == "phase" and r["depth"] == 0]
    assert all(r["gpu_start_ns"] < r["gpu_end_ns"] for r in tops)
    d, v = tops[3], tops[4]
    assert d["gpu_end_ns"] < v["gpu_start_ns"]


def test_gpu_sample_times_one_cycle_in_n(tmp_path: Path) -> None:
    # GIVEN --gpu-sample 4 WHEN cycles 0..8 run (the first, then 8 more)
    cuda, rec = _per_cycle_events(tmp_path, 8, 10**9, gpu_sample=4)
    # THEN only the cycles the rule picks have CUDA events: {c / phi} < 1/4 for c = 0, 2, 5
    # (0.618 x 2 = 1.236, fraction 0.236; x 5 = 3.090, fraction 0.090), 4 events each
    # (cycle 0 was before the count)
    assert [c for c in range(9) if gpu_events.sampled(c, 4)] == [0, 2, 5]
    assert cuda.records == 2 * 4
    rows = _rows(rec)
    tops = [r for r in rows if r["kind"] == "phase" and r["depth"] == 0]
    timed = sorted({r["cycle"] for r in tops if r["gpu_start_ns"] is not None})
    assert timed == [0, 2, 5]
    assert all(
        (r["gpu_start_ns"] is not None) == gpu_events.sampled(r["cycle"], 4) for r in tops
    )  # a cycle is timed whole or not at all
    # every row keeps its CPU times
    assert all(r["start_ns"] <= r["end_ns"] for r in rows)
    assert len([r for r in rows if r["kind"] == "cycle"]) == 9
    # the sampled GPU times are the device's: CPU range shifted by the fake device's lag
    for r in tops:
        if r["gpu_start_ns"] is not None:
            assert r["gpu_start_ns"] - r["start_ns"] < 1_000_000


def test_gpu_sample_without_cycles_times_one_call_in_n(tmp_path: Path) -> None:
    # GIVEN phases outside every cycle (no cycle target, no starts_with) and --gpu-sample 3
    cuda = FakeCuda()
    rec = _recorder(tmp_path, cuda, gpu_sample=3)
    ph = make_wrapper(lambda: None, Site(Target("m", "p"), phase="decode"), rec)
    for _ in range(9):
        ph()
    rec.close()
    # THEN the calls numbered as the rule picks them are GPU-timed: {c / phi} < 1/3 for
    # c = 0, 2, 5, 7 (0.618 c = 0, 1.236, 3.090, 4.326)
    picked = [c for c in range(9) if gpu_events.sampled(c, 3)]
    assert picked == [0, 2, 5, 7]
    rows = _rows(rec)
    assert [r["gpu_start_ns"] is not None for r in rows] == [c in picked for c in range(9)]
    # 2 events each (an untimed call between them ends the boundary: nothing is shared across
    # it; two picked in a row share one), the calibration event excluded
    shared = sum(1 for c in picked if c - 1 in picked)
    assert cuda.records - 1 == 2 * len(picked) - shared


def test_the_sampling_rule_is_one_in_n_without_a_period() -> None:
    # GIVEN the rule for N = 8 over 8,000 cycles
    picked = [c for c in range(8000) if gpu_events.sampled(c, 8)]
    # THEN one cycle in 8 (to within 3 cycles over the whole stretch and over each 800: the
    # golden-ratio sequence's discrepancy grows as log n)
    assert abs(len(picked) - 1000) <= 3
    for start in range(0, 8000, 800):
        assert abs(sum(1 for c in picked if start <= c < start + 800) - 100) <= 3
    # and a program period of 8 (a request of 8 steps, blocks of 8) does not line up with
    # them: every step of the period is picked about as often (each 1/8 of 1,000 +- 20%),
    # where "every 8th cycle" picks step 0 alone
    by_step = [sum(1 for c in picked if c % 8 == k) for k in range(8)]
    assert all(100 <= n <= 150 for n in by_step), by_step
    assert gpu_events.sampled(12345, 1)


def test_shared_event_is_not_reused_while_held(tmp_path: Path) -> None:
    # GIVEN a flush (which resolves events and returns them to the pool) inside verify, while
    # draft's end event is still verify's start
    cuda = FakeCuda()
    rec = _recorder(tmp_path, cuda, flush_records=1, share_gap_ns=10**9)

    def flush_and_wait() -> None:
        rec.flush()
        time.sleep(0.002)

    step = _spec_program(rec, inside_verify=flush_and_wait)
    for _ in range(4):
        step()
    rec.close()
    # THEN verify's GPU span still starts at draft's end and lasts the 2 ms it slept: its start
    # event was not handed out again as its end event
    tops = [r for r in _rows(rec) if r["kind"] == "phase" and r["depth"] == 0]
    for c in range(4):
        d, v, _e = (r for r in tops if r["cycle"] == c)
        assert d["gpu_end_ns"] == v["gpu_start_ns"]
        assert v["gpu_end_ns"] - v["gpu_start_ns"] >= 2_000_000


def test_inlined_and_generic_paths_record_the_same_events(tmp_path: Path) -> None:
    # GIVEN the same program through the inlined path and through plain enter/exit hooks

    class Plain:
        def __init__(self, rec: Recorder) -> None:
            self.rec, self.enter, self.exit = rec, rec.enter, rec.exit

        @property
        def active(self) -> bool:
            return self.rec.active

    counts = []
    for name, wrap in (("inl", lambda r: r), ("gen", Plain)):
        cuda = FakeCuda()
        rec = _recorder(tmp_path / name, cuda, gpu_sample=2, share_gap_ns=10**9)
        step = _spec_program(wrap(rec))
        for _ in range(6):
            step()
        rec.close()
        counts.append(cuda.records)
        tops = [r for r in _rows(rec) if r["kind"] == "phase" and r["depth"] == 0]
        picked = [c for c in range(6) if gpu_events.sampled(c, 2)]
        assert picked == [0, 2, 4, 5]
        assert [r["cycle"] for r in tops if r["gpu_start_ns"] is not None] == [
            c for c in picked for _ in range(3)
        ]
    # THEN both record 1 calibration + 4 timed cycles x 4 events
    assert counts == [1 + 4 * 4, 1 + 4 * 4]


def test_set_recording_pauses_the_wrappers(tmp_path: Path) -> None:
    # GIVEN a recorder paused for 3 of 7 cycles
    cuda = FakeCuda()
    rec = _recorder(tmp_path, cuda)
    step = _spec_program(rec)
    for i in range(7):
        rec.set_recording(i not in (2, 3, 4))
        step()
    rec.set_recording(True)
    rec.close()
    # THEN only the 4 recorded cycles have rows (1 cycle + 5 phase rows each), numbered 0..3
    rows = _rows(rec)
    assert len(rows) == 4 * 6
    assert sorted({r["cycle"] for r in rows}) == [0, 1, 2, 3]
    # a failed recorder is not resumed
    rec2 = _recorder(tmp_path / "b", FakeCuda())
    rec2.fail("test", RuntimeError("x"))
    rec2.set_recording(True)
    assert rec2.active is False


def test_events_are_queried_in_the_relaxed_capture_mode_and_the_mode_restored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a driver whose capture-mode exchange is recorded (a program capturing a CUDA graph
    # in global mode forbids other threads' event queries: relaxed mode allows them)
    import ctypes

    calls: list[int] = []
    mode_of_thread = [0]  # CU_STREAM_CAPTURE_MODE_GLOBAL

    def exchange(ptr: Any) -> int:
        p = ctypes.cast(ptr, ctypes.POINTER(ctypes.c_int))
        calls.append(p[0])
        p[0], mode_of_thread[0] = mode_of_thread[0], p[0]
        return 0

    monkeypatch.setattr(gpu_events, "_exchange_mode", [exchange])
    seen: list[int] = []
    # WHEN events are resolved inside it
    with gpu_events.relaxed_capture():
        seen.append(mode_of_thread[0])
    # THEN the queries ran in relaxed mode (2) and the thread's global mode (0) came back
    assert seen == [2]
    assert calls == [2, 0]
    assert mode_of_thread[0] == 0


def test_relaxed_capture_is_a_no_op_without_a_cuda_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_events, "_exchange_mode", [None])
    with gpu_events.relaxed_capture():
        pass


class Float32Cuda(FakeCuda):
    """FakeCuda whose `elapsed_time` rounds to float32 milliseconds, as CUDA's does."""

    def __init__(self) -> None:
        super().__init__(lag_ns=0)
        base = self.Event

        class Event(base):  # type: ignore[valid-type,misc]
            def elapsed_time(self, other: Any) -> float:
                import numpy as np

                return float(np.float32(super().elapsed_time(other)))

        self.Event = Event


def test_spans_keep_their_precision_with_an_old_reference(tmp_path: Path) -> None:
    # GIVEN a calibration reference an hour old (float32 milliseconds since it step by 0.25 ms)
    cuda = Float32Cuda()
    rec = _recorder(tmp_path, cuda)
    call = make_wrapper(lambda: time.sleep(0.0013), Site(Target("m", "f"), phase="decode"), rec)
    call()  # the calibration, and one call
    ref, ref_ns = rec._gpu_ref  # type: ignore[misc]
    ref.t -= 3600 * 10**9
    rec._gpu_ref = (ref, ref_ns - 3600 * 10**9)
    events: list[tuple[int, int]] = []

    def timed_call() -> None:  # the call, and its two events' device times
        call()
        _seq, ev0, ev1 = rec._gpu_pending[-1]
        events.append((ev0.t, ev1.t))

    # WHEN calls are resolved in two flushes
    for _ in range(3):
        timed_call()
    rec.flush()
    first_ref = rec._gpu_ref[0]  # type: ignore[index]
    for _ in range(3):
        timed_call()
    rec.close()
    # THEN every span is the events' own difference to the microsecond (float32 of 1.3 ms),
    # where one measured from the old reference would step by 0.25 ms
    rows = [r for r in _rows(rec) if r["kind"] == "phase"][1:]
    assert len(rows) == 6
    for r, (t0, t1) in zip(rows, events):
        assert abs((r["gpu_end_ns"] - r["gpu_start_ns"]) - (t1 - t0)) < 1_000
    # and the first flush made its last end event the reference: the second flush's times
    # carry that event's offset (up to half a 0.25 ms step here, from the hour-old reference)
    # and nothing more, where the old reference would round each again
    assert first_ref is not ref
    offset = rows[2]["gpu_end_ns"] - events[2][1]
    for r, (t0, _t1) in zip(rows[3:], events[3:]):
        assert abs(r["gpu_start_ns"] - t0 - offset) < 1_000


class CapturingCuda(FakeCuda):
    """FakeCuda whose stream capture is switched by the test, its queries counted."""

    def __init__(self) -> None:
        super().__init__()
        self.capturing = False
        self.queries = 0

    def is_current_stream_capturing(self) -> bool:
        self.queries += 1
        return self.capturing


@pytest.mark.parametrize("use_native", [True, False])
def test_only_a_call_with_no_recorded_call_open_asks_whether_the_stream_captures(
    tmp_path: Path, use_native: bool
) -> None:
    from tracekit.collectors.recording import native

    if use_native and native.NATIVE is None:
        pytest.skip(native.WHY_NOT)
    # GIVEN the demo-shaped cycle (a cycle target; draft, verify with two nested allreduce
    # calls, draft_extend) on a fake CUDA device, past its sites' first calls
    cuda = CapturingCuda()
    state: dict[str, bool] = {"start_capture_in_verify": False}

    def inside_verify() -> None:
        if state["start_capture_in_verify"]:
            cuda.capturing = True

    rec = _recorder(tmp_path, cuda, flush_records=10**6, native=use_native)
    step = _spec_program(rec, inside_verify)
    for _ in range(3):
        step()
    queries, rows = cuda.queries, rec.records
    # WHEN a cycle runs: 6 calls, 4 of them with no recorded call of the thread open
    step()
    # THEN the 4 ask whether the stream captures (the cycle target, draft, verify,
    # draft_extend) and the 2 allreduce calls inside verify do not; all 6 are recorded
    assert cuda.queries - queries == 4
    assert rec.records - rows == 6
    # WHEN a cycle runs while the stream captures: every call passes through, asking
    queries, rows = cuda.queries, rec.records
    cuda.capturing = True
    step()
    assert rec.records == rows
    assert cuda.queries - queries == 6
    # WHEN a capture starts inside a recorded verify (DEFINITIONS.md, "Hot path"): verify's
    # second allreduce is nested in a call that started before it, so it is recorded; the
    # draft_extend after it (no recorded call open) passes through
    cuda.capturing = False
    state["start_capture_in_verify"] = True
    rows = rec.records
    step()
    # the cycle target, draft, verify, both allreduce calls; not draft_extend
    assert rec.records - rows == 5
    rec.close()


def _graphs_module() -> Any:
    """A module shaped like torch.cuda.graphs: CUDAGraph's capture_begin (which raises when
    asked to), capture_end and replay."""
    from types import ModuleType

    graphs = ModuleType("fake_graphs")

    class CUDAGraph:
        def capture_begin(self, fail: bool = False) -> None:
            if fail:
                raise RuntimeError("capture refused")

        def capture_end(self) -> None:
            pass

        def replay(self) -> None:
            pass

    graphs.CUDAGraph = CUDAGraph  # type: ignore[attr-defined]
    return graphs


@pytest.mark.parametrize("use_native", [True, False])
def test_with_no_capture_open_only_a_call_that_takes_cuda_events_asks(
    tmp_path: Path, use_native: bool
) -> None:
    from tracekit.collectors import phasemap as pm
    from tracekit.collectors.importhook import PostImportHook
    from tracekit.collectors.recording import native
    from tracekit.collectors.runtime import Runtime

    if use_native and native.NATIVE is None:
        pytest.skip(native.WHY_NOT)
    # GIVEN the demo-shaped cycle, one cycle in 8 GPU-timed, and torch's CUDAGraph counted
    cuda = CapturingCuda()
    rec = _recorder(tmp_path, cuda, flush_records=10**6, native=use_native, gpu_sample=8)
    graphs = _graphs_module()
    assert rec._captures == -1  # not counted yet: every top-level call asks
    pmap = pm.parse('[[phase]]\nname = "verify"\ntargets = ["m:ve"]\n')
    Runtime(rec, PostImportHook(), pmap).patch_graphs(graphs)
    assert rec._captures == 0
    step = _spec_program(rec)
    for _ in range(3):
        step()
    # WHEN 24 cycles run with no capture open
    asked = []
    for _ in range(24):
        queries = cuda.queries
        step()
        asked.append((rec.cycle, cuda.queries - queries))
    # THEN the top-level phase calls of a sampled cycle ask (draft, verify, draft_extend: the
    # calls that take CUDA events), no call of another cycle asks, nor the cycle target
    assert asked == [(c, 3 if gpu_events.sampled(c, 8) else 0) for c in range(3, 27)]
    assert 2 <= sum(q > 0 for _c, q in asked) <= 4  # 24 cycles, one in 8
    # WHEN a capture is open (begun, not ended) and the stream captures: every call asks (each
    # passes through, so none has a recorded call open), whatever its cycle
    g = graphs.CUDAGraph()
    g.capture_begin()
    assert rec._captures == 1
    cuda.capturing = True
    rows = rec.records
    for _ in range(8):
        queries = cuda.queries
        step()
        assert cuda.queries - queries == 6
    assert rec.records == rows
    # WHEN it ends, and when a capture fails to begin
    cuda.capturing = False
    g.capture_end()
    with pytest.raises(RuntimeError, match="capture refused"):
        g.capture_begin(fail=True)
    # THEN none is open: an unsampled cycle asks nothing again, and records its 6 rows
    assert rec._captures == 0
    while gpu_events.sampled(rec.cycle + 1, 8):
        step()
    queries, rows = cuda.queries, rec.records
    step()
    assert (cuda.queries - queries, rec.records - rows) == (0, 6)
    rec.close()
