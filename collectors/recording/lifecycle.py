"""The recorder's exit, every wait bounded by one deadline, and fork handling (the child starts a
record stream of its own)."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tracekit.collectors.segments import SegmentLog

if TYPE_CHECKING:  # mypy checks collectors/ as `collectors` (mapped at install)
    from tracekit.collectors.recording.output import Output
else:
    from tracekit.collectors.recording.output import Output


class Lifecycle(Output):
    """Close at exit within `exit_deadline_s`; keep a fork from inheriting a flush in progress."""

    def close(self) -> None:
        """Final flush at process exit (atexit, multiprocessing finalizers, a signal), every
        wait bounded by one deadline, `exit_deadline_s` from now."""
        if os.getpid() != self.pid:
            return
        if self.finished:
            self._join_exit()  # a close under way (a signal during the atexit close): let it end
            return
        self.finished = True
        self._stop_timer()
        until = time.monotonic() + self.config.exit_deadline_s
        self._exit_until = until
        self._exit_interrupt = None
        dev = self._cuda_device()  # on the program's thread: the rank's device
        if self._failed:
            self._close_profile(until)
            return
        if self._bounded(lambda: self._close_records(until), until, "the final flush"):
            self._close_profile(until)
            self._bounded(lambda: self._close_rank(dev), until, "the rank and manifest update")
        interrupt, self._exit_interrupt = self._exit_interrupt, None
        if interrupt is not None:
            raise interrupt  # the program's signal handler's exception, once the records are out

    def _bounded(self, fn: Callable[[], None], until: float, step: str) -> bool:
        """Run `fn` in a daemon thread, wait for it until `until`; False if it did not end."""
        self._exit_step = step
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        try:
            t = threading.Thread(target=run, name="tracekit-exit", daemon=True)
            t.start()
        except RuntimeError:  # no new thread now (interpreter shutting down): on this one
            fn()
            return True
        self._exit_thread, self._exit_done = t, done
        return self._join_exit()

    def _join_exit(self) -> bool:
        """Wait for the exit thread until the deadline; True when it ended. Its own event, not
        `Thread.join`: a join that an exception interrupts marks the thread stopped while it
        runs on (CPython 3.11, bpo-45274's fix), so a second join would not wait."""
        t, done = self._exit_thread, self._exit_done
        if t is None or done is None or t is threading.current_thread():
            return True
        try:
            done.wait(max(0.0, self._exit_until - time.monotonic()))
        except BaseException as exc:
            # A signal handler of the program raised here (vLLM's worker installs a SIGTERM
            # handler that raises SystemExit): the records are written first, within the same
            # deadline; close raises it after its last step.
            if self._exit_interrupt is None:
                self._exit_interrupt = exc
            done.wait(max(0.0, self._exit_until - time.monotonic()))
        if done.is_set():
            return True
        if not self._failed:
            self._failed = True  # said once; the program exits
            try:
                sys.stderr.write(
                    f"tracekit: pid {self.pid} left {self._exit_step} unfinished at the exit "
                    f"deadline ({self.config.exit_deadline_s:g} s, TRACEKIT_EXIT_DEADLINE_S); "
                    f"{self._rows_written} records are on disk\n"
                )
            except Exception:
                pass
        return False

    def _close_records(self, until: float) -> None:
        try:
            if self.records == 0 and self._stream is None:
                self._write_process(end_ns=time.time_ns())
                return
            # the CUDA-event poll leaves a share of the deadline to writing the records
            reserve = min(1.0, 0.25 * self.config.exit_deadline_s)
            self.flush(final=True, until=until - reserve)
        except Exception as exc:  # at exit too: never a traceback in the server's output
            self.fail("exit", exc)

    def _close_profile(self, until: float) -> None:
        """Close an open profiler window on this thread (torch.profiler's state is the
        thread's), unless the device is stuck (its export would wait for the device)."""
        prof = self.profile
        if prof is None or not prof.active:
            return
        if self._gpu_pending or time.monotonic() >= until:
            prof.active = False
            sys.stderr.write(
                f"tracekit: pid {self.pid}: the device did not finish its work before the exit "
                "deadline; the profiler window is not written\n"
            )
            return
        try:
            prof.close()
        except Exception as exc:
            self.fail("profiler export", exc)

    def _close_rank(self, dev: int | None) -> None:
        """After the records are on disk: rank (torch.distributed), manifest, end time."""
        if self._failed:
            return
        try:
            with self._internal():
                self._update_rank(cuda_device=dev)
                if not self._manifest_written:
                    self._write_manifest(with_device=False)  # dev is in the rank info
                self._write_process(end_ns=time.time_ns())
        except Exception as exc:
            self.fail("exit", exc)

    def before_fork(self) -> None:
        """No flush in progress across a fork (its locks, pyarrow's, would stay held in the
        child): wait for one (bounded) and hold the lock over the fork."""
        self._fork_locked = self._lock.acquire(timeout=1.0)

    def after_fork_in_parent(self) -> None:
        if self._fork_locked:
            self._fork_locked = False
            self._lock.release()

    def after_fork(self) -> None:
        """In a forked child: start a fresh record stream of its own (the parent keeps its)."""
        self.pid = os.getpid()
        self._rows = bytearray()
        self._accept_detail = []
        self._gpu_pending = []
        self._gpu_done = {}
        self._bound_ids = set()
        if self._stream is not None:  # the parent's segment: no end marker from here
            with contextlib.suppress(OSError):
                self._stream.close(clean=False)
        self._stream = None
        self._segments = SegmentLog(self.config.retention)
        self._sites_written = 0
        self._lock = threading.RLock()
        self._fork_locked = False
        self._flush_owner = 0
        self._process_records = -1
        self._timer = None
        self._timer_alive = False
        if self._wake is not None:
            self._wake.abandon()  # the parent's doorbell: the child rings its own
            self._wake = None
        self._flush_asked = 0
        self._wake_sent = False
        self._rearm_flush_test()
        self._exit_thread, self._exit_done = None, None
        self._loc = threading.local()
        self._rows_written = 0
        self.flushes = 0
        self.finished = False
        self._manifest_written = False
        self._rank_info = {}
        self.process_info = dict(self.process_info, pid=self.pid, ppid=os.getppid(), forked=True)
        if self.profile is not None:
            self.profile.out_dir = self.dir
        self._write_process()
        self._start_timer()  # the parent's timer thread did not survive the fork
