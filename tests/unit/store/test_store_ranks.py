"""Rank detection: distributedInfo, file names, --rank, duplicates, none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.unit.store._traces import kernel, trace, write
from tracekit.cli import cli
from tracekit.errors import RankError
from tracekit.store.ingest import ingest
from tracekit.store.ranks import detect_rank, rank_from_name
from tracekit.store.reader import ranks


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("sglang-1759000000.123-TP-3-DP-0.trace.json.gz", 3),  # SGLang
        ("dp0_pp0_tp2_dcp0_ep2_rank2.1234.pt.trace.json.gz", 2),  # vLLM
        ("dp1_pp0_tp2_rank6.99.pt.trace.json.gz", 6),  # vLLM, DP replica: global rank wins
        ("worker_tp5.pt.trace.json", 5),
        ("sampled_rank-1.json.gz", 1),
        ("trace_rank_12.json", 12),
        ("https_trace.json", None),  # "tp" inside a word is not a rank
        ("trace.json", None),
    ],
)
def test_rank_from_name(name: str, rank: int | None) -> None:
    assert rank_from_name(Path("/runs/rank9_dir") / name) == rank


def test_distributed_info_wins_over_name() -> None:
    assert detect_rank(Path("x_rank5.json"), {"rank": 1, "world_size": 2}) == (1, "distributedInfo")
    assert detect_rank(Path("x_rank5.json"), {"backend": "nccl"}) == (5, "file name")
    assert detect_rank(Path("x_rank5.json"), {"rank": 1}, override=4) == (4, "override")


def test_compact_distributed_info(tmp_path: Path) -> None:
    # GIVEN two files with compact JSON ("rank":1, no spaces; HTA's regex misses these)
    files = []
    for r in (0, 1):
        doc = trace([kernel("k", "1.000", "1.000", 1)], rank=r)
        p = tmp_path / f"t{r}.json"
        p.write_text(json.dumps(doc, separators=(",", ":")))
        files.append(p)
    # WHEN
    result = ingest(files, tmp_path / "run", jobs=1)
    # THEN both ranks, not one rank overwritten
    assert result.ranks == [0, 1]
    assert ranks(tmp_path / "run") == [0, 1]


def test_duplicate_ranks_error_names_both_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", trace([kernel("k", "1.000", "1.000", 1)], rank=1))
    b = write(tmp_path / "b.json", trace([kernel("k", "1.000", "1.000", 1)], rank=1))
    c = write(tmp_path / "c.json", trace([kernel("k", "1.000", "1.000", 1)], rank=0))
    with pytest.raises(RankError) as info:
        ingest([a, b, c], tmp_path / "run", jobs=1)
    msg = str(info.value)
    assert str(a) in msg
    assert str(b) in msg
    assert "rank 1" in msg
    assert "\n" not in msg
    # the unambiguous rank was still written
    assert ranks(tmp_path / "run") == [0]


def test_no_rank_asks_for_rank_option(tmp_path: Path) -> None:
    f = write(tmp_path / "trace.json", trace([kernel("k", "1.000", "1.000", 1)], rank=None))
    with pytest.raises(RankError, match="--rank"):
        ingest([f], tmp_path / "run", jobs=1)


def test_cli_rank_option(tmp_path: Path) -> None:
    f = write(tmp_path / "trace.json", trace([kernel("k", "1.000", "1.000", 1)], rank=None))
    res = CliRunner().invoke(cli, ["ingest", str(f), "-o", str(tmp_path / "run"), "--rank", "4"])
    assert res.exit_code == 0, res.output
    assert ranks(tmp_path / "run") == [4]


def test_cli_rank_option_needs_one_file(tmp_path: Path) -> None:
    d = tmp_path / "in"
    for r in (0, 1):
        write(d / f"t{r}.json", trace([kernel("k", "1.000", "1.000", 1)], rank=None))
    res = CliRunner().invoke(cli, ["ingest", str(d), "-o", str(tmp_path / "run"), "--rank", "4"])
    assert res.exit_code == 2
    assert "--rank needs exactly one trace file" in res.output


def test_cli_no_rank_error(tmp_path: Path) -> None:
    f = write(tmp_path / "trace.json", trace([kernel("k", "1.000", "1.000", 1)], rank=None))
    res = CliRunner().invoke(cli, ["ingest", str(f), "-o", str(tmp_path / "run")])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1
    assert "--rank" in lines[0]
    assert str(f) in lines[0]
