"""The flush thread's doorbell (collectors/recording/doorbell.py): the program's wake, the
launcher's flush requests through a FIFO, and the descriptors it holds."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collectors._paths import NATIVE_OR_PYTHON
from tracekit.collectors.recording.doorbell import ASK, Doorbell, fifo_path

PATHS = NATIVE_OR_PYTHON  # the wait: select.poll, or the extension's poll_drain


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("native", PATHS)
def test_set_wakes_a_wait_once(native: Any) -> None:
    bell = Doorbell(native=native)
    try:
        assert not bell.wait(0.01)
        bell.set()
        bell.set()
        assert bell.wait(1.0)
        assert not bell.wait(0.01)  # both wakes drained by the first wait
        assert bell.take_asked() == 0  # the program's own wakes are no flush request
    finally:
        bell.close()


@pytest.mark.parametrize("native", PATHS)
def test_the_launchers_requests_are_counted(tmp_path: Path, native: Any) -> None:
    bell = Doorbell(fifo_path(tmp_path, 4242), native=native)
    try:
        assert bell.fifo == tmp_path / "4242.fifo"
        fd = os.open(bell.fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.write(fd, ASK + ASK)
        os.close(fd)
        assert bell.wait(1.0)
        assert bell.take_asked() == 2
        assert bell.take_asked() == 0
        # the launcher's write end closed: no end of file reported again and again
        t0 = time.monotonic()
        assert not bell.wait(0.1)
        assert time.monotonic() - t0 >= 0.09
    finally:
        bell.close()
    assert not (tmp_path / "4242.fifo").exists()
    # with nobody listening the launcher's open fails at once (ENXIO): it never blocks
    os.mkfifo(tmp_path / "4243.fifo")
    with pytest.raises(OSError, match="No such device or address"):  # ENXIO
        os.open(tmp_path / "4243.fifo", os.O_WRONLY | os.O_NONBLOCK)


@pytest.mark.parametrize("native", PATHS)
def test_without_a_fifo_it_still_wakes(tmp_path: Path, native: Any) -> None:
    bell = Doorbell(tmp_path / "no-such-dir" / "1.fifo", native=native)
    try:
        assert bell.fifo is None
        bell.set()
        assert bell.wait(1.0)
    finally:
        bell.close()


def test_close_and_abandon_release_every_descriptor(tmp_path: Path) -> None:
    before = _open_fds()
    bell = Doorbell(fifo_path(tmp_path, 1))
    assert _open_fds() == before + 3  # the pipe's two ends and the FIFO
    bell.close()
    assert _open_fds() == before
    bell.set()  # after close: a no-op, never a write to a descriptor reused since
    assert not bell.wait(0.0)
    child = Doorbell(fifo_path(tmp_path, 2))
    child.abandon()  # a fork's child: descriptors closed, the parent's FIFO left in place
    assert _open_fds() == before
    assert (tmp_path / "2.fifo").exists()
