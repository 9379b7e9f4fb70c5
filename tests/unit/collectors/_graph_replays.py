"""A CUDA graph replay as programs make one: `replay()` of a class shaped like torch's
CUDAGraph, hooked by `collectors/graphs.py` as the launcher hooks torch.cuda.graphs."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from tracekit.collectors import graphs


def graph_replay(rec: Any) -> Callable[[], None]:
    """A function replaying a (fake) CUDA graph whose replays `rec` counts."""
    module = ModuleType("fake_torch_cuda_graphs")

    class CUDAGraph:
        def replay(self) -> None:
            pass

    module.CUDAGraph = CUDAGraph  # type: ignore[attr-defined]
    graphs.install(module, rec)
    return CUDAGraph().replay
