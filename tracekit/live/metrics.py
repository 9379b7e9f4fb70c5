"""`tracekit launch --metrics-port PORT`: live Prometheus metrics of the running server.

Served by the launcher process (never inside the server) from the records the ranks flush:
a thread polls `raw/` (`LiveFeed`) every `interval` seconds and feeds the metrics below;
`prometheus_client` serves them as Prometheus text on `http://HOST:PORT/metrics` (HOST
127.0.0.1 unless `--metrics-host`). Names, labels and units: docs/production.md. The figures
follow docs/DEFINITIONS.md (light mode: `instances.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from tracekit.errors import CollectorError
from tracekit.live.feed import LiveFeed, Polled

# Phase times (seconds): 50 µs .. 10 s, about three buckets a decade.
TIME_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
ACCEPT_BUCKETS = (1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0)
COMPONENTS = ("forward", "allreduce", "overhead")


class _RunCollector(Collector):
    """Figures read from the feed at scrape time: records read and lost, ranks."""

    def __init__(self, feed: LiveFeed, lock: threading.Lock) -> None:
        self.feed = feed
        self.lock = lock

    def collect(self) -> Iterator[Any]:
        with self.lock:
            ranks = self.feed.ranks()
            lost = self.feed.lost()
            unranked = self.feed.unranked_lost
        records = CounterMetricFamily(
            "tracekit_records", "Raw records read from the ranks' flushed files.", labels=["rank"]
        )
        for rank, procs in sorted(ranks.items()):
            records.add_metric([str(rank)], float(sum(p.records for p in procs)))
        yield records
        lost_f = CounterMetricFamily(
            "tracekit_records_lost",
            "Records recorded but not available: deleted by retention (--keep, --keep-hours), "
            "buffered in a process whose recorder failed, or of a process whose rank never "
            "became known.",
            labels=["rank", "reason"],
        )
        for (rank, reason), n in sorted(lost.items()):
            lost_f.add_metric([str(rank), reason], float(n))
        if unranked:
            lost_f.add_metric(["unknown", "no_rank"], float(unranked))
        yield lost_f
        nranks = GaugeMetricFamily("tracekit_ranks", "Ranks that recorded something.")
        nranks.add_metric([], float(len(ranks)))
        yield nranks


class MetricsSink:
    """The Prometheus metrics a stream of phase instances and cycles feeds."""

    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["rank", "phase"]
        self.wall = Histogram(
            "tracekit_phase_wall_seconds",
            "Wall time of each phase instance (its share of the device timeline; "
            "DEFINITIONS.md forward / allreduce / overhead).",
            labels,
            buckets=TIME_BUCKETS,
            registry=registry,
        )
        self.parts = {
            c: Histogram(
                f"tracekit_phase_{c}_seconds",
                f"{c.capitalize()} part of each phase instance's wall time.",
                labels,
                buckets=TIME_BUCKETS,
                registry=registry,
            )
            for c in COMPONENTS
        }
        self.replayed = Counter(
            "tracekit_phase_graph_replayed",
            "Phase instances that replayed at least one CUDA graph.",
            labels,
            registry=registry,
        )
        self.replay_frac = Gauge(
            "tracekit_graph_replay_fraction",
            "Share of the phase's instances so far that replayed a CUDA graph.",
            labels,
            registry=registry,
        )
        self.cycles = Counter(
            "tracekit_cycles", "Speculative cycles completed.", ["rank"], registry=registry
        )
        self.accept = Histogram(
            "tracekit_accept_length",
            "Tokens emitted per cycle (accepted draft tokens plus the bonus token).",
            ["rank"],
            buckets=ACCEPT_BUCKETS,
            registry=registry,
        )
        self.last = Gauge(
            "tracekit_last_record_timestamp_seconds",
            "End time (Unix seconds) of the latest phase instance read, per rank.",
            ["rank"],
            registry=registry,
        )
        self._counts: dict[tuple[str, str], tuple[int, int]] = {}

    def observe(self, polled: Polled) -> None:
        for i in polled.instances:
            key = (str(i.rank), i.phase)
            self.wall.labels(*key).observe(i.wall_ns / 1e9)
            self.parts["forward"].labels(*key).observe(i.forward_ns / 1e9)
            self.parts["allreduce"].labels(*key).observe(i.allreduce_ns / 1e9)
            self.parts["overhead"].labels(*key).observe(i.overhead_ns / 1e9)
            n, g = self._counts.get(key, (0, 0))
            n, g = n + 1, g + i.graph_replayed
            self._counts[key] = (n, g)
            if i.graph_replayed:
                self.replayed.labels(*key).inc()
            else:
                self.replayed.labels(*key)  # the series exists at 0
            self.replay_frac.labels(*key).set(g / n)
            self.last.labels(key[0]).set(i.end_ns / 1e9)
        for c in polled.cycles:
            self.cycles.labels(str(c.rank)).inc()
            if c.accept_len is not None:
                self.accept.labels(str(c.rank)).observe(c.accept_len)


@dataclass
class LiveMetrics:
    """The feed, its metrics, the polling thread and the HTTP server."""

    feed: LiveFeed
    registry: CollectorRegistry
    sink: MetricsSink
    host: str
    port: int
    interval: float
    _server: Any = None
    _thread: threading.Thread | None = None
    _stop: threading.Event | None = None
    _lock: threading.Lock | None = None
    errors: int = 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def poll_once(self) -> None:
        assert self._lock is not None
        with self._lock:
            polled = self.feed.poll()
            self.sink.observe(polled)

    def _run(self, warn: Callable[[str], None]) -> None:
        assert self._stop is not None
        while not self._stop.wait(self.interval):
            try:
                self.poll_once()
            except Exception as exc:  # the server goes on; metrics stop updating, said once
                self.errors += 1
                if self.errors == 1:
                    warn(f"live metrics: reading the records failed ({type(exc).__name__}: {exc})")

    def stop(self, timeout: float = 2.0) -> None:
        """Stop polling and serving."""
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, timeout))
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def serve_metrics(
    raw: Path,
    port: int,
    *,
    host: str = "127.0.0.1",
    interval: float = 0.5,
    warn: Callable[[str], None] | None = None,
) -> LiveMetrics:
    """Start serving the metrics of the run whose `raw/` directory is `raw` (port 0: any free
    port, see `.port`). Raises CollectorError when the address cannot be bound."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=True)
    feed = LiveFeed(raw)
    lock = threading.Lock()
    registry.register(_RunCollector(feed, lock))
    sink = MetricsSink(registry)
    try:
        server, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        msg = (
            f"--metrics-port {port}: cannot serve on {host}:{port} ({exc.strerror or exc}); "
            "pick a free port (0: any) or another --metrics-host"
        )
        raise CollectorError(msg) from exc
    live = LiveMetrics(
        feed=feed,
        registry=registry,
        sink=sink,
        host=host,
        port=int(server.server_address[1]),
        interval=interval,
        _server=server,
        _stop=threading.Event(),
        _lock=lock,
    )
    t = threading.Thread(
        target=live._run, args=(warn or (lambda _m: None),), name="tracekit-metrics", daemon=True
    )
    t.start()
    live._thread = t
    return live
