"""Light-mode recorder: one record a wrapped call, streamed to a per-process Arrow IPC file.

Per phase call: an NVTX range (domain `tracekit`, one category a phase), CPU start/end from
`time.time_ns()`, and on CUDA a pair of pooled CUDA events on the current stream for outermost
phases, resolved later with `Event.query()` (no synchronisation added; one `synchronize` at the
first CUDA phase calibrates the GPU clock against `time.time_ns`, and one at exit resolves what
is left). Records are buffered and appended to `raw/pid-<pid>/records.arrow` (Arrow IPC stream
format, one `os.write` a flush) every `flush_records` records or `flush_seconds` seconds, at
outermost exits only, and at process exit. A process killed with SIGKILL loses at most what was
buffered since the last flush; the stream stays readable up to the last complete batch.

Nothing heavy is imported until the first record: pyarrow, nvtx and torch are looked up then.
Every public method is guarded: if the recorder itself fails, it disables itself, prints one line
to stderr, and the program goes on unwrapped.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.collectors.phasemap import read_attr_path

if TYPE_CHECKING:
    from tracekit.collectors.phasemap import Site
    from tracekit.collectors.profiler import ProfileWindow

# Raw record columns (the raw format; merge maps it to the `phases` / `cycles` tables).
RAW_COLUMNS: tuple[str, ...] = (
    "kind",  # "phase" or "cycle"
    "cycle",
    "phase",
    "depth",
    "parent",
    "tid",
    "seq",
    "start_ns",
    "end_ns",
    "gpu_start_ns",
    "gpu_end_ns",
    "graph_replays",
    "accept_len",
    "ok",
    "target",
)
RECORDS_FILE = "records.arrow"
PROCESS_FILE = "process.json"
MANIFEST_FILE = "manifest.json"
_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


def raw_schema() -> Any:
    import pyarrow as pa

    s = pa.string()
    i64 = pa.int64()
    return pa.schema(
        [
            ("kind", s),
            ("cycle", i64),
            ("phase", s),
            ("depth", pa.int32()),
            ("parent", s),
            ("tid", i64),
            ("seq", i64),
            ("start_ns", i64),
            ("end_ns", i64),
            ("gpu_start_ns", i64),
            ("gpu_end_ns", i64),
            ("graph_replays", pa.int32()),
            ("accept_len", pa.float64()),
            ("ok", pa.bool_()),
            ("target", s),
        ]
    )


@dataclass
class RecorderConfig:
    raw_dir: Path  # RUN_DIR/raw
    flush_records: int = 1000
    flush_seconds: float = 1.0
    adapter: str = ""
    mode: str = "light"
    package: str | None = None
    via: str = "sitecustomize"


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
        if getattr(value, "is_cuda", False):
            return None  # reading it would synchronise the stream
        if value.numel() == 1:
            return float(value.item())
        if value.numel() > 1:
            return float(value.float().mean().item())
    return None


class _Frame:
    __slots__ = (
        "cycle",
        "depth",
        "ev",
        "is_cycle",
        "is_phase",
        "parent",
        "replays",
        "rf",
        "rf_cycle",
        "seq",
        "site",
        "start",
    )


class Recorder:
    """Per-process recorder; implements the `Hooks` protocol of `wrappers`."""

    def __init__(self, config: RecorderConfig) -> None:
        self.config = config
        self.active = True
        self.pid = os.getpid()
        self.cycle = -1
        self.records = 0
        self.flushes = 0
        self._seq = 0
        self._buf: list[list[Any]] = []
        self._gpu_pending: list[tuple[list[Any], Any, Any]] = []
        self._lock = threading.RLock()
        self._loc = threading.local()
        self._flush_ns = int(config.flush_seconds * 1e9)
        self._flush_n = max(1, config.flush_records)
        self._last_flush = time.time_ns()
        self._fd: int | None = None
        self._schema: Any = None
        self._nvtx: Any = None
        self._nvtx_attrs: dict[str, Any] = {}
        self._nvtx_ready = False
        self._is_compiling: Callable[[], bool] | None = None
        self._cuda: Any = None
        self._event_pool: list[Any] = []
        self._gpu_ref: tuple[Any, int] | None = None
        self._failed = False
        self._rank_info: dict[str, Any] = {}
        self._manifest_written = False
        self.profile: ProfileWindow | None = None
        self.patched: list[str] = []
        self.unresolved: dict[str, str] = {}
        self.process_info: dict[str, Any] = {}
        self.finished = False

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
            self._is_compiling = torch.compiler.is_compiling
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

    # -- hot path --------------------------------------------------------------------------
    def _init_nvtx(self) -> None:
        self._nvtx_ready = True
        try:
            import nvtx

            self._nvtx = nvtx.get_domain("tracekit")
        except Exception:
            self._nvtx = None

    def _attrs(self, name: str) -> Any:
        attrs = self._nvtx_attrs.get(name)
        if attrs is None:
            attrs = self._nvtx.get_event_attributes(message=name, category=name)
            self._nvtx_attrs[name] = attrs
        return attrs

    def _thread_stack(self) -> list[str]:
        loc = self._loc
        loc.stack = []
        loc.tid = threading.get_native_id()
        loc.replays = 0
        loc.in_cycle = False
        loc.internal = False
        return loc.stack  # type: ignore[no-any-return]

    def enter(self, site: Site) -> _Frame | None:
        try:
            loc = self._loc
            stack: list[str] | None = getattr(loc, "stack", None)
            if stack is None:
                stack = self._thread_stack()
            if loc.internal:
                return None  # tracekit's own work (writing its files) is never recorded
            if not self._nvtx_ready:
                self._init_nvtx()
            fr = _Frame()
            fr.site = site
            fr.is_cycle = False
            fr.rf = None
            fr.rf_cycle = None
            if site.cycle and not loc.in_cycle:
                loc.in_cycle = True
                fr.is_cycle = True
                self.cycle += 1
                if self.profile is not None:
                    fr.rf_cycle = self.profile.cycle_start(self.cycle, "tracekit/cycle")
                if self._nvtx is not None:
                    self._nvtx.push_range(self._attrs("cycle"))
            phase = site.phase
            fr.is_phase = phase is not None
            depth = len(stack)
            fr.depth = depth
            if phase is not None:
                if site.starts_cycle and depth == 0 and not loc.in_cycle:
                    self.cycle += 1
                    if self.profile is not None:
                        self.profile.cycle_start(self.cycle, None)
                fr.parent = stack[-1] if depth else None
                stack.append(phase)
                if self._nvtx is not None:
                    self._nvtx.push_range(self._attrs(phase))
                if self.profile is not None and self.profile.active:
                    fr.rf = self.profile.range(f"tracekit/{phase}")
            fr.cycle = self.cycle
            self._seq += 1
            fr.seq = self._seq
            fr.replays = loc.replays
            cuda = self._cuda
            fr.ev = (
                self._gpu_mark()
                if (cuda is not None and cuda._initialized and depth == 0)
                else None
            )
            fr.start = time.time_ns()
            return fr
        except Exception as exc:
            self.fail("enter", exc)
            return None

    def exit(self, fr: _Frame | None, ok: bool, result: object) -> None:
        if fr is None:
            return
        try:
            end = time.time_ns()
            loc = self._loc
            ev_end = self._gpu_mark() if fr.ev is not None else None
            replays = loc.replays - fr.replays
            site = fr.site
            if fr.is_phase:
                if fr.rf is not None:
                    self.profile.range_exit(fr.rf)  # type: ignore[union-attr]
                if self._nvtx is not None:
                    self._nvtx.pop_range()
                loc.stack.pop()
                acc = None
                if ok and site.accept_len is not None:
                    acc = self._accept(result, site.accept_len)
                rec = [
                    "phase",
                    fr.cycle,
                    site.phase,
                    fr.depth,
                    fr.parent,
                    loc.tid,
                    fr.seq,
                    fr.start,
                    end,
                    None,
                    None,
                    replays,
                    acc,
                    ok,
                    str(site.target),
                ]
                self._buf.append(rec)
                if ev_end is not None:
                    self._gpu_pending.append((rec, fr.ev, ev_end))
            if fr.is_cycle:
                loc.in_cycle = False
                if self._nvtx is not None:
                    self._nvtx.pop_range()
                acc = None
                if ok and site.cycle_accept_len is not None:
                    acc = self._accept(result, site.cycle_accept_len)
                crec = [
                    "cycle",
                    fr.cycle,
                    None,
                    fr.depth,
                    None,
                    loc.tid,
                    fr.seq,
                    fr.start,
                    end,
                    None,
                    None,
                    replays,
                    acc,
                    ok,
                    str(site.target),
                ]
                self._buf.append(crec)
                if ev_end is not None and not fr.is_phase:
                    self._gpu_pending.append((crec, fr.ev, ev_end))
                if self.profile is not None:
                    self.profile.cycle_end(fr.cycle, fr.rf_cycle)
            self.records += 1
            # Flush between cycles (not inside one, where it would add to the cycle's time),
            # unless the buffer keeps growing inside a very long cycle.
            n = len(self._buf)
            if fr.depth == 0 and (
                (
                    not loc.in_cycle
                    and (n >= self._flush_n or end - self._last_flush >= self._flush_ns)
                )
                or n >= 4 * self._flush_n
            ):
                self.flush()
        except Exception as exc:
            self.fail("exit", exc)

    def _accept(self, result: object, path: str) -> float | None:
        try:
            return _as_accept_len(read_attr_path(result, path))
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            return None

    def count_replay(self) -> None:
        loc = self._loc
        if getattr(loc, "stack", None) is None:
            self._thread_stack()
        loc.replays += 1

    # -- CUDA events -----------------------------------------------------------------------
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
        pool = self._event_pool
        ev = pool.pop() if pool else cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def _resolve_gpu(self, *, wait: bool) -> None:
        if not self._gpu_pending or self._gpu_ref is None:
            return
        ref, ref_ns = self._gpu_ref
        keep: list[tuple[list[Any], Any, Any]] = []
        for rec, ev0, ev1 in self._gpu_pending:
            if wait:
                ev1.synchronize()
            elif not ev1.query():
                keep.append((rec, ev0, ev1))
                continue
            rec[9] = ref_ns + round(ref.elapsed_time(ev0) * 1e6)
            rec[10] = ref_ns + round(ref.elapsed_time(ev1) * 1e6)
            self._event_pool.append(ev0)
            self._event_pool.append(ev1)
        self._gpu_pending = keep

    # -- output ----------------------------------------------------------------------------
    def _open(self) -> None:
        import pyarrow  # noqa: F401  (fail early, inside the guard)

        self.dir.mkdir(parents=True, exist_ok=True)
        self._schema = raw_schema()
        path = self.dir / RECORDS_FILE
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        _write_all(self._fd, self._schema.serialize().to_pybytes())

    def flush(self, *, final: bool = False) -> None:
        """Write buffered records whose GPU times are known (all of them when `final`)."""
        with self._lock, self._internal():
            try:
                self._last_flush = time.time_ns()
                self._resolve_gpu(wait=final)
                pending = {id(rec) for rec, _, _ in self._gpu_pending}
                if pending:
                    ready = [r for r in self._buf if id(r) not in pending]
                    self._buf = [r for r in self._buf if id(r) in pending]
                else:
                    ready, self._buf = self._buf, []
                if ready or final or self._fd is None:
                    if self._fd is None:
                        self._open()
                    if ready:
                        import pyarrow as pa

                        cols = list(zip(*ready))
                        batch = pa.RecordBatch.from_arrays(
                            [pa.array(c, type=f.type) for c, f in zip(cols, self._schema)],
                            schema=self._schema,
                        )
                        _write_all(self._fd, batch.serialize().to_pybytes())  # type: ignore[arg-type]
                        self.flushes += 1
                    if final:
                        _write_all(self._fd, _EOS)  # type: ignore[arg-type]
                        os.close(self._fd)  # type: ignore[arg-type]
                        self._fd = -1
                self._update_rank()
                if not self._manifest_written or final:
                    self._write_manifest()
            except Exception as exc:
                self.fail("flush", exc)

    def _update_rank(self) -> None:
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
        cuda = self._cuda
        try:
            if cuda is not None and cuda._initialized:
                info["cuda_device"] = cuda.current_device()
        except Exception:
            pass
        if info != self._rank_info:
            self._rank_info = info
            self._manifest_written = False
            self._write_process()

    def _write_manifest(self) -> None:
        from tracekit.collectors import manifest

        data = manifest.collect(package=self.config.package, rank_info=self._rank_info)
        _write_json(self.dir / MANIFEST_FILE, data)
        self._manifest_written = True

    @contextlib.contextmanager
    def _internal(self) -> Iterator[None]:
        """Calls made by tracekit itself on this thread (json, pyarrow) are not recorded."""
        loc = self._loc
        if getattr(loc, "stack", None) is None:
            self._thread_stack()
        old = loc.internal
        loc.internal = True
        try:
            yield
        finally:
            loc.internal = old

    def _write_process(self, **extra: Any) -> None:
        with self._internal():
            self._write_process_unguarded(**extra)

    def _write_process_unguarded(self, **extra: Any) -> None:
        data = dict(self.process_info)
        data.update(
            pid=self.pid,
            rank_info=self._rank_info,
            records=self.records,
            flushes=self.flushes,
            finished=self.finished,
            patched=self.patched,
            unresolved=self.unresolved,
            active=self.active,
        )
        data.update(extra)
        _write_json(self.dir / PROCESS_FILE, data)

    def close(self) -> None:
        """Final flush at process exit (atexit, multiprocessing finalizers, SIGTERM)."""
        if self.finished or os.getpid() != self.pid:
            return
        self.finished = True
        if self.profile is not None:
            try:
                self.profile.close()
            except Exception as exc:
                self.fail("profiler export", exc)
        if self._failed:
            return
        if self.records == 0 and self._fd is None:
            try:
                self._write_process(end_ns=time.time_ns())
            except OSError:
                pass  # disk full at exit: nothing was recorded, nothing is lost
            return
        self.flush(final=True)
        if not self._failed:
            try:
                self._write_process(end_ns=time.time_ns())
            except Exception as exc:
                self.fail("close", exc)

    def after_fork(self) -> None:
        """In a forked child: start a fresh record stream of its own (the parent keeps its)."""
        self.pid = os.getpid()
        self._buf = []
        self._gpu_pending = []
        if self._fd is not None and self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self._lock = threading.RLock()
        self._loc = threading.local()
        self.records = 0
        self.flushes = 0
        self.finished = False
        self._manifest_written = False
        self._rank_info = {}
        self.process_info = dict(self.process_info, pid=self.pid, ppid=os.getppid(), forked=True)
        self._write_process()


def _write_all(fd: int, data: bytes) -> None:
    """`os.write` until all is written: a nearly full disk takes part, then raises ENOSPC."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(data, default=str, indent=1))
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
