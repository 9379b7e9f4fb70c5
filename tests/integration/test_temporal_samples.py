"""HTA parity on the traces shipped in sample_traces/ (runs on a fresh clone, no corpus)."""

from __future__ import annotations

from pathlib import Path

from tracekit.analyzers.temporal import temporal
from tracekit.store.ingest import ingest


def test_sample_trace_filter_2rank_matches_hta(sample_traces: Path, tmp_path: Path) -> None:
    result = ingest([sample_traces / "trace_filter_2rank"], tmp_path / "run")
    assert result.ranks == [0, 1]
    rows = temporal(tmp_path / "run").to_dicts()
    got = [
        (r["rank"], r["idle_us"], r["compute_us"], r["non_compute_us"], r["span_us"]) for r in rows
    ]
    assert got == [
        (0, 321378.0, 106252.0, 172428.0, 600058.0),
        (1, 328671.0, 135548.0, 136455.0, 600674.0),
    ]


def test_sample_vllm_full_graph_matches_hta_pct(sample_traces: Path, tmp_path: Path) -> None:
    ingest([sample_traces / "tracelens_vllm_decode_full_graph"], tmp_path / "run")
    row = temporal(tmp_path / "run", hta_rounding=True).to_dicts()[0]
    assert (row["idle_pct"], row["compute_pct"], row["non_compute_pct"]) == (4.26, 95.42, 0.32)
    # in exact ns HTA's rounding no longer hides busy time: idle is far lower
    exact = temporal(tmp_path / "run").to_dicts()[0]
    assert exact["idle_pct"] < 1.0
