"""Inside an instrumented process: read the launcher's configuration, install the import hook.

Called by the bootstrap `sitecustomize` (and by the server plugins). A no-op unless
`TRACEKIT_RUN_DIR` is set. Imports only the standard library and tracekit's own light modules.
"""

from __future__ import annotations

import atexit
import functools
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from tracekit.collectors import graphs, phasemap
from tracekit.collectors.importhook import PostImportHook
from tracekit.collectors.recorder import (
    DEFAULT_FLUSH_RECORDS,
    EXIT_DEADLINE_S,
    Mode,
    Recorder,
    RecorderConfig,
)
from tracekit.collectors.recording import native
from tracekit.collectors.recording.gpu import DEFAULT_GPU_SAMPLE
from tracekit.collectors.redact import redact_argv
from tracekit.collectors.segments import RetentionPolicy
from tracekit.collectors.wrappers import install, resolve_owner

ENV_RUN_DIR = "TRACEKIT_RUN_DIR"
ENV_PHASES = "TRACEKIT_PHASES"  # path of the phase map TOML (the launcher copies it into raw/)
ENV_PHASES_SOURCE = "TRACEKIT_PHASES_SOURCE"  # the file it is a copy of (named in messages)
ENV_ADAPTER = "TRACEKIT_ADAPTER"
ENV_MODE = "TRACEKIT_MODE"  # light | full
ENV_PROFILE_CYCLES = "TRACEKIT_PROFILE_CYCLES"  # START:COUNT (full mode)
ENV_FLUSH_RECORDS = "TRACEKIT_FLUSH_RECORDS"
ENV_FLUSH_SECONDS = "TRACEKIT_FLUSH_SECONDS"  # the flush interval (`--flush-interval`)
# the launcher's FIFOs: a flush asked for before it forwards a signal (recording/doorbell.py)
ENV_CONTROL_DIR = "TRACEKIT_CONTROL_DIR"
ENV_EXIT_DEADLINE = "TRACEKIT_EXIT_DEADLINE_S"  # one bound on everything the exit waits for
ENV_DISABLE = "TRACEKIT_DISABLE"  # set to 1 to run a process of the tree without tracekit
# retention of each process's records (`--keep`, `--keep-hours`; collectors/segments.py)
ENV_KEEP_BYTES = "TRACEKIT_KEEP_BYTES"
ENV_KEEP_SECONDS = "TRACEKIT_KEEP_SECONDS"
ENV_SEGMENT_BYTES = "TRACEKIT_SEGMENT_BYTES"  # rotation size (default: derived from --keep)
ENV_SEGMENT_SECONDS = "TRACEKIT_SEGMENT_SECONDS"
ENV_GPU_SAMPLE = "TRACEKIT_GPU_SAMPLE"  # CUDA events on one cycle in N (`--gpu-sample N`)
# "torch": light mode's CUDA events are torch's, not the native extension's driver-API
# CudaEvent (the default where the extension loads; docs/BENCHMARKS.md, issue 25)
ENV_GPU_EVENTS = "TRACEKIT_GPU_EVENTS"

GRAPH_MODULE = "torch.cuda.graphs"


class Runtime:
    def __init__(self, recorder: Recorder, hook: PostImportHook, pmap: phasemap.PhaseMap) -> None:
        self.recorder = recorder
        self.hook = hook
        self.phasemap = pmap

    def patch_module(self, sites: list[phasemap.Site], module: ModuleType) -> None:
        rec = self.recorder
        for site in sites:
            name = str(site.target)
            try:
                if install(module, site, rec) is not None:
                    rec.patched.append(name)
                else:
                    self._already_wrapped(module, site)
            except AttributeError:
                rec.unresolved[name] = _not_found(module, site.target.qualname)
            except Exception as exc:
                rec.unresolved[name] = f"{type(exc).__name__}: {exc}"
        try:
            if not rec.opened and rec.active:
                rec.flush()  # opens the record file now, at import time, not inside a cycle
        except Exception as exc:
            rec.fail("open", exc)

    def _already_wrapped(self, module: ModuleType, site: phasemap.Site) -> None:
        """`install` found a tracekit wrapper there already: inherited from a base class whose
        own target was wrapped first (e.g. EagleProposer.propose, inherited from
        SpecDecodeBaseProposer.propose). It is covered: report it as resolved via the base."""
        rec = self.recorder
        name = str(site.target)
        if name in rec.patched:
            return
        owner, attr = resolve_owner(module, site.target.qualname)
        where = ""
        if isinstance(owner, type):
            for klass in owner.__mro__:
                if attr in vars(klass):
                    where = f"{klass.__module__}:{klass.__qualname__}.{attr}"
                    break
        if where and where != name:
            rec.patched.append(name)
            rec.process_info.setdefault("via_base", {})[name] = where

    def probe_module(self, specs: list[phasemap.ComponentSpec], module: ModuleType) -> None:
        """One-shot probes naming the components in use (collectors/components.py)."""
        from tracekit.collectors import components

        for spec in specs:
            try:
                components.install_probe(module, spec, components.reporter(self.recorder))
            except Exception as exc:
                self.recorder.unresolved[f"component {spec.name} at {spec.at}"] = (
                    f"{type(exc).__name__}: {exc}"
                )

    def patch_graphs(self, module: ModuleType) -> None:
        """torch.cuda.graphs' CUDAGraph hooked: replays and open captures counted."""
        graphs.install(module, self.recorder)

    def mp_util_imported(self, module: ModuleType) -> None:
        # multiprocessing's fork children leave through os._exit (no atexit): close the recorder
        # from multiprocessing's own exit finalizers, registered again in every forked child.
        def after_fork(rec: Recorder) -> None:
            module.Finalize(None, rec.close, exitpriority=100)

        module.register_after_fork(self.recorder, after_fork)


