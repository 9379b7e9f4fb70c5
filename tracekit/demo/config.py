"""Sizes of the demo's target model and draft head.

The presets are chosen for the machines tracekit is developed on: `tiny` keeps an 8-rank CPU run
(ranks outnumber the 2 cores) inside the demo's time budget; `large` is Llama-3-8B-shaped so that
one decode step on an H200 takes a few milliseconds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from tracekit.errors import InputError

# The demo's choices (its options and `tracekit demo`'s / `tracekit sweep --demo`'s).
Device = Literal["cpu", "cuda"]
VerifyMode = Literal["extend", "graph"]
ModelSize = Literal["tiny", "small", "medium", "large"]


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the Llama-style target model (the draft head reuses its widths)."""

    vocab_size: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    num_layers: int
    max_seq_len: int = 256
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    # Scale of the residual branches (attention and MLP outputs) against the token embedding.
    # The draft head models the embedding path exactly and the residual branches not at all, so
    # this is the knob of the acceptance rate: 0 makes the draft always right, larger values make
    # it wrong more often (docs/demo.md, "Acceptance").
    divergence: float = 0.3
    seed: int = 0

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def check(self, tp_size: int) -> None:
        """Raise `InputError` when this shape cannot be split over `tp_size` ranks."""
        if self.hidden_size % self.num_heads:
            msg = f"hidden size {self.hidden_size} is not a multiple of {self.num_heads} heads"
            raise InputError(msg)
        if self.num_heads % self.num_kv_heads:
            msg = f"{self.num_heads} heads are not a multiple of {self.num_kv_heads} kv heads"
            raise InputError(msg)
        if tp_size < 1:
            msg = f"--ranks must be at least 1, got {tp_size}"
            raise InputError(msg)
        for what, n in (
            ("attention heads", self.num_heads),
            ("kv heads", self.num_kv_heads),
            ("MLP width", self.intermediate_size),
        ):
            if n % tp_size:
                msg = (
                    f"{what} ({n}) of this model cannot be split over {tp_size} ranks; "
                    f"use --ranks that divides {n} or another --model-size"
                )
                raise InputError(msg)

    def replace(self, **changes: object) -> ModelConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


PRESETS: dict[ModelSize, ModelConfig] = {
    # CPU default: 2 target layers, so a cycle has few allreduces at 8 ranks.
    "tiny": ModelConfig(
        vocab_size=1024,
        hidden_size=256,
        num_heads=16,
        num_kv_heads=8,
        intermediate_size=512,
        num_layers=2,
    ),
    "small": ModelConfig(
        vocab_size=8192,
        hidden_size=1024,
        num_heads=16,
        num_kv_heads=8,
        intermediate_size=2816,
        num_layers=4,
        max_seq_len=512,
    ),
    "medium": ModelConfig(
        vocab_size=32000,
        hidden_size=2048,
        num_heads=16,
        num_kv_heads=8,
        intermediate_size=5632,
        num_layers=16,
        max_seq_len=1024,
    ),
    # Llama-3-8B-shaped (without its 128k vocabulary): several ms a decode step on one H200.
    "large": ModelConfig(
        vocab_size=32000,
        hidden_size=4096,
        num_heads=32,
        num_kv_heads=8,
        intermediate_size=14336,
        num_layers=32,
        max_seq_len=1024,
    ),
}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]  # type: ignore[index]
    except KeyError:
        msg = f"unknown --model-size {name!r}; choose one of {', '.join(PRESETS)}"
        raise InputError(msg) from None
