"""sample_traces/demo_cpu_full_8rank: a real full-mode `tracekit demo` run (8 CPU ranks) merges.

The directory holds what `tracekit launch` left (run.json, raw/ with each rank's records,
manifest and Kineto trace) and the server's own `demo_result.json`, the known answer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SAMPLE_TRACES

SAMPLE = SAMPLE_TRACES / "demo_cpu_full_8rank"


def test_sample_is_small_and_unmerged() -> None:
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 5 * 1024 * 1024
    assert not (SAMPLE / "store").exists()
    assert len(list((SAMPLE / "raw").glob("pid-*/kineto.json.gz"))) == 8


@pytest.mark.slow
def test_sample_merges_to_the_servers_own_counts(tmp_path: Path) -> None:
    # GIVEN a copy of the sample run directory
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    expected = json.loads((SAMPLE / "demo_result.json").read_text())
    # WHEN it is merged
    subprocess.run(
        [sys.executable, "-m", "tracekit", "merge", str(run)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    # THEN every rank has every cycle the server ran, with the acceptance lengths it counted
    from tracekit.store.reader import read_table

    cycles = read_table(run, "cycles")
    assert sorted(cycles["rank"].unique().to_list()) == list(range(8))
    for rank in range(8):
        mine = cycles.filter(cycles["rank"] == rank)
        assert mine.height == expected["cycles"]
        assert mine["accept_len"].sum() == expected["tokens"]
    # AND the demo's phases were recorded, with allreduce nested in them
    phases = read_table(run, "phases")
    assert {"draft", "verify", "draft_extend", "allreduce"} <= set(phases["phase"].cast(str))
    # AND the profiled window's Kineto events made it into the store
    assert read_table(run, "events").height > 1000
