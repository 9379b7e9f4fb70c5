"""A tiny tensor-parallel-like program for the two-node test: one rank a process, gloo over
loopback, `--cycles` cycles of a draft (one allreduce) and a verify (three allreduces).

Rank and world from RANK / WORLD_SIZE, rendezvous at tcp://127.0.0.1:MASTER_PORT. The phase
map is `phases.toml` beside this file (targets in this importable module, not __main__).

    RANK=0 WORLD_SIZE=2 MASTER_PORT=29600 python -m tests.integration.multinode --cycles 40
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist


class Engine:
    def __init__(self) -> None:
        self.x = torch.ones(4, 256)

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t)
        return t

    def draft(self) -> torch.Tensor:
        return self.allreduce(self.x * 0.5)

    def verify(self) -> torch.Tensor:
        y = self.x
        for _ in range(3):
            y = self.allreduce(y * 0.25)
        return y

    def step(self) -> int:
        self.draft()
        self.verify()
        return 2


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--cycles", type=int, default=40)
    args = p.parse_args()
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    port = os.environ["MASTER_PORT"]
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    eng = Engine()
    for _ in range(3):  # warm the connections up
        eng.allreduce(torch.zeros(1))
    for _ in range(args.cycles):
        eng.step()
        time.sleep(0.001)
    dist.barrier()
    dist.destroy_process_group()
