"""The demo server's options: `python -m tracekit.demo`'s parser, their checks (InputError, one
line with the fix) and the process-group backend they lead to."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, fields
from typing import Any, get_args

from tracekit.demo.config import PRESETS, Device, ModelConfig, ModelSize, VerifyMode, preset
from tracekit.errors import InputError

# Held acceptance, as SGLang's SGLANG_SIMULATE_ACC_LEN: `--simulate-accept-len` wins over it.
SIMULATE_ENV = "TRACEKIT_DEMO_SIMULATE_ACC_LEN"


@dataclass(frozen=True)
class DemoOptions:
    ranks: int = 8
    device: Device = "cpu"
    cycles: int = 40
    draft_tokens: int = 3
    verify_mode: VerifyMode = "extend"
    baseline: bool = False
    model_size: ModelSize = "tiny"
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
    compile: bool = False

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
        allow_abbrev=False,
    )
    p.add_argument(
        "--ranks",
        type=int,
        default=None,
        help="tensor-parallel ranks (default: 8 on CPU, 1 a GPU on CUDA)",
    )
    p.add_argument("--device", choices=get_args(Device), default="cpu")
    p.add_argument("--cycles", type=int, default=40, help="decode cycles (steps) to run")
    p.add_argument("--draft-tokens", type=int, default=3, help="K, tokens drafted a cycle")
    p.add_argument(
        "--verify-mode",
        choices=get_args(VerifyMode),
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
    p.add_argument(
        "--compile",
        action="store_true",
        help=(
            "run the target model under torch.compile (inductor; on CUDA mode reduce-overhead, "
            "whose CUDA graphs replay through cudagraph trees)"
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
        ranks = 8 if ns.device == "cpu" else max(1, cuda_count())
    given = {f.name: getattr(ns, f.name) for f in fields(DemoOptions)}  # one dest a field
    opts = DemoOptions(**{**given, "ranks": ranks, "simulate_accept_len": simulate})
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


def cuda_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def validate(opts: DemoOptions) -> None:
    """Raise `InputError` (one line, with the fix) for options the demo cannot run."""
    check(opts)
    if opts.device == "cuda" and cuda_count() == 0:
        msg = "--device cuda, but torch sees no CUDA device; run with --device cpu"
        raise InputError(msg)


def check(opts: DemoOptions, *, ranks_known: bool = True) -> None:
    """The checks that need no torch (`tracekit demo` makes them before it starts anything);
    `ranks_known` False: the server will pick the ranks (one a GPU), so they are not checked."""
    cfg = opts.model_config()
    if ranks_known:
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
    if opts.verify_mode == "graph" and (opts.device != "cuda" or not opts.graphs):
        msg = (
            "--verify-mode graph replays a CUDA graph: it needs --device cuda (without --no-graphs)"
        )
        raise InputError(msg)
    if opts.compile and opts.verify_mode == "graph":
        msg = (
            "--compile replays the compiled target's own CUDA graphs; drop --verify-mode graph "
            "(it captures the target eagerly)"
        )
        raise InputError(msg)
    if opts.verify_mode == "graph" and opts.baseline:
        msg = "--verify-mode applies to speculative decoding; drop it with --baseline"
        raise InputError(msg)


def choose_backend(opts: DemoOptions) -> tuple[str, str | None]:
    """(backend, message): NCCL on CUDA unless ranks outnumber GPUs, gloo on CPU."""
    if opts.device == "cpu":
        return "gloo", None
    gpus = cuda_count()
    if opts.ranks > gpus:
        return "gloo", (
            f"{opts.ranks} ranks on {gpus} GPU(s): NCCL refuses two ranks on one GPU, so the "
            "ranks use gloo and CUDA graphs are off (graphs cannot capture gloo collectives)"
        )
    return "nccl", None
