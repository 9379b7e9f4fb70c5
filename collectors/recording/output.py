"""Buffered rows to the record stream: flushes (from the program's threads, the timer thread,
a signal, the exit), segments (rotation and retention, collectors/segments.py), process.json
and manifest.json, and the recorder disabling itself on a failure. Writes go through the raw
format's writer (tracekit/store/raw/)."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from tracekit.collectors.recording import fileops
from tracekit.collectors.recording.doorbell import Doorbell, fifo_path
from tracekit.store.raw.accepts import accepts_lines, accepts_name
from tracekit.store.raw.files import (
    MANIFEST_FILE,
    PROCESS_FILE,
    SITES_FILE,
    json_bytes,
    write_json,
)
from tracekit.store.raw.ipc import StreamWriter
from tracekit.store.raw.records import encode_rows
from tracekit.store.raw.schema import ROW as _ROW
from tracekit.store.raw.schema import raw_schema, row_dtype

if TYPE_CHECKING:  # mypy checks collectors/ as `collectors` (mapped at install)
    from tracekit.collectors.recording.gpu import GpuEvents
else:
    from tracekit.collectors.recording.gpu import GpuEvents


class Output(GpuEvents):
    """The record stream of this process, and the files beside it."""

    def fail(self, where: str, exc: BaseException) -> None:
        """Disable recording in this process and say so once."""
        self.active = False
        if not self._failed:
            self._failed = True
            if self._wake is not None:
                self._wake.set()  # the flush thread ends (and its FIFO with it)
            try:
                sys.stderr.write(
                    f"tracekit: recorder failed in pid {self.pid} during {where} "
                    f"({type(exc).__name__}: {exc}); recording is disabled in this process, "
                    "the program goes on\n"
                )
                self._write_process(failed=f"{where}: {type(exc).__name__}: {exc}")
            except Exception:
                pass

    def _open(self) -> None:
        import pyarrow  # noqa: F401  (fail early, inside the guard)

        self.dir.mkdir(parents=True, exist_ok=True)
        self._open_segment()
        self._start_timer()

    def _open_segment(self) -> None:
        seg = self._segments.open(self.dir, time.time_ns())
        self._stream = stream = StreamWriter(seg.path, raw_schema())
        seg.add(stream.head_bytes, 0, None, time.time_ns())

    def _segment_written(self, nbytes: int, rows: Any) -> None:
        seg = self._segments.current
        if seg is not None:
            span = (
                int(rows["start_ns"].min()),
                int(rows["end_ns"].max()),
                int(rows["cycle"].min()),
                int(rows["cycle"].max()),
            )
            seg.add(nbytes, len(rows), span, time.time_ns())

    def _rotate(self, *, writing: bool) -> None:
        """At a flush (under the lock), before its batch: close a full or old segment and open
        the next (so no segment is left empty); delete what retention no longer keeps (the
        oldest first)."""
        log = self._segments
        now = time.time_ns()
        stream = self._stream
        if writing and stream is not None and not stream.closed and log.should_rotate(now):
            self._stream = None
            stream.close()
            log.close_current()
            self._open_segment()
        if log.enforce(now):
            self._process_records = -1  # process.json says what was dropped

    def _start_timer(self) -> None:
        """The daemon thread that flushes once `flush_seconds` passed without a flush, and when
        the program's threads hand it a full batch (`_flush_due`)."""
        if not self.config.flush_thread or self.finished:
            return
        if self._timer is not None and self._timer.is_alive():
            return
        self._timer_stop = stop = threading.Event()
        control = self.config.control_dir
        self._wake = wake = Doorbell(fifo_path(control, self.pid) if control else None)
        self._wake_sent = False
        t = threading.Thread(
            target=self._timer_loop, args=(stop, wake), name="tracekit-flush", daemon=True
        )
        t.start()
        self._timer = t
        self._timer_alive = True

    def _stop_timer(self) -> None:
        self._timer_alive = False
        self._timer_stop.set()
        if self._wake is not None:
            self._wake.set()

    def _flush_due(self) -> None:
        """The hot path's flush test held at an outermost exit (a full batch, or the flush
        interval passed). With the flush thread running it is woken and the program's thread
        goes on: the event resolution, the write and process.json happen on that thread, off
        the program's path. Without it, or with 8 batches waiting (the thread fell behind), the
        flush happens here, as before; while another thread's flush holds the lock, the test
        holds again a batch later, not at the next exit."""
        batch = self._flush_n * _ROW.size
        wake = self._wake
        if self._timer_alive and wake is not None and len(self._rows) < 8 * batch:
            if not self._wake_sent:
                self._wake_sent = True
                # until the flush thread has run (it may wait a GIL switch interval, 5 ms, for
                # its turn), the hot path stops asking: its test holds again at 8 batches
                self._rearm_flush_test()
                self._last_flush = time.time_ns()
                wake.set()
            return
        if not self.flush():
            # another thread's flush is under way (the flush thread's, which waits up to a GIL
            # switch interval at each of its steps while this thread runs): without this, every
            # outermost exit until it ends would call here and fail to take the lock
            self._flush_bytes = len(self._rows) + batch

    def _rearm_flush_test(self) -> None:
        """The hot path's batch test (`_flush_bytes`): one batch, or 8 while a wake-up waits
        for the flush thread."""
        self._flush_bytes = self._flush_n * _ROW.size * (8 if self._wake_sent else 1)

    def _timer_loop(self, stop: threading.Event, wake: Doorbell) -> None:
        """Flush each period (and when woken); until torch.distributed gives a rank, read it
        each period too: a process that served for less than the period flushes only at its
        exit, when its process group may be gone (vLLM's workers destroy theirs first), and
        merge leaves out records whose rank is unknown."""
        period = max(0.01, self.config.flush_seconds)
        period_ns = int(period * 1e9)
        pid = self.pid
        try:
            self._warm_manifest()
            while True:
                due = (self._last_flush + period_ns - time.time_ns()) / 1e9
                woken = wake.wait(max(due, period / 20))
                self._wake_sent = False
                self._rearm_flush_test()  # the hot path's test as before
                if stop.is_set() or self._failed or self.finished or os.getpid() != pid:
                    return
                if "dist_rank" not in self._rank_info and "torch.distributed" in sys.modules:
                    self._after_flush(timer=True)  # the rank while the group lives
                asked = wake.take_asked()
                if asked:
                    self._answer(asked, until=time.monotonic() + period)
                    continue
                if not self.active:  # paused (`set_recording(False)`): rows wait for the next
                    self._last_flush = time.time_ns()  # flush, the thread a whole period
                    continue
                if not woken and time.time_ns() - self._last_flush < period_ns:
                    continue  # a flush happened meanwhile
                if self._rows or self._gpu_pending or self._process_records != self._rows_written:
                    self.flush(timer=True, until=time.monotonic() + period)
                else:
                    self._last_flush = time.time_ns()  # nothing to write: sleep a whole period
        finally:
            if os.getpid() == pid:
                if self._timer_stop is stop:
                    self._timer_alive = False
                wake.close()  # the launcher no longer asks this process (nor waits for it)

    def _answer(self, asked: int, *, until: float) -> None:
        """`tracekit launch` asked for a flush (a signal to the command is on its way): write
        the buffered rows whose GPU times are known, and process.json, whose `flush_requests`
        tells the launcher it was answered."""
        self._flush_asked += asked
        self._process_records = -1  # process.json written even with no new row
        self.flush(timer=True, until=until)

    def _warm_manifest(self) -> None:
        """The manifest's package look-up (distributions, git: 0.1 to 0.3 s) done once as the
        flush thread starts, while the program starts up, not at a flush in its steady state."""
        try:
            with self._internal():
                from tracekit.collectors import manifest

                manifest.package_info(self.config.package)
        except Exception:
            pass  # the manifest's own look-up at the first flush says what failed

    def _take_rows(self, *, final: bool) -> Any:
        """Remove from the buffer the rows whose GPU times are known (all when `final`); return
        them as a numpy array. Rows other threads append meanwhile stay in the buffer."""
        import numpy as np

        buf = self._rows
        size = len(buf) - len(buf) % _ROW.size
        rows = np.frombuffer(bytes(buf[:size]), dtype=row_dtype())
        if self._gpu_pending and not final:
            pending = np.fromiter((seq for seq, _, _ in self._gpu_pending), dtype=np.int64)
            wait = np.isin(rows["seq"], pending)
            buf[:size] = rows[wait].tobytes()
            return rows[~wait]
        del buf[:size]
        return rows

    def flush(
        self, *, final: bool = False, timer: bool = False, until: float | None = None
    ) -> bool:
        """Write buffered records whose GPU times are known (all of them when `final`).

        Without `until` (the program's threads) it never waits: when another thread is
        flushing it returns False at once. With `until` (monotonic) it waits for the lock, and
        `final` polls the CUDA events, until then. `timer`: called from the timer thread, which
        leaves the rank and manifest update (torch.distributed and CUDA state are the program's
        threads') to the others. Never re-entered from a signal handler on its own thread."""
        lock = self._lock
        if until is None:
            got = lock.acquire(blocking=False)
        else:
            got = lock.acquire(timeout=max(0.0, until - time.monotonic()))
        if not got:
            return False
        me = threading.get_ident()
        if self._flush_owner == me:
            lock.release()
            return False
        self._flush_owner = me
        self._yielding = timer
        self._held_since = time.perf_counter_ns()
        cpu0, wall0 = time.thread_time_ns(), time.perf_counter_ns()
        try:
            with self._internal():
                self._flush_locked(final=final, until=until)
        finally:
            self._yielding = False
            self._flush_owner = 0
            self._count_flush(time.thread_time_ns() - cpu0, time.perf_counter_ns() - wall0)
            self._rearm_flush_test()  # as before any `_flush_due` raised it past this flush
            lock.release()
        if not final and self.active:
            self._after_flush(timer=timer)
        sig = self.deferred_signal
        deliver = self.on_deferred_signal
        if sig and deliver is not None and threading.current_thread() is threading.main_thread():
            self.deferred_signal = 0
            deliver(sig)
        return True

    def _count_flush(self, cpu_ns: int, wall_ns: int) -> None:
        """What the flushes cost so far (process.json `flush_cost`): CPU time on the thread
        that flushed, wall time, the longest flush; the program's and the flush thread's."""
        cost = self._flush_cost
        cost[0] += cpu_ns
        cost[1] += wall_ns
        cost[2] = max(cost[2], wall_ns)
        if not self._yielding and threading.current_thread() is not self._timer:
            cost[3] += 1

    def _after_flush(self, *, timer: bool) -> None:
        """Rank (torch.distributed) and manifest, outside the lock: a backend call that blocks
        (a process group in teardown) must never hold up a flush or the exit."""
        try:
            with self._internal():
                self._update_rank(cuda_device=None if timer else self._cuda_device())
                if not self._manifest_written:
                    self._write_manifest(with_device=not timer)
        except Exception as exc:
            self.fail("flush", exc)

    def _flush_locked(self, *, final: bool, until: float | None) -> None:
        """The flush's files are written together at its end, in one system-call batch
        (collectors/recording/fileops.py): sites.json, the record batch, the acceptance
        readings after the rows they belong to, process.json (after the stream's end at exit)."""
        try:
            self._last_flush = time.time_ns()
            self._resolve_gpu(wait=final, until=until)
            self._yield_gil()
            ready = self._take_rows(final=final)
            if self._stream is None:
                self._open()
            ops: list[fileops.Op] = []
            if len(self._sites) > self._sites_written:
                sites = json_bytes({"sites": self._sites})
                ops.append(fileops.replace(self.dir / SITES_FILE, sites))
                self._sites_written = len(self._sites)
            self._rotate(writing=len(ready) > 0)
            stream = self._stream
            assert stream is not None
            if len(ready):
                data = encode_rows(ready, self._gpu_done)
                self._yield_gil()
                ops.append(fileops.to_fd(stream.writable_fd(), data))
                self.flushes += 1
                self._rows_written += len(ready)
                self._segment_written(len(data), ready)
            if self._accept_detail:  # after the rows they belong to, in their segment's file
                detail, self._accept_detail = self._accept_detail, []
                seg = self._segments.current
                name = accepts_name(seg.index if seg is not None else 0)
                ops.append(fileops.append(self.dir / name, accepts_lines(detail)))
            if final:
                fileops.run(ops)
                ops = []
                stream.close()
            if final or self._process_records != self._rows_written:
                self._yield_gil()
                ops.append(self._process_op())
            fileops.run(ops)
        except Exception as exc:
            self.fail("flush", exc)

    def _update_rank(self, *, cuda_device: int | None = None) -> None:
        info: dict[str, Any] = {}
        for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
            val = os.environ.get(key)
            if val is not None and val.strip().lstrip("-").isdigit():
                info[f"env_{key.lower()}"] = int(val)
        dist = sys.modules.get("torch.distributed")
        try:
            if dist is not None and dist.is_available() and dist.is_initialized():
                info["dist_rank"] = dist.get_rank()
                info["dist_world_size"] = dist.get_world_size()
                info["dist_backend"] = str(dist.get_backend())
        except Exception:
            pass
        # Sticky: a process group destroyed before exit does not make the rank unknown.
        info = {**self._rank_info, **info}
        if cuda_device is None:
            cuda_device = self._cuda_dev
        if cuda_device is not None:
            info["cuda_device"] = cuda_device
        if info != self._rank_info:
            self._rank_info = info
            self._manifest_written = False
            self._write_process()

    def _write_manifest(self, *, with_device: bool = True) -> None:
        from tracekit.collectors import manifest

        data = manifest.collect(
            package=self.config.package, rank_info=self._rank_info, with_device=with_device
        )
        write_json(self.dir / MANIFEST_FILE, data)
        self._manifest_written = True

    def _write_process(self, **extra: Any) -> None:
        with self._internal():
            fileops.run([self._process_op(**extra)])

    def _process_op(self, **extra: Any) -> fileops.Op:
        """process.json's write (`fileops.replace`), its content as of now."""
        with self._internal():
            data = dict(self.process_info)
            written = self._rows_written
            data.update(
                pid=self.pid,
                rank_info=self._rank_info,
                records=written,  # on disk; `buffered`: recorded, not written yet
                buffered=self.records - written,
                flushes=self.flushes,
                flush_requests=self._flush_asked,
                finished=self.finished,
                patched=self.patched,
                unresolved=self.unresolved,
                accept_failed=self.accept_failed,
                active=self.active,
                segments=self._segments.to_json(),
                dropped=self._segments.dropped.to_json(),
                flush_cost={
                    "cpu_ms": round(self._flush_cost[0] / 1e6, 3),
                    "wall_ms": round(self._flush_cost[1] / 1e6, 3),
                    "max_ms": round(self._flush_cost[2] / 1e6, 3),
                    "on_program_threads": self._flush_cost[3],
                },
            )
            data.update(extra)
            self._process_records = written
            return fileops.replace(self.dir / PROCESS_FILE, json_bytes(data))
