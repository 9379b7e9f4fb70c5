"""Hand-built store tables for the analyzer tests (events rows written straight to Parquet)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.store.writer import write_partition

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


@dataclass
class RankTrace:
    """Events of one rank, built call by call. Times are ns."""

    pid: int = 100
    tid: int = 7
    rows: list[dict[str, Any]] = field(default_factory=list)
    _corr: int = 0

    def range(self, name: str, start: int, end: int, *, tid: int | None = None) -> None:
        self.rows.append(
            {
                "cat": "user_annotation",
                "name": name,
                "ph": "X",
                "start_ns": start,
                "dur_ns": end - start,
                "pid": self.pid,
                "tid": tid or self.tid,
            }
        )

    def cpu_op(self, name: str, start: int, end: int, *, tid: int | None = None) -> None:
        self.rows.append(
            {
                "cat": "cpu_op",
                "name": name,
                "ph": "X",
                "start_ns": start,
                "dur_ns": end - start,
                "pid": self.pid,
                "tid": tid or self.tid,
            }
        )

    def launch(
        self,
        at: int,
        kernels: list[tuple[str, int, int]],
        *,
        graph: bool = False,
        stream: int = 7,
        runtime: str | None = None,
        cat: str = "kernel",
    ) -> int:
        """A runtime call at `at` (1 ns long) and its GPU activities (name, start, end)."""
        self._corr += 1
        corr = self._corr
        rt = runtime or ("cudaGraphLaunch" if graph else "cudaLaunchKernel")
        self.rows.append(
            {
                "cat": "cuda_runtime",
                "name": rt,
                "ph": "X",
                "start_ns": at,
                "dur_ns": 1,
                "pid": self.pid,
                "tid": self.tid,
                "correlation": corr,
            }
        )
        for name, s, e in kernels:
            self.rows.append(
                {
                    "cat": cat,
                    "name": name,
                    "ph": "X",
                    "start_ns": s,
                    "dur_ns": e - s,
                    "pid": 0,
                    "tid": stream,
                    "device": 0,
                    "stream": stream,
                    "correlation": corr,
                    "graph_launched": graph,
                }
            )
        return corr


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    # from_pylist takes its columns from the first row only: give every row every key.
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    return pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows])


def write_events(run_dir: Path, traces: dict[int, RankTrace]) -> Path:
    for rank, tr in traces.items():
        write_partition(run_dir, "events", rank, _table(tr.rows))
    return run_dir


def write_rows(
    run_dir: Path, table: str, rank: int, rows: list[dict[str, Any]], *, part: int = 0
) -> None:
    write_partition(run_dir, table, rank, _table(rows), part=part)


BASE_TIME_NS = 1_790_857_026_000_000_000  # a real kineto baseTimeNanoseconds value


def _us(ns: int) -> float:
    return round(ns / 1000, 3)


def to_kineto(trace: RankTrace, rank: int, world: int) -> dict[str, Any]:
    """The rank's rows as a torch-2.x Kineto trace (relative ts in µs, 3 decimals)."""
    events: list[dict[str, Any]] = []
    for r in trace.rows:
        ev: dict[str, Any] = {
            "ph": "X",
            "cat": r["cat"],
            "name": r["name"],
            "pid": r["pid"],
            "tid": r["tid"],
            "ts": _us(r["start_ns"]),
            "dur": _us(r["dur_ns"]),
            "args": {},
        }
        if r["cat"] in ("cuda_runtime", "cuda_driver"):
            ev["args"] = {"cbid": 211, "correlation": r["correlation"]}
        elif r["cat"] in GPU_CATS:
            ev["args"] = {
                "device": r["device"],
                "stream": r["stream"],
                "correlation": r["correlation"],
            }
        events.append(ev)
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world},
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": BASE_TIME_NS,
        "traceEvents": events,
        "traceName": f"rank{rank}.json",
    }


def write_kineto(out_dir: Path, traces: dict[int, RankTrace]) -> list[Path]:
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, tr in traces.items():
        p = out_dir / f"trace_rank{rank}.json"
        p.write_text(json.dumps(to_kineto(tr, rank, len(traces))))
        paths.append(p)
    return paths
