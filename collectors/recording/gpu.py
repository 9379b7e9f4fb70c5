"""CUDA events of light mode: which top-level phase calls get them, and how many
(docs/DEFINITIONS.md, "CUDA events of light mode").

- sampling: with `gpu_sample` N > 1 only the calls of the cycles `sampled(cycle, N)` picks, one
  in N spread by the golden ratio (calls outside every cycle: numbered in order, the same rule)
  are GPU-timed; all keep CPU times;
- sharing: a top-level phase that starts in the same cycle, on the same thread, within
  SHARE_GAP_NS of the end event of the previous GPU-timed top-level phase (host time after that
  record, so nothing but the two calls' own bookkeeping ran between them) takes that event as
  its start instead of recording one. Its GPU span then starts where the previous one ended:
  whatever the device did in between (nothing, or the little the host enqueued in under
  SHARE_GAP_NS) moves from the gap, which light mode charges as the phase's overhead, into its
  span; its `wall_ns` (gap + span) is the same either way;
- a cycle-only target (no phase) records no events: merge keeps no GPU times for cycles.

A cycle of draft, verify and draft_extend thus records 4 events instead of 8. Events are pooled
and resolved with `Event.query()` at flushes (no synchronisation added; one `synchronize` at the
first CUDA phase calibrates the GPU clock against `time.time_ns`).
"""

from __future__ import annotations

import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # mypy checks collectors/ as `collectors` (mapped at install)
    from tracekit.collectors.recording.state import RecorderState, ThreadState
    from tracekit.collectors.recording.state import now_ns as _time_ns
else:
    from tracekit.collectors.recording.state import RecorderState, ThreadState
    from tracekit.collectors.recording.state import now_ns as _time_ns

# Two adjacent top-level phases share one CUDA event at their boundary when the second starts
# at most this long (host time) after the first's end event was recorded (see _gpu_begin); the
# default of RecorderConfig.share_gap_ns.
SHARE_GAP_NS = 20_000
# how long the flush thread sleeps to hand the GIL to a waiting program thread (`_yield_gil`),
# and after how long holding it in one flush it does
YIELD_S = 50e-6
YIELD_AFTER_NS = 1_000_000


# CUstreamCaptureMode: CU_STREAM_CAPTURE_MODE_RELAXED
_CAPTURE_RELAXED = 2
_exchange_mode: list[Any] = []  # [cuThreadExchangeStreamCaptureMode or None], found once


def _capture_mode_exchange() -> Any:
    """libcuda's `cuThreadExchangeStreamCaptureMode` (ctypes), or None without a driver."""
    if not _exchange_mode:
        fn = None
        try:
            import ctypes

            fn = ctypes.CDLL("libcuda.so.1").cuThreadExchangeStreamCaptureMode
            fn.argtypes = [ctypes.POINTER(ctypes.c_int)]
            fn.restype = ctypes.c_int
        except (OSError, AttributeError):
            fn = None
        _exchange_mode.append(fn)
    return _exchange_mode[0]


@contextlib.contextmanager
def relaxed_capture() -> Iterator[None]:
    """This thread in CUDA's relaxed stream-capture mode while the pending events are queried.

    A program that captures a CUDA graph (torch.cuda.graph, cudagraph trees; torch's default
    capture mode is global) forbids every other thread "potentially unsafe" calls while it
    captures, `cuEventQuery` / `cudaEventQuery` among them: one such call from the flush thread
    invalidates the program's capture (`cudaErrorStreamCaptureInvalidated`, seen on the H200
    with the demo's verify graph). In relaxed mode this thread's queries of its own events are
    allowed and leave the capture alone; the thread's previous mode is restored after."""
    fn = _capture_mode_exchange()
    if fn is None:
        yield
        return
    import ctypes

    mode = ctypes.c_int(_CAPTURE_RELAXED)
    swapped = fn(ctypes.byref(mode)) == 0
    try:
        yield
    finally:
        if swapped:
            fn(ctypes.byref(mode))


# `tracekit launch`'s default `--gpu-sample` (the ranks' `TRACEKIT_GPU_SAMPLE` when unset): CUDA
# events on one cycle in 8. On the H200 every cycle's events cost a compiled HF generate +2.7
# to +2.9% and one in 8 +1.2 to +1.9% (+1.5% over four processes), and the medians of the
# timed cycles stay within about 1% of all cycles' (docs/BENCHMARKS.md, "fifth and sixth
# sessions"; DEFINITIONS.md "Sampling"). A bare `Recorder` times every cycle
# (RecorderConfig.gpu_sample = 1).
DEFAULT_GPU_SAMPLE = 8

# 2**32 / the golden ratio: cycle c is sampled when the fraction of c / phi falls in the
# first 1/N of [0, 1) (Fibonacci hashing), see `sampled`
_PHI32 = 2654435769


