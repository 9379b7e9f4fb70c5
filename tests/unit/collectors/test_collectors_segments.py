"""Record segments: rotation by size and age, retention (`--keep`, `--keep-hours`), and a
sped-up soak of one million cycles through the recorder's hot path (issue 17)."""

from __future__ import annotations

import gc
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.segments import RetentionPolicy
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.files import PROCESS_FILE, list_segments, segment_name
from tracekit.store.raw.ipc import read_stream


class Out:
    accept_len = 3


def _program(rec: Recorder) -> Any:
    """One cycle = draft (the map's starts_with phase) then verify: two records."""

    def draft() -> None:
        pass

    def verify() -> Out:
        return Out()

    dr = make_wrapper(draft, Site(Target("m", "draft"), phase="draft", starts_cycle=True), rec)
    ve = make_wrapper(
        verify, Site(Target("m", "verify"), phase="verify", accept_len="accept_len"), rec
    )

    def cycle() -> None:
        dr()
        ve()

    return cycle


def _disk(d: Path) -> int:
    return sum(p.stat().st_size for _i, p in list_segments(d))


def test_policy_from_keep_derives_segment_sizes() -> None:
    # GIVEN / WHEN
    p = RetentionPolicy.from_keep(2 * 10**9, 24 * 3600)
    # THEN: 2 GB / 8 = 250 MB segments, 24 h / 24 = a segment an hour
    assert p.segment_bytes == 250_000_000
    assert p.segment_seconds == 3600
    assert RetentionPolicy.from_keep(100_000).segment_bytes == 64 << 10  # at least 64 KiB
    assert RetentionPolicy.from_keep().keep_bytes == 0  # default: keep all
    assert segment_name(0) == "records.arrow"
    assert segment_name(3) == "records.3.arrow"


def test_rotation_by_size_keeps_every_record_in_order(tmp_path: Path) -> None:
    # GIVEN: 10 KB segments, nothing deleted
    policy = RetentionPolicy(segment_bytes=10_000)
    rec = Recorder(
        RecorderConfig(tmp_path / "raw", flush_records=100, flush_seconds=3600, retention=policy)
    )
    cycle = _program(rec)
    # WHEN
    for _ in range(2000):
        cycle()
    rec.close()
    # THEN: several segments, each a complete stream, together every record once
    segs = list_segments(rec.dir)
    assert len(segs) > 5
    assert [i for i, _ in segs] == list(range(len(segs)))
    seqs: list[int] = []
    for _i, path in segs:
        table, complete, err = read_stream(path)
        assert complete
        assert err is None
        assert table is not None
        seqs += table.column("seq").to_pylist()
    assert len(seqs) == 4000
    assert sorted(seqs) == list(range(1, 4001))
    assert seqs == sorted(seqs)  # segment order is record order


def test_rotation_by_age(tmp_path: Path) -> None:
    # GIVEN: a segment at most 0.05 s old, flushed every call
    policy = RetentionPolicy(segment_bytes=10**9, segment_seconds=0.05)
    rec = Recorder(
        RecorderConfig(tmp_path / "raw", flush_records=1, flush_seconds=3600, retention=policy)
    )
    cycle = _program(rec)
    # WHEN
    cycle()
    time.sleep(0.06)
    cycle()
    time.sleep(0.06)
    cycle()
    rec.close()
    # THEN
    assert [i for i, _ in list_segments(rec.dir)] == [0, 1, 2]


def test_retention_drops_oldest_first_and_says_so(tmp_path: Path) -> None:
    # GIVEN: 10 KB segments, 40 KB kept
    policy = RetentionPolicy.from_keep(40_000, segment_bytes=10_000)
    rec = Recorder(
        RecorderConfig(tmp_path / "raw", flush_records=100, flush_seconds=3600, retention=policy)
    )
    cycle = _program(rec)
    # WHEN
    for _ in range(5000):
        cycle()
        assert _disk(rec.dir) <= 40_000 + 12_000  # + at most the batch that crossed the size
    rec.close()
    # THEN: the kept segments are the newest ones, contiguous, ending with the last record
    segs = list_segments(rec.dir)
    idx = [i for i, _ in segs]
    assert idx[0] > 0
    assert idx == list(range(idx[0], idx[0] + len(idx)))
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    dropped = info["dropped"]
    assert dropped["first_index"] == 0
    assert dropped["last_index"] == idx[0] - 1
    assert dropped["segments"] == idx[0]
    assert dropped["reasons"] == {"keep": idx[0]}
    kept = sum(read_stream(p)[0].num_rows for _i, p in segs)  # type: ignore[union-attr]
    assert kept + dropped["records"] == 10_000 == info["records"]
    last = read_stream(segs[-1][1])[0]
    assert last is not None
    assert max(last.column("seq").to_pylist()) == 10_000


