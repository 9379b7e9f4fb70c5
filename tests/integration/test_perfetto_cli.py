"""`tracekit perfetto` end to end: real Kineto traces from the corpus, real subprocesses."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from tests.outputs_synth import make_run
from tests.pftrace_read import read_back
from tracekit.cli import cli
from tracekit.store.reader import read_table


def _tk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args], capture_output=True, text=True, check=False
    )


def test_h200_graph_trace_every_gpu_event_kept_and_one_flow_per_kernel(
    corpus: Path, tmp_path: Path
) -> None:
    # GIVEN the H200 trace: 4 graph launches of 18 kernels each, 72 eager kernels, on stream 7
    run_dir = tmp_path / "run"
    r = _tk("ingest", str(corpus / "h200" / "graph_replay_vs_extend.json.gz"), "-o", str(run_dir))
    assert r.returncode == 0, r.stderr
    # WHEN
    r = _tk("perfetto", str(run_dir), "--flows")
    # THEN
    assert r.returncode == 0, r.stderr
    assert "tracekit view" in r.stderr
    rb = read_back(run_dir / "tracekit.pftrace")
    assert rb.unmatched_ends == 0
    assert rb.unclosed == 0
    events = read_table(run_dir, "events")
    gpu = events.filter(pl.col("stream").is_not_null() & (pl.col("ph").cast(pl.String) == "X"))
    want = Counter(
        (n, s, s + d)
        for n, s, d in gpu.select(pl.col("name").cast(pl.String), "start_ns", "dur_ns").iter_rows()
    )
    stream_tracks = {u for u, d in rb.tracks.items() if d.name.startswith("stream ")}
    got = Counter((s.name, s.start, s.end) for s in rb.slices if s.track in stream_tracks)
    assert got == want
    assert sum(got.values()) == gpu.height
    kernels = [
        s
        for s in rb.slices
        if s.track in stream_tracks and "annotations" not in rb.track_name(s.track)
    ]
    assert len(kernels) == 144
    # 23 eager kernels start 63 to 96 ns before the previous one ends (PDL): they, and only
    # they, sit on a second lane
    k = gpu.filter(pl.col("cat").cast(pl.String) == "kernel").sort("start_ns")
    early = (k["start_ns"] < (k["start_ns"] + k["dur_ns"]).cum_max().shift(1)).sum()
    lanes = [u for u in stream_tracks if "lane" in rb.track_name(u)]
    assert [rb.track_name(u) for u in lanes] == ["stream 7 · lane 1"]
    assert sum(1 for s in rb.slices if s.track == lanes[0]) == early == 23
    launches = [s for s in rb.slices if s.name == "cudaGraphLaunch"]
    assert [len(s.flows) for s in launches] == [18, 18, 18, 18]
    flows = [f for s in rb.slices for f in s.flows]
    assert all(c == 2 for c in Counter(flows).values())  # each id: one launch end, one kernel end


def test_two_rank_corpus_is_two_processes_on_one_time_base(corpus: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    assert _tk("ingest", str(corpus / "trace_filter_2rank"), "-o", str(run_dir)).returncode == 0
    out = tmp_path / "two.pftrace"
    r = _tk("perfetto", str(run_dir), "-o", str(out))
    assert r.returncode == 0, r.stderr
    rb = read_back(out)
    assert sorted(d.process.process_name.split(" ·")[0] for d in rb.processes().values()) == [
        "rank 0",
        "rank 1",
    ]
    events = read_table(run_dir, "events")
    kept = events.filter(pl.col("ph").cast(pl.String).is_in(["X", "i", "I"]))
    assert len(rb.slices) + len([s for s in rb.instants if s.name != "tracekit run"]) == kept.height
    assert min(s.start for s in rb.slices) == kept["start_ns"].min()


def test_cli_refuses_bad_input_with_one_line_and_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["perfetto", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "no such run directory" in result.output
    assert "Traceback" not in result.output
    make_run(tmp_path / "run", ranks=1, cycles=1)
    (tmp_path / "exists.pftrace").write_bytes(b"x")
    result = CliRunner().invoke(
        cli, ["perfetto", str(tmp_path / "run"), "-o", str(tmp_path / "exists.pftrace")]
    )
    assert result.exit_code == 2
    assert "--force" in result.output
    assert (tmp_path / "exists.pftrace").read_bytes() == b"x"
