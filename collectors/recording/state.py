"""The recorder's state: its attributes, per-thread state, the bypass of torch.compile tracing
and CUDA graph capture, and the clock records are stamped with."""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.collectors.recording import hot
from tracekit.collectors.recording.doorbell import Doorbell
from tracekit.collectors.recording.native import NATIVE
from tracekit.collectors.recording.readings import accept_value, read_accept
from tracekit.collectors.segments import SegmentLog
from tracekit.store.raw.ipc import StreamWriter
from tracekit.store.raw.schema import ROW

if TYPE_CHECKING:
    from tracekit.collectors.phasemap import Site
    from tracekit.collectors.profiler import ProfileWindow
    from tracekit.collectors.recorder import RecorderConfig

_ROW = ROW


ENV_TEST_CLOCK_OFFSET = "TRACEKIT_TEST_CLOCK_OFFSET_NS"


def _test_clock_offset() -> int:
    """0, or, for tests only, TRACEKIT_TEST_CLOCK_OFFSET_NS: the CPU times this process records
    read as on a host whose clock is that far ahead (the two-node test in
    tests/integration/test_multinode.py recovers it; docs/multinode.md)."""
    text = os.environ.get(ENV_TEST_CLOCK_OFFSET, "").strip()
    return int(text) if text.lstrip("-").isdecimal() else 0


def _test_clock(offset: int) -> Callable[[], int]:
    if not offset:
        return time.time_ns
    clock = time.time_ns
    return lambda: clock() + offset


CLOCK_OFFSET_NS = _test_clock_offset()  # the native hot path adds it to the same clock
now_ns = _test_clock(CLOCK_OFFSET_NS)  # the clock of every record (time.time_ns outside tests)


def compiling_check(tc: Any) -> Callable[[], bool]:
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


def compile_flag_owner(tc: Any) -> Any:
    """`torch.compiler` when `compiling_check` took its short form (then, outside Dynamo's
    tracing, `is_compiling()` is its `_is_compiling_flag`: what the native hot path reads),
    else None (the native path calls the check)."""
    dynamo = getattr(tc, "is_dynamo_compiling", None)
    if dynamo is None or not isinstance(getattr(tc, "_is_compiling_flag", None), bool):
        return None
    return tc


def capture_check(torch: Any) -> Callable[[], bool]:
    """`torch.cuda.is_current_stream_capturing`, or the builtin it returns (one call less)."""
    fast = getattr(getattr(torch, "_C", None), "_cuda_isCurrentStreamCapturing", None)
    return fast if fast is not None else torch.cuda.is_current_stream_capturing  # type: ignore[no-any-return]


class ThreadState:
    """Per-thread state, one `threading.local` look-up a call: the stack of open phase codes,
    the native thread id, graph replays counted so far, whether a cycle is open, and whether
    tracekit itself is running (its own calls are not recorded). The native hot path has its
    own type with the same attributes (`_native.ThreadState`)."""

    __slots__ = ("bound", "boundary", "in_cycle", "internal", "replays", "stack", "tid")

    def __init__(self) -> None:
        self.stack: list[int] = []
        self.tid = threading.get_native_id()
        self.replays = 0
        self.in_cycle = False
        self.internal = False
        # the end event of this thread's last GPU-timed top-level phase, which the next one
        # may share as its start: (event, cycle, CPU ns just after its record) or None
        self.bound: tuple[Any, int, int] | None = None
        # the compiled call this thread is in (collectors/compiled.py's marker), or None
        self.boundary: Any = None


# What enter() hands to exit(): one tuple (not tracked by gc once freed, never kept).
# (site info, phase code, cycle, depth, parent code, thread, seq, replays at enter, CUDA event,
#  cycle code, profiler range, profiler cycle range, start ns)
Frame = tuple[Any, int, int, int, int, ThreadState, int, int, Any, int, Any, Any, int]
# Per-site info, computed once a site: (phase code or -1, cycle site, starts_cycle, phase accept
# (a `BoundAccept`, or a legacy `accept_len` path), cycle accept (same), site).
SiteInfo = tuple[int, bool, bool, Any, Any, "Site"]


