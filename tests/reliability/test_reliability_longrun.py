"""The collector under a long run: many thousand cycles with bounded memory and file handles,
and nothing lost.

A recorder driven in-process for 20,000 cycles (60,000 records, 60 flushes), and the NVML
sampler for 20,000 samples with a flush every 500: after a warm-up, the Python heap
(tracemalloc) and the process's RSS stay flat and the number of open file descriptors does
not change, and every record reaches the disk.
"""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

from tests.reliability.test_reliability_disk import read_sites
from tests.reliability.test_reliability_nvml import Nvml
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.wrappers import make_wrapper
from tracekit.launch.nvml import NvmlSampler
from tracekit.store.raw.files import RECORDS_FILE
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.nvml import COUNTERS_FILE
from tracekit.store.raw.records import decoded


def decode(table: Any, sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded records, one dict a row."""
    rows: list[dict[str, Any]] = decoded(table, sites).to_dicts()
    return rows


WARMUP = 2_000
CYCLES = 20_000
HEAP_GROWTH_MAX = 1 << 20  # 1 MiB: keeping the records would take > 10 MiB
RSS_GROWTH_MAX = 32 << 20  # RSS is noisy (allocator, pyarrow pools); a leak of records is not


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_recorder_long_run_bounded_memory_and_handles(tmp_path: Path) -> None:
    # GIVEN a recorder flushing every 1000 records, and a cycle of step -> draft + verify
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=1000, flush_seconds=60))

    def step(i: int) -> int:
        return draft(i) + verify(i)

    def draft(i: int) -> int:
        return i

    def verify(i: int) -> int:
        return 1

    draft = make_wrapper(draft, Site(Target("m", "W.draft"), phase="draft"), rec)
    verify = make_wrapper(verify, Site(Target("m", "W.verify"), phase="verify"), rec)
    step = make_wrapper(step, Site(Target("m", "W.step"), cycle=True), rec)
    for i in range(WARMUP):
        step(i)
    tracemalloc.start()
    try:
        heap0, fds0, rss0 = tracemalloc.get_traced_memory()[0], open_fds(), rss_bytes()
        # WHEN it runs 20,000 more cycles
        total = sum(step(i) for i in range(WARMUP, WARMUP + CYCLES))
        heap1, fds1, rss1 = tracemalloc.get_traced_memory()[0], open_fds(), rss_bytes()
    finally:
        tracemalloc.stop()
    rec.close()
    fds_closed = open_fds()  # before the checks below load polars (its pool may open some)
    # THEN the program's results are its own, and memory and handles stayed flat
    assert total == sum(range(WARMUP, WARMUP + CYCLES)) + CYCLES
    assert fds1 == fds0, (fds0, fds1)
    assert heap1 - heap0 < HEAP_GROWTH_MAX, heap1 - heap0
    assert rss1 - rss0 < RSS_GROWTH_MAX, rss1 - rss0
    assert len(rec._buf) < 1000
    assert rec.flushes >= (WARMUP + CYCLES) * 3 // 1000
    # and every record is on disk, the stream closed cleanly, the file closed
    table, complete, err = read_stream(rec.dir / RECORDS_FILE)
    assert err is None
    assert complete
    assert table is not None
    rows = decode(table, read_sites(rec.dir))
    assert len(rows) == (WARMUP + CYCLES) * 3
    assert sum(r["kind"] == "cycle" for r in rows) == WARMUP + CYCLES
    assert fds_closed == fds0 - 1  # the record stream's own descriptor is closed


def test_nvml_sampler_long_run_bounded_memory_and_handles(tmp_path: Path) -> None:
    # GIVEN a sampler (driven by hand, no thread) on a healthy one-GPU NVML
    said: list[str] = []
    s = NvmlSampler(tmp_path / "nvml", nvml=Nvml())
    s.available = True
    s._handles = [0]
    s._warn = said.append

    def run(n: int) -> None:
        for i in range(n):
            s.sample_once()
            if i % 500 == 499:
                s.flush()

    run(WARMUP)
    tracemalloc.start()
    try:
        heap0, fds0 = tracemalloc.get_traced_memory()[0], open_fds()
        # WHEN it takes 20,000 more samples
        run(CYCLES)
        heap1, fds1 = tracemalloc.get_traced_memory()[0], open_fds()
    finally:
        tracemalloc.stop()
    s.stop()
    # THEN memory and handles stayed flat, nothing was said, and every sample is on disk
    assert fds1 == fds0
    assert heap1 - heap0 < HEAP_GROWTH_MAX, heap1 - heap0
    assert said == []
    table, complete, err = read_stream(tmp_path / "nvml" / COUNTERS_FILE)
    assert err is None
    assert complete
    assert table is not None
    assert len(set(table.column("ts_ns").to_pylist())) > 1
    per_sample = table.num_rows / (WARMUP + CYCLES)
    assert per_sample == int(per_sample) >= 1  # every sample's metrics, none dropped
