"""What a recorded call costs when it wraps a GPU step that synchronises (issue 25).

    python bench/sync_exit.py [--steps 480] [--block 8] [--out FILE]

The demo's baseline decode cycle is one wrapped call (a phase that is also the cycle target:
the recorder's Python `enter` / `exit`) around a CUDA graph replay and the `int()` that reads
its token back; inside one process recording it costs about 30 µs a cycle (the `abbare` runs:
no CUDA event, no flush), where the same call in a loop with no GPU work costs 2-4 µs
(bench/host_costs.py). This program separates the two: one process, a recorder of its own
(no flush, no CUDA event after cycle 0), a class whose `step` is mapped as the demo's is, and
steps of three kinds, each in ABBA blocks of recording on and off:

- `sync`: a CUDA graph of matrix products (about `--step-ms` ms) replayed, then `int()` of
  one element (the device's work and its read-back inside the call, as the demo);
- `host`: the same call with no GPU work (the host path alone);
- `after_sync`: the GPU work and its read-back before the call, the call itself empty (what
  the first Python code after a long device wait costs).

`KIND_noquery` (`--kinds`): the same with the recorder's capture query replaced by a C no-op;
`KIND_counted`: with torch's captures counted and none open (what `collectors/graphs.py` sets
up in a launched program), so a call that takes no CUDA event does not ask.
On the native path (cycle targets included, since 9ae72db) `enter_us` / `exit_us` stay 0: the
call never reaches the Python `enter` / `exit`.

Per kind: the step's wall time on minus off (mean over ABBA groups, 95% t-interval), and in
the "on" steps the time spent inside the recorder's `enter` and `exit` (perf_counter_ns
around them; their own cost included). Printed as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def build_graph(torch: Any, step_ms: float) -> tuple[Any, Any]:
    """A CUDA graph of chained 4096x4096 products lasting about `step_ms` ms, and its output."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) / 64
    for _ in range(3):
        (a @ b).sum()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    one = (time.perf_counter() - t0) / 20 * 1e3
    n = max(1, round(step_ms / one))
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = a
        for _ in range(3):
            y = a @ b
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        y = a
        for _ in range(n):
            y = torch.tanh(y @ b)
    return g, y


def timed_hooks(rec: Any, spent: list[int]) -> None:
    """The recorder's `enter` / `exit` with the time inside them added to spent[0] / [1]."""
    enter, leave = rec.enter, rec.exit

    def t_enter(site: Any) -> Any:
        t = time.perf_counter_ns()
        try:
            return enter(site)
        finally:
            spent[0] += time.perf_counter_ns() - t

    def t_exit(*args: Any, **kwargs: Any) -> None:
        t = time.perf_counter_ns()
        try:
            leave(*args, **kwargs)
        finally:
            spent[1] += time.perf_counter_ns() - t

    rec.enter, rec.exit = t_enter, t_exit


def analyse(walls: list[float], on: list[bool], block: int) -> dict[str, float]:
    """On minus off a step (µs): `overhead_ab.step_difference` over ABBA groups after the
    first, with its 95% t-interval."""
    import overhead_ab

    result = {"step_ms": [w / 1e3 for w in walls], "ab_on": on, "ab_blocks": block}
    diff = overhead_ab.step_difference(result, "step_ms", skip_groups=1)
    assert diff is not None
    return diff


def run_kind(
    kind: str, torch: Any, graph: Any, out: Any, steps: int, block: int, variant: str = ""
) -> dict[str, Any]:
    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.recorder import Recorder, RecorderConfig
    from tracekit.collectors.wrappers import install

    tmp = Path(tempfile.mkdtemp())
    rec = Recorder(
        RecorderConfig(raw_dir=tmp, flush_records=10**8, flush_seconds=1e6, gpu_sample=10**6)
    )
    spent = [0, 0]
    timed_hooks(rec, spent)
    if variant == "noquery":  # the capture query replaced by a C no-op (what it costs the call)
        rec._probe_torch()
        rec._capturing = bool
    if variant == "counted":  # captures counted, none open: unsampled calls do not ask
        rec._captures = 0
    mod = types.ModuleType(f"tk_sync_{kind}")

    class Decoder:
        def step(self) -> int:
            if kind == "sync":
                graph.replay()
                return int(out[0, 0].float().item() > 0)
            return 0

    mod.Decoder = Decoder  # type: ignore[attr-defined]
    # the demo's BaselineDecoder.step: the phase `decode` and the cycle target
    target = Target.parse(f"{mod.__name__}:Decoder.step")
    install(mod, Site(target=target, phase="decode", cycle=True), rec)
    dec = Decoder()
    for _ in range(3):
        dec.step()
    walls: list[float] = []
    on: list[bool] = []
    spent_on = [0, 0]
    for i in range(steps):
        state = (i // block) % 4 in (0, 3)
        rec.set_recording(state)
        if kind == "after_sync":
            graph.replay()
            int(out[0, 0].float().item() > 0)
        if kind == "host":
            torch.cuda.synchronize()
        e0, x0 = spent
        t0 = time.perf_counter()
        dec.step()
        if kind == "sync":
            torch.cuda.synchronize()
        walls.append((time.perf_counter() - t0) * 1e6)
        on.append(state)
        if state:
            spent_on[0] += spent[0] - e0
            spent_on[1] += spent[1] - x0
    rec.close()
    n_on = sum(on)
    res = analyse(walls, on, block)
    res.update(
        step_us_p50=statistics.median(walls),
        enter_us=spent_on[0] / n_on / 1e3,
        exit_us=spent_on[1] / n_on / 1e3,
        records=rec.records,
    )
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--steps", type=int, default=480)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument(
        "--kinds",
        default="sync,host,after_sync,sync",
        help="comma-separated; KIND_noquery: the capture query replaced by a C no-op; "
        "KIND_counted: captures counted, none open",
    )
    a = ap.parse_args(argv)
    import torch

    graph, out = build_graph(torch, a.step_ms)
    res: dict[str, Any] = {}
    for kind in a.kinds.split(","):
        variant = next((v for v in ("noquery", "counted") if kind.endswith(f"_{v}")), "")
        base = kind.removesuffix(f"_{variant}")
        key = kind if kind not in res else f"{kind}_again"
        res[key] = run_kind(base, torch, graph, out, a.steps, a.block, variant)
    line = json.dumps(res)
    print(line)
    if a.out is not None:
        a.out.write_text(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