class RecorderState:
    """The attributes of a recorder, and what every layer above uses. Those the hot path reads
    every call live in `_hot` (collectors/recording/hot.py: these names are properties over it)."""

    active: bool
    cycle: int
    _captures: int  # torch captures open (collectors/graphs.py); -1: not counted
    _gpu_every: int
    _flush_bytes: int
    _flush_ns: int
    _last_flush: int
    _nvtx: Any
    profile: ProfileWindow | None
    _is_compiling: Callable[[], bool] | None
    _compiler: Any
    _cuda: Any
    _capturing: Callable[[], bool] | None
    _gpu_ref: tuple[Any, int] | None
    _next_seq: Callable[[], int]
    _rows: bytearray
    _loc: threading.local

    def __init__(self, config: RecorderConfig) -> None:
        self._hot = hot.new_hot(NATIVE if config.native else None)
        self.config = config
        self.active = True
        self.pid = os.getpid()  # `cycle` starts at -1 in `_hot`
        self.flushes = 0
        self._rows_written = 0
        # call numbers 1, 2, ...: the C struct's counter (`Hot.take_seq`), or a count's next()
        self._next_seq = getattr(self._hot, "take_seq", None) or itertools.count(1).__next__
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
        self._nvtx = None
        self._nvtx_ready = False
        self._is_compiling = None
        # what the torch probe finds besides: the owner of the compile flag (read by the native
        # path), the capture check (the wrappers' Dynamo check is collectors/compiled.py's gate)
        self._compiler = self._capturing = self._cuda = None
        self._captures = -1
        self._native: Any = NATIVE if config.native else None  # recording/native.py, unless off
        self._ts_type: Any = ThreadState if self._native is None else self._native.ThreadState
        self._event_pool: list[Any] = []
        self._new_event: Callable[[], Any] | None = None  # set at the GPU calibration
        self._gpu_every, self._share_gap_ns = max(1, config.gpu_sample), config.share_gap_ns
        self._loose = 0  # top-level calls outside every cycle so far (sampling without cycles)
        self._bound_ids: set[int] = set()  # id() of events held by a thread's boundary slot
        self.events_recorded = 0  # CUDA event records (calibration excluded)
        self._gpu_ref = None
        self._failed = False
        self._accept_off: set[int] = set()  # id() of accept rules disabled after a failure
        self._arg_plans: dict[int, list[Any]] = {}  # by the rule's id (readings.arg_plan)
        # per-request numbers of accept rules, (row key, "t" tokens | "d" drafted, numbers),
        # appended to accepts.jsonl at each flush (tracekit/store/raw/accepts.py)
        self._accept_detail: list[tuple[int, str, list[float]]] = []
        # the rules so disabled, for process.json (merge warns once a rule)
        self.accept_failed: list[dict[str, str]] = []
        self._rank_info: dict[str, Any] = {}
        self._manifest_written = False
        # site codes: id(site) -> code; table written to sites.json before a batch uses them
        self._codes: dict[int, int] = {}
        self._cycle_codes: dict[int, int] = {}
        self._info: dict[int, SiteInfo] = {}  # id(site) -> its info, the hot path's one look-up
        self._sites: list[dict[str, Any]] = []
        self._nvtx_attrs: list[Any] = []
        self._sites_written = 0
        self.profile = None
        self.patched: list[str] = []
        self.unresolved: dict[str, str] = {}
        self.process_info: dict[str, Any] = {}
        self.finished = False
        # lifecycle: the timer thread, who is inside flush, the exit's threads and deadline
        self._timer: threading.Thread | None = None
        self._timer_stop = threading.Event()
        self._wake: Doorbell | None = None  # wakes the flush thread (`Output._flush_due`)
        self._flush_asked = 0  # the launcher's flush requests answered (process.json)
        self._wake_sent = False
        self._timer_alive = False  # the flush thread runs: the hot path hands flushes to it
        self._yielding = False  # inside a flush on the flush thread: it yields the GIL (after
        self._held_since = 0  # holding it YIELD_AFTER_NS since this perf_counter_ns)
        # flushes so far: CPU ns, wall ns, longest wall ns, flushes on the program's threads
        self._flush_cost = [0, 0, 0, 0]
        self._flush_owner = 0  # threading.get_ident() of the thread inside flush, 0 if none
        self._process_records = -1  # rows on disk when process.json was last written
        self._fork_locked = False
        self._exit_thread: threading.Thread | None = None
        self._exit_done: threading.Event | None = None  # set when the exit thread ends
        self._exit_until = 0.0
        self._exit_interrupt: BaseException | None = None  # raised in a wait of the exit
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

    def _accept(
        self,
        result: object,
        rule: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any] | None,
        site: Site,
        key: int = 0,
    ) -> float:
        """A cycle's tokens from a call (collectors/recording/readings.py `read_accept`); `key`
        is the row's seq (-seq for a cycle rule), under which per-request numbers are kept."""
        return read_accept(self, result, rule, args, kwargs, site, key)

    def _accept_value(self, value: object, rule: Any, site: Site, key: int = 0) -> float:
        """The number of a value the native path read by an argument rule's plan (`arg_plan`)."""
        return accept_value(self, value, rule, site, key)

    @property
    def records(self) -> int:
        """Rows recorded so far in this process: written plus buffered."""
        return self._rows_written + len(self._rows) // _ROW.size

    @property
    def opened(self) -> bool:
        """True once the record stream was opened (it stays True after it is closed)."""
        return self._stream is not None

    @property
    def dir(self) -> Path:
        return self.config.raw_dir / f"pid-{self.pid}"

    def _probe_torch(self) -> None:
        torch = sys.modules.get("torch")
        if torch is None:
            return
        try:
            tc = torch.compiler
            self._compiler = compile_flag_owner(tc)
            self._capturing = capture_check(torch)
            self._cuda = torch.cuda
            self._is_compiling = compiling_check(tc)
        except AttributeError:  # torch is still importing
            self._is_compiling = None

    def capture_state(self, ask: bool = True) -> int:
        """-1 while torch.compile traces or the current stream captures a CUDA graph (the call
        passes through), 1 when CUDA is initialised (a top-level phase may take CUDA events),
        else 0; the Python hot path's first check (the native one does it in C). `ask`: whether
        to ask torch if the stream captures, False inside a recorded phase call of this thread
        and, while no torch capture is open, for a call that takes no CUDA event
        (`GpuEvents.asks_capture`; docs/DEFINITIONS.md, "Hot path")."""
        comp = self._is_compiling
        if comp is None:
            if "torch" not in sys.modules:
                return 0
            self._probe_torch()
            comp = self._is_compiling
            if comp is None:
                return 0
        if comp():
            return -1
        cuda = self._cuda
        if not cuda._initialized:
            return 0
        if not ask:
            return 1
        return -1 if cuda.is_current_stream_capturing() else 1

    def _thread(self) -> ThreadState:
        ts: ThreadState = self._ts_type()
        self._loc.ts = ts
        return ts

    def _this_thread(self) -> ThreadState:
        """This thread's state, made on first use (off the hot path, which reads `loc.ts`
        inline)."""
        try:
            ts: ThreadState = self._loc.ts
        except AttributeError:
            ts = self._thread()
        return ts

    @contextlib.contextmanager
    def _internal(self) -> Iterator[None]:
        """Calls made by tracekit itself on this thread (json, pyarrow) are not recorded."""
        ts = self._this_thread()
        old = ts.internal
        ts.internal = True
        try:
            yield
        finally:
            ts.internal = old

    def flushing_here(self) -> bool:
        """True when this thread is inside `flush` (a signal handler interrupted it)."""
        return self._flush_owner == threading.get_ident()


hot.install(RecorderState)
