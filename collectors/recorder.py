"""Light-mode recorder: one record a wrapped call, streamed to a per-process Arrow IPC file.

Per phase call: an NVTX range (domain `tracekit`, one category a phase; skipped when no NVTX
tool is attached, where `nvtx` only hands out a do-nothing domain), CPU start/end from
`time.time_ns()`, and on CUDA pooled CUDA events on the current stream for outermost phases,
resolved later with `Event.query()` (no synchronisation added; one `synchronize` at the first
CUDA phase calibrates the GPU clock against `time.time_ns`, and one at exit resolves what is
left). Events per cycle are few (`_gpu_begin`): one event per phase boundary, shared by two
adjacent top-level phases of one cycle on one thread when the second starts within
`SHARE_GAP_NS` (20 µs) of host time after the first's end event (its GPU span then starts where
the previous one ended; the phase's wall time is the same, the gap's device time moves from its
overhead into its span); none for a cycle-only target (merge keeps no GPU times for cycles); and
with `gpu_sample` N > 1 (`tracekit launch --gpu-sample N`) only every N-th cycle gets events at
all, the others keep CPU times (docs/DEFINITIONS.md, "CUDA events of light mode"). Records are buffered and appended to `raw/pid-<pid>/records.arrow` (Arrow IPC stream
format, one `os.write` a flush) every `flush_records` records or `flush_seconds` seconds at
outermost exits, by a daemon timer thread (`tracekit-flush`) once `flush_seconds` passed without
a flush (a server idle between requests, or stopped between cycles), on SIGTERM / SIGINT
(runtime), and at process exit. A process killed with SIGKILL loses at most the last flush
interval; the stream stays readable up to the last complete batch. A flush from the program's
own threads never waits for the lock (another thread flushing: it returns at once); the timer
thread and the exit wait for it within bounds. `process.json` is rewritten at each flush that
wrote records, so its record count is the count on disk.

Exit (`close`): every wait is bounded by one deadline, `exit_deadline_s` from its start
(`TRACEKIT_EXIT_DEADLINE_S`, default 3 s): the final flush (with its polled CUDA-event wait)
runs in a daemon thread joined until the deadline, the torch.profiler window is closed only when
the device finished its work, and the torch.distributed / manifest update runs after the records
are on disk, in a daemon thread too. Whatever the backend's teardown does (a destroyed process
group, a watchdog stuck on a peer, a device that never completes), the process leaves within the
deadline with the records written before it.

The hot path (budget 2 µs of CPU a call; docs/BENCHMARKS.md) is `sync_call`, the body of a
phase site's sync wrapper with `enter` and `exit` inlined: it keeps one packed row of bytes a
call (nothing the garbage collector walks), looks per-thread state up once (`threading.local`)
and keeps per-site state in closure cells. `enter` / `exit` (cycle targets, async wrappers, full
mode, an NVTX tool) add a frame tuple, freed at exit, and one dict look-up for the site.

Nothing heavy is imported until the first record: pyarrow, nvtx and torch are looked up then.
Every public method is guarded: if the recorder itself fails, it disables itself, prints one line
to stderr, and the program goes on unwrapped.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.collectors.phasemap import read_attr_path
from tracekit.collectors.segments import RetentionPolicy, SegmentLog
from tracekit.store.raw.files import MANIFEST_FILE, PROCESS_FILE, SITES_FILE, write_json
from tracekit.store.raw.ipc import StreamWriter
from tracekit.store.raw.records import encode_rows
from tracekit.store.raw.schema import ROW, raw_schema, row_dtype

if TYPE_CHECKING:
    from tracekit.collectors.phasemap import Site
    from tracekit.collectors.profiler import ProfileWindow

_ROW = ROW
_pack = ROW.pack
_NAN = float("nan")
# One deadline for everything the exit waits on (the last phases' CUDA events, the final flush,
# the backend's rank query): a device stuck on a peer that is gone (a collective whose other
# ranks exited) must not keep the server's process from exiting. Phases left unresolved keep
# their CPU times.
EXIT_DEADLINE_S = 3.0
# Two adjacent top-level phases share one CUDA event at their boundary when the second starts
# at most this long (host time) after the first's end event was recorded (see _gpu_begin).
SHARE_GAP_NS = 20_000


@dataclass
class RecorderConfig:
    raw_dir: Path  # RUN_DIR/raw
    flush_records: int = 1000
    flush_seconds: float = 1.0
    adapter: str = ""
    mode: str = "light"
    package: str | None = None
    via: str = "sitecustomize"
    exit_deadline_s: float = EXIT_DEADLINE_S
    flush_thread: bool = False  # a daemon thread flushes every flush_seconds (runtime sets it)
    # rotation by size / age and retention of the record segments (collectors/segments.py)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    gpu_sample: int = 1  # CUDA events on every N-th cycle (`--gpu-sample N`); CPU clocks on all


def _as_accept_len(value: object) -> float | None:
    """A number from a return-value field; never synchronises a device."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple)):
        nums = [float(v) for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        return sum(nums) / len(nums) if nums else None
    if hasattr(value, "item") and hasattr(value, "numel"):
        tensor: Any = value
        if getattr(tensor, "is_cuda", False):
            return None  # reading it would synchronise the stream
        if tensor.numel() == 1:
            return float(tensor.item())
        if tensor.numel() > 1:
            return float(tensor.float().mean().item())
    return None


ENV_TEST_CLOCK_OFFSET = "TRACEKIT_TEST_CLOCK_OFFSET_NS"


def _test_clock() -> Callable[[], int]:
    """time.time_ns, or, for tests only, time.time_ns + TRACEKIT_TEST_CLOCK_OFFSET_NS: the CPU
    times this process records read as on a host whose clock is that far ahead (the two-node
    test in tests/integration/test_multinode.py recovers it; docs/multinode.md)."""
    text = os.environ.get(ENV_TEST_CLOCK_OFFSET, "").strip()
    offset = int(text) if text.lstrip("-").isdecimal() else 0
    if not offset:
        return time.time_ns
    clock = time.time_ns
    return lambda: clock() + offset


_time_ns = _test_clock()
_modules = sys.modules


def _compiling_check(tc: Any) -> Callable[[], bool]:
    """`torch.compiler.is_compiling`, or an equivalent that costs one call less.

    `is_compiling()` is True while Dynamo traces (Dynamo folds the call to True) and while
    `torch.compiler._is_compiling_flag` is set (export, AOT tracing, a compile session), False
    under TorchScript scripting, where no tracekit wrapper runs. `is_dynamo_compiling()` is
    folded to True by Dynamo too and is a bare `return False` in eager Python, so
    `is_dynamo_compiling() or _is_compiling_flag` says the same for less. Torch versions
    without either name get `is_compiling` itself.
    """
    dynamo = getattr(tc, "is_dynamo_compiling", None)
    if dynamo is None or not isinstance(getattr(tc, "_is_compiling_flag", None), bool):
        return tc.is_compiling  # type: ignore[no-any-return]

    def is_compiling() -> bool:
        return dynamo() or tc._is_compiling_flag  # type: ignore[no-any-return]

    return is_compiling


class _Thread:
    """Per-thread state, one `threading.local` look-up a call: the stack of open phase codes,
    the native thread id, graph replays counted so far, whether a cycle is open, and whether
    tracekit itself is running (its own calls are not recorded)."""

    __slots__ = ("bound", "in_cycle", "internal", "replays", "stack", "tid")

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.tid = threading.get_native_id()
        self.replays = 0
        self.in_cycle = False
        self.internal = False
        # the end event of this thread's last GPU-timed top-level phase, which the next one
        # may share as its start: (event, cycle, CPU ns just after its record) or None
        self.bound: tuple[Any, int, int] | None = None


# What enter() hands to exit(): one tuple (not tracked by gc once freed, never kept).
# (site info, phase code, cycle, depth, parent code, thread, seq, replays at enter, CUDA event,
#  cycle code, profiler range, profiler cycle range, start ns)
Frame = tuple[Any, int, int, int, int, _Thread, int, int, Any, int, Any, Any, int]
# Per-site info, computed once a site: (phase code or -1, cycle site, starts_cycle, phase accept
# (a `BoundAccept`, or a legacy `accept_len` path), cycle accept (same), site).
_SiteInfo = tuple[int, bool, bool, Any, Any, "Site"]


class Recorder:
    """Per-process recorder; implements the `Hooks` protocol of `wrappers`."""

    def __init__(self, config: RecorderConfig) -> None:
        self.config = config
        self.active = True
        self.pid = os.getpid()
        self.cycle = -1
        self.flushes = 0
        self._rows_written = 0
        # call numbers, unique in the process: next() on a count is atomic, even across threads
        self._next_seq = itertools.count(1).__next__
        self._rows = bytearray()  # buffered rows, _ROW.size bytes each
        self._gpu_pending: list[tuple[int, Any, Any]] = []
        self._gpu_done: dict[int, tuple[int, int]] = {}
        self._lock = threading.RLock()
        self._loc = threading.local()
        self._flush_ns = int(config.flush_seconds * 1e9)
        self._flush_n = max(1, config.flush_records)
        self._flush_bytes = self._flush_n * _ROW.size
        self._last_flush = time.time_ns()
        self._stream: StreamWriter | None = None  # the open segment (closed at exit)
        self._segments = SegmentLog(config.retention)
        self._nvtx: Any = None
        self._nvtx_ready = False
        self._is_compiling: Callable[[], bool] | None = None
        self._cuda: Any = None
        self._event_pool: list[Any] = []
        self._gpu_every = max(1, int(config.gpu_sample))
        self._loose = 0  # top-level calls outside every cycle so far (sampling without cycles)
        self._bound_ids: set[int] = set()  # id() of events held by a thread's boundary slot
        self.events_recorded = 0  # CUDA event records (calibration excluded)
        self._gpu_ref: tuple[Any, int] | None = None
        self._failed = False
        self._accept_off: set[int] = set()  # id() of accept rules disabled after a failure
        self._rank_info: dict[str, Any] = {}
        self._manifest_written = False
        # site codes: id(site) -> code; table written to sites.json before a batch uses them
        self._codes: dict[int, int] = {}
        self._cycle_codes: dict[int, int] = {}
        self._info: dict[int, _SiteInfo] = {}  # id(site) -> its info, the hot path's one look-up
        self._sites: list[dict[str, Any]] = []
        self._nvtx_attrs: list[Any] = []
        self._sites_written = 0
        self.profile: ProfileWindow | None = None
        self.patched: list[str] = []
        self.unresolved: dict[str, str] = {}
        self.process_info: dict[str, Any] = {}
        self.finished = False
        # lifecycle: the timer thread, who is inside flush, the exit's threads and deadline
        self._timer: threading.Thread | None = None
        self._timer_stop = threading.Event()
        self._flush_owner = 0  # threading.get_ident() of the thread inside flush, 0 if none
        self._process_records = -1  # rows on disk when process.json was last written
        self._fork_locked = False
        self._exit_thread: threading.Thread | None = None
        self._exit_until = 0.0
        self._exit_step = ""
        self._cuda_dev: int | None = None
        self.deferred_signal = 0  # a signal that arrived inside a flush on its thread
        self.on_deferred_signal: Callable[[int], None] | None = None

    def set_recording(self, on: bool) -> None:
        """Pause (False) or resume (True) recording in this process, e.g. between blocks of
        cycles of an A/B overhead measurement (`python -m tracekit.demo --ab-blocks N`). Paused,
        every wrapper passes straight through (the inactive wrapper's cost), the timer thread
        writes nothing, and rows recorded before wait for the next flush; a recorder that
        failed stays disabled."""
        if self._failed or self.finished:
            return
        self.active = bool(on)

    @property
    def records(self) -> int:
        """Rows recorded so far in this process: written plus buffered."""
        return self._rows_written + len(self._rows) // _ROW.size

    @property
    def opened(self) -> bool:
        """True once the record stream was opened (it stays True after it is closed)."""
        return self._stream is not None

    # -- paths -----------------------------------------------------------------------------
    @property
    def dir(self) -> Path:
        return self.config.raw_dir / f"pid-{self.pid}"

    # -- guards ----------------------------------------------------------------------------
    def fail(self, where: str, exc: BaseException) -> None:
        """Disable recording in this process and say so once."""
        self.active = False
        if not self._failed:
            self._failed = True
            try:
                sys.stderr.write(
                    f"tracekit: recorder failed in pid {self.pid} during {where} "
                    f"({type(exc).__name__}: {exc}); recording is disabled in this process, "
                    "the program goes on\n"
                )
                self._write_process(failed=f"{where}: {type(exc).__name__}: {exc}")
            except Exception:
                pass

    def _probe_torch(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return
        try:
            self._is_compiling = _compiling_check(torch.compiler)
            self._cuda = torch.cuda
        except AttributeError:  # torch is still importing
            self._is_compiling = None

    def bypass(self) -> bool:
        """True while torch.compile traces or a CUDA graph is being captured."""
        comp = self._is_compiling
        if comp is None:
            if "torch" not in sys.modules:
                return False
            self._probe_torch()
            comp = self._is_compiling
            if comp is None:
                return False
        if comp():
            return True
        cuda = self._cuda
        return bool(cuda._initialized and cuda.is_current_stream_capturing())

    # -- site codes ------------------------------------------------------------------------
    def _init_nvtx(self) -> None:
        """The `tracekit` NVTX domain, or None when `nvtx` is missing or no NVTX tool (Nsight
        Systems, ...) is attached: `nvtx` then hands out a `DummyDomain` whose calls do nothing,
        and skipping them saves the calls."""
        self._nvtx_ready = True
        try:
            import nvtx

            dom = nvtx.get_domain("tracekit")
            self._nvtx = None if type(dom).__name__ == "DummyDomain" else dom
        except Exception:
            self._nvtx = None

    def _new_code(self, site: Site, kind: str) -> int:
        with self._lock:
            name = site.phase if kind == "phase" else "cycle"
            code = len(self._sites)
            self._sites.append(
                {"code": code, "kind": kind, "phase": name, "target": str(site.target)}
            )
            attrs = None
            if self._nvtx is not None:
                attrs = self._nvtx.get_event_attributes(message=name, category=name)
            self._nvtx_attrs.append(attrs)
            (self._codes if kind == "phase" else self._cycle_codes)[id(site)] = code
            return code

    def _site_info(self, site: Site) -> _SiteInfo:
        """First call of a site: its phase code (sites.json), NVTX attributes, flags."""
        if not self._nvtx_ready:
            self._init_nvtx()
        code = -1
        if site.phase is not None:
            code = self._codes.get(id(site), -1)
            if code < 0:
                code = self._new_code(site, "phase")
        acc = site.bound[0] if site.bound[0] is not None else site.accept_len
        cacc = site.bound[1] if site.bound[1] is not None else site.cycle_accept_len
        info = (code, site.cycle, site.starts_cycle, acc, cacc, site)
        self._info[id(site)] = info
        return info

    def _thread(self) -> _Thread:
        ts = _Thread()
        self._loc.ts = ts
        return ts

    # -- hot path --------------------------------------------------------------------------
    def enter(self, site: Site) -> Frame | None:
        """Start a record; None means: pass straight through (tracekit's own call, torch.compile
        tracing, CUDA graph capture, or a recorder failure)."""
        try:
            # First, before touching anything else: torch.compile traces this code too.
            comp = self._is_compiling
            if comp is None and "torch" in _modules:
                self._probe_torch()
                comp = self._is_compiling
            cuda_on = False
            if comp is not None:
                if comp():
                    return None
                cuda = self._cuda
                cuda_on = cuda._initialized
                if cuda_on and cuda.is_current_stream_capturing():
                    return None
            try:
                ts = self._loc.ts
            except AttributeError:
                ts = self._thread()
            if ts.internal:
                return None
            info = self._info.get(id(site))
            if info is None:
                info = self._site_info(site)
            code = info[0]
            nv = self._nvtx
            prof = self.profile
            ccode = -1
            rf = rfc = None
            qualified = False
            if info[1] and not ts.in_cycle:  # a cycle-target call starts a cycle
                ts.in_cycle = True
                ccode = self._cycle_codes.get(id(site), -1)
                if ccode < 0:
                    ccode = self._new_code(site, "cycle")
                self.cycle += 1
                if ts.bound is not None:
                    self._drop_bound(ts)
                if prof is not None:
                    prof.cycle_start(self.cycle, target=True)  # counts; opens no range
                if nv is not None:
                    nv.push_range(self._nvtx_attrs[ccode])
            stack = ts.stack
            depth = len(stack)
            parent = -1
            if code >= 0:
                if depth:
                    parent = stack[-1]
                elif info[2] and not ts.in_cycle:  # the map's `starts_with` phase
                    self.cycle += 1
                    if prof is not None:
                        prof.cycle_start(self.cycle)
                stack.append(code)
                if nv is not None:
                    nv.push_range(self._nvtx_attrs[code])
                if prof is not None:
                    qualified = prof.phase_start(site.phase, self.cycle)
            seq = self._next_seq()
            # CUDA events for top-level phases only (a cycle-only target has none: merge keeps
            # no GPU times for cycles), on the sampled cycles, shared at boundaries
            ev = self._gpu_begin(ts) if cuda_on and depth == 0 and code >= 0 else None
            start = _time_ns()
            if prof is not None and prof.active:
                # Inside the recorded [start, end]: a profiler range never starts before its
                # record (nor ends after it), so the cycle the record is in holds it too.
                if ccode >= 0 and prof.marks_cycle_at_start:
                    rfc = prof.range("tracekit/cycle")
                if qualified:  # `require` made this step a cycle: its range opens here
                    prof.open_cycle_range()
                if code >= 0:
                    rf = prof.range(f"tracekit/{site.phase}")
            return (
                info, code, self.cycle, depth, parent, ts, seq, ts.replays, ev, ccode, rf, rfc,
                start,
            )  # fmt: skip
        except Exception as exc:
            self.fail("enter", exc)
            return None

    def exit(
        self,
        fr: Frame | None,
        ok: bool,
        result: object,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> None:
        if fr is None:
            return
        try:
            info, code, cycle, depth, parent, ts, seq, rep0, ev, ccode, rf, rfc, start = fr
            if ccode >= 0 and rfc is None and self.profile is not None:
                rfc = self.profile.take_cycle_range(cycle)
            if rf is not None or rfc is not None:  # full mode: close the ranges, then stamp
                if rf is not None:
                    self.profile.range_exit(rf)  # type: ignore[union-attr]
                if rfc is not None:
                    self.profile.range_exit(rfc)  # type: ignore[union-attr]
                rf = rfc = None
            end = _time_ns()
            if ev is not None:  # before the row: a flush never takes the row without its events
                self._gpu_end(ts, seq, ev, cycle)
            replays = ts.replays - rep0
            nv = self._nvtx
            rows = self._rows
            if code >= 0:
                if nv is not None:
                    nv.pop_range()
                ts.stack.pop()
                acc = _NAN
                if ok and info[3] is not None:
                    acc = self._accept(result, info[3], args, kwargs, info[5])
                rows += _pack(code, cycle, depth, parent, ts.tid, seq, start, end, replays, acc, ok)
            if ccode >= 0:
                ts.in_cycle = False
                if ts.bound is not None:
                    self._drop_bound(ts)
                if nv is not None:
                    nv.pop_range()
                acc = _NAN
                if ok and info[4] is not None:
                    acc = self._accept(result, info[4], args, kwargs, info[5])
                cseq = seq if code < 0 else -seq  # a site both phase and cycle: two rows
                rows += _pack(ccode, cycle, depth, -1, ts.tid, cseq, start, end, replays, acc, ok)
                if self.profile is not None:
                    self.profile.cycle_end(cycle)
            # Flush between cycles (not inside one, where it would add to the cycle's time),
            # unless the buffer keeps growing inside a very long cycle.
            if depth == 0:
                n = len(rows)
                if (
                    not ts.in_cycle
                    and (n >= self._flush_bytes or end - self._last_flush >= self._flush_ns)
                ) or (n >= 4 * self._flush_bytes):
                    self.flush()
        except Exception as exc:
            self.fail("exit", exc)

    def sync_call(
        self, fn: Callable[..., Any], site: Site, generic: Callable[..., Any]
    ) -> Callable[..., Any]:
        """The body of the sync wrapper of `site` (`wrappers.make_wrapper` adds the metadata).

        For a phase site that is no cycle target (the hot case: draft, verify, allreduce...)
        `enter` and `exit` are inlined here, which saves two calls, the frame tuple and most
        attribute look-ups. The inlined code is `enter` + `exit` for such a site with no NVTX
        tool and no profiler window; any other state (the site's first call, which registers
        it, an NVTX tool, full mode) goes through `generic`, the wrapper's plain `enter` /
        `exit` body (the test
        `test_inlined_phase_path_records_what_enter_exit_record` compares both).
        """
        rec = self
        next_seq = self._next_seq
        if site.phase is None or site.cycle or site.needs_args:
            return generic
        starts_cycle = site.starts_cycle
        acc_path = site.bound[0] if site.bound[0] is not None else site.accept_len
        code = -1  # the site's phase code, known after its first call

        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal code
            if not rec.active:
                return fn(*args, **kwargs)
            if code < 0 or rec._nvtx is not None or rec.profile is not None:
                if code < 0 and rec.active:
                    info = rec._info.get(id(site))
                    if info is not None:
                        code = info[0]
                return generic(*args, **kwargs)
            # -- enter
            ts: _Thread | None = None
            try:
                # First, before touching anything else: torch.compile traces this code too.
                comp = rec._is_compiling
                if comp is None and "torch" in _modules:
                    rec._probe_torch()
                    comp = rec._is_compiling
                cuda_on = skip = False
                if comp is not None:
                    skip = comp()
                    if not skip:
                        cuda = rec._cuda
                        cuda_on = cuda._initialized
                        skip = cuda_on and cuda.is_current_stream_capturing()
                if not skip:
                    try:
                        ts = rec._loc.ts
                    except AttributeError:
                        ts = rec._thread()
                    if ts.internal:
                        ts = None
                    else:
                        stack = ts.stack
                        depth = len(stack)
                        parent = -1
                        if depth:
                            parent = stack[-1]
                        elif starts_cycle and not ts.in_cycle:
                            rec.cycle += 1
                        stack.append(code)
                        cycle = rec.cycle
                        seq = next_seq()
                        rep0 = ts.replays
                        ev = rec._gpu_begin(ts) if cuda_on and depth == 0 else None
                        start = _time_ns()
            except Exception as exc:
                rec.fail("enter", exc)
                ts = None
            if ts is None:
                return fn(*args, **kwargs)
            # -- the call, then exit (also when it raises)
            ok = False
            result = None
            try:
                result = fn(*args, **kwargs)
                ok = True
            finally:
                try:
                    end = _time_ns()
                    if ev is not None:
                        rec._gpu_end(ts, seq, ev, cycle)
                    ts.stack.pop()
                    acc = _NAN
                    if ok and acc_path is not None:
                        acc = rec._accept(result, acc_path, (), None, site)
                    rows = rec._rows
                    rows += _pack(
                        code, cycle, depth, parent, ts.tid, seq, start, end,
                        ts.replays - rep0, acc, ok,
                    )  # fmt: skip
                    if depth == 0:
                        n = len(rows)
                        if (n >= rec._flush_bytes or end - rec._last_flush >= rec._flush_ns) and (
                            not ts.in_cycle or n >= 4 * rec._flush_bytes
                        ):
                            rec.flush()
                except Exception as exc:
                    rec.fail("exit", exc)
            return result

        return call

    def _accept(
        self,
        result: object,
        rule: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        site: Site,
    ) -> float:
        """A cycle's tokens from a call: a legacy `accept_len` path on the return value (NaN
        when absent), or a bound `accept` rule; a rule that fails, or gives no number, is
        disabled for this target and said once on stderr; the program never sees it."""
        if isinstance(rule, str):
            try:
                acc = _as_accept_len(read_attr_path(result, rule))
            except (AttributeError, KeyError, IndexError, TypeError, ValueError):
                return _NAN
            return _NAN if acc is None else acc
        if id(rule) in self._accept_off:
            return _NAN
        why = ""
        try:
            value = rule.read(result, args, kwargs or {})
            acc = _as_accept_len(value)
            if acc is None:
                why = f"gave {type(value).__name__}, not a number (a CUDA tensor is not read: that would synchronise)"
        except Exception as exc:
            acc, why = None, f"{type(exc).__name__}: {exc}"
        if acc is not None:
            return acc
        self._accept_off.add(id(rule))
        with contextlib.suppress(Exception):
            sys.stderr.write(
                f"tracekit: accept rule {rule.rule.text} ({rule.rule.where}) on {site.target} "
                f"{why}; acceptance is not read from this target any more, the program goes on\n"
            )
        return _NAN

    @property
    def _buf(self) -> list[tuple[Any, ...]]:
        """The buffered rows, unpacked (tests, debugging; accept_len None when absent)."""
        return [
            (*r[:9], None if r[9] != r[9] else r[9], r[10]) for r in _ROW.iter_unpack(self._rows)
        ]

    def count_replay(self) -> None:
        try:
            ts = self._loc.ts
        except AttributeError:
            ts = self._thread()
        ts.replays += 1

    # -- CUDA events -----------------------------------------------------------------------
    # Which top-level phase calls get CUDA events, and how many (docs/DEFINITIONS.md, "CUDA
    # events of light mode"):
    # - sampling: with `gpu_sample` N > 1 only the calls of cycles whose number is a multiple
    #   of N (calls outside every cycle: every N-th of them) are GPU-timed; all keep CPU times;
    # - sharing: a top-level phase that starts in the same cycle, on the same thread, within
    #   SHARE_GAP_NS of the end event of the previous GPU-timed top-level phase (host time after
    #   that record, so nothing but the two calls' own bookkeeping ran between them) takes that
    #   event as its start instead of recording one. Its GPU span then starts where the previous
    #   one ended: whatever the device did in between (nothing, or the little the host enqueued
    #   in under SHARE_GAP_NS) moves from the gap, which light mode charges as the phase's
    #   overhead, into its span; its `wall_ns` (gap + span) is the same either way;
    # - a cycle-only target (no phase) records no events: merge keeps no GPU times for cycles.
    # A cycle of draft, verify and draft_extend thus records 4 events instead of 8.

    def _gpu_begin(self, ts: _Thread) -> Any:
        """The start event of a top-level phase call, or None when the call is not GPU-timed."""
        every = self._gpu_every
        if every > 1:
            key = self.cycle
            if key < 0:
                key = self._loose
                self._loose += 1
            if key % every:
                if ts.bound is not None:
                    self._drop_bound(ts)
                return None
        bound = ts.bound
        if bound is not None:
            ev, cycle, after_ns = bound
            if cycle == self.cycle and _time_ns() - after_ns <= SHARE_GAP_NS:
                return ev  # stays in _bound_ids until this call's pending entry exists
            self._drop_bound(ts)
        return self._gpu_mark()

    def _gpu_end(self, ts: _Thread, seq: int, ev: Any, cycle: int) -> None:
        """Record the end event of a GPU-timed call; it becomes the thread's boundary."""
        ev1 = self._gpu_mark()
        self._gpu_pending.append((seq, ev, ev1))
        bound_ids = self._bound_ids
        bound_ids.add(id(ev1))
        old = ts.bound
        ts.bound = (ev1, cycle, _time_ns())
        if old is not None:  # after the append: a resolving thread always sees one of the two
            bound_ids.discard(id(old[0]))

    def _drop_bound(self, ts: _Thread) -> None:
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
            ref = cuda.Event(enable_timing=True)
            ref.record()
            ref.synchronize()
            self._gpu_ref = (ref, time.time_ns())
            self._cuda_dev = self._cuda_device()  # the rank's device, read on its own thread
        pool = self._event_pool
        ev = pool.pop() if pool else cuda.Event(enable_timing=True)
        ev.record()
        self.events_recorded += 1
        return ev

    def _resolve_gpu(self, *, wait: bool, until: float | None = None) -> None:
        """Resolve the pending events that completed; with `wait`, poll for the others until
        `until` (monotonic; default: the exit deadline from now). The pending list is changed in
        place: other threads append to it meanwhile. An event goes back to the pool only when
        no pending entry and no thread's boundary slot still holds it (shared events)."""
        pending = self._gpu_pending
        if not pending or self._gpu_ref is None:
            return
        ref, ref_ns = self._gpu_ref
        keep: list[tuple[int, Any, Any]] = []
        deadline = time.monotonic() + self.config.exit_deadline_s if until is None else until
        n = len(pending)
        times: dict[int, int] = {}
        freed: dict[int, Any] = {}

        def at(ev: Any) -> int:
            t = times.get(id(ev))
            if t is None:
                t = times[id(ev)] = ref_ns + round(ref.elapsed_time(ev) * 1e6)
            return t

        for seq, ev0, ev1 in pending[:n]:
            done = ev1.query()
            while wait and not done and time.monotonic() < deadline:
                time.sleep(0.0005)  # polled, not synchronize(): bounded, never hangs the exit
                done = ev1.query()
            if not done:
                keep.append((seq, ev0, ev1))
                continue
            self._gpu_done[seq] = (at(ev0), at(ev1))
            freed[id(ev0)] = ev0
            freed[id(ev1)] = ev1
        del pending[:n]
        pending[0:0] = keep
        if freed:
            # held: boundary slots first, then the pending entries (see _gpu_end's order)
            held = set(self._bound_ids)
            for _seq, ev0, ev1 in list(pending):
                held.add(id(ev0))
                held.add(id(ev1))
            self._event_pool.extend(ev for i, ev in freed.items() if i not in held)

    # -- output ----------------------------------------------------------------------------
    def _open(self) -> None:
        import pyarrow  # noqa: F401  (fail early, inside the guard)

        self.dir.mkdir(parents=True, exist_ok=True)
        self._open_segment()
        self._start_timer()

    # -- segments (rotation and retention, collectors/segments.py) --------------------------
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

    # -- timer flush -----------------------------------------------------------------------
    def _start_timer(self) -> None:
        """The daemon thread that flushes once `flush_seconds` passed without a flush."""
        if not self.config.flush_thread or self.finished:
            return
        if self._timer is not None and self._timer.is_alive():
            return
        self._timer_stop = stop = threading.Event()
        t = threading.Thread(
            target=self._timer_loop, args=(stop,), name="tracekit-flush", daemon=True
        )
        t.start()
        self._timer = t

    def _timer_loop(self, stop: threading.Event) -> None:
        period = max(0.01, self.config.flush_seconds)
        period_ns = int(period * 1e9)
        pid = self.pid
        while True:
            due = (self._last_flush + period_ns - time.time_ns()) / 1e9
            if stop.wait(max(due, period / 20)):
                return
            if self._failed or self.finished or os.getpid() != pid:
                return
            if not self.active:
                continue  # paused (`set_recording(False)`): rows wait for the next flush
            if time.time_ns() - self._last_flush < period_ns:
                continue  # the program's threads flushed meanwhile
            if self._rows or self._gpu_pending or self._process_records != self._rows_written:
                self.flush(timer=True, until=time.monotonic() + period)
            else:
                self._last_flush = time.time_ns()  # nothing to write: sleep a whole period

    def _owns_lock(self) -> bool:
        owned = getattr(self._lock, "_is_owned", None)
        return bool(owned()) if owned is not None else False

    def flushing_here(self) -> bool:
        """True when this thread is inside `flush` (a signal handler interrupted it)."""
        return self._flush_owner == threading.get_ident()

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
        try:
            with self._internal():
                self._flush_locked(final=final, until=until)
        finally:
            self._flush_owner = 0
            lock.release()
        if not final and self.active:
            self._after_flush(timer=timer)
        sig = self.deferred_signal
        deliver = self.on_deferred_signal
        if sig and deliver is not None and threading.current_thread() is threading.main_thread():
            self.deferred_signal = 0
            deliver(sig)
        return True

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
        try:
            self._last_flush = time.time_ns()
            self._resolve_gpu(wait=final, until=until)
            ready = self._take_rows(final=final)
            if self._stream is None:
                self._open()
            if len(self._sites) > self._sites_written:
                write_json(self.dir / SITES_FILE, {"sites": self._sites})
                self._sites_written = len(self._sites)
            self._rotate(writing=len(ready) > 0)
            stream = self._stream
            assert stream is not None
            if len(ready):
                data = encode_rows(ready, self._gpu_done)
                stream.write(data)
                self.flushes += 1
                self._rows_written += len(ready)
                self._segment_written(len(data), ready)
            if final:
                stream.close()
            if final or self._process_records != self._rows_written:
                self._write_process()
        except Exception as exc:
            self.fail("flush", exc)

    def _cuda_device(self) -> int | None:
        """This thread's CUDA device (the rank's, on the program's threads), if CUDA is on."""
        cuda = self._cuda
        try:
            if cuda is not None and cuda._initialized:
                return int(cuda.current_device())
        except Exception:
            pass
        return None

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

    @contextlib.contextmanager
    def _internal(self) -> Iterator[None]:
        """Calls made by tracekit itself on this thread (json, pyarrow) are not recorded."""
        try:
            ts = self._loc.ts
        except AttributeError:
            ts = self._thread()
        old = ts.internal
        ts.internal = True
        try:
            yield
        finally:
            ts.internal = old

    def _write_process(self, **extra: Any) -> None:
        with self._internal():
            data = dict(self.process_info)
            written = self._rows_written
            data.update(
                pid=self.pid,
                rank_info=self._rank_info,
                records=written,  # on disk; `buffered`: recorded, not written yet
                buffered=self.records - written,
                flushes=self.flushes,
                finished=self.finished,
                patched=self.patched,
                unresolved=self.unresolved,
                active=self.active,
                segments=self._segments.to_json(),
                dropped=self._segments.dropped.to_json(),
            )
            data.update(extra)
            write_json(self.dir / PROCESS_FILE, data)
            self._process_records = written

    def close(self) -> None:
        """Final flush at process exit (atexit, multiprocessing finalizers, a signal), every
        wait bounded by one deadline, `exit_deadline_s` from now."""
        if os.getpid() != self.pid:
            return
        if self.finished:
            self._join_exit()  # a close under way (a signal during the atexit close): let it end
            return
        self.finished = True
        self._timer_stop.set()
        until = time.monotonic() + self.config.exit_deadline_s
        self._exit_until = until
        dev = self._cuda_device()  # on the program's thread: the rank's device
        if self._failed:
            self._close_profile(until)
            return
        if not self._bounded(lambda: self._close_records(until), until, "the final flush"):
            return
        self._close_profile(until)
        self._bounded(lambda: self._close_rank(dev), until, "the rank and manifest update")

    def _bounded(self, fn: Callable[[], None], until: float, step: str) -> bool:
        """Run `fn` in a daemon thread, wait for it until `until`; False if it did not end."""
        self._exit_step = step
        try:
            t = threading.Thread(target=fn, name="tracekit-exit", daemon=True)
            t.start()
        except RuntimeError:  # no new thread now (interpreter shutting down): on this one
            fn()
            return True
        self._exit_thread = t
        return self._join_exit()

    def _join_exit(self) -> bool:
        t = self._exit_thread
        if t is None or t is threading.current_thread():
            return True
        t.join(max(0.0, self._exit_until - time.monotonic()))
        if not t.is_alive():
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
        self._exit_thread = None
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
