"""Where light mode's host time goes, piece by piece, on the machine it runs on (issue 25).

    python bench/host_costs.py [--out FILE] [--calls 20000] [--repeat 5] [--flushes 20]

One process, one thread; every figure is the median over `--repeat` loops of wall ns per call
with the empty loop's time taken off (`time.perf_counter_ns` around the loop, not per call):

1. `clock`: the clocks the hot path and the flush read (`time.time_ns` is the hot path's
   CLOCK_REALTIME) and, where torch and CUDA are there, what the native hot path asks torch a
   call: the capture builtin (`torch._C._cuda_isCurrentStreamCapturing`), `torch.cuda`'s
   `_initialized`, the compile flag. On a virtual machine without a vDSO clock a clock read is
   a system call: this part says so.
2. `call`: a wrapped method (a phase target) on the native hot path with no flush and no
   CUDA event (flush interval and batch past the loop, `gpu_sample` past its cycles): nested,
   outermost, and a demo-shaped cycle (a cycle target and three phases) per wrapped call,
   against the same unwrapped methods; as a direct call (collectors/direct.py) and through the
   Python shim (what a process keeps once torch.compile ran); with CUDA, the direct call also
   with the capture query replaced by `bool` (what the query costs). (Session 7's result
   files also hold a "no_cuda_branch" variant: the recorder disabled itself there, its figures
   are a disabled recorder's.)
3. `flush`: what one flush of `--rows` rows costs the thread that runs it (thread CPU, all of
   it with the GIL held but for the native event resolution and the file system's calls), and
   its steps: the event resolution, taking the rows, encoding, the write, process.json.
   With CUDA, once without events and once with one cycle in 8 timed.

`--device cpu` (or no CUDA) runs parts 1-3 without the CUDA rows; `--no-torch` as if torch
were not installed (the hot path's torch probe finds nothing). Printed as one JSON line.
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOOPS: dict[str, Any] = {"calls": 20000, "repeat": 5}


def per_call_ns(fn: Callable[[], Any], calls: int = 0) -> float:
    """Median wall ns a call of `fn` over the repeats, the empty loop's time taken off."""
    n = calls or LOOPS["calls"]

    def run(f: Callable[[], Any]) -> float:
        t0 = time.perf_counter_ns()
        for _ in range(n):
            f()
        return (time.perf_counter_ns() - t0) / n

    def nothing() -> None:
        return None

    walls = []
    for _ in range(LOOPS["repeat"]):
        walls.append(run(fn) - run(nothing))
    return round(statistics.median(walls), 1)


def clock_costs(torch: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        name: per_call_ns(getattr(time, name))
        for name in ("time_ns", "perf_counter_ns", "monotonic_ns", "thread_time_ns")
    }
    src = Path("/sys/devices/system/clocksource/clocksource0")
    for f in ("current_clocksource", "available_clocksource"):
        try:
            out[f] = (src / f).read_text().strip()
        except OSError:
            out[f] = None
    if torch is None:
        return out
    tc = torch.compiler
    out["compile_flag_read"] = per_call_ns(lambda: tc._is_compiling_flag)
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
        cuda = torch.cuda
        out["cuda_initialized_read"] = per_call_ns(lambda: cuda._initialized)
        out["capture_builtin"] = per_call_ns(torch._C._cuda_isCurrentStreamCapturing)
        out["capture_public"] = per_call_ns(torch.cuda.is_current_stream_capturing)
    return out


def make_recorder(
    tmp: Path, name: str, gpu_sample: int, flush_rows: int, direct_calls: bool = True
) -> tuple[Any, Any]:
    """A recorder (native hot path, no flush thread) and an object whose class's methods are
    wrapped as phase targets are (a method: its direct call, collectors/direct.py, or with
    `direct_calls` False the Python shim): a demo-shaped cycle (`step`: draft, verify,
    draft_extend) and `outer` / `inner` phases."""
    from tracekit.collectors import direct
    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.recorder import Recorder, RecorderConfig
    from tracekit.collectors.wrappers import install

    rec = Recorder(
        RecorderConfig(
            raw_dir=tmp / name, flush_records=flush_rows, flush_seconds=1e6, gpu_sample=gpu_sample
        )
    )
    mod = types.ModuleType(f"tk_host_{name}")

    class T:
        def outer(self) -> None:
            return None

        def inner(self) -> None:
            return None

        def draft(self) -> None:
            return None

        def verify(self) -> None:
            return None

        def draft_extend(self) -> None:
            return None

        def step(self) -> None:
            self.draft()
            self.verify()
            self.draft_extend()

    mod.T = T  # type: ignore[attr-defined]
    sites = [Site(target=Target.parse(f"{mod.__name__}:T.step"), cycle=True)]
    for fn, phase in (("outer", "verify"), ("inner", "allreduce"), ("draft", "draft")):
        sites.append(Site(target=Target.parse(f"{mod.__name__}:T.{fn}"), phase=phase))
    for phase in ("verify", "draft_extend"):
        sites.append(Site(target=Target.parse(f"{mod.__name__}:T.{phase}"), phase=phase))
    saved = direct._shims_only
    direct._shims_only = not direct_calls
    try:
        for site in sites:
            install(mod, site, rec)
    finally:
        direct._shims_only = saved
    obj = T()
    obj.outer()  # registration, the torch probe, the GPU calibration
    for _ in range(3):  # past cycle 0, which every `gpu_sample` times
        obj.step()
    return rec, obj


