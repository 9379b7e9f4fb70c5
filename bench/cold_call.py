"""A recorded call made cold: what one call touches (callgrind) and what it costs (issue 25).

    N=300 valgrind --tool=callgrind --cache-sim=yes --LL=2097152,16,64 \\
        --toggle-collect=starmap_next --callgrind-out-file=cg.on.300 \\
        python bench/cold_call.py on [call|boundary]
    (the same with N=100, and with `off`; `python bench/callgrind_diff.py cg` prints per call,
    (N=300 minus N=100) / 200, on minus off, by function)

    python bench/cold_call.py time [call|boundary] [--thrash cache|tlb|sleep|none] [--calls 800]

Shapes: `call`, the demo's baseline call (a method mapped as a phase that is also the cycle
target, on the native hot path, torch imported); `boundary`, the compiled boundary's call
(collectors/compiled.py's wrapper around a plain function, the HF decode site: a `starts_with`
phase, as transformers' compiled decode step is recorded). Between calls a 4 MB buffer is
written, so each call starts with the caches holding none of its lines, as a call right after a
long device wait does on the H200 (docs/BENCHMARKS.md, "seventh" and "tenth session"). Each
call is made through `itertools.starmap`, so `--toggle-collect=starmap_next` counts what runs
inside the call and nothing else. `on` records, `off` pauses recording (the wrapper's
pass-through).

`time`: the call timed one by one (`perf_counter_ns`) after a thrash (`cache`: 64 MB written a
line at a time; `tlb`: a word of each 4 KB page of 256 MB; `sleep`: a 2 ms sleep; `none`),
recording on and off in ABBA order; prints the medians, on minus off, and an unwrapped empty
call's after the same thrash. Figures: docs/BENCHMARKS.md, "tenth session".
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable
from itertools import starmap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def _recorder() -> Any:
    from tracekit.collectors.recorder import Recorder, RecorderConfig

    cfg = RecorderConfig(
        raw_dir=Path(tempfile.mkdtemp()), flush_records=10**8, flush_seconds=1e6,
        gpu_sample=10**6,
    )  # fmt: skip
    return Recorder(cfg)


def _call_shape(rec: Any) -> Callable[[], Any]:
    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.wrappers import install

    mod = types.ModuleType("tk_cold_call")

    class Decoder:
        def step(self) -> int:
            return 0

    mod.Decoder = Decoder  # type: ignore[attr-defined]
    install(
        mod, Site(target=Target.parse("tk_cold_call:Decoder.step"), phase="decode", cycle=True), rec
    )
    return Decoder().step


def _boundary_shape(rec: Any) -> Callable[[], Any]:
    from tracekit.collectors import compiled
    from tracekit.collectors.phasemap import Site, Target

    def forward(x: int, y: int = 0) -> int:
        return x

    site = Site(target=Target.parse("tk_cold_call:forward"), phase="decode", starts_cycle=True)
    b = compiled.Boundary("tk_cold_call:forward", None)
    b.site = site
    call = compiled._boundary_call(forward, b, rec)
    return lambda: call(1)


def _thrash(kind: str) -> Callable[[], None]:
    import numpy as np

    if kind == "none":
        return lambda: None
    if kind == "sleep":
        return lambda: time.sleep(0.002)
    big = np.ones((256 << 20) // 8)
    lines, pages = big[: (64 << 20) // 8 : 8], big[:: 4096 // 8]

    def thrash() -> None:
        (lines if kind == "cache" else pages)[:] += 1.0

    return thrash


def _timed(rec: Any, call: Callable[[], Any], thrash: Callable[[], None], calls: int) -> str:
    pc = time.perf_counter_ns
    res: dict[bool, list[int]] = {True: [], False: []}
    for blk in range(calls // 4):
        for on in (True, False, False, True) if blk % 2 else (False, True, True, False):
            rec.set_recording(on)
            thrash()
            t0 = pc()
            call()
            res[on].append(pc() - t0)

    class Empty:
        def step(self) -> int:
            return 0

    empty, e = [], Empty()
    for _ in range(calls // 2):
        thrash()
        t0 = pc()
        e.step()
        empty.append(pc() - t0)
    on, off = (statistics.median(res[k]) / 1e3 for k in (True, False))
    return (
        f"on {on:.2f} µs, off {off:.2f}, on minus off {on - off:.2f}; "
        f"an empty call {statistics.median(empty) / 1e3:.2f}; {rec.records} rows"
    )


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("what", choices=["on", "off", "time"])
    p.add_argument("shape", nargs="?", choices=["call", "boundary"], default="call")
    p.add_argument("--thrash", choices=["cache", "tlb", "sleep", "none"], default="cache")
    p.add_argument("--calls", type=int, default=800)
    args = p.parse_args(argv)
    import numpy as np
    import torch  # noqa: F401  (the compile check runs as in a program that imported torch)

    rec = _recorder()
    call = (_boundary_shape if args.shape == "boundary" else _call_shape)(rec)
    for _ in range(20):  # the site's first calls (generic path)
        call()
    if args.what == "time":
        print(f"{args.shape}, {args.thrash}: {_timed(rec, call, _thrash(args.thrash), args.calls)}")
        rec.close()
        return 0
    rec.set_recording(args.what == "on")
    buf = np.ones(4 << 20 >> 3)  # 4 MB: twice the simulated last-level cache
    calls, one = int(os.environ.get("N", "200")), ((),)
    for _ in range(calls):
        buf[::8] += 1.0  # every cache line of the buffer written
        next(starmap(call, one))  # --toggle-collect=starmap_next: the call and nothing else
    print(f"{calls} calls, recording {args.what}: {rec.records} rows", file=sys.stderr)
    rec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