def sampled(key: int, every: int) -> bool:
    """Whether cycle `key` gets CUDA events under `--gpu-sample every`: one cycle in `every`,
    those whose fraction {key / phi} is below 1 / every. The picked cycles are 1 in `every`
    over any stretch (their gaps take two or three lengths around `every`), and, the golden
    ratio being irrational, no period of the program lines up with them, where "every
    `every`-th cycle" meets any step pattern whose period divides it (a request length, a
    schedule)."""
    return every <= 1 or ((key * _PHI32) & 0xFFFFFFFF) * every >> 32 == 0


class GpuEvents(RecorderState):
    """Start and end events of the GPU-timed calls, and their resolution into GPU times.

    The native hot path does what `_gpu_begin` / `_gpu_end` / `_gpu_mark` do after the
    calibration in C (`_native_gpu.c`), on the same attributes in the same order; it calls
    `_gpu_begin` for the calibration and for sampled calls outside every cycle."""

    def asks_capture(self, phase: bool, opens_cycle: bool) -> bool:
        """Whether a top-level call asks torch if its stream captures a CUDA graph: always
        while a torch capture is open in the process (or before captures are counted), else
        only a phase call that may take a CUDA event (`_gpu_begin`: a sampled cycle, the
        calibration, calls outside every cycle). `opens_cycle`: the call opens a cycle (its
        cycle is the next one)."""
        if self._captures != 0:
            return True
        if not phase:
            return False
        every = self._gpu_every
        if every <= 1 or self._gpu_ref is None:
            return True
        cycle = self.cycle + 1 if opens_cycle else self.cycle
        return cycle < 0 or sampled(cycle, every)

    def _gpu_begin(self, ts: ThreadState) -> Any:
        """The start event of a top-level phase call, or None when the call is not GPU-timed."""
        every = self._gpu_every
        if every > 1:
            key = self.cycle
            if key < 0:
                key = self._loose
                self._loose += 1
            if not sampled(key, every):
                if ts.bound is not None:
                    self._drop_bound(ts)
                return None
        bound = ts.bound
        if bound is not None:
            ev, cycle, after_ns = bound
            if cycle == self.cycle and _time_ns() - after_ns <= self._share_gap_ns:
                return ev  # stays in _bound_ids until this call's pending entry exists
            self._drop_bound(ts)
        return self._gpu_mark()

    def _gpu_end(self, ts: ThreadState, seq: int, ev: Any, cycle: int) -> None:
        """Record the end event of a GPU-timed call; it becomes the thread's boundary."""
        ev1 = self._gpu_mark()
        self._gpu_pending.append((seq, ev, ev1))
        bound_ids = self._bound_ids
        bound_ids.add(id(ev1))
        old = ts.bound
        ts.bound = (ev1, cycle, _time_ns())
        if old is not None:  # after the append: a resolving thread always sees one of the two
            bound_ids.discard(id(old[0]))

    def _drop_bound(self, ts: ThreadState) -> None:
        bound = ts.bound
        ts.bound = None
        if bound is not None:
            self._bound_ids.discard(id(bound[0]))

    def _gpu_mark(self) -> Any:
        cuda = self._cuda
        if self._gpu_ref is None:
            # One-time calibration: the reference event's GPU time is taken as the CPU time at
            # which it completed on an idle device.
            cuda.synchronize()
            self._new_event = make = self._event_maker()
            ref = make()
            ref.record()
            ref.synchronize()
            self._gpu_ref = (ref, time.time_ns())
            self._cuda_dev = self._cuda_device()  # the rank's device, read on its own thread
        pool = self._event_pool
        ev = pool.pop() if pool else self._new_event()  # type: ignore[misc]
        ev.record()
        self.events_recorded += 1
        return ev

    def _event_maker(self) -> Callable[[], Any]:
        """What makes this process's timing events: with `driver_events` (the default;
        `TRACEKIT_GPU_EVENTS=torch` turns it off) the native extension's `CudaEvent` (the driver API, without
        the Python layers of `torch.cuda.Event.record`) where it loads and records on this
        thread, else torch's. Chosen once (the calibration), so every event of a process is of
        one kind."""
        cuda = self._cuda
        native = self._native
        why = "off" if native is None else ""
        if native is not None and self.config.driver_events:
            try:
                tc = sys.modules["torch"]._C
                make = functools.partial(
                    native.CudaEvent, tc._cuda_getCurrentRawStream, tc._cuda_getDevice
                )
                make().record()  # on this thread's context and stream, or it raises
                self.process_info["gpu_events"] = "driver"
                return make
            except Exception as exc:
                why = f"{type(exc).__name__}: {exc}"
        elif native is not None:
            why = "driver_events off"
        self.process_info["gpu_events"] = f"torch ({why})"
        return functools.partial(cuda.Event, enable_timing=True)

    def _yield_gil(self) -> None:
        """On the flush thread, between steps of a flush that has held the GIL for more than
        `YIELD_AFTER_NS`: give it to a program thread that waits for it (a sleep, not
        `sleep(0)`: the interpreter hands the GIL over to a waiting thread only when its holder
        blocks), so the program waits for about a millisecond of a flush, not for the whole of a
        long one. Not sooner: taking the GIL back while the program runs Python makes the
        program's thread switch twice (collectors/recording/fileops.py), so a short flush holds
        it throughout."""
        if self._yielding and time.perf_counter_ns() - self._held_since > YIELD_AFTER_NS:
            time.sleep(YIELD_S)
            self._held_since = time.perf_counter_ns()

    def _resolve_gpu(self, *, wait: bool, until: float | None = None) -> None:
        """`_resolve_events` in the relaxed stream-capture mode (`relaxed_capture`)."""
        if not self._gpu_pending or self._gpu_ref is None:
            return
        with relaxed_capture():
            self._resolve_events(wait=wait, until=until)

    def _resolve_events(self, *, wait: bool, until: float | None = None) -> None:
        """Resolve the pending events that completed; with `wait`, poll for the others until
        `until` (monotonic; default: the exit deadline from now). The pending list is changed in
        place: other threads append to it meanwhile. An event goes back to the pool only when
        no pending entry and no thread's boundary slot still holds it (shared events). The last
        end event resolved becomes the reference of the next resolution (`_rebase`)."""
        pending = self._gpu_pending
        if not pending or self._gpu_ref is None:
            return
        deadline = time.monotonic() + self.config.exit_deadline_s if until is None else until
        n = len(pending)
        entries = pending[:n]
        times = self._event_times(entries)
        missing = [k for k, t in enumerate(times) if t is None]
        while wait and missing and time.monotonic() < deadline:
            time.sleep(0.0005)  # polled, not synchronize(): bounded, never hangs the exit
            again = self._event_times([entries[k] for k in missing])
            for k, t in zip(missing, again):
                times[k] = t
            missing = [k for k, t in zip(missing, again) if t is None]
        keep: list[tuple[int, Any, Any]] = []
        freed: dict[int, Any] = {}
        done = self._gpu_done
        last: tuple[Any, int] | None = None
        for entry, t in zip(entries, times):
            if t is None:
                keep.append(entry)
                continue
            seq, ev0, ev1 = entry
            done[seq] = t
            freed[id(ev0)] = ev0
            freed[id(ev1)] = ev1
            last = (ev1, t[1])
        del pending[:n]
        pending[0:0] = keep
        if last is not None:
            freed.update(self._rebase(last))
        if freed:
            # held: boundary slots first, then the pending entries (see _gpu_end's order),
            # and the reference
            held = set(self._bound_ids)
            held.add(id(self._gpu_ref[0]))
            for _seq, ev0, ev1 in list(pending):
                held.add(id(ev0))
                held.add(id(ev1))
            self._event_pool.extend(ev for i, ev in freed.items() if i not in held)

    def _event_times(self, entries: list[tuple[int, Any, Any]]) -> list[tuple[int, int] | None]:
        """(start, end) in ns of each (seq, start event, end event) whose end completed, else
        None. Driver-API events: one native call that makes the driver calls without the GIL
        (`resolve_events`); torch's: the same rule in Python, yielding the GIL every 64."""
        assert self._gpu_ref is not None
        ref, ref_ns = self._gpu_ref
        native = self._native
        if native is not None and isinstance(ref, native.CudaEvent):
            out: list[tuple[int, int] | None] = native.resolve_events(
                ref, ref_ns, entries, len(entries)
            )
            return out
        times: dict[int, int] = {}
        result: list[tuple[int, int] | None] = []
        for k, (_seq, ev0, ev1) in enumerate(entries):
            if k % 64 == 63:
                self._yield_gil()
            if not ev1.query():
                result.append(None)
                continue
            t0 = times.get(id(ev0))
            if t0 is None:
                t0 = times[id(ev0)] = ref_ns + round(ref.elapsed_time(ev0) * 1e6)
            t1 = times.get(id(ev1))
            if t1 is None:  # from its own start: a span keeps its precision (resolve_events)
                t1 = times[id(ev1)] = t0 + round(ev0.elapsed_time(ev1) * 1e6)
            result.append((t0, t1))
        return result

    def _rebase(self, last: tuple[Any, int]) -> dict[int, Any]:
        """Make `last` (a resolved end event and its time) the reference: elapsed times from
        it stay small, so their float32 milliseconds keep sub-microsecond steps (from the
        calibration event they round to 60 us after an hour). Returns the old reference, for
        the pool (kept out of it while a pending entry or a boundary slot holds it)."""
        old = self._gpu_ref
        self._gpu_ref = last
        if old is None or old[0] is last[0]:
            return {}
        return {id(old[0]): old[0]}

    def _cuda_device(self) -> int | None:
        """This thread's CUDA device (the rank's, on the program's threads), if CUDA is on."""
        cuda = self._cuda
        try:
            if cuda is not None and cuda._initialized:
                return int(cuda.current_device())
        except Exception:
            pass
        return None