_RUNTIME: Runtime | None = None


def current() -> Runtime | None:
    return _RUNTIME


def _not_found(module: ModuleType, qualname: str) -> str:
    """Why `qualname` is not in the imported `module` (the first missing part). Python's own
    message for a module still marked as initialising (true inside an import hook) blames a
    circular import, which is wrong here: the module ran to its end without that name."""
    obj: object = module
    done: list[str] = []
    for part in qualname.split("."):
        if not hasattr(obj, part):
            kind = "package" if hasattr(module, "__path__") and obj is module else "module"
            if obj is not module:
                kind = "class" if isinstance(obj, type) else type(obj).__name__
            where = ".".join(done) or module.__name__
            return f"{kind} {where} has no attribute {part!r} in this release"
        obj = getattr(obj, part)
        done.append(part)
    return f"{qualname} in {module.__name__} is not a function"


def _int_env(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _float_env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def activate(*, via: str = "sitecustomize") -> Runtime | None:
    """Instrument this process if a tracekit run is configured; idempotent."""
    global _RUNTIME
    if _RUNTIME is not None:
        return _RUNTIME
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir or os.environ.get(ENV_DISABLE, "") not in ("", "0"):
        return None
    raw = Path(run_dir) / "raw"
    phases_path = os.environ.get(ENV_PHASES) or str(raw / "phasemap.toml")
    pmap = phasemap.load(phases_path, source=os.environ.get(ENV_PHASES_SOURCE) or None)
    rec = _recorder(raw, pmap, via)
    native.say_once()  # the extension did not load: the Python path, said once a process
    hook = PostImportHook()
    rt = Runtime(rec, hook, pmap)
    _RUNTIME = rt
    rec._write_process()
    _register_hooks(rt, hook, pmap)
    atexit.register(rec.close)
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
    rec.on_deferred_signal = _die_of
    _install_signals()
    return rt


def _recorder(raw: Path, pmap: phasemap.PhaseMap, via: str) -> Recorder:
    """The process's recorder, configured from the launcher's environment, with its
    process.json facts and, in full mode, its profiler window."""
    mode: Mode = "full" if os.environ.get(ENV_MODE, "light") == "full" else "light"
    config = RecorderConfig(
        raw_dir=raw,
        flush_records=_int_env(ENV_FLUSH_RECORDS, DEFAULT_FLUSH_RECORDS),
        flush_seconds=_float_env(ENV_FLUSH_SECONDS, 1.0),
        adapter=os.environ.get(ENV_ADAPTER, pmap.name),
        mode=mode,
        package=pmap.package,
        via=via,
        exit_deadline_s=max(0.0, _float_env(ENV_EXIT_DEADLINE, EXIT_DEADLINE_S)),
        flush_thread=True,
        control_dir=Path(os.environ[ENV_CONTROL_DIR]) if os.environ.get(ENV_CONTROL_DIR) else None,
        retention=RetentionPolicy.from_keep(
            _int_env(ENV_KEEP_BYTES, 0),
            _float_env(ENV_KEEP_SECONDS, 0.0),
            segment_bytes=_int_env(ENV_SEGMENT_BYTES, 0),
            segment_seconds=_float_env(ENV_SEGMENT_SECONDS, 0.0),
        ),
        gpu_sample=max(1, _int_env(ENV_GPU_SAMPLE, DEFAULT_GPU_SAMPLE)),
        driver_events=os.environ.get(ENV_GPU_EVENTS, "").strip().lower() != "torch",
    )
    rec = Recorder(config)
    rec.process_info = {
        "pid": os.getpid(),
        "ppid": os.getppid(),
        "host": socket.gethostname(),
        "argv": redact_argv(sys.argv),
        "executable": sys.executable,
        "via": via,
        "adapter": config.adapter,
        "mode": mode,
        "gpu_sample": config.gpu_sample,
        "hot_path": native.hot_path_name(rec._native)
        + (f" ({native.WHY_NOT})" if native.WHY_NOT else ""),
        "start_ns": time.time_ns(),
        "instrumented": True,
    }
    if mode == "full":
        from tracekit.collectors.profiler import CycleWindow, ProfileWindow

        window = CycleWindow.parse(os.environ.get(ENV_PROFILE_CYCLES, "2:3"))
        rec.profile = ProfileWindow(window, rec.dir, require=pmap.cycle.require)
    return rec


def _register_hooks(rt: Runtime, hook: PostImportHook, pmap: phasemap.PhaseMap) -> None:
    """What to do as each module is imported: patch the map's phase sites, probe its
    components, patch CUDA graphs, wrap torch.compile's boundaries, follow multiprocessing;
    then install the import hook."""
    for module, sites in pmap.sites().items():
        hook.register(module, functools.partial(rt.patch_module, sites))
    probes: dict[str, list[phasemap.ComponentSpec]] = {}
    for comp in pmap.components:
        probes.setdefault(comp.at.module, []).append(comp)
    for module, specs in probes.items():
        hook.register(module, functools.partial(rt.probe_module, specs))
    hook.register(GRAPH_MODULE, rt.patch_graphs)
    from tracekit.collectors import compiled, direct

    boundaries = compiled.Boundaries(rt.recorder)
    boundaries.install()
    hook.register(compiled.EVAL_FRAME_MODULE, functools.partial(_install_boundaries, boundaries))
    hook.register(direct.COMPILE_START_MODULE, direct.install_compile_start)
    hook.register("multiprocessing.util", rt.mp_util_imported)
    hook.install()


def _install_boundaries(boundaries: Any, module: ModuleType) -> None:
    from tracekit.collectors import compiled

    try:
        compiled.install_boundaries(module, boundaries)
    except Exception as exc:
        boundaries.rec.fail("compiled boundary", exc)


def _before_fork() -> None:
    rt = _RUNTIME
    if rt is not None:
        try:
            rt.recorder.before_fork()
        except Exception:
            pass


def _after_fork_in_parent() -> None:
    rt = _RUNTIME
    if rt is not None:
        try:
            rt.recorder.after_fork_in_parent()
        except Exception:
            pass


def _after_fork_in_child() -> None:
    rt = _RUNTIME
    if rt is not None:
        try:
            rt.recorder.after_fork()
        except Exception as exc:
            rt.recorder.fail("fork", exc)


# -- signals ---------------------------------------------------------------------------------
# SIGTERM and SIGINT flush the records in every instrumented process. tracekit's handler stays
# installed under the program's: `signal.signal` / `signal.getsignal` are wrapped so that the
# program installs, reads and restores its handlers as usual (it sees its own, never tracekit's),
# and tracekit's handler runs first, then the program's (or the default action: for SIG_DFL
# the final flush, then death by the same signal, as without tracekit). A signal the program
# ignores (SIG_IGN, also inherited from its parent) is left ignored. Handlers are installed
# only from the main thread (Python's rule).
SIGNALS = (signal.SIGTERM, signal.SIGINT)
_orig_signal = signal.signal
_orig_getsignal = signal.getsignal
_program: dict[int, Any] = {}  # signal -> the handler the program believes is installed


def _die_of(signum: int) -> None:
    """The default action of `signum` (terminate), after the final flush."""
    rt = _RUNTIME
    if rt is not None:
        rt.recorder.close()
    _orig_signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    handler = _program.get(signum, signal.SIG_DFL)
    rt = _RUNTIME
    rec = rt.recorder if rt is not None else None
    if handler == signal.SIG_DFL:
        if rec is not None and rec.flushing_here():
            rec.deferred_signal = signum  # delivered when that flush ends
            return
        _die_of(signum)
        return
    if handler == signal.SIG_IGN or handler is None:
        return
    if rec is not None and rec.active and not rec.finished and not rec.flushing_here():
        try:
            rec.flush(until=time.monotonic() + rec.config.exit_deadline_s)
        except Exception as exc:
            rec.fail("signal flush", exc)
    handler(signum, frame)


def _signal(signalnum: Any, handler: Any) -> Any:
    """`signal.signal`, with tracekit's handler kept in front of the program's."""
    if signalnum not in _program or not (
        callable(handler) or handler in (signal.SIG_DFL, signal.SIG_IGN)
    ):
        return _orig_signal(signalnum, handler)
    _orig_signal(signalnum, signal.SIG_IGN if handler == signal.SIG_IGN else _on_signal)
    old = _program[signalnum]
    _program[signalnum] = handler
    return old


def _getsignal(signalnum: Any) -> Any:
    if signalnum in _program:
        return _program[signalnum]
    return _orig_getsignal(signalnum)


_signal.__doc__ = _orig_signal.__doc__
_getsignal.__doc__ = _orig_getsignal.__doc__


def _install_signals() -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        try:
            current = _orig_getsignal(sig)
            if current is signal.SIG_IGN or current is None:
                continue  # ignored (nohup, a background job), or not Python's: left alone
            _orig_signal(sig, _on_signal)
        except (ValueError, OSError):
            continue
        _program[sig] = current
    if _program and signal.signal is _orig_signal:
        signal.signal = _signal
        signal.getsignal = _getsignal
