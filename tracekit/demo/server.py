"""The demo server: start the ranks, build the model on each, serve requests, report.

Ranks are started the way real servers start them, with multiprocessing's spawn, and join
one process group (gloo on CPU, NCCL on CUDA). Every rank builds its shard of the same model and
runs the same cycles; rank 0 prints tokens/s, cycles and the mean acceptance length, and writes
them as JSON with `--result FILE`. Nothing here imports tracekit's collectors: `tracekit launch`
instruments the ranks from outside.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import socket
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.demo.config import PRESETS, ModelConfig, preset
from tracekit.errors import InputError, RankFailedError, TracekitError

if TYPE_CHECKING:
    pass

# torch warns on import when numpy is missing; the demo does not use numpy. torch itself is
# imported only where it is used: the parent process that spawns the ranks never needs it on
# CPU, which saves its import time (seconds on a loaded 2-core machine) before the ranks start.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")

# Held acceptance, as SGLang's SGLANG_SIMULATE_ACC_LEN: `--simulate-accept-len` wins over it.
SIMULATE_ENV = "TRACEKIT_DEMO_SIMULATE_ACC_LEN"

CPU_NOTE = (
    "note: {ranks} ranks share {cores} CPU cores here, so every allreduce waits for ranks to be "
    "scheduled: the CPU breakdown is allreduce-heavy by construction (on GPUs it is not)."
)


@dataclass(frozen=True)
class DemoOptions:
    ranks: int = 8
    device: str = "cpu"
    cycles: int = 40
    draft_tokens: int = 3
    verify_mode: str = "extend"
    baseline: bool = False
    model_size: str = "tiny"
    layers: int | None = None
    divergence: float | None = None
    prompt_len: int = 16
    max_new_tokens: int = 64
    seed: int = 0
    graphs: bool = True
    simulate_accept_len: float | None = None
    result: str | None = None
    quiet: bool = False
    ab_blocks: int = 0

    def model_config(self) -> ModelConfig:
        cfg = preset(self.model_size)
        changes: dict[str, Any] = {"seed": self.seed}
        if self.layers is not None:
            changes["num_layers"] = self.layers
        if self.divergence is not None:
            changes["divergence"] = self.divergence
        return cfg.replace(**changes)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tracekit.demo",
        description="A small tensor-parallel EAGLE-style speculative decoder (tracekit's demo).",
    )
    p.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="tensor-parallel ranks (default: 8 on CPU, 1 a GPU on CUDA)",
    )
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--cycles", type=int, default=40, help="decode cycles (steps) to run")
    p.add_argument("--draft-tokens", type=int, default=3, help="K, tokens drafted a cycle")
    p.add_argument(
        "--verify-mode",
        choices=["extend", "graph"],
        default="extend",
        help="verify eagerly, or replay a captured CUDA graph",
    )
    p.add_argument("--baseline", action="store_true", help="plain decoding, no draft")
    p.add_argument("--model-size", choices=list(PRESETS), default="tiny")
    p.add_argument("--layers", type=int, default=None, help="target layers (default: the preset's)")
    p.add_argument(
        "--divergence",
        type=float,
        default=None,
        help="how far the target strays from what the draft head models (default 0.3; 0 = the draft is almost always right)",
    )
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=64,
        help="tokens a request; then the next request starts",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--no-graphs", dest="graphs", action="store_false", help="CUDA: run every phase eagerly"
    )
    p.add_argument(
        "--simulate-accept-len",
        type=float,
        default=None,
        metavar="X",
        help=(
            "hold the mean acceptance length at X (1 to K+1): each cycle keeps floor(X) or "
            f"ceil(X) tokens, same work a cycle (default: ${SIMULATE_ENV} if set, else real "
            "acceptance)"
        ),
    )
    p.add_argument(
        "--result",
        default=None,
        help="write tokens/s, cycles, accept_len_mean and step times to this JSON file",
    )
    p.add_argument(
        "--ab-blocks",
        type=int,
        default=0,
        metavar="N",
        help=(
            "overhead A/B in one process: under `tracekit launch`, switch recording off and on "
            "in blocks of N cycles (on, off, off, on, ...; ab_schedule) and write each "
            "cycle's state beside its step time (`ab_on` in --result; bench/overhead_ab.py)"
        ),
    )
    p.add_argument("-q", "--quiet", action="store_true")
    return p


def parse_args(argv: list[str] | None = None) -> DemoOptions:
    ns = parser().parse_args(argv)
    simulate = ns.simulate_accept_len
    if simulate is None and not ns.baseline:
        simulate = _simulate_from_env()
    ranks = ns.ranks
    if ranks is None:
        ranks = 8 if ns.device == "cpu" else max(1, _cuda_count())
    opts = DemoOptions(
        ranks=ranks,
        device=ns.device,
        cycles=ns.cycles,
        draft_tokens=ns.draft_tokens,
        verify_mode=ns.verify_mode,
        baseline=ns.baseline,
        model_size=ns.model_size,
        layers=ns.layers,
        divergence=ns.divergence,
        prompt_len=ns.prompt_len,
        max_new_tokens=ns.max_new_tokens,
        seed=ns.seed,
        graphs=ns.graphs,
        simulate_accept_len=simulate,
        result=ns.result,
        quiet=ns.quiet,
        ab_blocks=ns.ab_blocks,
    )
    validate(opts)
    return opts


def _simulate_from_env() -> float | None:
    raw = os.environ.get(SIMULATE_ENV, "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        msg = f"{SIMULATE_ENV}={raw!r} is not a number; set it to an acceptance length, e.g. 2.5"
        raise InputError(msg) from None


def _cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def validate(opts: DemoOptions) -> None:
    """Raise `InputError` (one line, with the fix) for options the demo cannot run."""
    cfg = opts.model_config()
    cfg.check(opts.ranks)
    if opts.cycles < 1:
        msg = f"--cycles must be at least 1, got {opts.cycles}"
        raise InputError(msg)
    if opts.ab_blocks < 0:
        msg = f"--ab-blocks must be 0 (off) or a number of cycles a block, got {opts.ab_blocks}"
        raise InputError(msg)
    if opts.draft_tokens < 1:
        msg = f"--draft-tokens must be at least 1, got {opts.draft_tokens}"
        raise InputError(msg)
    if opts.layers is not None and opts.layers < 1:
        msg = f"--layers must be at least 1, got {opts.layers}"
        raise InputError(msg)
    if opts.prompt_len < 1 or opts.max_new_tokens < 1:
        msg = "--prompt-len and --max-new-tokens must be at least 1"
        raise InputError(msg)
    need = opts.prompt_len + 2 * (opts.draft_tokens + 1) + 1
    if need > cfg.max_seq_len:
        msg = (
            f"--prompt-len {opts.prompt_len} with --draft-tokens {opts.draft_tokens} does not fit "
            f"the {cfg.max_seq_len}-position KV cache of --model-size {opts.model_size}; use a "
            "shorter prompt or fewer draft tokens"
        )
        raise InputError(msg)
    x = opts.simulate_accept_len
    if x is not None:
        if opts.baseline:
            msg = "--simulate-accept-len holds speculative acceptance; drop it with --baseline"
            raise InputError(msg)
        if not 1.0 <= x <= opts.draft_tokens + 1:
            msg = (
                f"--simulate-accept-len {x} is outside [1, {opts.draft_tokens + 1}]: a cycle "
                f"emits 1 to K+1 tokens (K = --draft-tokens {opts.draft_tokens})"
            )
            raise InputError(msg)
    if opts.device == "cuda" and _cuda_count() == 0:
        msg = "--device cuda, but torch sees no CUDA device; run with --device cpu"
        raise InputError(msg)
    if opts.verify_mode == "graph" and (opts.device != "cuda" or not opts.graphs):
        msg = (
            "--verify-mode graph replays a CUDA graph: it needs --device cuda (without --no-graphs)"
        )
        raise InputError(msg)
    if opts.verify_mode == "graph" and opts.baseline:
        msg = "--verify-mode applies to speculative decoding; drop it with --baseline"
        raise InputError(msg)


def choose_backend(opts: DemoOptions) -> tuple[str, str | None]:
    """(backend, message): NCCL on CUDA unless ranks outnumber GPUs, gloo on CPU."""
    if opts.device == "cpu":
        return "gloo", None
    gpus = _cuda_count()
    if opts.ranks > gpus:
        return "gloo", (
            f"{opts.ranks} ranks on {gpus} GPU(s): NCCL refuses two ranks on one GPU, so the "
            "ranks use gloo and CUDA graphs are off (graphs cannot capture gloo collectives)"
        )
    return "nccl", None


# -- starting ranks ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank_entry(
    rank: int,
    world: int,
    port: int,
    backend: str,
    fn: Callable[..., None],
    args: tuple[Any, ...],
) -> None:
    os.environ.update(
        {
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "LOCAL_WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
        }
    )
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        fn(rank, *args)
    finally:
        dist.destroy_process_group()


def spawn_ranks(
    fn: Callable[..., None], world: int, args: tuple[Any, ...], *, backend: str = "gloo"
) -> None:
    """Run `fn(rank, *args)` on `world` spawned processes joined in one process group.

    When a rank fails the others are terminated (they would wait for it in a collective) and
    `RankFailedError` names it.
    """
    ctx = multiprocessing.get_context("spawn")
    port = free_port()
    procs = [
        ctx.Process(target=_rank_entry, args=(r, world, port, backend, fn, args), name=f"rank {r}")
        for r in range(world)
    ]
    for p in procs:
        p.start()
    alive, failed = list(procs), None
    try:
        while alive and failed is None:
            ready = multiprocessing.connection.wait([p.sentinel for p in alive])
            for p in [p for p in alive if p.sentinel in ready]:
                p.join()
                alive.remove(p)
                if p.exitcode != 0 and failed is None:
                    failed = p
    finally:
        for p in alive:
            p.terminate()
        for p in alive:
            p.join()
    if failed is not None:
        msg = f"{failed.name} of {world} exited with code {failed.exitcode}; see its messages above"
        raise RankFailedError(msg)


# -- A/B overhead blocks ----------------------------------------------------------------------


def ab_schedule(cycles: int, block: int) -> list[bool]:
    """Recording on (True) or off for each cycle: blocks of `block` cycles in the order on, off,
    off, on, repeated (ABBA: a linear drift of the machine's speed cancels within each group
    of four blocks). `block` 0: all on."""
    if block <= 0:
        return [True] * cycles
    return [(i // block) % 4 in (0, 3) for i in range(cycles)]


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


def _serve(rank: int, opts: DemoOptions, backend: str, started: float) -> None:
    import torch

    from tracekit.demo.draft import DraftHead
    from tracekit.demo.model import TargetModel
    from tracekit.demo.parallel import TensorParallelGroup
    from tracekit.demo.speculative import BaselineDecoder, SpeculativeDecoder

    cfg = opts.model_config()
    if opts.device == "cuda":
        device = torch.device("cuda", rank % _cuda_count())
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
        decoder = BaselineDecoder(target, use_graphs=use_graphs)
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
    ready = time.time()

    rng = random.Random(opts.seed)
    step_s: list[float] = []
    accept: list[int] = []
    requests, in_request = 0, 0

    def sync() -> None:
        if opts.device == "cuda":
            torch.cuda.synchronize()

    schedule = ab_schedule(opts.cycles, opts.ab_blocks)
    switch = recording_switch() if opts.ab_blocks > 0 else None
    t_run = time.perf_counter()
    for i in range(opts.cycles):
        if switch is not None and (i == 0 or schedule[i] != schedule[i - 1]):
            switch(schedule[i])  # between cycles, outside the timed step
        if requests == 0 or in_request >= opts.max_new_tokens or decoder.room() < 1:
            decoder.prefill([rng.randrange(cfg.vocab_size) for _ in range(opts.prompt_len)])
            requests, in_request = requests + 1, 1
        sync()
        t0 = time.perf_counter()
        result = decoder.step()
        sync()
        step_s.append(time.perf_counter() - t0)
        accept.append(result.accept_len)
        in_request += result.accept_len
    run_s = time.perf_counter() - t_run
    if switch is not None:
        switch(True)  # the exit's flush and the rest of the process are recorded as usual
    if rank != 0:
        return

    tokens = sum(accept)
    step_total = sum(step_s)
    payload: dict[str, Any] = {
        "mode": "baseline" if opts.baseline else "speculative",
        "ranks": group.size,
        "device": opts.device,
        "backend": backend,
        "dtype": str(dtype).removeprefix("torch."),
        "cuda_graphs": use_graphs,
        "draft_tokens": None if opts.baseline else opts.draft_tokens,
        "verify_mode": None if opts.baseline else opts.verify_mode,
        "cycles": len(step_s),
        "requests": requests,
        "tokens": tokens,
        "accept_len_mean": tokens / len(accept),
        "simulate_accept_len": opts.simulate_accept_len,
        # what the real greedy check would have accepted (drafts + 1 a cycle); equal to
        # accept_len_mean unless acceptance is simulated
        "accept_len_natural_mean": (
            1.0 if opts.baseline else 1.0 + getattr(decoder, "natural_accepted", 0) / len(accept)
        ),
        "tokens_per_s": tokens / step_total if step_total > 0 else 0.0,
        "step_ms": [s * 1e3 for s in step_s],
        "step_ms_p50": statistics.median(step_s) * 1e3,
        # Robust to a few slow (profiled, warm-up) cycles: mean acceptance / median step.
        "tokens_per_s_p50": tokens / len(accept) / statistics.median(step_s),
        "startup_s": ready - started,
        "run_s": run_s,
        "ab_blocks": opts.ab_blocks,
        "ab_on": schedule if opts.ab_blocks > 0 else None,
        "ab_recorder": switch is not None,
        "model": {"size": opts.model_size, **asdict(cfg)},
    }
    if not opts.quiet:
        _print_summary(payload, opts)
    if opts.result:
        Path(opts.result).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


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
        f"{p['accept_len_mean']:.2f}  tokens/s {p['tokens_per_s']:.1f}  step p50 "
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
