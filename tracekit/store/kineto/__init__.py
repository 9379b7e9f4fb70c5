"""Decode one Kineto Chrome-JSON trace (`.json` / `.json.gz`) into Arrow batches of `events`.

- `raw`: read (gunzip), split into top-level raw values and the raw `traceEvents`, salvage
  damaged files;
- `fallback`: the general msgspec-struct reader (the default);
- `native`: a reader for traces written one event per line (DuckDB's JSON reader for the typed
  fields, the args text sliced from the bytes as written; no per-event Python object), opt-in
  with `TRACEKIT_INGEST_READER=native` because it measured slower (docs/BENCHMARKS.md);
- `columns`: exact nanoseconds, JSON values -> Arrow, and the batch assembly both readers share.

Timestamps become exact int64 nanoseconds (see `exact_ns`). Imports only msgspec, numpy and
pyarrow at start-up (DuckDB when the native reader runs), so ingest workers start quickly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pyarrow as pa

from tracekit.store.kineto import fallback, native
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
    """Yield `events` tables (schema columns, before `conform`) batch by batch.

    The general (msgspec) reader by default: it measured faster than the native one on the
    93 MB benchmark rank (docs/BENCHMARKS.md, "Ingest"). `TRACEKIT_INGEST_READER=native` tries
    the native reader first (same tables, or it declines; tests/unit/store/
    test_store_kineto_native.py).
    """
    if os.environ.get("TRACEKIT_INGEST_READER") == "native":
        tables = native.read(trace, stats=stats, batch_events=batch_events)
        if tables is not None:
            yield from tables
            return
    yield from fallback.iter_batches(trace, stats=stats, batch_events=batch_events)
