"""The vectorised packet encoder writes the same bytes as the protobuf classes."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TracePacket

from tracekit.export.perfetto import packets, wire

u64 = st.integers(min_value=0, max_value=2**63 - 1)


def _reference(ts: int, typ: int, uuid: int, seq: int, iid: int, corr: int, flow: int) -> bytes:
    t = Trace()
    p = t.packet.add()
    p.timestamp = ts
    p.trusted_packet_sequence_id = seq
    p.track_event.type = typ
    if iid:
        p.track_event.name_iid = iid
    p.track_event.track_uuid = uuid
    if flow:
        p.track_event.flow_ids.append(flow)
    if corr:
        p.track_event.correlation_id = corr
    p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    return bytes(t.SerializeToString())


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(u64, st.sampled_from([1, 2, 3]), u64, u64, u64, u64), min_size=1, max_size=30
    ),
    st.integers(1, 300),
)
def test_track_event_packets_match_protobuf(rows: list[tuple[int, ...]], seq: int) -> None:
    # GIVEN
    ts, typ, uuid, iid, corr, flow = (np.array(c, dtype=np.uint64) for c in zip(*rows))
    # WHEN
    blob, lens = packets.track_event_packets(
        ts=ts,
        event_type=typ,
        track_uuid=uuid,
        sequence_id=seq,
        name_iid=iid,
        correlation=corr,
        flow_id=flow,
    )
    # THEN
    expected = [
        _reference(int(t), int(k), int(u), seq, int(i), int(c), int(f)) for t, k, u, i, c, f in rows
    ]
    assert blob == b"".join(expected)
    assert lens.tolist() == [len(e) for e in expected]


def test_counter_packets_match_protobuf_and_skip_nan() -> None:
    # GIVEN
    ts = np.array([10, 20, 30], dtype=np.int64)
    vals = np.array([1.5, float("nan"), -2.25])
    # WHEN
    blob = packets.counter_packets(ts=ts, track_uuid=77, sequence_id=3, values=vals)
    # THEN
    t = Trace()
    t.ParseFromString(blob)
    assert [
        (p.timestamp, p.track_event.double_counter_value, p.track_event.track_uuid)
        for p in t.packet
    ] == [
        (10, 1.5, 77),
        (30, -2.25, 77),
    ]
    assert all(p.track_event.type == p.track_event.TYPE_COUNTER for p in t.packet)


def test_varint_lengths() -> None:
    piece = wire.varint(np.array([0, 127, 128, 2**14, 2**63], dtype=np.uint64))
    assert piece.lens.tolist() == [1, 1, 2, 3, 10]
