"""What a CUDA timing event costs a step that waits for the device, inside one process.

Light mode records a CUDA event at each boundary of a top-level phase call. On the H200 the
compiled HF generate cost +3 to +6% a token with events and nothing measurable without
(docs/BENCHMARKS.md), far more than the events' host time (1.3 µs a driver-API record). A step
that synchronises (HF's stopping check, the demo's token read) puts the device's time on the
critical path, so this script asks whether an event costs the device time: one process, a
step of `--kernels` small kernels (as a CUDA graph replay, and eager), synchronised after each
step, in ABBA blocks of `--block` steps, the variants:

- `none`: the step alone;
- `driver`: a timing event of the driver API (tracekit's `CudaEvent`) before and after;
- `torch`: torch.cuda.Event(enable_timing=True) before and after;
- `notiming`: torch.cuda.Event() (timing off) before and after;
- `host`: the host work of a driver record without the record (the current-stream look-ups).

Per variant against `none`: the mean over groups of (variant / none - 1), in µs a step and %,
with a 95% t-interval. Prints JSON.

    python bench/event_cost.py [--steps 400] [--block 10] [--kernels 60]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from tracekit.analyzers.tquantile import t975


def make_step(torch: Any, kernels: int, graph: bool) -> Callable[[], None]:
    x = torch.randn(256, 256, device="cuda")
    w = torch.randn(256, 256, device="cuda") * 0.01

    def body() -> Any:
        y = x
        for _ in range(kernels):
            y = torch.tanh(y @ w)
        return y

    if not graph:

        def eager() -> None:
            body()

        return eager
    body()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        body()
    replay: Callable[[], None] = g.replay
    return replay


def variants(torch: Any, native: Any) -> dict[str, Callable[[Callable[[], None]], None]]:
    tc = torch._C
    out: dict[str, Callable[[Callable[[], None]], None]] = {}

    def none(step: Callable[[], None]) -> None:
        step()

    out["none"] = none
    if native is not None:
        make = [tc._cuda_getCurrentRawStream, tc._cuda_getDevice]
        pool = [native.CudaEvent(*make) for _ in range(2)]

        def driver(step: Callable[[], None]) -> None:
            pool[0].record()
            step()
            pool[1].record()

        out["driver"] = driver
    te = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    tn = [torch.cuda.Event() for _ in range(2)]

    def with_torch(step: Callable[[], None]) -> None:
        te[0].record()
        step()
        te[1].record()

    def notiming(step: Callable[[], None]) -> None:
        tn[0].record()
        step()
        tn[1].record()

    def host(step: Callable[[], None]) -> None:
        tc._cuda_getCurrentRawStream(tc._cuda_getDevice())
        step()
        tc._cuda_getCurrentRawStream(tc._cuda_getDevice())

    out.update(torch=with_torch, notiming=notiming, host=host)
    return out


def measure(torch: Any, step: Callable[[], None], runs: dict[str, Any], a: Any) -> dict[str, Any]:
    """ABBA blocks of each variant against `none`; per step wall µs."""
    res: dict[str, Any] = {}
    sync = torch.cuda.synchronize
    for name, fn in runs.items():
        if name == "none":
            continue
        groups: list[float] = []
        diffs: list[float] = []
        base_all: list[float] = []
        for g in range(a.steps // (4 * a.block)):
            means = []
            for on in (True, False, False, True):
                run = fn if on else runs["none"]
                sync()
                t0 = time.perf_counter()
                for _ in range(a.block):
                    run(step)
                    sync()
                means.append((time.perf_counter() - t0) / a.block * 1e6)
            on_m, off_m = (means[0] + means[3]) / 2, (means[1] + means[2]) / 2
            if g:  # the first group warms up
                groups.append(100 * (on_m / off_m - 1))
                diffs.append(on_m - off_m)
                base_all.append(off_m)
        n = len(groups)
        half = t975(n - 1) * statistics.stdev(groups) / math.sqrt(n) if n > 1 else float("nan")
        dhalf = t975(n - 1) * statistics.stdev(diffs) / math.sqrt(n) if n > 1 else float("nan")
        res[name] = {
            "groups": n,
            "cost_pct": statistics.fmean(groups),
            "pct_95": [statistics.fmean(groups) - half, statistics.fmean(groups) + half],
            "cost_us": statistics.fmean(diffs),
            "us_95": [statistics.fmean(diffs) - dhalf, statistics.fmean(diffs) + dhalf],
            "step_us": statistics.fmean(base_all),
        }
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--block", type=int, default=10)
    ap.add_argument("--kernels", type=int, default=60)
    a = ap.parse_args(argv)
    import torch

    from tracekit.collectors.recording import native as native_mod

    native = native_mod.NATIVE
    out: dict[str, Any] = {"args": vars(a), "torch": torch.__version__}
    for graph in (True, False):
        step = make_step(torch, a.kernels, graph)
        runs = variants(torch, native)
        key = "graph" if graph else "eager"
        out[key] = measure(torch, step, runs, a)
        for name, r in out[key].items():
            print(
                f"{key} {name}: {r['cost_us']:+.1f} µs a step [{r['us_95'][0]:+.1f}, "
                f"{r['us_95'][1]:+.1f}] ({r['cost_pct']:+.2f}% of {r['step_us']:.0f} µs)",
                file=sys.stderr,
            )
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
