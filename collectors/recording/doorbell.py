"""The flush thread's doorbell: what wakes it before its flush interval is up.

Two callers ring it. The program's threads, at an outermost exit whose flush test held
(`Output._flush_due`: a full batch, or the interval passed), through a pipe of this process.
And `tracekit launch`, before it forwards a signal to the command (tracekit/launch/flushask.py),
through a FIFO `<pid>.fifo` in the run's control directory (`TRACEKIT_CONTROL_DIR`): a server
that SIGKILLs its workers the moment it is told to stop (vLLM's API server does, with a
timeout of 0 s) would otherwise lose what they recorded since their last flush.

The thread blocks in `poll` on both (no polling, the GIL released; on the native path the poll
and the drain are one call, `_native.poll_drain`). The FIFO is opened for
reading and writing by its own process: it always has a writer, so `poll` never reports an
end of file after the launcher's write end closes, and the launcher's non-blocking open fails
(ENXIO) only once the process is gone. Bytes: `w` a wake from this process, `f` a flush the
launcher asked for (counted: process.json `flush_requests` acknowledges them).
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from pathlib import Path
from typing import Any

from tracekit.collectors.recording.native import NATIVE

WAKE = b"w"
ASK = b"f"
FIFO_SUFFIX = ".fifo"


def fifo_path(control_dir: Path, pid: int) -> Path:
    """Where process `pid` listens for the launcher's flush requests."""
    return control_dir / f"{pid}{FIFO_SUFFIX}"


class Doorbell:
    """`set` from any thread; `wait` (which drains what was rung) on the flush thread only."""

    def __init__(self, fifo: Path | None = None, *, native: Any = NATIVE) -> None:
        self._native = native  # the extension's `poll_drain`, or None: `select.poll` here
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self._fifo = -1
        self.fifo: Path | None = None
        if fifo is not None:
            self._open_fifo(fifo)
        self.asked = 0  # flush requests heard and not yet taken (`take_asked`)
        self.closed = False
        self._poller: select.poll | None = None
        self._lock = threading.Lock()  # `set` never writes to a descriptor `close` released

    def _open_fifo(self, path: Path) -> None:
        """The launcher's FIFO; without it (no FIFOs on that file system, a stale name) the
        doorbell still wakes the thread for this process's own hand-offs."""
        try:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()  # a pid reused from an earlier process of the run
            os.mkfifo(path, 0o600)
            self._fifo = os.open(path, os.O_RDWR | os.O_NONBLOCK)
            self.fifo = path
        except OSError:
            self._fifo = -1

    def set(self) -> None:
        """Wake the thread (a full pipe: it is woken already)."""
        with self._lock:
            if not self.closed:
                with contextlib.suppress(OSError):
                    os.write(self._write, WAKE)

    def wait(self, timeout: float) -> bool:
        """Block up to `timeout` s; True when rung (by either side). Drains what was rung: on
        the native path the wait and the drain are one call, the GIL released once (taking it
        back costs the program's thread two switches: collectors/recording/fileops.py)."""
        if self.closed:
            return False
        native = self._native
        if native is not None:
            woken, asked = native.poll_drain(
                self._read, self._fifo, int(max(0.0, timeout) * 1000.0), ASK
            )
            self.asked += asked
            return bool(woken)
        poller = self._poller
        if poller is None:
            self._poller = poller = select.poll()  # not select(): descriptors past 1024
            for fd in (self._read, self._fifo):
                if fd >= 0:
                    poller.register(fd, select.POLLIN)
        try:
            ready = poller.poll(max(0.0, timeout) * 1000.0)
        except (OSError, ValueError):  # closed under us (a fork's child, the exit)
            return False
        woken = False
        for fd, events in ready:
            if events & select.POLLIN:
                self.asked += _drain(fd).count(ASK)
                woken = True
        return woken

    def take_asked(self) -> int:
        n, self.asked = self.asked, 0
        return n

    def close(self) -> None:
        """Close the descriptors and remove the FIFO."""
        with self._lock:
            self._release()
        if self.fifo is not None:
            with contextlib.suppress(OSError):
                self.fifo.unlink()

    def abandon(self) -> None:
        """In a fork's child: close the inherited descriptors (the parent keeps its own and
        its FIFO) without the lock, which a parent's thread may have held at the fork."""
        self._lock = threading.Lock()
        self._release()

    def _release(self) -> None:
        if self.closed:
            return
        self.closed = True
        for fd in (self._read, self._write, self._fifo):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


def _drain(fd: int) -> bytes:
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # drained (EAGAIN), or closed under us
            return out
        if not chunk:
            return out
        out += chunk
