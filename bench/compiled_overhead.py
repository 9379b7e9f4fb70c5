"""Cost of recording a compiled program on CPU (issue 22, item 6): an inductor-compiled small
decoder-like model, called with and without tracekit in one process, alternated.

Two copies of one model class, identical code and weights: `Mapped`, whose `forward` is a
phase target (`decode`, `[cycle] starts_with = "decode"`) wrapped by tracekit, compiled after
tracekit wrapped torch.compile (each call is recorded at the compiled boundary: one `decode`
record a call), and `Plain`, compiled before (no tracekit anywhere on its path). Both compile to
the same graph (the FX graph cache serves the second). Calls run in blocks of `--block` calls
in the order Plain, Mapped, Mapped (recording off), Mapped (off), Mapped, Plain, ... (a linear
drift of the machine cancels); each block's mean call time is one sample; the figures are the
ratios of the medians over blocks: Mapped against Plain (tracekit against no tracekit; two
module instances, so their own speed may differ a little) and Mapped against Mapped with
recording off (the recording's cost on one module), and the records written are checked
against the calls made while recording.

    python bench/compiled_overhead.py [--blocks 40] [--block 200] [--hidden 512] [--layers 4]

Prints JSON: per-call medians (µs) of wall and of this thread's CPU time (which a loaded
machine's lost time slices do not inflate), overhead %, records against calls, load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import types
from pathlib import Path
from typing import Any


def _model(hidden: int, layers: int) -> Any:
    import torch

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(hidden, 2 * hidden)
            self.down = torch.nn.Linear(2 * hidden, hidden)
            self.norm = torch.nn.LayerNorm(hidden)

        def forward(self, x: Any) -> Any:
            return x + self.down(torch.nn.functional.silu(self.up(self.norm(x))))

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(Block() for _ in range(layers))

        def forward(self, x: Any) -> Any:
            for b in self.blocks:
                x = b(x)
            return x

    return Net


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--blocks", type=int, default=40, help="blocks of each kind")
    p.add_argument("--block", type=int, default=200, help="calls a block")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--tokens", type=int, default=4, help="rows of the input (tokens a step)")
    p.add_argument("--backend", default="inductor")
    args = p.parse_args(argv)

    import torch
    import torch._dynamo.eval_frame as ef

    from tracekit.collectors import compiled
    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.recorder import Recorder, RecorderConfig
    from tracekit.collectors.wrappers import install

    torch.set_num_threads(1)
    torch.manual_seed(0)
    net_cls = _model(args.hidden, args.layers)
    plain_mod = net_cls().eval()
    mapped_cls = type("Mapped", (net_cls,), {"forward": net_cls.forward})
    mod = types.ModuleType("bench_prog")
    mod.Mapped = mapped_cls  # type: ignore[attr-defined]
    mapped_mod = mapped_cls().eval()
    mapped_mod.load_state_dict(plain_mod.state_dict())
    plain = torch.compile(plain_mod, backend=args.backend)  # before tracekit: no boundary
    x = torch.randn(args.tokens, args.hidden)
    with torch.inference_mode():
        plain(x)
    tmp = Path(tempfile.mkdtemp(prefix="tracekit-bench-"))
    rec = Recorder(RecorderConfig(raw_dir=tmp / "raw"))
    bounds = compiled.Boundaries(rec)
    bounds.install()
    compiled.install_boundaries(ef, bounds)
    install(
        mod, Site(Target("bench_prog", "Mapped.forward"), phase="decode", starts_cycle=True), rec
    )
    mapped = torch.compile(mapped_mod, backend=args.backend)
    with torch.inference_mode():
        same = torch.equal(mapped(x), plain(x))
        calls = 1
        samples: dict[str, list[float]] = {"plain": [], "mapped": [], "mapped_off": []}
        cpu: dict[str, list[float]] = {k: [] for k in samples}
        order = ("plain", "mapped", "mapped_off", "mapped_off", "mapped", "plain")
        for i in range(3 * args.blocks):
            kind = order[i % len(order)]
            fn = plain if kind == "plain" else mapped
            rec.set_recording(kind == "mapped")
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            for _ in range(args.block):
                fn(x)
            samples[kind].append((time.perf_counter_ns() - t0) / args.block / 1e3)
            cpu[kind].append((time.thread_time_ns() - c0) / args.block / 1e3)
            if kind == "mapped":
                calls += args.block
    rec.set_recording(True)
    rec.close()
    records = rec.records
    med = {k: statistics.median(v) for k, v in samples.items()}
    cmed = {k: statistics.median(v) for k, v in cpu.items()}
    result = {
        "backend": args.backend,
        "hidden": args.hidden,
        "layers": args.layers,
        "tokens": args.tokens,
        "blocks": args.blocks,
        "block": args.block,
        "call_us_median": med,
        # this thread's CPU time a call (one torch thread: the compiled kernels run on it too),
        # which time slices lost to other processes of a loaded machine do not inflate
        "cpu_us_median": cmed,
        "cpu_overhead_pct": 100 * (cmed["mapped"] / cmed["plain"] - 1),
        "cpu_recording_pct": 100 * (cmed["mapped"] / cmed["mapped_off"] - 1),
        "cpu_recording_us": cmed["mapped"] - cmed["mapped_off"],
        "overhead_pct": 100 * (med["mapped"] / med["plain"] - 1),
        "overhead_us": med["mapped"] - med["plain"],
        # the same compiled module, recording on against off (the recording's own cost)
        "recording_pct": 100 * (med["mapped"] / med["mapped_off"] - 1),
        "recording_us": med["mapped"] - med["mapped_off"],
        "mapped_calls": calls,
        "records": records,
        "same_output": same,
        "compiled_report": bounds.report,
        "loadavg": os.getloadavg(),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