def call_costs(tmp: Path, torch: Any) -> dict[str, Any]:
    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.recording import native

    out: dict[str, Any] = {"hot_path": "native" if native.NATIVE else f"python ({native.WHY_NOT})"}

    class Plain:
        def f(self) -> None:
            return None

        def step(self) -> None:
            self.f()
            self.f()
            self.f()

    plain = Plain()
    bare, bare_step = per_call_ns(plain.f), per_call_ns(plain.step, LOOPS["calls"] // 4)
    out["bare_call_ns"], out["bare_step_ns"] = bare, bare_step
    variants: dict[str, tuple[bool, Callable[[Any], None]]] = {
        "direct": (True, lambda rec: None),
        "shim": (False, lambda rec: None),
    }
    if torch is not None and torch.cuda.is_available():
        variants["direct_no_capture_query"] = (True, lambda rec: setattr(rec, "_capturing", bool))
    for vname, (direct_calls, change) in variants.items():
        rec, obj = make_recorder(tmp, f"call_{vname}", 10**9, 10**9, direct_calls)
        change(rec)
        fr = rec.enter(Site(target=Target.parse("tk_host_x:o"), phase="verify"))
        out[f"nested_{vname}"] = round(per_call_ns(obj.inner) - bare, 1)
        rec.exit(fr, True, None)
        out[f"outermost_{vname}"] = round(per_call_ns(obj.outer) - bare, 1)
        cycle = per_call_ns(obj.step, LOOPS["calls"] // 4)
        out[f"cycle_per_call_{vname}"] = round((cycle - bare_step) / 4, 1)
        rec.close()
    return out


def timed(store: dict[str, list[int]], key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        c0 = time.thread_time_ns()
        try:
            return fn(*args, **kwargs)
        finally:
            store.setdefault(key, []).append(time.thread_time_ns() - c0)

    return wrapper


def flush_costs(tmp: Path, name: str, gpu_sample: int, rows: int, flushes: int) -> dict[str, Any]:
    """Thread CPU µs of one flush of `rows` rows (a demo-shaped cycle: 4 rows), and of its
    steps; medians over `flushes` flushes after two unmeasured ones."""
    from tracekit.collectors.recording import output

    rec, obj = make_recorder(tmp, name, gpu_sample, 10**9)
    steps: dict[str, list[int]] = {}
    for meth in ("_resolve_gpu", "_take_rows", "_write_process", "_rotate"):
        setattr(rec, meth, timed(steps, meth, getattr(rec, meth)))
    encode = output.encode_rows
    output.encode_rows = timed(steps, "encode_rows", encode)  # type: ignore[assignment]
    total: list[int] = []
    walls: list[int] = []
    sync = getattr(getattr(sys.modules.get("torch"), "cuda", None), "synchronize", None)
    try:
        for i in range(flushes + 2):
            for _ in range(rows // 4):
                obj.step()
            if sync is not None and gpu_sample < 10**9 and rec._cuda is not None:
                sync()  # the events complete, as they do a period later in a real run
            if i == 2:
                steps.clear()
            stream = rec._stream
            if stream is not None and not hasattr(stream.write, "__wrapped__"):
                stream.write = timed(steps, "stream_write", stream.write)
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            rec.flush()
            if i >= 2:
                total.append(time.thread_time_ns() - c0)
                walls.append(time.perf_counter_ns() - w0)
    finally:
        output.encode_rows = encode  # type: ignore[assignment]
        rec.close()

    def med(xs: list[int]) -> float:
        return round(statistics.median(xs) / 1e3, 1) if xs else 0.0

    out = {"rows": rows, "flushes": len(total), "cpu_us": med(total), "wall_us": med(walls)}
    out.update({f"{k}_us": med(v) for k, v in sorted(steps.items())})
    out["events_recorded"] = rec.events_recorded
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--flushes", type=int, default=20)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--device", choices=("auto", "cpu"), default="auto")
    ap.add_argument("--no-torch", action="store_true", help="run as if torch were not installed")
    a = ap.parse_args(argv)
    LOOPS.update(calls=a.calls, repeat=a.repeat)
    torch: Any = None
    if a.no_torch:
        sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import torch as torch_mod

        torch = torch_mod
    except ImportError:
        pass
    if a.device == "cpu" and torch is not None:
        torch.cuda.is_available = lambda: False  # type: ignore[assignment]
    tmp = Path(tempfile.mkdtemp())
    res: dict[str, Any] = {"python": sys.version.split()[0]}
    try:
        res["clock"] = clock_costs(torch)
        res["call"] = call_costs(tmp, torch)
        res["flush"] = flush_costs(tmp, "flush", 10**9, a.rows, a.flushes)
        if torch is not None and torch.cuda.is_available():
            res["flush_sample8"] = flush_costs(tmp, "flush8", 8, a.rows, a.flushes)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    line = json.dumps(res)
    print(line, flush=True)
    if a.out is not None:
        a.out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
