"""The child's process group: which processes it had (/proc), signals forwarded to it, the wait
for it bounded by the grace period, then its stragglers stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.collectors.redact import redact_argv


class ProcessWatcher:
    """Samples /proc for the processes of one session (the child's)."""

    def __init__(self, sid: int, period: float = 0.2) -> None:
        self.sid = sid
        self.period = period
        self.seen: dict[int, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tracekit-procs", daemon=True)

    def start(self) -> None:
        if Path("/proc/self/stat").exists():
            self._thread.start()

    def scan(self) -> list[int]:
        """The pids of the session alive now (zombies left out); new ones are added to `seen`."""
        alive: list[int] = []
        try:
            entries = os.listdir("/proc")
        except OSError:
            return alive
        for entry in entries:
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                sid = int(fields[3])
            except (OSError, ValueError, IndexError):
                continue
            if sid != self.sid or fields[0] == "Z":
                continue
            alive.append(pid)
            if pid not in self.seen:
                self.seen[pid] = {"pid": pid, "ppid": int(fields[1]), "argv": _argv(pid)}
        return alive

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.period)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(0.0, timeout))


def _argv(pid: int) -> list[str]:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []
    out: list[str] = redact_argv([a.decode(errors="replace") for a in argv if a])
    return out


@dataclass
class Supervision:
    """What happened to the child while it ran."""

    returncode: int = 0
    forwarded: list[int] = field(default_factory=list)  # signals forwarded to the group
    # the flushes asked for before the first signal the launcher sent: forwarded to the group,
    # or to processes that outlived the command (flushask.py)
    flush_ask: dict[str, Any] | None = None
    killed: bool = False  # SIGKILLed after the grace period

    @property
    def exit_code(self) -> int:
        """The child's exit code; 128+N when a signal N ended it."""
        rc = self.returncode
        return rc if rc >= 0 else 128 - rc


@contextlib.contextmanager
def forwarding(
    child: subprocess.Popen[Any],
    grace_s: float,
    sup: Supervision,
    ask_flush: Callable[[], dict[str, Any]] | None = None,
) -> Iterator[list[float]]:
    """SIGINT / SIGTERM of this process forwarded to the child's group while inside; yields the
    deadline list (empty until the first signal: then now + `grace_s`). Before the first one,
    `ask_flush` (the processes write what they buffered: a server may SIGKILL its workers as
    soon as it is signalled). Handlers are installed on the main thread only and restored at
    the end."""
    deadline: list[float] = []

    def forward(signum: int, frame: Any) -> None:
        first = not sup.forwarded
        sup.forwarded.append(signum)
        if first and ask_flush is not None:
            try:
                sup.flush_ask = ask_flush()
            except Exception as exc:  # never what keeps the signal from the command
                sup.flush_ask = {"error": f"{type(exc).__name__}: {exc}"}
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)
        if not deadline:
            deadline.append(time.monotonic() + grace_s)

    old_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            old_handlers[sig] = signal.signal(sig, forward)
    try:
        yield deadline
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)


def wait_child(
    child: subprocess.Popen[Any],
    watcher: ProcessWatcher,
    grace_s: float,
    warn: Callable[[str], None],
    sup: Supervision,
    ask_flush: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """Wait for the child, forwarding signals (after `ask_flush`); SIGKILL its group `grace_s`
    after the first signal; then give its outliving children the grace period and stop them."""
    with forwarding(child, grace_s, sup, ask_flush) as deadline:
        while True:
            try:
                sup.returncode = child.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if deadline and time.monotonic() > deadline[0] and not sup.killed:
                warn(
                    f"the command did not stop within {grace_s:.0f} s of the signal; killing its process group"
                )
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)
                sup.killed = True
        # Children of the command that outlive it (ranks of a killed main process): give them
        # the grace period to flush and exit, then stop them.
        reap_group(child.pid, watcher, grace_s if not sup.killed else 1.0, warn, sup, ask_flush)


def reap_group(
    sid: int,
    watcher: ProcessWatcher,
    grace_s: float,
    warn: Callable[[str], None],
    sup: Supervision | None = None,
    ask_flush: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """Wait up to `grace_s` for the session's processes to end; then SIGTERM, then SIGKILL,
    after asking them to flush when no signal was sent yet (a process that ignores SIGTERM
    would lose what it buffered to the SIGKILL)."""
    end = time.monotonic() + grace_s
    alive = watcher.scan()
    if not alive:
        return
    while alive and time.monotonic() < end:
        time.sleep(0.1)
        alive = watcher.scan()
    if alive:
        warn(f"{len(alive)} process(es) of the command outlived it; sending SIGTERM then SIGKILL")
        if sup is not None and ask_flush is not None and sup.flush_ask is None:
            try:
                sup.flush_ask = ask_flush()
            except Exception as exc:  # never what keeps the signal from the processes
                sup.flush_ask = {"error": f"{type(exc).__name__}: {exc}"}
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sid, sig)
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            t = time.monotonic() + 5
            while alive and time.monotonic() < t:
                time.sleep(0.1)
                alive = watcher.scan()
            if not alive:
                break
