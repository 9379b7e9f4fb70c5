"""Merge's per-rank thread pool (tracekit/store/raw/threads.py): how many threads, results in order."""

from __future__ import annotations

import threading

import pytest

from tracekit.store.raw import threads
from tracekit.store.raw.threads import MIN_CORES, thread_map, workers


@pytest.mark.parametrize(
    ("cores", "items", "limit", "want"),
    [
        (2, 8, None, 1),  # below MIN_CORES: one after the other
        (MIN_CORES, 8, None, MIN_CORES),
        (16, 8, None, 8),  # never more threads than tasks
        (16, 1, None, 1),
        (2, 8, 3, 3),  # an explicit limit wins
        (16, 0, None, 1),
    ],
)
def test_workers(
    monkeypatch: pytest.MonkeyPatch, cores: int, items: int, limit: int | None, want: int
) -> None:
    monkeypatch.setattr(threads.os, "sched_getaffinity", lambda _pid: set(range(cores)))
    assert workers(items, limit) == want


def test_thread_map_keeps_the_order_and_uses_threads() -> None:
    names: set[str] = set()
    gate = threading.Barrier(3, timeout=10)

    def square(x: int) -> int:
        names.add(threading.current_thread().name)
        gate.wait()  # three tasks at once: only three threads get here together
        return x * x

    assert thread_map(square, [3, 1, 2], limit=3) == [9, 1, 4]
    assert len(names) == 3


def test_thread_map_raises_the_tasks_error() -> None:
    def boom(x: int) -> int:
        if x == 2:
            raise ValueError("task 2")
        return x

    with pytest.raises(ValueError, match="task 2"):
        thread_map(boom, [1, 2, 3], limit=2)