def test_retention_by_age_deletes_closed_segments(tmp_path: Path) -> None:
    # GIVEN: segments kept 0.1 s
    policy = RetentionPolicy(segment_bytes=2_000, keep_seconds=0.1)
    rec = Recorder(
        RecorderConfig(tmp_path / "raw", flush_records=10, flush_seconds=3600, retention=policy)
    )
    cycle = _program(rec)
    for _ in range(200):
        cycle()
    n_before = len(list_segments(rec.dir))
    # WHEN: time passes, then a few more cycles (retention runs at each flush)
    time.sleep(0.15)
    for _ in range(10):
        cycle()
    # THEN
    segs = list_segments(rec.dir)
    assert n_before > 3
    assert len(segs) <= 2
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["dropped"]["reasons"].get("keep-hours", 0) >= n_before - 1
    rec.close()


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.slow  # about 20 s on the 2-core development machine
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc")
def test_soak_million_cycles_disk_memory_files_flat_17(tmp_path: Path) -> None:
    # GIVEN: the recorder's hot path (sync wrappers, inlined enter/exit), 200 KB segments,
    # 1 MB kept, a flush every 1000 records
    policy = RetentionPolicy.from_keep(1_000_000, segment_bytes=200_000)
    rec = Recorder(
        RecorderConfig(tmp_path / "raw", flush_records=1000, flush_seconds=3600, retention=policy)
    )
    cycle = _program(rec)
    for _ in range(2000):  # warm-up: pyarrow and numpy imported, first segments written
        cycle()
    gc.collect()
    samples: list[tuple[int, int, int]] = []
    # WHEN: one million cycles (two million phase records)
    t0 = time.perf_counter()
    for _chunk in range(10):
        for _ in range(100_000):
            cycle()
        samples.append((_disk(rec.dir), _rss_bytes(), _open_fds()))
    elapsed = time.perf_counter() - t0
    rec.close()
    # THEN
    disk = [s[0] for s in samples]
    rss = [s[1] for s in samples]
    fds = [s[2] for s in samples]
    # the budget plus at most the batch that crossed the rotation size (1000 rows, 60 KB)
    assert max(disk) <= 1_000_000 + 60_000, disk
    assert len(set(fds)) == 1, fds  # one record file open, whatever the number of segments
    # memory: what the first 100k cycles settled at, within 8 MB, to the end
    assert max(rss) - rss[0] < 8 << 20, [r >> 20 for r in rss]
    assert len(rec._rows) < 4 * rec._flush_bytes  # the buffer never grows
    assert len(rec._segments.closed) <= 5  # the segment log is bounded by the budget too
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["records"] == 2 * (1_000_000 + 2000)
    assert (
        info["dropped"]["records"]
        + sum(
            read_stream(p)[0].num_rows
            for _i, p in list_segments(rec.dir)  # type: ignore[union-attr]
        )
        == info["records"]
    )
    print(
        f"1M cycles in {elapsed:.1f} s; disk {min(disk)}..{max(disk)} B; rss {[r >> 20 for r in rss]} MB"
    )


def test_retention_deletes_a_segments_acceptance_readings_with_it(tmp_path: Path) -> None:
    # GIVEN a count rule whose value is a list (one number a request): readings in
    # accepts*.jsonl, one file a record segment
    from tracekit.collectors.phasemap import parse
    from tracekit.store.raw.accepts import read_accepts

    rules = (
        parse(
            "[[phase]]\nname = 'verify'\ntargets = ['m:verify']\n"
            "accept = { from = 'return', value = 'toks' }\n"
        )
        .phases[0]
        .accept
    )

    class Batch:
        toks = (3, 1)

    policy = RetentionPolicy.from_keep(40_000, segment_bytes=10_000)
    rec = Recorder(
        RecorderConfig(tmp_path / "raw", flush_records=100, flush_seconds=3600, retention=policy)
    )
    ve = make_wrapper(
        lambda: Batch(), Site(Target("m", "verify"), phase="verify", accept=rules), rec
    )
    for _ in range(5000):
        ve()
    rec.close()
    # THEN the readings files are those of the kept segments, and every kept row has its own
    segs = [i for i, _ in list_segments(rec.dir)]
    names = sorted(p.name for p in rec.dir.glob("accepts*.jsonl"))
    assert segs[0] > 0
    assert names == sorted(f"accepts.{i}.jsonl" for i in segs)
    found = read_accepts(rec.dir)
    kept = [
        s for _i, p in list_segments(rec.dir) for s in read_stream(p)[0].column("seq").to_pylist()
    ]  # type: ignore[union-attr]
    assert {k[1] for k in found} == set(kept)
    assert all(v == {"t": [3.0, 1.0]} for v in found.values())
