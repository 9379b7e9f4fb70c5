"""The packet writer: packets built with the `perfetto` package's `StreamingTraceProtoBuilder`
(descriptors, interned names, slices with many flows, the run's metadata), and pre-encoded
bulk packets (packets.py) written beside them into the same file."""

from __future__ import annotations

from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from tracekit._version import __version__
from tracekit.store import reader
from tracekit.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

    from tracekit.export.perfetto.inputs import ExportStats

# TrackEvent.type
SLICE_BEGIN = 1
SLICE_END = 2
INSTANT = 3
COUNTER = 4

META_SEQUENCE = 1


class Writer:
    """Writes packets through the perfetto builder, and pre-encoded bulk packets beside them."""

    def __init__(self, f: IO[bytes], builder: Any) -> None:
        self.f = f
        self.builder = builder

    @classmethod
    def on(cls, f: IO[bytes]) -> Writer:
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

        return cls(f, StreamingTraceProtoBuilder(f))

    def packet(self, sequence: int, *, first: bool = False, ts: int | None = None) -> TracePacket:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

        p: TracePacket = self.builder.create_packet()
        p.trusted_packet_sequence_id = sequence
        if first:
            p.first_packet_on_sequence = True
            p.previous_packet_dropped = 1
            p.sequence_flags = (
                TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            )
        else:
            p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if ts is not None:
            p.timestamp = ts
        return p

    def write(self, p: TracePacket) -> None:
        self.builder.write_packet(p)

    def raw(self, data: bytes | memoryview) -> None:
        self.f.write(data)

    def metadata(self, run_dir: Path, tables: dict[str, bool], stats: ExportStats) -> None:
        """An instant on a `tracekit` track: version, schema, run, notes (what is missing)."""
        uuid = 1
        p = self.packet(META_SEQUENCE, first=True)
        d = p.track_descriptor
        d.uuid = uuid
        d.name = "tracekit"
        self.write(p)
        ts = first_ts(run_dir, tables)
        e = self.packet(META_SEQUENCE, ts=ts)
        e.track_event.type = INSTANT
        e.track_event.track_uuid = uuid
        e.track_event.name = "tracekit run"
        annotate(
            e,
            {
                "tracekit_version": __version__,
                "schema_version": SCHEMA_VERSION,
                "run_dir": str(run_dir),
                "ranks": len(stats.ranks),
                "notes": "; ".join(stats.notes) or "none",
            },
        )
        self.write(e)


def annotate(p: TracePacket, args: dict[str, Any]) -> None:
    for key, val in args.items():
        if val is None:
            continue
        if isinstance(val, float) and val != val:  # NaN: leave out
            continue
        a = p.track_event.debug_annotations.add()
        a.name = key
        if isinstance(val, bool | np.bool_):
            a.bool_value = bool(val)
        elif isinstance(val, int | np.integer):
            a.int_value = int(val)
        elif isinstance(val, float | np.floating):
            a.double_value = float(val)
        else:
            a.string_value = str(val)


def first_ts(run_dir: Path, tables: dict[str, bool]) -> int:
    import polars as pl

    best: int | None = None
    for table, col in (("events", "start_ns"), ("phases", "start_ns"), ("cycles", "start_ns")):
        if tables.get(table):
            v = reader.scan_table(run_dir, table).select(pl.col(col).min()).collect().item()
            if v is not None:
                best = int(v) if best is None else min(best, int(v))
    return best or 0
