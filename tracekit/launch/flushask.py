"""A flush asked of every recording process before a signal is forwarded to the command.

A server may kill its workers the moment it is told to stop: vLLM's API server, on SIGINT,
sends SIGTERM to its engine core and SIGKILLs it and its workers at once (a shutdown timeout of
0 s), so a worker's own signal handler may never run and what it recorded since its last
periodic flush would be lost. So the launcher first rings each process's doorbell (a FIFO in
the run's control directory, collectors/recording/doorbell.py), waits until each has answered
(process.json `flush_requests` went up: its buffered rows are on disk) or `FLUSH_ASK_S` passed,
and only then forwards the signal. A process that is gone, or not recording, has no reader on
its FIFO and is not waited for.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from tracekit.collectors.recording.doorbell import ASK, FIFO_SUFFIX
from tracekit.store.raw.files import PROCESS_FILE

FLUSH_ASK_S = 2.0  # the longest a forwarded signal waits for the processes' flushes
POLL_S = 0.005


@dataclass
class FlushAsk:
    """What the launcher's flush request got (run.json `flush_before_signal`)."""

    asked: int = 0  # processes whose FIFO took the request
    answered: int = 0  # of those, the ones that wrote their buffered rows in time
    wait_ms: float = 0.0

    def to_json(self) -> dict[str, float]:
        return {"asked": self.asked, "answered": self.answered, "wait_ms": round(self.wait_ms, 1)}


def ask_to_flush(control_dir: Path, raw_dir: Path, wait_s: float = FLUSH_ASK_S) -> FlushAsk:
    """Ring every listening process's doorbell, then wait up to `wait_s` for their answers."""
    t0 = time.monotonic()
    out = FlushAsk()
    pending: dict[int, int] = {}  # pid -> its answers before this request
    with contextlib.suppress(OSError):
        for fifo in sorted(control_dir.glob(f"*{FIFO_SUFFIX}")):
            name = fifo.name[: -len(FIFO_SUFFIX)]
            if not name.isdigit():
                continue
            before = answers(raw_dir, int(name))
            if _ring(fifo):
                pending[int(name)] = before
    out.asked = len(pending)
    end = t0 + max(0.0, wait_s)
    while pending:
        for pid, before in list(pending.items()):
            if answers(raw_dir, pid) > before:
                del pending[pid]
                out.answered += 1
        if not pending or time.monotonic() >= end:
            break
        time.sleep(POLL_S)
    out.wait_ms = (time.monotonic() - t0) * 1e3
    return out


def _ring(fifo: Path) -> bool:
    """One request down `fifo`; False when nobody listens (ENXIO: the process is gone)."""
    try:
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.write(fd, ASK) == 1
    except OSError:
        return False
    finally:
        os.close(fd)


def answers(raw_dir: Path, pid: int) -> int:
    """The flush requests process `pid` answered so far (process.json; 0 when unreadable)."""
    try:
        data = json.loads((raw_dir / f"pid-{pid}" / PROCESS_FILE).read_text())
        return int(data.get("flush_requests", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        return 0
