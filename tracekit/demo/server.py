"""The demo server: start the ranks, build the model on each, serve requests, report.

Options and their checks are in `tracekit.demo.options`; the ranks are started by
`tracekit.demo.ranks` (multiprocessing's spawn, one process group: gloo on CPU, NCCL on CUDA).
Every rank builds its shard of the same model and runs the same cycles; rank 0 prints tokens/s, cycles and the mean acceptance length, and writes
them as JSON with `--result FILE`. Nothing here imports tracekit's collectors: `tracekit launch`
instruments the ranks from outside.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tracekit.demo import clocks
from tracekit.demo.options import DemoOptions, choose_backend, cuda_count, parse_args
from tracekit.demo.ranks import spawn_ranks
from tracekit.errors import InputError, RankFailedError, TracekitError

# torch warns on import when numpy is missing; the demo does not use numpy. torch itself is
# imported only where it is used: the parent process that spawns the ranks never needs it on
# CPU, which saves its import time (seconds on a loaded 2-core machine) before the ranks start.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

CPU_NOTE = (
    "note: {ranks} ranks share {cores} CPU cores here, so every allreduce waits for ranks to be "
    "scheduled: the CPU breakdown is allreduce-heavy by construction (on GPUs it is not)."
)


# -- A/B overhead blocks ----------------------------------------------------------------------


def ab_schedule(cycles: int, block: int) -> list[bool]:
    """Recording on (True) or off for each cycle: blocks of `block` cycles in the order on, off,
    off, on, repeated (ABBA: a linear drift of the machine's speed cancels within each group
    of four blocks). `block` 0: all on."""
    if block <= 0:
        return [True] * cycles
    return [(i // block) % 4 in (0, 3) for i in range(cycles)]


class GcClock:
    """Time the interpreter spends in garbage collections, from `gc.callbacks` (the A/B
    blocks' `step_gc_ms`, bench/hf_static_compile.py's `gc_s`: a collection in a step is the
    program's, whichever side its allocations came from)."""

    def __init__(self) -> None:
        self.total_s = 0.0
        self._t0 = 0.0

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        else:
            self.total_s += time.perf_counter() - self._t0


def recording_switch() -> Callable[[bool], None] | None:
    """The test hook that pauses tracekit's recorder in this process, when `tracekit launch`
    instruments it (`Recorder.set_recording`); None when nothing records. Looked up, never
    imported: the demo does not depend on tracekit's collectors."""
    runtime = sys.modules.get("tracekit.collectors.runtime")
    current = getattr(runtime, "current", None)
    rt = current() if current is not None else None
    rec = getattr(rt, "recorder", None)
    switch = getattr(rec, "set_recording", None)
    return switch if callable(switch) else None


# -- one rank ------------------------------------------------------------------------------


@dataclass
class _Rank:
    """What one rank serves with: its device, dtype, group and decoder."""

    device: Any  # torch.device
    dtype: Any  # torch.dtype
    group: Any  # TensorParallelGroup
    use_graphs: bool
    decoder: Any  # BaselineDecoder | SpeculativeDecoder


def _build(rank: int, opts: DemoOptions, backend: str) -> _Rank:
    import torch

    from tracekit.demo.draft import DraftHead
    from tracekit.demo.parallel import TensorParallelGroup
    from tracekit.demo.speculative import BaselineDecoder, SpeculativeDecoder
    from tracekit.demo.target_model import TargetModel

    cfg = opts.model_config()
    if opts.device == "cuda":
        device = torch.device("cuda", rank % cuda_count())
        torch.cuda.set_device(device)
        dtype = torch.bfloat16
    else:
        device, dtype = torch.device("cpu"), torch.float32
    group = TensorParallelGroup.from_default_group()
    use_graphs = opts.device == "cuda" and opts.graphs and (backend == "nccl" or group.size == 1)
    if use_graphs and group.size > 1:
        # NCCL communicators must exist before a graph captures their collectives.
        group.all_reduce(torch.zeros(1, device=device))
        torch.cuda.synchronize()

    target = TargetModel(cfg, group, dtype=dtype, device=device)
    decoder: BaselineDecoder | SpeculativeDecoder
    if opts.baseline:
        # compiled, the target's CUDA graphs are reduce-overhead's, not a captured step's
        decoder = BaselineDecoder(target, use_graphs=use_graphs and not opts.compile)
    else:
        head = DraftHead(cfg, group, target, dtype=dtype, device=device)
        decoder = SpeculativeDecoder(
            target,
            head,
            draft_tokens=opts.draft_tokens,
            use_graphs=use_graphs,
            verify_mode=opts.verify_mode,
            simulate_accept_len=opts.simulate_accept_len,
        )
    if opts.compile:
        decoder.compile_target("reduce-overhead" if opts.device == "cuda" else None)
    return _Rank(device, dtype, group, use_graphs, decoder)


@dataclass
class _Cycles:
    """Step times and tokens of the cycles a rank ran."""

    step_s: list[float]
    accept: list[int]
    requests: int
    run_s: float
    schedule: list[bool]
    switched: bool  # the A/B blocks switched a recorder
    after_prefill: list[bool]  # the cycle's step was the first of a request
    # with --ab-blocks: each step's thread CPU time and garbage-collection time (ms)
    step_cpu_ms: list[float] | None = None
    step_gc_ms: list[float] | None = None
    # with --ab-blocks, eager: each step's host time inside the row-parallel all_reduce calls
    # (ms) and how many it made (clocks.CallClock)
    step_comm_ms: list[float] | None = None
    comm_calls: int = 0
    # with --ab-blocks: each step's host time crossing into and out of its top-level calls
    # (ms), by phase, and inside them, from their first line to their last (clocks.BoundaryClock)
    step_boundary_ms: dict[str, list[float]] | None = None
    step_inside_ms: dict[str, list[float]] | None = None


def _run_cycles(opts: DemoOptions, r: _Rank) -> _Cycles:
    import torch

    vocab = opts.model_config().vocab_size
    rng = random.Random(opts.seed)
    step_s: list[float] = []
    accept: list[int] = []
    after_prefill: list[bool] = []
    requests, in_request = 0, 0

    def sync() -> None:
        if opts.device == "cuda":
            torch.cuda.synchronize()

    schedule = ab_schedule(opts.cycles, opts.ab_blocks)
    switch = recording_switch() if opts.ab_blocks > 0 else None
    decoder = r.decoder
    ab = opts.ab_blocks > 0
    step_cpu: list[float] = []
    step_gc: list[float] = []
    step_comm: list[float] = []
    gc_clock = GcClock()
    comm = _comm_clock(opts) if ab else None
    comm_calls = 0
    boundary = _boundary_clock() if ab else None
    step_boundary: dict[str, list[float]] = {}
    step_inside: dict[str, list[float]] = {}
    t_run = time.perf_counter()
    with gc_clock if ab else contextlib.nullcontext():
        for i in range(opts.cycles):
            if switch is not None and (i == 0 or schedule[i] != schedule[i - 1]):
                switch(schedule[i])  # between cycles, outside the timed step
            prefill = requests == 0 or in_request >= opts.max_new_tokens or decoder.room() < 1
            if prefill:
                decoder.prefill([rng.randrange(vocab) for _ in range(opts.prompt_len)])
                requests, in_request = requests + 1, 1
            after_prefill.append(prefill)
            sync()
            if comm is not None:
                comm.ns = comm.calls = 0  # this step's calls only (not the prefill's)
            if boundary is not None:
                boundary.reset()
            c0, g0 = time.thread_time(), gc_clock.total_s
            t0 = time.perf_counter()
            result = clocks.call("step", decoder.step)
            sync()
            step_s.append(time.perf_counter() - t0)
            if ab:
                step_cpu.append((time.thread_time() - c0) * 1e3)
                step_gc.append((gc_clock.total_s - g0) * 1e3)
            if comm is not None:
                step_comm.append(comm.ns / 1e6)
                comm_calls += comm.calls
            if boundary is not None:
                _append_ms(step_boundary, boundary.ns)
                _append_ms(step_inside, boundary.inside_ns)
            accept.append(result.accept_len)
            in_request += result.accept_len
    run_s = time.perf_counter() - t_run
    if switch is not None:
        switch(True)  # the exit's flush and the rest of the process are recorded as usual
    return _Cycles(
        step_s, accept, requests, run_s, schedule, switch is not None, after_prefill,
        step_cpu if ab else None, step_gc if ab else None,
        step_comm if comm is not None else None, comm_calls,
        step_boundary if boundary is not None else None,
        step_inside if boundary is not None else None,
    )  # fmt: skip


def _comm_clock(opts: DemoOptions) -> clocks.CallClock | None:
    """The A/B loop's `clocks.CallClock` (eager only: a compiled forward must not time
    itself), made the row-parallel layers' clock; None under --compile."""
    if opts.compile:
        return None
    clocks.COMM_CLOCK = clocks.CallClock()
    return clocks.COMM_CLOCK


def _append_ms(series: dict[str, list[float]], ns: dict[str, int]) -> None:
    """A step's figures (ns, by phase) appended to their series (ms)."""
    for phase, value in ns.items():
        series.setdefault(phase, []).append(value / 1e6)


def _boundary_clock() -> clocks.BoundaryClock:
    """The A/B loop's `clocks.BoundaryClock`, made the decoders' clock."""
    clocks.BOUNDARY_CLOCK = clocks.BoundaryClock()
    return clocks.BOUNDARY_CLOCK


def _serve(rank: int, opts: DemoOptions, backend: str, started: float) -> None:
    r = _build(rank, opts, backend)
    ready = time.time()
    cycles = _run_cycles(opts, r)
    if rank != 0:
        return
    payload = _payload(opts, backend, r, cycles, startup_s=ready - started)
    if not opts.quiet:
        _print_summary(payload, opts)
    if opts.result:
        Path(opts.result).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


def _payload(
    opts: DemoOptions, backend: str, r: _Rank, c: _Cycles, *, startup_s: float
) -> dict[str, Any]:
    """Rank 0's result (`--result FILE`)."""
    tokens = sum(c.accept)
    step_total = sum(c.step_s)
    return {
        "mode": "baseline" if opts.baseline else "speculative",
        "ranks": r.group.size,
        "device": opts.device,
        "backend": backend,
        "dtype": str(r.dtype).removeprefix("torch."),
        "cuda_graphs": r.use_graphs,
        "compiled": opts.compile,
        "target_calls": r.decoder.target_calls,
        "draft_tokens": None if opts.baseline else opts.draft_tokens,
        "verify_mode": None if opts.baseline else opts.verify_mode,
        "cycles": len(c.step_s),
        "requests": c.requests,
        "tokens": tokens,
        "accept_len_mean": tokens / len(c.accept),
        "simulate_accept_len": opts.simulate_accept_len,
        # what the real greedy check would have accepted (drafts + 1 a cycle); equal to
        # accept_len_mean unless acceptance is simulated
        "accept_len_natural_mean": (
            1.0
            if opts.baseline
            else 1.0 + getattr(r.decoder, "natural_accepted", 0) / len(c.accept)
        ),
        "tokens_per_s": tokens / step_total if step_total > 0 else 0.0,
        "step_ms": [s * 1e3 for s in c.step_s],
        "step_ms_p50": statistics.median(c.step_s) * 1e3,
        # Robust to a few slow (profiled, warm-up) cycles: mean acceptance / median step.
        "tokens_per_s_p50": tokens / len(c.accept) / statistics.median(c.step_s),
        "startup_s": startup_s,
        "run_s": c.run_s,
        "ab_blocks": opts.ab_blocks,
        "ab_on": c.schedule if opts.ab_blocks > 0 else None,
        "after_prefill": c.after_prefill if opts.ab_blocks > 0 else None,
        "step_cpu_ms": c.step_cpu_ms,
        "step_gc_ms": c.step_gc_ms,
        "step_comm_ms": c.step_comm_ms,
        "comm_calls": c.comm_calls,
        "step_boundary_ms": c.step_boundary_ms,
        "step_inside_ms": c.step_inside_ms,
        "ab_recorder": c.switched,
        "model": {"size": opts.model_size, **asdict(opts.model_config())},
    }


def _print_summary(p: dict[str, Any], opts: DemoOptions) -> None:
    m = p["model"]
    what = (
        "baseline (plain decoding)"
        if opts.baseline
        else (f"speculative, K={opts.draft_tokens} draft tokens, verify {opts.verify_mode}")
    )
    if opts.simulate_accept_len is not None:
        what += (
            f", acceptance held at {opts.simulate_accept_len:g} (the real check would have "
            f"given {p['accept_len_natural_mean']:.2f})"
        )
    graphs = ", CUDA graphs" if p["cuda_graphs"] else ""
    lines = [
        f"tracekit demo server: {p['ranks']} rank(s) on {p['device']} ({p['backend']}, "
        f"{p['dtype']}{graphs}); model {m['size']}: {m['num_layers']} layers, hidden "
        f"{m['hidden_size']}, vocab {m['vocab_size']}; {what}",
        f"  cycles {p['cycles']}  tokens {p['tokens']}  mean acceptance length "
        f"{p['accept_len_mean']:.2f}  tokens/s over all cycles {p['tokens_per_s']:.1f}  step p50 "
        f"{p['step_ms_p50']:.1f} ms  start-up {p['startup_s']:.1f} s",
    ]
    cores = os.cpu_count() or 1
    if p["device"] == "cpu" and p["ranks"] > cores:
        lines.append("  " + CPU_NOTE.format(ranks=p["ranks"], cores=cores))
    print("\n".join(lines), flush=True)


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    try:
        opts = parse_args(argv)
        backend, message = choose_backend(opts)
        if backend == "gloo" and opts.device == "cuda" and opts.verify_mode == "graph":
            msg = (
                f"--verify-mode graph needs CUDA graphs, which gloo cannot capture ({message}); "
                "use --verify-mode extend or one rank a GPU"
            )
            raise InputError(msg)
    except TracekitError as exc:
        print(f"python -m tracekit.demo: error: {exc}", file=sys.stderr)
        return exc.exit_code
    if message and not opts.quiet:
        print(f"tracekit demo server: {message}", file=sys.stderr)
    try:
        spawn_ranks(_serve, opts.ranks, (opts, backend, started), backend=backend)
    except RankFailedError as exc:
        print(f"python -m tracekit.demo: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
