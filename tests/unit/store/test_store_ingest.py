"""Ingest of hand-written traces: exact ns, columns, graph launches, manifests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tests.unit.store._traces import BASE, cpu, kernel, runtime, trace, write
from tracekit.store.ingest import ingest
from tracekit.store.kineto import exact_ns
from tracekit.store.reader import read_table


def test_exact_ns_relative_three_decimals() -> None:
    # GIVEN µs values with three decimals, some not exactly representable in binary
    values = [0.001, 0.1, 1.005, 123456.789, 7_889_999_999.999, 4_398_046_511.103, 0, 12]
    # WHEN
    ns, ok = exact_ns(values, relative=True)
    # THEN
    assert ok.all()
    assert ns.tolist() == [1, 100, 1005, 123456789, 7_889_999_999_999, 4_398_046_511_103, 0, 12000]


def test_exact_ns_exhaustive_window() -> None:
    # Every ns in a window just under 2^43 µs (the end of kineto's relative range) round-trips.
    k = np.arange(7_800_000_000_000_000, 7_800_000_000_000_000 + 20_000, dtype=np.int64)
    floats = [float(f"{v // 1000}.{v % 1000:03d}") for v in k.tolist()]
    ns, ok = exact_ns(floats, relative=True)
    assert ok.all()
    assert (ns == k).all()


def test_exact_ns_absolute_integers_and_missing() -> None:
    ns, ok = exact_ns([1_682_725_898_236_567, None, "x"], relative=False)
    assert ok.tolist() == [True, False, False]
    assert int(ns[0]) == 1_682_725_898_236_567_000


def test_ingest_exact_timestamps_relative(tmp_path: Path) -> None:
    # GIVEN a torch >= 2.4 trace: ts relative to baseTimeNanoseconds, three decimals
    doc = trace(
        [
            cpu("aten::mm", "1000.001", "5.999"),
            runtime("cudaLaunchKernel", "1001.250", "3.100", 42),
            kernel("gemm", "1010.007", "20.993", 42),
        ]
    )
    f = write(tmp_path / "t.json", doc)
    # WHEN
    result = ingest([f], tmp_path / "run", jobs=1)
    # THEN
    df = read_table(tmp_path / "run", "events").filter(pl.col("ph") == "X").sort("start_ns")
    assert result.ranks == [0]
    assert df["start_ns"].to_list() == [BASE + 1_000_001, BASE + 1_001_250, BASE + 1_010_007]
    assert df["dur_ns"].to_list() == [5999, 3100, 20993]


def test_ingest_exact_timestamps_absolute_us(tmp_path: Path) -> None:
    # GIVEN a torch <= 2.3 trace: absolute epoch µs integers, no baseTimeNanoseconds
    doc = trace(
        [cpu("aten::add", 1_682_725_898_236_567, 13), kernel("k", 1_682_725_898_236_590, 4, 1)],
        base=None,
    )
    f = write(tmp_path / "old.json.gz", doc)
    ingest([f], tmp_path / "run", jobs=1)
    df = read_table(tmp_path / "run", "events").filter(pl.col("ph") == "X").sort("start_ns")
    assert df["start_ns"].to_list() == [1_682_725_898_236_567_000, 1_682_725_898_236_590_000]
    m = read_table(tmp_path / "run", "manifests")
    assert m.filter(pl.col("key") == "time_base")["value"].to_list() == ["absolute_us"]


def test_ingest_columns_and_graph_launch(tmp_path: Path) -> None:
    # GIVEN a graph launch (corr 7) with two kernels and a memcpy, plus one eager kernel (corr 8)
    events = [
        runtime("cudaGraphLaunch", "10.000", "5.000", 7),
        runtime("cudaLaunchKernel", "20.000", "2.000", 8),
        kernel("graph_k1", "30.000", "1.000", 7),
        kernel("graph_k2", "31.000", "1.000", 7, stream=9),
        {
            "ph": "X",
            "cat": "gpu_memcpy",
            "name": "Memcpy DtoD",
            "pid": 0,
            "tid": 7,
            "ts": "32.000",
            "dur": "1.000",
            "args": {"device": 0, "stream": 7, "correlation": 7, "bytes": 4096},
        },
        kernel("eager", "40.000", "1.000", 8),
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "decode_graph",
            "pid": 0,
            "tid": 7,
            "ts": "29.999",
            "dur": "3.002",
            "args": {"External id": 5},
        },
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "record_param_comms",
            "pid": 100,
            "tid": 101,
            "ts": "1.000",
            "dur": "1.000",
            "args": {
                "Collective name": "allreduce",
                "dtype": "BFloat16",
                "In msg nelems": 1024,
                "Group size": 8,
                "Process Group Name": "0",
                "External id": 3,
            },
        },
        {
            "ph": "C",
            "cat": "memory",
            "name": "[memory]",
            "pid": 100,
            "tid": 0,
            "ts": "50.000",
            "args": {"Total Allocated": 512},
        },
        {"ph": "s", "cat": "ac2g", "name": "flow", "id": 7, "pid": 100, "tid": 101, "ts": "10.000"},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]
    f = write(tmp_path / "g.json", trace(events, rank=3))
    ingest([f], tmp_path / "run", jobs=1)
    df = read_table(tmp_path / "run", "events")
    by = dict(zip(df["name"].cast(pl.String).to_list(), df.to_dicts()))
    # flows and metadata are not rows; X, C and the instant are
    assert sorted(df["ph"].cast(pl.String).unique().to_list()) == ["C", "X", "i"]
    assert by["graph_k1"]["graph_launched"] is True
    assert by["graph_k2"]["graph_launched"] is True
    assert by["graph_k2"]["stream"] == 9
    assert by["Memcpy DtoD"]["graph_launched"] is True
    assert by["Memcpy DtoD"]["bytes"] == 4096
    assert by["eager"]["graph_launched"] is False
    assert by["cudaGraphLaunch"]["graph_launched"] is None  # CPU rows carry no device flag
    assert by["cudaGraphLaunch"]["cbid"] == 211
    assert by["cudaGraphLaunch"]["args"] is None
    assert by["eager"]["device"] == 0
    assert by["eager"]["external_id"] == 1008
    assert by["decode_graph"]["stream"] == 7  # annotation spans: stream from tid
    rpc = by["record_param_comms"]
    assert (
        rpc["collective"],
        rpc["dtype"],
        rpc["msg_nelems"],
        rpc["group_size"],
        rpc["pg_name"],
    ) == ("allreduce", "BFloat16", 1024, 8, "0")
    assert json.loads(rpc["args"])["Collective name"] == "allreduce"
    assert by["[memory]"]["value"] == 512.0
    assert by["Record Window End"]["pid"] is None  # pid "" is not numeric
    assert set(df["rank"].to_list()) == {3}


def test_manifests_long_format(tmp_path: Path) -> None:
    f = write(
        tmp_path / "m.json",
        trace(
            [kernel("k", "1.000", "1.000", 1)],
            rank=2,
            extra={"cuda_runtime_version": 13000, "cupti_version": 130001},
        ),
    )
    ingest([f], tmp_path / "run", jobs=1)
    m = read_table(tmp_path / "run", "manifests")
    got = {(s, k): v for s, k, v in zip(m["section"], m["key"], m["value"])}
    assert got[("trace", "source_file")] == str(f.resolve())
    assert got[("trace", "base_time_ns")] == str(BASE)
    assert got[("trace", "time_base")] == "relative_ns"
    assert got[("distributed", "rank")] == "2"
    assert got[("distributed", "world_size")] == "8"
    assert got[("versions", "nccl")] == "2.28.9"
    assert got[("versions", "cuda_runtime")] == "13000"
    assert got[("versions", "cupti")] == "130001"
    assert got[("device", "name")] == "NVIDIA H200"
    assert got[("device", "compute_capability")] == "9.0"
    assert got[("trace", "trace_name")] == "/tmp/x.json"


def test_negative_duration_clamped_and_warned(tmp_path: Path) -> None:
    f = write(tmp_path / "n.json", trace([kernel("k", "5.000", "-2.000", 1)]))
    result = ingest([f], tmp_path / "run", jobs=1)
    df = read_table(tmp_path / "run", "events").filter(pl.col("ph") == "X")
    assert df["dur_ns"].to_list() == [0]
    assert any("negative duration" in w for w in result.warnings)


def test_string_pid_and_odd_arg_types(tmp_path: Path) -> None:
    # Producers other than kineto: string pids, string stream ids, float correlation.
    ev = kernel("k", "1.000", "1.000", 1)
    ev["pid"] = "GPU 0"
    ev["args"]["stream"] = "7"
    ev["args"]["correlation"] = 5.0
    f = write(tmp_path / "o.json", trace([ev]))
    ingest([f], tmp_path / "run", jobs=1)
    row = read_table(tmp_path / "run", "events").filter(pl.col("ph") == "X").to_dicts()[0]
    assert row["pid"] is None
    assert row["stream"] == 7
    assert row["correlation"] == 5


@pytest.mark.parametrize("jobs", [1, 2])
def test_parallel_equals_serial(tmp_path: Path, jobs: int) -> None:
    files = [
        write(tmp_path / f"in/r{r}.json", trace([kernel("k", f"{r}.500", "1.000", r)], rank=r))
        for r in range(3)
    ]
    result = ingest(files, tmp_path / "run", jobs=jobs)
    assert result.ranks == [0, 1, 2]
    df = read_table(tmp_path / "run", "events").filter(pl.col("ph") == "X").sort("rank")
    assert df["start_ns"].to_list() == [BASE + 500, BASE + 1500, BASE + 2500]


def test_reingest_replaces_partition(tmp_path: Path) -> None:
    f = write(tmp_path / "a.json", trace([kernel("k", "1.000", "1.000", 1)]))
    ingest([f], tmp_path / "run", jobs=1)
    ingest([f], tmp_path / "run", jobs=1)
    assert read_table(tmp_path / "run", "events").filter(pl.col("ph") == "X").height == 1
    assert not list((tmp_path / "run" / "store").glob(".ingest-staging*"))
