"""The flush the launcher asks of every recording process before it forwards a signal
(tracekit/launch/flushask.py, collectors/recording/doorbell.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording.doorbell import Doorbell, fifo_path
from tracekit.collectors.wrappers import make_wrapper
from tracekit.launch.flushask import answers, ask_to_flush
from tracekit.launch.supervise import Supervision, forwarding
from tracekit.store.raw.files import PROCESS_FILE


def test_a_recording_process_writes_its_buffer_when_asked(tmp_path: Path) -> None:
    # GIVEN a recorder with the flush thread and the launcher's control directory, whose
    # interval and batch are never reached: 10 calls stay in its buffer
    control = tmp_path / "control"
    control.mkdir()
    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp_path / "raw",
            flush_records=10**6,
            flush_seconds=600,
            flush_thread=True,
            control_dir=control,
        )
    )
    call = make_wrapper(lambda: None, Site(Target("m", "f"), phase="draft"), rec)
    rec.flush()  # opens the stream and starts the flush thread (as the import hook does)
    assert (control / f"{os.getpid()}.fifo").exists()
    for _ in range(10):
        call()
    assert json.loads((rec.dir / PROCESS_FILE).read_text())["records"] == 0
    # WHEN the launcher asks
    got = ask_to_flush(control, tmp_path / "raw", wait_s=5.0)
    # THEN the process answered: its 10 records are on disk, and process.json says so
    assert (got.asked, got.answered) == (1, 1)
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["records"] == 10
    assert info["flush_requests"] == 1
    assert answers(tmp_path / "raw", os.getpid()) == 1
    # and a second request is answered too, with nothing new to write
    assert ask_to_flush(control, tmp_path / "raw", wait_s=5.0).answered == 1
    assert answers(tmp_path / "raw", os.getpid()) == 2
    rec.close()
    assert not list(control.iterdir())  # the FIFO goes with the recorder


def test_processes_gone_or_silent_are_not_waited_for_beyond_the_bound(tmp_path: Path) -> None:
    # GIVEN the FIFO of a process that is gone (no reader) and one of a process that listens
    # but never answers (its flush thread stuck)
    os.mkfifo(fifo_path(tmp_path, 111))
    silent = Doorbell(fifo_path(tmp_path, 222))
    (tmp_path / "not-a-pid.fifo").touch()
    try:
        # WHEN the launcher asks, with a bound of 0.2 s
        t0 = time.monotonic()
        got = ask_to_flush(tmp_path, tmp_path / "raw", wait_s=0.2)
        took = time.monotonic() - t0
    finally:
        silent.close()
    # THEN only the listening one was asked, nobody answered, and the wait kept its bound
    assert (got.asked, got.answered) == (1, 0)
    assert 0.19 <= took < 2.0
    assert got.to_json()["wait_ms"] >= 190


def test_a_recorder_that_failed_is_not_asked(tmp_path: Path) -> None:
    # GIVEN a recording process whose recorder disabled itself after a failure
    control = tmp_path / "control"
    control.mkdir()
    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp_path / "raw", flush_seconds=600, flush_thread=True, control_dir=control
        )
    )
    rec.flush()
    assert list(control.iterdir())
    rec.fail("a test", RuntimeError("broken"))
    assert rec._timer is not None
    rec._timer.join(5)
    # THEN its flush thread ended and took its FIFO along: the launcher does not wait for it
    assert not list(control.iterdir())
    t0 = time.monotonic()
    got = ask_to_flush(control, tmp_path / "raw", wait_s=2.0)
    assert (got.asked, got.answered) == (0, 0)
    assert time.monotonic() - t0 < 0.5
    rec.close()


def test_a_failing_flush_request_never_keeps_the_signal_from_the_command() -> None:
    # GIVEN a child in its own session and a flush request that raises
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    sup = Supervision()

    def broken() -> dict[str, Any]:
        raise RuntimeError("control directory gone")

    try:
        with forwarding(child, 5.0, sup, broken):
            # WHEN the launcher gets SIGTERM
            os.kill(os.getpid(), signal.SIGTERM)
            rc = child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
    # THEN the signal reached the child anyway, and run.json will say what failed
    assert rc == -signal.SIGTERM
    assert sup.forwarded == [signal.SIGTERM]
    assert sup.flush_ask == {"error": "RuntimeError: control directory gone"}
