"""The Kineto reader's public functions (tracekit/store/kineto.py) on tiny hand-written traces:
load and salvage, top-level metadata, graph-launch correlations, events -> Arrow batches.
The same files end to end through `ingest`: tests/unit/store/test_store_ingest.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pytest

from tests.unit.store._traces import BASE, cpu, kernel, runtime, trace, write
from tracekit.errors import TraceFormatError
from tracekit.store.kineto import (
    BatchStats,
    base_time_ns,
    decode_events,
    graph_launch_correlations,
    iter_batches,
    load,
    meta_value,
)

EVENTS = [
    cpu("aten::mm", "10.000", "5.000"),
    runtime("cudaLaunchKernel", "11.000", "2.000", 42),
    kernel("gemm", "20.500", "3.250", 42),
]


def _one_table(path: Path, stats: BatchStats | None = None) -> pa.Table:
    tables = list(iter_batches(load(path), stats=stats or BatchStats()))
    assert len(tables) == 1
    return tables[0]


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_load_splits_metadata_from_events(tmp_path: Path, name: str) -> None:
    f = write(tmp_path / name, trace(EVENTS, rank=3))
    t = load(f)
    assert not t.salvaged
    assert t.warnings == []
    assert meta_value(t, "distributedInfo")["rank"] == 3
    assert meta_value(t, "schemaVersion") == 1
    assert meta_value(t, "traceEvents") is None  # events are not metadata
    assert meta_value(t, "absent") is None
    assert base_time_ns(t) == BASE
    assert len(decode_events(t)) == 4  # three events and the window-end instant


@pytest.mark.parametrize(
    ("value", "expected"),
    [(BASE, BASE), (0, 0), (-1, None), (2**63, None), (True, None), ("1", None), (None, None)],
)
def test_base_time_ns_only_for_an_int64_epoch_time(
    tmp_path: Path, value: object, expected: int | None
) -> None:
    doc = trace(
        EVENTS, base=None, extra={"baseTimeNanoseconds": value} if value is not None else {}
    )
    assert base_time_ns(load(write(tmp_path / "t.json", doc))) == expected


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"hello", "not JSON"),
        (b"[1, 2]", "JSON but not a Kineto trace"),
        (b'{"schemaVersion": 1}', "no `traceEvents` array"),
        (b'{"traceEvents": {}}', "`traceEvents` is not an array"),
        (b'{"traceEvents": [{"ph": "X", "ts": 1', "no complete event"),
    ],
)
def test_unusable_input_is_one_trace_format_error_naming_the_file(
    tmp_path: Path, data: bytes, needle: str
) -> None:
    f = tmp_path / "bad.json"
    f.write_bytes(data)
    with pytest.raises(TraceFormatError) as exc:
        load(f)
    msg = str(exc.value)
    assert msg.startswith(f"{f}: ")
    assert needle in msg
    assert "\n" not in msg


def test_a_cut_json_trace_keeps_the_events_before_the_cut(tmp_path: Path) -> None:
    # GIVEN a trace cut in the middle of its third event (the kernel)
    text = json.dumps(trace(EVENTS))
    cut = text.index('"gemm"')
    f = tmp_path / "cut.json"
    f.write_text(text[:cut])
    # THEN the two complete events and the metadata written before traceEvents are kept
    t = load(f)
    assert t.salvaged
    assert len(t.warnings) == 1
    assert "salvaged 2 events written before the damage" in t.warnings[0]
    assert base_time_ns(t) == BASE
    names = [e.name for e in decode_events(t)]
    assert names == ["aten::mm", "cudaLaunchKernel"]


def test_a_truncated_gzip_keeps_what_decompressed(tmp_path: Path) -> None:
    # GIVEN a gzip stream cut before its end (the JSON inside is cut too)
    many = [cpu(f"op{i}", f"{i}.000", "1.000") for i in range(2000)]
    data = gzip.compress(json.dumps(trace(many)).encode())
    f = tmp_path / "t.json.gz"
    f.write_bytes(data[: len(data) // 2])
    t = load(f)
    assert t.salvaged
    assert "truncated gzip stream" in t.warnings[0]
    kept = [e.name for e in decode_events(t)]
    assert 0 < len(kept) < 2000
    assert kept == [f"op{i}" for i in range(len(kept))]  # a prefix, in order


def test_graph_launch_correlations(tmp_path: Path) -> None:
    evs = [
        runtime("cudaGraphLaunch", "1.000", "1.000", 7),
        runtime("cuGraphLaunch_v2", "2.000", "1.000", 8),
        runtime("hipGraphLaunch", "3.000", "1.000", 9),
        runtime("cudaLaunchKernel", "4.000", "1.000", 10),
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaGraphLaunch", "ts": 5, "dur": 1},
    ]
    t = load(write(tmp_path / "t.json", trace(evs)))
    assert graph_launch_correlations(decode_events(t)) == {7, 8, 9}


def test_batches_hold_exact_columns(tmp_path: Path) -> None:
    # GIVEN a relative-time trace (baseTimeNanoseconds) with a CPU op, a launch and its kernel
    stats = BatchStats()
    table = _one_table(write(tmp_path / "t.json", trace(EVENTS)), stats)
    rows = table.to_pylist()
    by_name = {r["name"]: r for r in rows}
    # THEN times are BASE + µs x 1000, exactly; GPU rows carry device and stream; the instant
    # is kept (ph "i") and counted
    assert stats.events == 4
    assert stats.negative_dur == 0
    assert by_name["aten::mm"]["start_ns"] == BASE + 10_000
    assert by_name["aten::mm"]["dur_ns"] == 5_000
    assert by_name["gemm"]["start_ns"] == BASE + 20_500
    assert by_name["gemm"]["dur_ns"] == 3_250
    assert by_name["gemm"]["device"] == 0
    assert by_name["gemm"]["stream"] == 7
    assert by_name["gemm"]["correlation"] == 42
    assert by_name["gemm"]["external_id"] == 1042
    assert by_name["gemm"]["graph_launched"] is False
    assert by_name["cudaLaunchKernel"]["cbid"] == 211
    assert by_name["cudaLaunchKernel"]["stream"] is None
    assert by_name["aten::mm"]["pid"] == 100
    assert by_name["aten::mm"]["tid"] == 101
    assert sorted(r["ph"] for r in rows) == ["X", "X", "X", "i"]


def test_absolute_microsecond_traces_and_dropped_phases(tmp_path: Path) -> None:
    # GIVEN an old trace (no baseTimeNanoseconds: ts are absolute µs) with a metadata event
    # (ph M, dropped) and a negative duration (clamped to 0, counted)
    evs = [
        cpu("a", 1_682_725_898_236_567, "2.000"),
        cpu("b", 1_682_725_898_236_570, "-4.000"),
        {"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "python"}},
    ]
    stats = BatchStats()
    table = _one_table(write(tmp_path / "t.json", trace(evs, base=None)), stats)
    rows = {r["name"]: r for r in table.to_pylist()}
    assert set(rows) == {"a", "b", "Record Window End"}
    assert rows["a"]["start_ns"] == 1_682_725_898_236_567_000
    assert rows["b"]["dur_ns"] == 0
    assert stats.negative_dur == 1


def test_graph_replayed_kernels_are_marked(tmp_path: Path) -> None:
    evs = [
        runtime("cudaGraphLaunch", "1.000", "1.000", 5),
        kernel("k_graph", "2.000", "1.000", 5),
        runtime("cudaLaunchKernel", "4.000", "1.000", 6),
        kernel("k_eager", "5.000", "1.000", 6),
    ]
    rows = {r["name"]: r for r in _one_table(write(tmp_path / "t.json", trace(evs))).to_pylist()}
    assert rows["k_graph"]["graph_launched"] is True
    assert rows["k_eager"]["graph_launched"] is False
    assert rows["cudaGraphLaunch"]["graph_launched"] is None  # CPU rows: null


def test_batches_split_at_batch_events(tmp_path: Path) -> None:
    evs = [cpu(f"op{i}", f"{i}.000", "1.000") for i in range(5)]
    stats = BatchStats()
    tables = list(
        iter_batches(load(write(tmp_path / "t.json", trace(evs))), stats=stats, batch_events=2)
    )
    # 5 ops + the window-end instant, 2 a batch
    assert [t.num_rows for t in tables] == [2, 2, 2]
    assert [n for t in tables for n in t.column("name").to_pylist()][:5] == [
        f"op{i}" for i in range(5)
    ]
    assert stats.events == 6
