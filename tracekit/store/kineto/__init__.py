"""Decode one Kineto Chrome-JSON trace (`.json` / `.json.gz`) into Arrow batches of `events`.

- `raw`: read (gunzip), split into top-level raw values and the raw `traceEvents`, salvage
  damaged files;
- `fallback`: the general msgspec-struct reader (the default);
- `columns`: exact nanoseconds, JSON values -> Arrow, and the batch assembly.

A native reader (DuckDB's JSON reader on the one-event-per-line layout) was measured and
removed: slower than the msgspec reader end to end (docs/BENCHMARKS.md, "Ingest: readers").

Timestamps become exact int64 nanoseconds (see `exact_ns`). Imports only msgspec, numpy and
pyarrow at start-up, so ingest workers start quickly.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

from tracekit.store.kineto import fallback
from tracekit.store.kineto.columns import (
    ARGS_COVERED_CATS,
    GPU_CATS,
    GRAPH_LAUNCH_PREFIXES,
    KEEP_PH,
    BatchStats,
    exact_ns,
)
from tracekit.store.kineto.fallback import (
    BATCH_EVENTS,
    Args,
    Event,
    LooseArgs,
    LooseEvent,
    decode_events,
    graph_launch_correlations,
)
from tracekit.store.kineto.raw import (
    RawTrace,
    base_time_ns,
    load,
    meta_value,
    read_bytes,
    split_trace,
)

__all__ = [
    "ARGS_COVERED_CATS",
    "BATCH_EVENTS",
    "GPU_CATS",
    "GRAPH_LAUNCH_PREFIXES",
    "KEEP_PH",
    "Args",
    "BatchStats",
    "Event",
    "LooseArgs",
    "LooseEvent",
    "RawTrace",
    "base_time_ns",
    "decode_events",
    "exact_ns",
    "graph_launch_correlations",
    "iter_batches",
    "load",
    "meta_value",
    "read_bytes",
    "split_trace",
]


def iter_batches(
    trace: RawTrace, *, stats: BatchStats, batch_events: int = BATCH_EVENTS
) -> Iterator[pa.Table]:
    """Yield `events` tables (schema columns, before `conform`) batch by batch."""
    yield from fallback.iter_batches(trace, stats=stats, batch_events=batch_events)
