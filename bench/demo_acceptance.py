"""Mean acceptance length of the demo against `--divergence` and `--draft-tokens`.

One process (TP=1 gives the same tokens as any TP, tests/unit/demo/test_demo_tp.py), float32,
`tiny` model, 8 requests of 16 random prompt tokens x 20 cycles each, as the server runs them.
Usage: `python bench/demo_acceptance.py`.
"""

from __future__ import annotations

import random

import torch

from tracekit.demo.config import preset
from tracekit.demo.draft import DraftHead
from tracekit.demo.parallel import TensorParallelGroup
from tracekit.demo.speculative import SpeculativeDecoder
from tracekit.demo.target_model import TargetModel


def mean_accept(divergence: float, k: int, requests: int = 8, cycles: int = 20) -> float:
    cfg = preset("tiny").replace(divergence=divergence)
    group = TensorParallelGroup()
    target = TargetModel(cfg, group)
    dec = SpeculativeDecoder(target, DraftHead(cfg, group, target), draft_tokens=k)
    rng = random.Random(0)
    lengths: list[int] = []
    for _ in range(requests):
        dec.prefill([rng.randrange(cfg.vocab_size) for _ in range(16)])
        lengths += [dec.step().accept_len for _ in range(cycles)]
    return sum(lengths) / len(lengths)


def main() -> None:
    torch.set_num_threads(1)
    print("divergence  K=1   K=2   K=3   K=5")
    for div in (0.0, 0.2, 0.3, 0.4, 0.6, 0.9):
        row = "  ".join(f"{mean_accept(div, k):4.2f}" for k in (1, 2, 3, 5))
        print(f"{div:10.1f}  {row}")


if __name__ == "__main__":
    main()
