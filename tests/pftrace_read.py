"""Read a native Perfetto trace back the way the trace processor pairs it (for tests).

Packets are ordered by timestamp (stable: ties keep file order, as the trace processor's sorter
does); `TYPE_SLICE_END` closes the most recent open slice on its track; names come from the
sequence's interned event names. Returns tracks, slices, counters and flows as plain Python.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent


@dataclass
class Slice:
    track: int
    name: str
    start: int
    end: int
    args: dict[str, Any]
    flows: list[int]
    correlation: int


@dataclass
class ReadBack:
    tracks: dict[int, Any] = field(default_factory=dict)  # uuid -> TrackDescriptor
    slices: list[Slice] = field(default_factory=list)
    instants: list[Slice] = field(default_factory=list)
    counters: dict[int, list[tuple[int, float]]] = field(default_factory=lambda: defaultdict(list))
    unmatched_ends: int = 0
    unclosed: int = 0

    def track_name(self, uuid: int) -> str:
        d = self.tracks[uuid]
        if d.HasField("thread"):
            return str(d.thread.thread_name)
        if d.HasField("process"):
            return str(d.process.process_name)
        return str(d.name)

    def children(self, parent: int) -> list[int]:
        return [u for u, d in self.tracks.items() if d.parent_uuid == parent]

    def processes(self) -> dict[int, Any]:
        return {u: d for u, d in self.tracks.items() if d.HasField("process")}

    def under(self, root: int) -> set[int]:
        out, todo = set(), [root]
        while todo:
            u = todo.pop()
            out.add(u)
            todo.extend(self.children(u))
        return out


def _arg(a: Any) -> Any:
    kind = a.WhichOneof("value")
    return getattr(a, kind) if kind else None


def read_back(path: Path) -> ReadBack:
    trace = Trace()
    trace.ParseFromString(Path(path).read_bytes())
    out = ReadBack()
    names: dict[int, dict[int, str]] = defaultdict(dict)
    events = []
    for i, p in enumerate(trace.packet):
        seq = p.trusted_packet_sequence_id
        if p.sequence_flags & 1:
            names[seq] = {}
        for n in p.interned_data.event_names:
            names[seq][n.iid] = n.name
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            assert d.uuid not in out.tracks, f"duplicate track uuid {d.uuid}"
            out.tracks[d.uuid] = d
        if p.HasField("track_event"):
            e = p.track_event
            name = e.name or (
                names[seq].get(e.name_iid, f"<missing iid {e.name_iid}>") if e.name_iid else ""
            )
            events.append((p.timestamp, i, e, name))
    events.sort(key=lambda x: (x[0], x[1]))
    stacks: dict[int, list[Slice]] = defaultdict(list)
    for ts, _, e, name in events:
        assert e.track_uuid in out.tracks, f"event on undeclared track {e.track_uuid}"
        args = {a.name: _arg(a) for a in e.debug_annotations}
        if e.type == TrackEvent.TYPE_SLICE_BEGIN:
            stacks[e.track_uuid].append(
                Slice(e.track_uuid, name, ts, -1, args, list(e.flow_ids), e.correlation_id)
            )
        elif e.type == TrackEvent.TYPE_SLICE_END:
            if not stacks[e.track_uuid]:
                out.unmatched_ends += 1
                continue
            s = stacks[e.track_uuid].pop()
            s.end = ts
            out.slices.append(s)
        elif e.type == TrackEvent.TYPE_INSTANT:
            out.instants.append(
                Slice(e.track_uuid, name, ts, ts, args, list(e.flow_ids), e.correlation_id)
            )
        elif e.type == TrackEvent.TYPE_COUNTER:
            out.counters[e.track_uuid].append((ts, e.double_counter_value))
    out.unclosed = sum(len(s) for s in stacks.values())
    return out
