"""The per-rank maps on Dask give what the local path gives: analysis on the sample traces
and on 64 synthetic ranks, ingest of Kineto traces, and the join of a multi-node run."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.outputs_synth import make_run
from tracekit.analyzers.run_analysis import RunAnalysis, analyze
from tracekit.analyzers.summary import summary_from
from tracekit.store.reader import scan_table

distributed = pytest.importorskip("distributed")

from tracekit.distributed import DaskEngine, current_engine, start, use_engine  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


@pytest.fixture(scope="module")
def engine() -> Iterator[DaskEngine]:
    eng = start(workers=2, processes=False, memory_limit=None)
    try:
        yield eng
    finally:
        eng.close()


def _same(a: RunAnalysis, b: RunAnalysis) -> None:
    assert_frame_equal(a.breakdown, b.breakdown)
    assert_frame_equal(a.cycles, b.cycles)
    assert_frame_equal(a.collectives, b.collectives)
    assert_frame_equal(a.recorded, b.recorded)
    assert a.unknown_comm == b.unknown_comm
    assert a.instances == b.instances
    assert summary_from(a) == summary_from(b)


def _merged_sample(tmp_path: Path, name: str) -> Path:
    from tracekit.store.merge import merge

    run = tmp_path / Path(name).name
    shutil.copytree(SAMPLES / name, run)
    merge(run)
    return run


@pytest.mark.parametrize("sample", ["demo_cpu_full_8rank", "gpu_h200_light/extend"])
def test_analysis_on_dask_equals_local_on_sample_traces(
    tmp_path: Path, engine: DaskEngine, sample: str
) -> None:
    run = _merged_sample(tmp_path, sample)
    local = analyze(run)
    before = engine.tasks
    with use_engine(engine):
        on_dask = analyze(run)
    ranks = local.breakdown["rank"].n_unique()
    assert engine.tasks - before == ranks  # one task a rank, none run here
    assert local.breakdown.height > 0
    _same(local, on_dask)


def test_analysis_on_dask_equals_local_on_64_synthetic_ranks(
    tmp_path: Path, engine: DaskEngine
) -> None:
    # collector records only (light mode): the exact mode is covered by the sample traces
    counts = make_run(tmp_path / "r64", ranks=64, cycles=3, counters=False, events=False)
    local = analyze(tmp_path / "r64")
    with use_engine(engine):
        on_dask = analyze(tmp_path / "r64")
    # 64 ranks x 3 cycles x (draft + verify) top-level phases
    assert local.breakdown.height == 64 * counts.cycles * 2
    assert on_dask.breakdown["rank"].n_unique() == 64
    _same(local, on_dask)


def test_ingest_on_dask_writes_the_same_store(tmp_path: Path, engine: DaskEngine) -> None:
    from tracekit.store.ingest import ingest

    src = SAMPLES / "trace_filter_2rank"
    a = ingest([src], tmp_path / "local", jobs=1)
    with use_engine(engine):
        b = ingest([src], tmp_path / "dask")
    assert [(f.rank, f.events) for f in a.files] == [(f.rank, f.events) for f in b.files]
    for table in ("events", "manifests"):
        ea = scan_table(tmp_path / "local", table).collect().sort(pl.all())
        eb = scan_table(tmp_path / "dask", table).collect().sort(pl.all())
        assert ea.height > 0
        assert_frame_equal(ea, eb)


def test_engine_is_per_thread_and_scoped(engine: DaskEngine) -> None:
    import threading

    seen: list[object] = []
    with use_engine(engine):
        assert current_engine() is engine
        t = threading.Thread(target=lambda: seen.append(current_engine()))
        t.start()
        t.join()
    assert seen == [None]  # a worker thread of a LocalCluster(processes=False) runs locally
    assert current_engine() is None


def test_scheduler_and_workers_together_is_bad_input() -> None:
    from tracekit.errors import InputError

    with pytest.raises(InputError, match="cannot be used together"):
        start("tcp://127.0.0.1:1", 2)


@pytest.mark.slow
def test_summary_cli_with_workers(tmp_path: Path) -> None:
    """`--workers N` starts a LocalCluster of N processes: same JSON as without."""
    import json
    import subprocess
    import sys

    make_run(tmp_path / "r", ranks=2, cycles=3, counters=False)
    exe = [sys.executable, "-m", "tracekit", "summary", str(tmp_path / "r"), "--json"]
    a = subprocess.run(exe, capture_output=True, text=True, check=True)
    b = subprocess.run([*exe, "--workers", "2"], capture_output=True, text=True, check=True)
    assert json.loads(a.stdout) == json.loads(b.stdout)
    assert "per-rank work on Dask (2 worker(s)" in b.stderr
