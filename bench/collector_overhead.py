"""Collector overhead: what light mode adds per wrapped call, and to the demo's cycle.

Figures for docs/BENCHMARKS.md, "Collector overhead".

1. CPU, per call (budget: 2 µs): a trivial function called N times unwrapped, then wrapped by a
   light-mode recorder that writes to a temporary run directory (flush every 10,000 records;
   the function is a method, as phase targets are, installed in its class: on the native hot
   path as its direct call and as the Python shim, collectors/direct.py;
   NVTX skipped unless a tool is attached). Measured before and after `import torch` (with
   torch loaded every call also asks whether torch.compile is tracing; one `gc.collect()` right
   after the import), on the native hot path and the Python one: a top-level phase (with the
   flush of every 10,000 rows, and without any flush in the loop), a top-level phase inside an
   open cycle, a phase nested in a phase (depth 1), and the recorder inactive (the wrapper's
   pass-through). Median of
   `--repeat` runs, wall clock (`perf_counter_ns`) and this thread's CPU time
   (`thread_time_ns`, which a loaded machine disturbs less).
2. Demo cycle (`--demo`; budget on a GPU: 1% of the cycle): `python -m tracekit.demo` with and
   without `tracekit launch`, alternated `--demo-runs` times; the demo's own median step time.

Usage:
    python bench/collector_overhead.py                      # CPU per-call figures
    git show REV:collectors/recorder.py > old/recorder.py  # (and wrappers.py), then:
    python bench/collector_overhead.py --code old           # the same figures for REV
    (a REV whose recorder is one file, before collectors/recording/; in one from before
    collectors/accept.py, change its `phasemap import read_attr_path` to `accept import`)
    python bench/collector_overhead.py --demo --device cuda --ranks 1 --cycles 200
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tracekit.collectors import recorder as _recorder
from tracekit.collectors import wrappers as _wrappers
from tracekit.collectors.phasemap import Site, Target

REC: Any = _recorder  # the recorder and wrappers measured (--code swaps them)
WRAP: Any = _wrappers


def _load_code(directory: Path) -> None:
    """Measure another version of `recorder.py` and `wrappers.py` (e.g. an older commit's,
    `git show REV:collectors/recorder.py > DIR/recorder.py`), for before/after runs."""
    import importlib.util

    global REC, WRAP
    loaded = []
    for name in ("recorder", "wrappers"):
        spec = importlib.util.spec_from_file_location(f"bench_{name}", directory / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        loaded.append(mod)
    REC, WRAP = loaded


def _native_module() -> Any:
    try:
        from tracekit.collectors.recording.native import NATIVE
    except ImportError:
        return None
    return NATIVE


def _f(x: int) -> int:
    return x


class _Plain:
    """The unwrapped method the wrapped one is measured against."""

    def f(self, x: int) -> int:
        return x


def _method_target(rec: Any, direct_calls: bool) -> Any:
    """A bound method whose class attribute `install` wrapped (a phase target is a method):
    its direct call (collectors/direct.py) with `direct_calls`, else the Python shim."""
    import types

    from tracekit.collectors import direct

    mod = types.ModuleType("bench_target")

    class T:
        def f(self, x: int) -> int:
            return x

    mod.T = T  # type: ignore[attr-defined]
    saved = direct._shims_only
    direct._shims_only = not direct_calls
    try:
        WRAP.install(mod, Site(Target("bench_target", "T.f"), phase="verify"), rec)
    finally:
        direct._shims_only = saved
    return T().f


def _loop(fn: Any, n: int) -> tuple[float, float]:
    """(wall ns, CPU ns of this thread) a call."""
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    for i in range(n):
        fn(i)
    t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
    return (t1 - t0) / n, (c1 - c0) / n


def per_call(
    n: int,
    repeat: int,
    *,
    nested: bool,
    in_cycle: bool = False,
    active: bool = True,
    native: bool = True,
    flush_records: int = 10_000,
    flush_thread: bool = False,
    direct_calls: bool | None = None,
) -> dict[str, float]:
    """One case, median of `repeat` loops of `n` calls. `direct_calls` None: a wrapped
    function (`make_wrapper`) against the bare one; True / False: a wrapped method, its direct
    call or its shim, against the unwrapped method."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg: dict[str, Any] = {"native": native} if _has_native() else {}
        rec = REC.Recorder(
            REC.RecorderConfig(
                raw_dir=Path(tmp) / "raw",
                flush_records=flush_records,
                flush_seconds=1.0 if flush_records <= 10_000 else 1e6,
                flush_thread=flush_thread,
                **cfg,
            )
        )
        bare: Any = _f
        if direct_calls is None:
            call = WRAP.make_wrapper(_f, Site(Target("bench", "_f"), phase="verify"), rec)
        else:
            call, bare = _method_target(rec, direct_calls), _Plain().f
        if flush_thread:
            rec.flush()  # opens the stream and starts the flush thread, as the runtime does
        rec.active = active  # inactive: the wrapper's pass-through
        if nested or in_cycle:
            # nested: inside an open phase call (depth 1, never a flush); in_cycle: a top-level
            # phase inside an open cycle-target call (flushes wait for 4x the batch)
            site = Site(Target("bench", "o"), phase="outer") if nested else None
            if site is None:
                site = Site(Target("bench", "step"), cycle=True)
            fr = rec.enter(site)
        plain, wrap = [], []
        for _ in range(repeat):
            plain.append(_loop(bare, n))
            wrap.append(_loop(call, n))
        if nested or in_cycle:
            rec.exit(fr, True, None)
        rec.close()
    p, w = statistics.median(x[0] for x in plain), statistics.median(x[0] for x in wrap)
    pc, wc = statistics.median(x[1] for x in plain), statistics.median(x[1] for x in wrap)
    return {
        "plain_ns": p,
        "wrapped_ns": w,
        "overhead_ns": w - p,
        "plain_cpu_ns": pc,
        "wrapped_cpu_ns": wc,
        "overhead_cpu_ns": wc - pc,
    }


