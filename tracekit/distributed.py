"""Where the per-rank work runs: here (the default) or on a Dask cluster.

Ingest (one task a trace file), the join of a multi-node run (one task a part to merge, one a
Parquet file to copy) and the analysis (one task a rank: its phases, intervals, breakdown,
cycles) are maps over independent items followed by a reduce in the calling process. By
default they run as today (ingest in local worker processes, merge and analysis in this
process, polars scanning the hive store). With an engine in use (`--scheduler ADDRESS` or
`--workers N` on ingest, merge and the analysis commands, or `use_engine(...)` from Python)
the maps are submitted to Dask instead and the results gathered in order; the reduce is the
same code. Workers read and write the run directory by its path, so on a cluster it must be
on storage every worker sees (the same path everywhere); a `LocalCluster` (`--workers N`)
needs nothing more.

Dask is an optional dependency: `pip install 'tracekit-spec[dask]'`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tracekit.errors import InputError, MissingDependencyError


@dataclass
class DaskEngine:
    """A Dask client (to a scheduler, or to a LocalCluster it owns)."""

    client: Any
    cluster: Any = None  # the LocalCluster this engine started, closed with it
    address: str = ""
    tasks: int = field(default=0)  # tasks submitted so far (tests, messages)

    def map(self, fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
        """[fn(item) for item in items], each item a task, results in order."""
        if not items:
            return []
        futures = [self.client.submit(fn, item, pure=False) for item in items]
        self.tasks += len(futures)
        return list(self.client.gather(futures))

    def starmap(self, fn: Callable[..., Any], items: Sequence[Sequence[Any]]) -> list[Any]:
        """[fn(*item) for item in items], each item a task, results in order."""
        if not items:
            return []
        futures = [self.client.submit(fn, *item, pure=False) for item in items]
        self.tasks += len(futures)
        return list(self.client.gather(futures))

    @property
    def workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()


# Per thread: only the thread that entered `use_engine` submits tasks. A task running in a
# worker thread of a LocalCluster(processes=False) sees no engine and works locally (a task
# that submitted tasks and waited on them could leave the cluster without a free thread).
_local = threading.local()


def _stack() -> list[DaskEngine]:
    stack: list[DaskEngine] | None = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def current_engine() -> DaskEngine | None:
    """The engine in use on this thread (innermost `use_engine`), or None: run here."""
    stack = _stack()
    return stack[-1] if stack else None


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError as exc:
        msg = (
            "--scheduler / --workers need Dask: `pip install 'tracekit-spec[dask]'` (or drop "
            "the option to run here)"
        )
        raise MissingDependencyError(msg) from exc
    return distributed


def start(
    scheduler: str | None = None,
    workers: int | None = None,
    *,
    processes: bool = True,
    threads_per_worker: int = 1,
    memory_limit: str | None = "auto",
) -> DaskEngine:
    """A client to `scheduler` (tcp://host:8786, or a scheduler file path ending in .json), or to
    a new LocalCluster of `workers` workers (processes, one thread each, by default)."""
    if scheduler and workers:
        msg = "--scheduler and --workers cannot be used together: a cluster has its own workers"
        raise InputError(msg)
    distributed = _import_distributed()
    if scheduler:
        try:
            if scheduler.endswith(".json"):
                client = distributed.Client(scheduler_file=scheduler, timeout="20s")
            else:
                client = distributed.Client(scheduler, timeout="20s")
        except (OSError, TimeoutError, ValueError) as exc:
            msg = f"cannot reach the Dask scheduler at {scheduler} ({exc}); check the address"
            raise InputError(msg) from exc
        return DaskEngine(client=client, address=scheduler)
    cluster = distributed.LocalCluster(
        n_workers=workers or 1,
        threads_per_worker=threads_per_worker,
        processes=processes,
        memory_limit=memory_limit,
        dashboard_address=None,
        silence_logs=40,
    )
    client = distributed.Client(cluster)
    return DaskEngine(client=client, cluster=cluster, address=str(cluster.scheduler_address))


@contextlib.contextmanager
def use_engine(engine: DaskEngine | None) -> Iterator[DaskEngine | None]:
    """Run the maps of ingest, merge and analysis on `engine` inside this block."""
    if engine is None:
        yield None
        return
    stack = _stack()
    stack.append(engine)
    try:
        yield engine
    finally:
        stack.remove(engine)


@contextlib.contextmanager
def engine(
    scheduler: str | None = None, workers: int | None = None, **kw: Any
) -> Iterator[DaskEngine | None]:
    """`use_engine(start(...))`, closing what it started; nothing when both are None."""
    if not scheduler and not workers:
        yield None
        return
    eng = start(scheduler, workers, **kw)
    try:
        with use_engine(eng):
            yield eng
    finally:
        eng.close()
