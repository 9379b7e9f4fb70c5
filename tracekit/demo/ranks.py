"""Start the demo's ranks the way real servers start them: multiprocessing's spawn, one process
group (gloo on CPU, NCCL on CUDA); a failing rank stops the others."""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import socket
from collections.abc import Callable
from typing import Any

from tracekit.errors import RankFailedError


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