def _has_native() -> bool:
    """The measured recorder has the `native` switch (not an older `--code` one)."""
    return "native" in getattr(REC.RecorderConfig, "__dataclass_fields__", {})


def demo_runs(args: argparse.Namespace) -> list[dict[str, Any]]:
    demo = [sys.executable, "-m", "tracekit.demo", "--device", args.device, "--ranks", str(args.ranks),
            "--cycles", str(args.cycles), "--verify-mode", args.verify_mode, "-q"]  # fmt: skip
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.demo_runs):
            for traced in (False, True):
                result = Path(tmp) / f"r{i}{int(traced)}.json"
                cmd = [*demo, "--result", str(result)]
                if traced:
                    cmd = [sys.executable, "-m", "tracekit", "launch", "--adapter", "demo", "--out", tmp,
                           "--name", f"run{i}", "--", *cmd]  # fmt: skip
                env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
                subprocess.run(cmd, check=True, env=env, capture_output=True, text=True)
                data = json.loads(result.read_text())
                out.append({"traced": traced, **data})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--demo", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=100)
    ap.add_argument("--verify-mode", default="extend")
    ap.add_argument("--demo-runs", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the raw figures as JSON")
    ap.add_argument(
        "--code",
        type=Path,
        help="measure recorder.py and wrappers.py from this directory (an older version)",
    )
    ap.add_argument("--no-torch", action="store_true", help="skip the rows with torch imported")
    ap.add_argument(
        "--python-only", action="store_true", help="only the Python hot path (not the native one)"
    )
    args = ap.parse_args()
    if args.code is not None:
        _load_code(args.code)

    try:
        import nvtx  # noqa: F401

        nvtx_note = "nvtx installed (no tool attached: dummy domain)"
    except ImportError:
        nvtx_note = "nvtx not installed"
    rows = []
    for torch_loaded in (False,) if args.no_torch else (False, True):
        if torch_loaded:
            import torch  # noqa: F401

            # Settle the import: its ~150k new objects make the next full collection due, and
            # that one collection (~0.2 s here) would land in the first loop below; a server
            # that has run a while has long paid it. Later collections are measured.
            gc.collect()
        # (label, native hot path, direct calls): a wrapped method, its class attribute the
        # direct call or the shim (collectors/direct.py); --code: a wrapped function
        variants: list[tuple[str, bool, bool | None]] = [("python", False, False)]
        if _has_native() and not args.python_only and _native_module() is not None:
            variants[:0] = [("native, direct", True, True), ("native, shim", True, False)]
        if args.code is not None:
            variants = [
                (label, nat, None) for label, nat, _ in variants if label != "native, direct"
            ]
        for label, native, direct_calls in variants:
            # (where, nested, in a cycle, active, flush every, flush thread): "top" pays the
            # flush of every 10,000 rows on the calling thread; with the flush thread (what
            # `tracekit launch` sets up) the calling thread only wakes it; "top, no flush" is
            # the call alone
            cases = [
                ("top level", False, False, True, 10_000, False),
                ("top level, flush thread (launch's setting)", False, False, True, 10_000, True),
                ("top level, no flush in the loop", False, False, True, 10**9, False),
                ("top level inside an open cycle", False, True, True, 10_000, False),
                ("nested in a phase (depth 1)", True, False, True, 10_000, False),
                ("recorder inactive (pass-through)", False, False, False, 10_000, False),
            ]
            for where, nested, in_cycle, active, flush, thread in cases:
                if thread and "flush_thread" not in REC.RecorderConfig.__dataclass_fields__:
                    continue
                r = per_call(
                    args.calls, args.repeat, nested=nested, in_cycle=in_cycle, active=active,
                    native=native, flush_records=flush, flush_thread=thread,
                    direct_calls=direct_calls,
                )  # fmt: skip
                rows.append(
                    {"torch_imported": torch_loaded, "where": where, "hot_path": label, **r}
                )  # fmt: skip
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "nvtx": nvtx_note,
        "load_average": os.getloadavg(),
        "per_call": rows,
    }
    if args.demo:
        runs = demo_runs(args)
        report["demo"] = runs
    if args.json:
        print(json.dumps(report, indent=2))
        return
    load = ", ".join(f"{x:.1f}" for x in report["load_average"])
    print(
        f"Python {report['python']}, {nvtx_note}; {args.calls} calls x {args.repeat}, median; "
        f"load average {load}"
    )
    print(
        "| torch imported | hot path | phase | unwrapped ns/call | wrapped ns/call "
        "| overhead µs/call (wall) | overhead µs/call (thread CPU) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {'yes' if r['torch_imported'] else 'no'} | {r['hot_path']} | {r['where']} | {r['plain_ns']:.0f} | {r['wrapped_ns']:.0f} | {r['overhead_ns'] / 1000:.2f} | {r['overhead_cpu_ns'] / 1000:.2f} |"
        )
    if args.demo:

        def key(d: dict[str, Any]) -> float:
            for k in ("step_ms_p50", "cycle_ms_p50", "step_p50_ms"):
                if k in d:
                    return float(d[k])
            raise KeyError(f"no step time in the demo's result: {sorted(d)}")

        plain = [key(r) for r in report["demo"] if not r["traced"]]
        traced = [key(r) for r in report["demo"] if r["traced"]]
        p, t = statistics.median(plain), statistics.median(traced)
        print()
        print(
            f"Demo {args.device}, {args.ranks} rank(s), {args.cycles} cycles, verify {args.verify_mode}, {args.demo_runs} alternated runs"
        )
        print("| run | step p50 ms (each run) | median |")
        print("|---|---|---|")
        print(f"| plain | {', '.join(f'{x:.3f}' for x in plain)} | {p:.3f} |")
        print(f"| tracekit launch (light) | {', '.join(f'{x:.3f}' for x in traced)} | {t:.3f} |")
        print(f"overhead: {100 * (t - p) / p:+.2f}% of the cycle")


if __name__ == "__main__":
    main()
