"""Two launchers on this machine as two nodes of one run (gloo over loopback, one rank each),
node 1's collector clock shifted by a known offset (TRACEKIT_TEST_CLOCK_OFFSET_NS); the join
recovers the offset within 50 us and puts both ranks on one clock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.store.reader import scan_table

REPO = Path(__file__).resolve().parents[2]
PHASES = REPO / "tests" / "integration" / "multinode" / "phases.toml"
OFFSET_NS = 3_217_000  # node 1's clock reads 3.217 ms ahead


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch_two_nodes(out: Path, cycles: int = 120) -> list[subprocess.CompletedProcess[str]]:
    port = _port()
    procs = []
    for node in (0, 1):
        env = dict(os.environ, RANK=str(node), WORLD_SIZE="2", MASTER_PORT=str(port))
        env.pop("TRACEKIT_TEST_CLOCK_OFFSET_NS", None)
        if node == 1:
            env["TRACEKIT_TEST_CLOCK_OFFSET_NS"] = str(OFFSET_NS)
        cmd = [
            sys.executable, "-m", "tracekit", "launch", "--phases", str(PHASES),
            "--out", str(out), "--name", "mn", "--node-rank", str(node), "--nnodes", "2",
            "--", sys.executable, "-m", "tests.integration.multinode", "--cycles", str(cycles),
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    done = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=120)
        done.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return done


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mn")
    for res in _launch_two_nodes(out):
        assert res.returncode == 0, res.stderr
        assert "Next, once every node finished: tracekit merge" in res.stderr
    return out / "mn"


COLS = ["rank", "cycle", "phase", "start_ns", "end_ns"]


def _median_end_gap(phases: pl.DataFrame) -> float:
    """Median of (rank 1's end - rank 0's end) over the allreduce calls matched by (cycle, k)."""
    ends = (
        phases.filter(pl.col("phase") == "allreduce")
        .select(COLS)
        .sort("rank", "cycle", "start_ns")
        .with_columns(pl.int_range(pl.len()).over("rank", "cycle").alias("k"))
    )
    wide = ends.filter(pl.col("rank") == 0).join(
        ends.filter(pl.col("rank") == 1), on=["cycle", "k"], suffix="_1"
    )
    gap = (wide["end_ns_1"] - wide["end_ns"]).median()
    assert isinstance(gap, float | int)
    return float(gap)


def test_two_nodes_join_recovers_the_clock_offset(two_nodes: Path) -> None:
    parts = sorted(p.name for p in (two_nodes / "parts").iterdir())
    assert parts == ["node-0", "node-1"]
    res = CliRunner().invoke(cli, ["merge", str(two_nodes), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["ranks"] == [0, 1]
    assert doc["missing_nodes"] == []
    assert doc["missing_ranks"] == []
    ref, other = doc["clock"]
    assert ref["method"] == "reference"
    assert ref["offset_ns"] == 0
    assert other["method"] == "collectives"
    assert other["source"] == "phases"
    assert other["anchors"] >= 480  # 120 cycles x 4 allreduces, cycle -1 warm-ups aside
    assert other["estimator"] == "minimum delay", other  # both nodes entered last often
    assert abs(other["offset_ns"] - OFFSET_NS) < 50_000, other
    # the true offset lies inside the causality interval, which the estimate's error undercuts
    low, high = other["bound_low_ns"], other["bound_high_ns"]
    assert other["offset_ns"] + low <= OFFSET_NS <= other["offset_ns"] + high, other
    assert 0 < other["error_ns"] < (high - low) / 2, other

    # after the join the allreduce calls of both ranks end as they truly did: the median end
    # gap equals the one on the true clock (node 1's own times less the injected offset) to
    # within 50 us, where it was the 3.2 ms offset before. (The true gap itself is load: a rank
    # that shares its core with a busy process wakes late from every collective.)
    joined = _median_end_gap(scan_table(two_nodes, "phases").collect())
    own = pl.concat(
        [
            scan_table(two_nodes / "parts" / f"node-{n}", "phases").collect().select(COLS)
            for n in (0, 1)
        ]
    )
    true_clock = own.with_columns(
        pl.when(pl.col("rank") == 1)
        .then(pl.col("end_ns") - OFFSET_NS)
        .otherwise(pl.col("end_ns"))
        .alias("end_ns")
    )
    assert abs(_median_end_gap(own) - OFFSET_NS) < 1_000_000  # on the nodes' own clocks
    assert abs(joined - _median_end_gap(true_clock)) < 50_000, (joined, other)
    assert abs(joined) < 250_000

    man = scan_table(two_nodes, "manifests").filter(pl.col("section") == "node").collect()
    node_of = {
        r["rank"]: r["value"] for r in man.filter(pl.col("key") == "node").iter_rows(named=True)
    }
    assert node_of == {0: "0", 1: "1"}
    offsets = man.filter(pl.col("key") == "clock_offset_ns").sort("rank")["value"].to_list()
    assert offsets[0] == "0"
    assert int(offsets[1]) == other["offset_ns"]
    run = json.loads((two_nodes / "run.json").read_text())
    assert run["source"] == "join"
    assert [p["node"] for p in run["parts"]] == [0, 1]

    summary = CliRunner().invoke(cli, ["summary", str(two_nodes), "--json"])
    assert summary.exit_code == 0, summary.output
    assert json.loads(summary.stdout)["ranks"] == 2


def test_a_missing_node_is_reported_and_the_rest_joined(two_nodes: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["merge", str(two_nodes / "parts" / "node-0"), "-o", str(tmp_path / "j"), "--json"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["ranks"] == [0]
    assert doc["missing_nodes"] == [1]
    assert doc["missing_ranks"] == [1]
    assert any("node(s) [1] of 2 have no part" in w for w in doc["warnings"])


def test_a_part_given_twice_is_one_line_exit_2(two_nodes: Path, tmp_path: Path) -> None:
    node0 = str(two_nodes / "parts" / "node-0")
    res = CliRunner().invoke(cli, ["merge", node0, node0, "-o", str(tmp_path / "j")])
    assert res.exit_code == 2
    assert "given twice" in res.output or "both hold rank 0" in res.output
