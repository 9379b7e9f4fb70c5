"""The live Prometheus metrics (tracekit/live/metrics.py) fed hand-built phase instances and
cycles: the figures a scrape returns, worked out by hand. The served endpoint on a running demo:
tests/integration/test_live_metrics.py."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from tracekit.live.feed import Polled
from tracekit.live.instances import Cycle, Instance
from tracekit.live.metrics import MetricsSink


def _instance(phase: str, wall_ms: float, *, graph: bool, end_s: float, rank: int = 0) -> Instance:
    wall = int(wall_ms * 1e6)
    # forward 60%, allreduce 30%, overhead 10% of the wall time
    return Instance(
        rank=rank,
        phase=phase,
        cycle=0,
        end_ns=int(end_s * 1e9),
        wall_ns=wall,
        forward_ns=wall * 6 // 10,
        allreduce_ns=wall * 3 // 10,
        overhead_ns=wall - wall * 6 // 10 - wall * 3 // 10,
        cpu_ns=wall,
        graph_replayed=graph,
    )


def test_a_scrape_sums_what_was_fed() -> None:
    # GIVEN two verify instances (2 ms replaying a graph, 4 ms eager) and one draft (1 ms) on
    # rank 0, two cycles of 3 and 2 tokens and one of unknown acceptance
    registry = CollectorRegistry()
    sink = MetricsSink(registry)
    # WHEN they are fed in two polls
    sink.observe(
        Polled(
            instances=[
                _instance("verify", 2.0, graph=True, end_s=10.0),
                _instance("draft", 1.0, graph=False, end_s=10.5),
            ],
            cycles=[Cycle(0, 0, 10, 3.0)],
        )
    )
    sink.observe(
        Polled(
            instances=[_instance("verify", 4.0, graph=False, end_s=11.0)],
            cycles=[Cycle(0, 1, 11, 2.0), Cycle(0, 2, 12, None)],
        )
    )

    def get(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    # THEN verify: 2 instances, 6 ms of wall time, 3.6 ms forward, 1.8 ms allreduce
    verify = {"rank": "0", "phase": "verify"}
    assert get("tracekit_phase_wall_seconds_count", **verify) == 2
    assert get("tracekit_phase_wall_seconds_sum", **verify) == pytest.approx(0.006)
    assert get("tracekit_phase_forward_seconds_sum", **verify) == pytest.approx(0.0036)
    assert get("tracekit_phase_allreduce_seconds_sum", **verify) == pytest.approx(0.0018)
    assert get("tracekit_phase_overhead_seconds_sum", **verify) == pytest.approx(0.0006)
    # 2 ms falls in the 2.5 ms bucket, 4 ms above it
    assert get("tracekit_phase_wall_seconds_bucket", le="0.0025", **verify) == 1
    # one of the two verify instances replayed a graph; the draft none (its series exists at 0)
    assert get("tracekit_phase_graph_replayed_total", **verify) == 1
    assert get("tracekit_graph_replay_fraction", **verify) == 0.5
    draft = {"rank": "0", "phase": "draft"}
    assert get("tracekit_phase_graph_replayed_total", **draft) == 0
    assert get("tracekit_graph_replay_fraction", **draft) == 0.0
    # three cycles; the acceptance histogram holds the two known ones: 3 + 2 = 5 tokens
    assert get("tracekit_cycles_total", rank="0") == 3
    assert get("tracekit_accept_length_count", rank="0") == 2
    assert get("tracekit_accept_length_sum", rank="0") == 5.0
    # the latest record ends at 11 s
    assert get("tracekit_last_record_timestamp_seconds", rank="0") == 11.0
