"""Merge's per-rank work (reading a process's records, building and writing a rank's tables)
on a thread pool: Arrow and polars release the GIL in their kernels, the Parquet writer too,
so the ranks can overlap on idle cores. Below `MIN_CORES` cores there is no pool: on the
2-core host of docs/BENCHMARKS.md ("Merge") two threads made the 8-rank merge 10% slower
(polars already spreads its own kernels over both cores). One task: no pool either."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

MIN_CORES = 4  # fewer cores: the ranks one after the other (measured, see above)
T = TypeVar("T")
R = TypeVar("R")


def workers(n_items: int, limit: int | None = None) -> int:
    """Threads for `n_items` tasks: `limit` when given, else one a core (`os.sched_getaffinity`
    where there is one) from MIN_CORES cores on, else one; at most one a task."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    if limit is None:
        limit = cores if cores >= MIN_CORES else 1
    return max(1, min(n_items, limit))


def thread_map(fn: Callable[[T], R], items: Sequence[T], limit: int | None = None) -> list[R]:
    """`[fn(x) for x in items]`, in order, on `workers(len(items), limit)` threads; the first
    exception raised is raised here."""
    n = workers(len(items), limit)
    if n == 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="tracekit-merge") as pool:
        return list(pool.map(fn, items))
