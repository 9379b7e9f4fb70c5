"""Tensor parallelism for the demo: one process group, Megatron's column/row-parallel linears.

Every allreduce of the demo goes through `TensorParallelGroup.all_reduce`, the way every
allreduce of SGLang goes through `GroupCoordinator.all_reduce`: it is the one hook point the
`demo` phase map wraps (docs/dev/CONTRACTS.md).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist

from tracekit.demo import clocks


@dataclass
class TensorParallelGroup:
    """The ranks that share one model. `rank`/`size` are this process's place in it."""

    rank: int = 0
    size: int = 1
    backend: str = "none"

    @classmethod
    def from_default_group(cls) -> TensorParallelGroup:
        """The initialised default process group (or a single rank when there is none)."""
        if not (dist.is_available() and dist.is_initialized()):
            return cls()
        return cls(rank=dist.get_rank(), size=dist.get_world_size(), backend=dist.get_backend())

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum `tensor` over the group, in place, and return it (a no-op on one rank)."""
        if self.size > 1:
            dist.all_reduce(tensor)
        return tensor

    def shard(self, full: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's contiguous 1/size slice of `full` along `dim`."""
        return full.chunk(self.size, dim=dim)[self.rank].contiguous()


class ColumnParallelLinear(torch.nn.Module):
    """y = x W^T with W's output rows split over the ranks: each rank holds out/size rows.

    Needs no communication; its output is the rank's slice of the full output.
    """

    def __init__(self, weight_shard: torch.Tensor) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight_shard, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.weight)


class RowParallelLinear(torch.nn.Module):
    """y = x W^T with W's input columns split over the ranks, summed by one allreduce."""

    def __init__(self, weight_shard: torch.Tensor, group: TensorParallelGroup) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(weight_shard, requires_grad=False)
        self.group = group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = torch.nn.functional.linear(x, self.weight)
        clock = clocks.COMM_CLOCK
        if clock is None:
            return self.group.all_reduce(partial)
        t0 = time.perf_counter_ns()
        out = self.group.all_reduce(partial)
        clock.ns += time.perf_counter_ns() - t0
        clock.calls += 1
        return out
