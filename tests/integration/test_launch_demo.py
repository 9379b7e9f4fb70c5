"""`tracekit launch --adapter demo` on the embedded demo server (CPU, gloo, spawned ranks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from tracekit.store.reader import read_table


def _launch(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit",
            "launch",
            "--adapter",
            "demo",
            "--out",
            str(tmp_path),
            "--name",
            "run",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return res, tmp_path / "run"


@pytest.mark.slow
@pytest.mark.torch
def test_demo_8_ranks_every_rank_every_cycle(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    cycles = 4
    # WHEN
    res, run = _launch(
        tmp_path,
        "--",
        sys.executable,
        "-m",
        "tracekit.demo",
        "--ranks",
        "8",
        "--cycles",
        str(cycles),
    )
    # THEN
    assert res.returncode == 0, res.stderr
    phases = read_table(run, "phases")
    top = phases.filter(pl.col("depth") == 0, pl.col("cycle") >= 0)
    # every rank, every cycle: draft, verify, draft_extend exactly once
    per = top.group_by("rank", "cycle", "phase").len()
    for phase in ("draft", "verify", "draft_extend"):
        sub = per.filter(pl.col("phase") == phase)
        assert sub.height == 8 * cycles, phase
        assert sub["len"].unique().to_list() == [1]
    # allreduce inside verify/draft_extend on every rank, the same count on every rank and cycle
    ar = (
        phases.filter(pl.col("phase") == "allreduce", pl.col("cycle") >= 0)
        .group_by("rank", "cycle")
        .len()
    )
    assert ar.height == 8 * cycles
    assert ar.group_by("cycle").agg(pl.col("len").n_unique())["len"].to_list() == [1] * cycles
    assert ar["len"].min() > 0
    # cycles line up across ranks: same numbers, same acceptance lengths
    cyc = read_table(run, "cycles")
    assert sorted(cyc["rank"].unique().to_list()) == list(range(8))
    wide = cyc.group_by("cycle").agg(
        pl.col("accept_len").n_unique().alias("n"), pl.len().alias("ranks")
    )
    assert wide.sort("cycle")["cycle"].to_list() == list(range(cycles))
    assert wide["n"].to_list() == [1] * cycles
    assert wide["ranks"].to_list() == [8] * cycles
    # verify's accept_len equals the cycle's
    v = top.filter(pl.col("phase") == "verify").select("rank", "cycle", "accept_len")
    joined = v.join(
        cyc.select("rank", "cycle", pl.col("accept_len").alias("c")), on=["rank", "cycle"]
    )
    assert (joined["accept_len"] == joined["c"]).all()
    # a manifest per rank
    man = read_table(run, "manifests")
    ranks = man.filter(pl.col("section") == "distributed", pl.col("key") == "rank")
    assert sorted(int(v) for v in ranks["value"].to_list()) == list(range(8))
    assert set(
        man.filter(pl.col("section") == "distributed", pl.col("key") == "backend")[
            "value"
        ].to_list()
    ) == {"gloo"}
    manifest = json.loads((run / "run.json").read_text())
    assert sum(1 for p in manifest["processes"]["instrumented"] if p["records"]) == 8
    assert manifest["targets"]["unresolved"] == []


@pytest.mark.slow
@pytest.mark.torch
def test_demo_full_mode_writes_kineto_traces_with_tracekit_ranges(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    res, run = _launch(
        tmp_path, "--mode", "full", "--profile-cycles", "1:2",
        "--", sys.executable, "-m", "tracekit.demo", "--ranks", "2", "--cycles", "4",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    traces = sorted(run.glob("raw/pid-*/kineto.json.gz"))
    assert len(traces) == 2
    events = read_table(run, "events")
    ann = events.filter(pl.col("name").cast(str).str.starts_with("tracekit/"))
    counts = ann.group_by("rank", "name").len().sort("rank", "name")
    for rank in (0, 1):
        c = dict(
            counts.filter(pl.col("rank") == rank)
            .select(pl.col("name").cast(str), "len")
            .iter_rows()
        )
        # two profiled cycles: one range per phase per cycle
        assert c["tracekit/cycle"] == 2
        assert c["tracekit/draft"] == 2
        assert c["tracekit/verify"] == 2
        assert c["tracekit/draft_extend"] == 2
        assert c["tracekit/allreduce"] >= 2
    # light-mode records are there too, for every cycle
    assert read_table(run, "cycles").height == 2 * 4
