"""Collectives Python cannot see: a multi-rank light run with no communication recorded says
"allreduce not measured" instead of 0% (summary JSON `allreduce_measured`, text, report)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tests.unit.analyzers.builders import write_rows
from tracekit.analyzers.summary import allreduce_measured, summarize

NO_COMM = pl.DataFrame({"rank": [], "cycle": []}, schema={"rank": pl.Int64, "cycle": pl.Int64})


def _bd(ranks: list[int], allreduce_ns: list[int]) -> pl.DataFrame:
    return pl.DataFrame({"rank": ranks, "allreduce_ns": allreduce_ns})


def test_allreduce_measured_rules() -> None:
    assert allreduce_measured(_bd([0, 0], [0, 0]), NO_COMM)  # one rank: 0 is a measurement
    assert not allreduce_measured(_bd([0, 1], [0, 0]), NO_COMM)  # two ranks, nothing seen
    assert allreduce_measured(_bd([0, 1], [0, 5]), NO_COMM)
    comm = pl.DataFrame({"rank": [1], "cycle": [0]})
    assert allreduce_measured(_bd([0, 1], [0, 0]), comm)
    # allreduce calls seen, no device work (gloo on GPU ranks, full mode): a measured 0
    assert allreduce_measured(_bd([0, 1], [0, 0]), NO_COMM, {"verify": 4, "allreduce": 8})
    assert not allreduce_measured(_bd([0, 1], [0, 0]), NO_COMM, {"verify": 4})


def _two_rank_light(run_dir: Path, *, allreduce: bool) -> Path:
    for rank in (0, 1):
        rows = [
            {"pid": 1, "tid": 1, "ok": True, "cycle": 0, "phase": "draft", "depth": 0, "seq": 0,
             "start_ns": 1000, "end_ns": 2000, "graph_replays": 0},
            {"pid": 1, "tid": 1, "ok": True, "cycle": 0, "phase": "verify", "depth": 0, "seq": 1,
             "start_ns": 2000, "end_ns": 4000, "graph_replays": 0},
        ]  # fmt: skip
        if allreduce:
            rows.append(
                {"pid": 1, "tid": 1, "ok": True, "cycle": 0, "phase": "allreduce", "depth": 1,
                 "parent": "verify", "seq": 2, "start_ns": 3000, "end_ns": 3500, "graph_replays": 0}
            )  # fmt: skip
        write_rows(run_dir, "phases", rank, rows)
        write_rows(
            run_dir, "cycles", rank,
            [{"cycle": 0, "start_ns": 1000, "end_ns": 4000, "accept_len": 2.0, "source": "cycle_target"}],
        )  # fmt: skip
    return run_dir


def test_summary_marks_allreduce_not_measured(tmp_path: Path) -> None:
    s = summarize(_two_rank_light(tmp_path / "compiled", allreduce=False)).to_json()
    assert s["allreduce_measured"] is False
    assert "not measured" in s["allreduce_note"]
    assert all(p["allreduce_pct"] is None for p in s["phases"].values())
    s = summarize(_two_rank_light(tmp_path / "eager", allreduce=True)).to_json()
    assert s["allreduce_measured"] is True
    assert s["allreduce_note"] is None
    # verify 2000 ns wall, 500 ns of it allreduce
    assert abs(s["phases"]["verify"]["allreduce_pct"] - 25.0) < 1e-9
