"""The recorder's lifecycle in-process: the timer flush thread, the profile window's cycle
numbers against merge's, and the launcher's environment."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.unit.store._records import phases_and_cycles
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.profiler import CycleCounter, CycleWindow, ProfileWindow
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.files import PROCESS_FILE, RECORDS_FILE
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import read_records
from tracekit.store.raw.schema import ROW


def _disk(rec: Recorder) -> list[dict[str, Any]]:
    table, _complete, err = read_stream(rec.dir / RECORDS_FILE)
    assert err is None
    assert table is not None
    rows, why = read_records(rec.dir, table)
    assert why is None
    return list(rows.to_dicts())


def _steps(rec: Recorder) -> Any:
    def draft() -> None:
        pass

    def verify() -> None:
        pass

    def step() -> None:
        dr()
        ve()

    dr = make_wrapper(draft, Site(Target("m", "draft"), phase="draft"), rec)
    ve = make_wrapper(verify, Site(Target("m", "verify"), phase="verify"), rec)
    return make_wrapper(step, Site(Target("m", "step"), cycle=True), rec)


def test_timer_thread_flushes_an_idle_process_and_keeps_the_count_current(tmp_path: Path) -> None:
    # GIVEN a recorder with the timer thread, interval 0.05 s, far from the record threshold
    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp_path / "raw", flush_records=10**6, flush_seconds=0.05, flush_thread=True
        )
    )
    step = _steps(rec)
    rec.flush()  # opens the stream (as the import hook does) and starts the timer
    # WHEN the program records 4 cycles and then makes no call at all
    for _ in range(4):
        step()
    assert rec._rows  # buffered, the program's threads did not flush
    deadline = time.monotonic() + 5
    while rec._rows and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    # THEN the timer thread wrote them, and process.json counts what is on disk
    assert len(_disk(rec)) == 12
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["records"] == 12
    assert info["buffered"] == 0
    (timer,) = [t for t in threading.enumerate() if t.name == "tracekit-flush"]
    assert timer.daemon
    # and close stops it, with every record written once
    rec.close()
    timer.join(2)
    assert not timer.is_alive()
    assert len(_disk(rec)) == 12


def test_flush_from_the_programs_thread_never_waits_for_the_lock(tmp_path: Path) -> None:
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    rec.flush()
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with rec._lock:
            held.set()
            release.wait(5)

    t = threading.Thread(target=hold, daemon=True)
    t.start()
    held.wait(5)
    t0 = time.monotonic()
    assert rec.flush() is False  # another thread holds the lock: returns at once
    assert rec.flush(until=time.monotonic() + 0.2) is False  # the bounded wait gives up
    took = time.monotonic() - t0
    release.set()
    t.join(5)
    assert 0.15 <= took < 1.0
    assert rec.flush() is True
    rec.close()


# The window against merge: steps where some are no cycle by the map's rule (no draft inside).
PREFILL = {0, 1, 4, 7, 8, 12, 15}
N_STEPS = 24


class _FakeRange:
    def __init__(self, log: list[tuple[str, str, int]], name: str) -> None:
        self.log = log
        self.name = name

    def __enter__(self) -> None:
        self.log.append(("enter", self.name, time.time_ns()))

    def __exit__(self, *exc: object) -> None:
        self.log.append(("exit", self.name, time.time_ns()))


def _fake_window(win: ProfileWindow, log: list[tuple[str, str, int]]) -> None:
    def start() -> None:
        win.active = True
        log.append(("start", "", time.time_ns()))

    def stop() -> None:
        win.active = False
        win.done = True
        log.append(("stop", "", time.time_ns()))

    win._start = start
    win._stop = stop
    win._rf = lambda name: _FakeRange(log, name)


@pytest.mark.parametrize("rule", ["targets+require", "starts_with+require"])
def test_profile_window_profiles_exactly_the_cycles_merge_numbers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    monkeypatch.setitem(sys.modules, "torch", sys.modules.get("torch") or ModuleType("torch"))
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw"))
    rec._is_compiling = lambda: False
    rec._cuda = type("NoCuda", (), {"_initialized": False})()
    log: list[tuple[str, str, int]] = []
    rec.profile = ProfileWindow(CycleWindow(5, 5), rec.dir, require="draft")
    _fake_window(rec.profile, log)

    def draft() -> None:
        pass

    def verify() -> None:
        pass

    def prefill() -> None:
        pass

    dr = make_wrapper(draft, Site(Target("m", "draft"), phase="draft"), rec)
    pf = make_wrapper(prefill, Site(Target("m", "prefill"), phase="prefill"), rec)
    if rule == "targets+require":  # SGLang's map: a cycle-target call without a draft is none
        ve = make_wrapper(verify, Site(Target("m", "verify"), phase="verify"), rec)

        def body(i: int) -> None:
            if i in PREFILL:
                pf()
            else:
                dr()
                ve()

        step = make_wrapper(body, Site(Target("m", "step"), cycle=True), rec)
        cfg: dict[str, Any] = {"require": "draft", "starts_with": None}
    else:  # vLLM's map: a cycle starts at each verify, and needs a draft after it
        ve = make_wrapper(
            verify, Site(Target("m", "verify"), phase="verify", starts_cycle=True), rec
        )

        def step(i: int) -> None:
            ve()
            if i not in PREFILL:
                dr()

        cfg = {"require": "draft", "starts_with": "verify"}
    for i in range(N_STEPS):
        step(i)
        time.sleep(0.0002)
    rec.close()
    # merge's numbering of the records on disk
    _phases, cycles = phases_and_cycles([dict(r, pid=1) for r in _disk(rec)], cfg)
    assert len(cycles) == N_STEPS - len(PREFILL)
    (t_start,) = [t for kind, _n, t in log if kind == "start"]
    stops = [t for kind, _n, t in log if kind == "stop"]
    t_stop = stops[0] if stops else time.time_ns()
    inside = [c["cycle"] for c in cycles if t_start <= c["start_ns"] and c["end_ns"] <= t_stop]
    assert inside == [5, 6, 7, 8, 9]
    drafts = [t for kind, n, t in log if kind == "enter" and n == "tracekit/draft"]
    assert len(drafts) == 5
    marks = [t for kind, n, t in log if kind == "enter" and n == "tracekit/cycle"]
    if rule == "targets+require":
        # one cycle mark a cycle, none for the steps that are no cycle; each holds its draft
        assert len(marks) == 5
        assert all(m <= d for m, d in zip(marks, drafts, strict=True))
    else:
        assert marks == []  # starts_with cycles have no mark; the reports use the records


def test_cycle_counter_numbers_as_merge_does() -> None:
    c = CycleCounter("draft")
    numbers = []
    for raw, has_draft in enumerate([False, True, True, False, True]):
        n = c.start(raw)
        c.phase("verify", raw)
        if has_draft:
            c.phase("draft", raw)
            c.phase("draft", raw)  # a second draft in the same cycle counts once
            numbers.append(n)
    assert numbers == [0, 1, 2]
    assert c.count == 3
    plain = CycleCounter(None)
    assert [plain.start(r) for r in range(3)] == [0, 1, 2]


def test_tracekit_disable_is_passed_to_the_child(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tracekit.collectors import phasemap as pm
    from tracekit.launch.env import build_env
    from tracekit.launch.options import LaunchOptions

    monkeypatch.setenv("TRACEKIT_DISABLE", "1")
    pmap = pm.load(pm.builtin_path("demo"))
    opts = LaunchOptions(command=["python"], phasemap_path=pm.builtin_path("demo"))
    env = build_env(tmp_path, opts, pmap, tmp_path / "phasemap.toml")
    assert env["TRACEKIT_DISABLE"] == "1"
    assert env["TRACEKIT_FLUSH_SECONDS"] == "1.0"


def _handoff_recorder(tmp_path: Path) -> tuple[Recorder, Any]:
    """A recorder with the flush thread, a batch of 30 records, an interval never reached."""
    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp_path / "raw", flush_records=30, flush_seconds=600, flush_thread=True
        )
    )
    step = _steps(rec)
    rec.flush()  # opens the stream (as the import hook does) and starts the flush thread
    return rec, step


def test_a_full_batch_is_written_by_the_flush_thread_not_the_programs(tmp_path: Path) -> None:
    # GIVEN the flush thread and a batch of 30 records (10 cycles of 3)
    rec, step = _handoff_recorder(tmp_path)
    program = threading.get_ident()
    writers: list[int] = []
    encode = rec._flush_locked

    def spy(**kw: Any) -> None:
        writers.append(threading.get_ident())
        encode(**kw)

    rec._flush_locked = spy  # type: ignore[method-assign]
    # WHEN the program records 25 cycles (75 records: two full batches and a half)
    for _ in range(25):
        step()
    deadline = time.monotonic() + 5
    while len(rec._rows) >= 30 * 37 and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    # THEN the full batches were written by the flush thread (woken, not waited for): the
    # program's thread wrote nothing, and process.json counts them under `flush_cost`
    assert writers
    assert program not in writers
    assert len(_disk(rec)) >= 60
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["flush_cost"]["on_program_threads"] == 1  # the opening flush, before the calls
    assert info["flush_cost"]["wall_ms"] > 0
    rec.close()
    assert len(_disk(rec)) == 75


def test_the_programs_thread_flushes_when_the_flush_thread_falls_8_batches_behind(
    tmp_path: Path,
) -> None:
    # GIVEN the flush thread stuck (it holds the recorder's lock and never flushes)
    rec, step = _handoff_recorder(tmp_path)
    assert rec._wake is not None
    rec._wake.set = lambda: None  # type: ignore[method-assign]  # woken: it never hears it
    # WHEN the program records 8 batches and one cycle more
    for _ in range(81):
        step()
    # THEN the program's own thread flushed at 8 batches: the buffer stays bounded
    assert len(_disk(rec)) >= 240
    assert len(rec._rows) < 8 * rec._flush_bytes
    rec.close()
    assert len(_disk(rec)) == 243


def test_past_8_batches_the_program_tries_the_lock_once_a_batch_while_a_flush_runs(
    tmp_path: Path,
) -> None:
    # GIVEN the flush thread deaf to its doorbell, and another thread inside a flush (it holds
    # the recorder's lock: the flush thread waiting for the GIL between the steps of its flush)
    rec, step = _handoff_recorder(tmp_path)
    assert rec._wake is not None
    rec._wake.set = lambda: None  # type: ignore[method-assign]
    step()  # the sites' first calls (they take the lock too)
    held, release = threading.Event(), threading.Event()

    def flushing() -> None:
        with rec._lock:
            held.set()
            release.wait(10)

    other = threading.Thread(target=flushing)
    other.start()
    assert held.wait(5)
    tries: list[int] = []
    flush = rec.flush

    def spy(**kw: Any) -> bool:
        tries.append(len(rec._rows))
        return flush(**kw)

    rec.flush = spy  # type: ignore[method-assign]
    # WHEN the program records 8 batches and 20 cycles more (30 records a batch, 3 a cycle)
    for _ in range(99):
        step()
    # THEN it tried the lock at 8 batches and once a batch after (not at each cycle's exit),
    # and wrote nothing meanwhile
    assert tries == [240 * ROW.size, 270 * ROW.size, 300 * ROW.size]
    assert rec._rows_written == 0
    # and once that flush ended, the next try (a batch later) flushed as before
    release.set()
    other.join()
    for _ in range(10):
        step()
    assert len(tries) == 4
    assert len(_disk(rec)) == 330
    rec.close()
    assert len(_disk(rec)) == 330


def test_a_paused_recorders_flush_thread_sleeps_whole_periods(tmp_path: Path) -> None:
    # GIVEN a recorder with the flush thread, interval 0.05 s, paused after a few cycles
    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp_path / "raw", flush_records=10**6, flush_seconds=0.05, flush_thread=True
        )
    )
    step = _steps(rec)
    rec.flush()
    for _ in range(3):
        step()
    wake = rec._wake
    assert wake is not None
    waits: list[float] = []
    real_wait = wake.wait

    def counted(timeout: float) -> bool:
        waits.append(timeout)
        return real_wait(timeout)

    wake.wait = counted  # type: ignore[method-assign]
    rec.active = False
    # WHEN it stays paused for 0.5 s
    time.sleep(0.5)
    # THEN the thread woke about once a period (10 times), not every 1/20 of one (200)
    assert 3 <= len(waits) <= 25, len(waits)
    # and after the pause the buffered cycles are written at the next period
    rec.active = True
    deadline = time.monotonic() + 5
    while rec._rows_written < 9 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(_disk(rec)) == 9
    rec.close()


def test_a_signal_handler_raising_during_the_exit_waits_for_the_final_flush(
    tmp_path: Path,
) -> None:
    # GIVEN a recorder with 3 cycles buffered whose final flush takes 0.3 s, and a program
    # handler that raises SystemExit (vLLM's worker does on SIGTERM) 50 ms into the exit
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10**6, flush_seconds=60))
    step = _steps(rec)
    for _ in range(3):
        step()
    real_flush = rec.flush

    def slow_flush(**kw: Any) -> None:
        time.sleep(0.3)
        real_flush(**kw)

    rec.flush = slow_flush  # type: ignore[method-assign]

    def handler(signum: int, frame: Any) -> None:
        raise SystemExit(143)

    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        # WHEN the exit runs and the handler's exception arrives while it waits
        with pytest.raises(SystemExit):
            rec.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    # THEN the exception still reaches the program, after every record was written and
    # process.json says the process finished
    assert len(_disk(rec)) == 9
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["finished"] is True
    assert info["records"] == 9


def test_the_rank_is_read_while_the_process_group_lives_not_only_at_a_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a process whose torch.distributed group (rank 3 of 4) lives while it records
    # nothing, then is destroyed before it records its cycles and exits (vLLM's workers
    # serving for less than the flush interval: their only flush is at the exit)
    group = {"up": False}
    dist = ModuleType("torch.distributed")
    dist.is_available = lambda: True  # type: ignore[attr-defined]
    dist.is_initialized = lambda: group["up"]  # type: ignore[attr-defined]
    dist.get_rank = lambda: 3  # type: ignore[attr-defined]
    dist.get_world_size = lambda: 4  # type: ignore[attr-defined]
    dist.get_backend = lambda: "gloo"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    monkeypatch.delenv("RANK", raising=False)
    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp_path / "raw", flush_records=10**6, flush_seconds=0.05, flush_thread=True
        )
    )
    step = _steps(rec)
    rec.flush()  # opens the stream and starts the flush thread
    group["up"] = True
    time.sleep(0.3)  # six periods with nothing to write
    group["up"] = False
    # WHEN it records 3 cycles and exits
    for _ in range(3):
        step()
    rec.close()
    # THEN its process.json has the rank merge needs
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["records"] == 9
    assert info["rank_info"]["dist_rank"] == 3
    assert info["rank_info"]["dist_world_size"] == 4
