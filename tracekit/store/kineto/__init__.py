"""Decode one Kineto Chrome-JSON trace (`.json` / `.json.gz`) into Arrow batches of `events`.

- `raw`: read (gunzip), split into top-level raw values and the raw `traceEvents`, salvage
  damaged files;
- `native`: the columnar reader (the C scanner `_kscan`: bytes -> column buffers, no Python
  object per event), taken first; it declines odd or damaged input;
- `fallback`: the general msgspec-struct reader, for what the columnar one declines (and where
  the extension is not built);
- `columns`: exact nanoseconds, JSON values -> Arrow, and the batch assembly.

Both readers give identical tables (tests/unit/store/test_store_kineto_native.py). A DuckDB
reader was measured and removed: slower end to end (docs/BENCHMARKS.md, "Ingest: readers").

Timestamps become exact int64 nanoseconds (see `exact_ns`). Imports only msgspec, numpy and
pyarrow at start-up, so ingest workers start quickly.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

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
    ReadBuffer,
    base_time_ns,
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
    "ReadBuffer",
    "base_time_ns",
    "decode_events",
    "exact_ns",
    "graph_launch_correlations",
    "iter_batches",
    "load",
    "meta_value",
    "native",
    "read_bytes",
    "split_trace",
]


def load(path: Path, buffer: ReadBuffer | None = None) -> RawTrace:
    """Read and split one trace file (raises TraceFormatError for unusable input): by the
    columnar scanner where it takes the file, else by msgspec (`raw.split_trace`). With `buffer`, a
    plain file is read into it (the trace is valid until its next read)."""
    if buffer is not None:
        view = buffer.read(path)
        if view is not None and view[:2].tobytes() != b"\x1f\x8b":
            if (trace := native.split(path, view)) is not None:
                return trace
            return split_trace(path, bytes(view))
    data, gz_warning = read_bytes(path)
    if gz_warning is None and (trace := native.split(path, data)) is not None:
        return trace
    return split_trace(path, data, gz_warning)


def iter_batches(
    trace: RawTrace,
    *,
    stats: BatchStats,
    batch_events: int | None = None,
    restart: Callable[[], None] | None = None,
) -> Iterator[pa.Table]:
    """Yield `events` tables (schema columns, before `conform`) batch by batch.

    A trace split by the columnar scanner is read by it; where it declines, the file is split
    again by msgspec (`trace` is updated in place: it may come back salvaged, with warnings) and
    read by the msgspec reader, with `stats` as they were. Without `restart` the columnar
    reader's batches are held until it has read the whole file; with it, they are yielded as
    read, and `restart()` is called before the msgspec reader's first batch if any was yielded
    (the caller drops them).
    """
    if trace.native is not None:
        native_batch = batch_events or native.BATCH_EVENTS
        before = dataclasses.replace(stats, devices=dict(stats.devices))
        yielded = False
        try:
            if restart is None:
                tables = list(native.iter_batches(trace, stats=stats, batch_events=native_batch))
                yield from tables
            else:
                for table in native.iter_batches(trace, stats=stats, batch_events=native_batch):
                    yielded = True
                    yield table
            return
        except native.Declined:
            pass
        for f in dataclasses.fields(stats):
            setattr(stats, f.name, getattr(before, f.name))
        _resplit(trace)
        if yielded and restart is not None:
            restart()
    yield from fallback.iter_batches(trace, stats=stats, batch_events=batch_events or BATCH_EVENTS)


def _resplit(trace: RawTrace) -> None:
    """Split a trace the scanner declined again by msgspec, in place."""
    data = trace.data if isinstance(trace.data, bytes) else bytes(trace.data)
    again = split_trace(trace.path, data)
    trace.data = data
    trace.meta, trace.events = again.meta, again.events
    trace.warnings[:] = again.warnings
    trace.salvaged, trace.native = again.salvaged, None
