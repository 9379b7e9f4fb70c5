"""The demo on one CUDA GPU: graph replay against eager, and step times per path.

Run on a GPU machine: `python bench/demo_gpu.py [--model-size large] [--cycles 100]`.
Prints (1) whether CUDA-graph replay gives the same greedy tokens as eager execution (float32,
`small` model: baseline graph vs eager, speculative with draft graph + verify graph vs eager
baseline) and (2) step time, tokens/s and acceptance of each path of `python -m tracekit.demo`.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path


def equivalence() -> None:
    import torch

    from tracekit.demo.config import preset
    from tracekit.demo.draft import DraftHead
    from tracekit.demo.parallel import TensorParallelGroup
    from tracekit.demo.speculative import BaselineDecoder, SpeculativeDecoder
    from tracekit.demo.target_model import TargetModel

    cfg = preset("small")
    group = TensorParallelGroup()
    dev = torch.device("cuda")
    target = TargetModel(cfg, group, dtype=torch.float32, device=dev)
    head = DraftHead(cfg, group, target, dtype=torch.float32, device=dev)
    rng = random.Random(0)
    prompt = [rng.randrange(cfg.vocab_size) for _ in range(16)]

    def run(dec: BaselineDecoder | SpeculativeDecoder, n: int = 64) -> list[int]:
        dec.prefill(prompt)
        while len(dec.output) < n:
            dec.step()
        return dec.output[:n]

    eager = run(BaselineDecoder(target))
    graph = run(BaselineDecoder(target, use_graphs=True))
    spec_eager = run(SpeculativeDecoder(target, head))
    spec_graph = run(SpeculativeDecoder(target, head, use_graphs=True, verify_mode="graph"))
    spec_extend = run(SpeculativeDecoder(target, head, use_graphs=True, verify_mode="extend"))
    print(f"baseline graph == eager:               {graph == eager}")
    print(f"speculative eager == baseline:         {spec_eager == eager}")
    print(f"speculative graphs+verify graph == eager baseline: {spec_graph == eager}")
    print(f"speculative graphs+verify extend == eager baseline: {spec_extend == eager}")


def paths(size: str, cycles: int) -> None:
    runs = {
        "baseline, graph": ["--baseline"],
        "baseline, eager": ["--baseline", "--no-graphs"],
        "spec K=3, draft graph, verify extend": [],
        "spec K=3, draft graph, verify graph": ["--verify-mode", "graph"],
        "spec K=3, all eager": ["--no-graphs"],
    }
    print(f"\nmodel {size}, {cycles} cycles, 1 GPU, bf16")
    print(f"{'path':40} {'step p50 ms':>12} {'accept':>7} {'tok/s':>9} {'start-up s':>11}")
    for name, extra in runs.items():
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "r.json"
            cmd = [
                sys.executable,
                "-m",
                "tracekit.demo",
                "--device",
                "cuda",
                "--ranks",
                "1",
                "--model-size",
                size,
                "--cycles",
                str(cycles),
                "-q",
                "--result",
                str(out),
                *extra,
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode:
                print(f"{name:40} failed: {proc.stderr.strip()[-400:]}")
                continue
            r = json.loads(out.read_text())
        print(
            f"{name:40} {r['step_ms_p50']:12.2f} {r['accept_len_mean']:7.2f} "
            f"{r['tokens_per_s']:9.1f} {r['startup_s']:11.1f}"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--model-size", default="large")
    ap.add_argument("--cycles", type=int, default=100)
    a = ap.parse_args()
    equivalence()
    paths(a.model_size, a.cycles)
