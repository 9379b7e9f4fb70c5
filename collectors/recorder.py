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
with `gpu_sample` N > 1 (`tracekit launch --gpu-sample N`) only one cycle in N gets events at
all, the others keep CPU times (docs/DEFINITIONS.md, "CUDA events of light mode"). Records are buffered and appended to `raw/pid-<pid>/records.arrow` (Arrow IPC stream
format, one `os.write` a flush) every `flush_records` records or `flush_seconds` seconds, by a
daemon flush thread (`tracekit-flush`): an outermost exit that finds a full batch or the
interval passed only wakes it (`_flush_due`), so the event resolution, the write and
`process.json` happen off the program's threads, and the flush thread hands the GIL back between
the steps of a flush (`_yield_gil`); it also flushes on its own once `flush_seconds` passed
without a flush (a server idle between requests, or stopped between cycles). Without the flush
thread (a bare `Recorder`), or with 8 batches waiting, the program's thread flushes at the exit
itself. Also on SIGTERM / SIGINT (runtime), and at process exit. `process.json`'s `flush_cost`
says what the flushes cost (CPU and wall ms, the longest, how many ran on the program's threads). A process killed with SIGKILL loses at most the last flush
interval; the stream stays readable up to the last complete batch. A flush from the program's
own threads never waits for the lock (another thread flushing: it returns at once, and its
thread's batch test holds again a batch later, not at each exit until that flush ends); the timer
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

The recorder is one class stacked from layers with one job each (collectors/recording/: state,
gpu events, output, lifecycle, hot path); the raw format it writes is tracekit/store/raw/.

Nothing heavy is imported until the first record: pyarrow, nvtx and torch are looked up then.
Every public method is guarded: if the recorder itself fails, it disables itself, prints one line
to stderr, and the program goes on unwrapped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tracekit.collectors.segments import RetentionPolicy

if TYPE_CHECKING:  # mypy checks collectors/ as `collectors` (mapped at install)
    from tracekit.collectors.recording.gpu import SHARE_GAP_NS
    from tracekit.collectors.recording.hotpath import HotPath
else:
    from tracekit.collectors.recording.gpu import SHARE_GAP_NS
    from tracekit.collectors.recording.hotpath import HotPath

# One deadline for everything the exit waits on (the last phases' CUDA events, the final flush,
# the backend's rank query): a device stuck on a peer that is gone (a collective whose other
# ranks exited) must not keep the server's process from exiting. Phases left unresolved keep
# their CPU times.
EXIT_DEADLINE_S = 3.0
Mode = Literal["light", "full"]  # light: CPU clocks + CUDA events; full: + a torch.profiler window
MODES: tuple[Mode, ...] = ("light", "full")


# Rows a flush is started by (or `flush_seconds`, whichever first): a flush takes a fixed
# 0.4 ms or so from a program thread on the H200 host, and 0.17 µs a row (bench/flush_gil.py,
# docs/BENCHMARKS.md "eleventh session"), so a batch this size halves a busy program's flush
# share against 1,000; `tracekit launch` passes it on (launch/options.py, a test keeps them one)
DEFAULT_FLUSH_RECORDS = 4096


@dataclass
class RecorderConfig:
    raw_dir: Path  # RUN_DIR/raw
    flush_records: int = DEFAULT_FLUSH_RECORDS
    flush_seconds: float = 1.0
    adapter: str = ""
    mode: Mode = "light"
    package: str | None = None
    via: str = "sitecustomize"
    exit_deadline_s: float = EXIT_DEADLINE_S
    flush_thread: bool = False  # a daemon thread flushes every flush_seconds (runtime sets it)
    # where the flush thread listens for `tracekit launch`'s flush requests before it forwards a
    # signal (collectors/recording/doorbell.py; `TRACEKIT_CONTROL_DIR`)
    control_dir: Path | None = None
    # rotation by size / age and retention of the record segments (collectors/segments.py)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    gpu_sample: int = 1  # CUDA events on one cycle in N (`--gpu-sample N`); CPU clocks on all
    # two adjacent top-level phases of a cycle share the event at their boundary when the
    # second starts within this much host time of the first's end record (`_gpu_begin`)
    share_gap_ns: int = SHARE_GAP_NS
    # the native hot path where it loads (collectors/recording/native.py; same records)
    native: bool = True
    # with it, CUDA events through the driver API (`_native.CudaEvent`) instead of torch's
    # (`TRACEKIT_GPU_EVENTS=torch` keeps torch's; docs/BENCHMARKS.md, issue 25)
    driver_events: bool = True


class Recorder(HotPath):
    """Per-process recorder; implements the `Hooks` protocol of `wrappers`. Built from
    `RecorderConfig`; every layer's methods are its own (collectors/recording/)."""
