"""Ingest of every corpus trace: exact timestamps against a Decimal parse, graph launches, ranks."""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path

import polars as pl
import pytest

from tracekit.store.ingest import ingest
from tracekit.store.reader import read_table

# file, rank from distributedInfo, GPU rows launched by a graph (corpus README)
FILES = [
    ("trace_filter_2rank/sampled_rank-0.json.gz", 0, 0),
    ("trace_filter_2rank/sampled_rank-1.json.gz", 1, 0),
    ("trace_diff_control/control.json.gz", 3, 0),
    ("trace_diff_test/test.json.gz", 1, 5046),
    ("nccl_parser_config/nccl_data.json.gz", 0, 0),
    ("h200/graph_replay_vs_extend.json.gz", 0, 72),
    ("h200/compile_reduce_overhead.json.gz", 0, 54),
    ("tracelens/tracelens_sglang_qwen3_8b_decode/sglang_Qwen3-8B_decode.json.gz", 0, 544),
    ("tracelens/tracelens_vllm_decode_full_graph/graph_execution.json.gz", 0, 421),
    (
        "tracelens/tracelens_sglang_qwen3_8b_prefilldecode/sglang_Qwen3-8B_prefilldecode.json.gz",
        0,
        0,
    ),
]


@pytest.mark.parametrize(
    ("name", "rank", "graph_rows"), FILES, ids=[f[0].split("/")[-1] for f in FILES]
)
def test_corpus_file_exact(
    corpus: Path, tmp_path: Path, name: str, rank: int, graph_rows: int
) -> None:
    # GIVEN the reference: every kept event's ts/dur parsed as exact decimals
    path = corpus / name
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    base = doc.get("baseTimeNanoseconds", 0)
    expected = [
        (
            e.get("name", ""),
            int(Decimal(e["ts"]) * 1000) + base,
            int(Decimal(e.get("dur", 0)) * 1000),
        )
        for e in doc["traceEvents"]
        if e.get("ph") in ("X", "i", "C")
    ]
    # WHEN
    result = ingest([path], tmp_path / "run", jobs=1)
    # THEN
    assert result.ranks == [rank]
    assert result.warnings == []
    df = read_table(tmp_path / "run", "events")
    got = list(
        zip(df["name"].cast(pl.String).to_list(), df["start_ns"].to_list(), df["dur_ns"].to_list())
    )
    assert got == expected
    assert int(df["graph_launched"].sum()) == graph_rows


def test_corpus_nccl_kernels_and_collective_args(corpus: Path, tmp_path: Path) -> None:
    ingest([corpus / "trace_diff_control"], tmp_path / "run", jobs=1)
    df = read_table(tmp_path / "run", "events")
    nccl = df.filter(pl.col("name").cast(pl.String).str.starts_with("ncclKernel"))
    assert nccl.height == 60
    assert nccl["stream"].null_count() == 0
    m = read_table(tmp_path / "run", "manifests")
    assert m.filter((pl.col("section") == "distributed") & (pl.col("key") == "world_size"))[
        "value"
    ].to_list() == ["8"]
