"""Capture a function of static buffers into a `torch.cuda.CUDAGraph` and replay it.

The function reads only its static input buffers (and model state such as the KV cache, which is
static too) and returns tensors; replay writes new values into the inputs, replays the graph and
returns the same output tensors, overwritten. Warm-up runs on a side stream before capture, as the
CUDA-graph documentation of torch asks.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class GraphRunner:
    def __init__(
        self,
        fn: Callable[[], tuple[torch.Tensor, ...]],
        inputs: dict[str, torch.Tensor],
        *,
        warmup: int = 2,
    ) -> None:
        self.fn = fn
        self.inputs = inputs
        self.graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with torch.cuda.graph(self.graph):
            self.outputs = fn()
        torch.cuda.synchronize()

    def replay(self, **values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for name, value in values.items():
            self.inputs[name].copy_(value)
        self.graph.replay()
        return self.outputs
