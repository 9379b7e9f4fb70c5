"""Allreduce inside captured CUDA graphs (issue 22, item 4), known answers (ns).

Light mode: a phase instance that replayed graphs and recorded no allreduce call on a run of
several ranks has its allreduce "not measured (inside a CUDA graph; --mode full measures it)",
never a measured 0 (breakdown `allreduce_measured`, summary per phase `allreduce_pct` None and
`allreduce_note`). Full mode: the kernels of a replay belong to the phase of its
cudaGraphLaunch, and the allreduce kernels inside it (custom allreduce, NCCL, torch symmetric
memory) are its allreduce time.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.analyzers.builders import RankTrace, write_events, write_rows
from tracekit.analyzers.run_analysis import analyze
from tracekit.analyzers.summary import IN_COMPILED, IN_GRAPH, summarize


def _light(run_dir: Path, ranks: tuple[int, ...], replays: int = 2) -> Path:
    """draft eager with one allreduce call (500 of 1000 ns); verify replayed `replays` graphs
    and recorded no allreduce call (its collectives ran inside the graphs)."""
    for rank in ranks:
        rows = [
            {"pid": 1, "tid": 1, "ok": True, "cycle": 0, "phase": "draft", "depth": 0, "seq": 0,
             "start_ns": 1000, "end_ns": 2000, "graph_replays": 0},
            {"pid": 1, "tid": 1, "ok": True, "cycle": 0, "phase": "allreduce", "depth": 1,
             "parent": "draft", "seq": 1, "start_ns": 1200, "end_ns": 1700, "graph_replays": 0},
            {"pid": 1, "tid": 1, "ok": True, "cycle": 0, "phase": "verify", "depth": 0, "seq": 2,
             "start_ns": 2000, "end_ns": 4000, "graph_replays": replays},
        ]  # fmt: skip
        write_rows(run_dir, "phases", rank, rows)
        write_rows(
            run_dir, "cycles", rank,
            [{"cycle": 0, "start_ns": 1000, "end_ns": 4000, "accept_len": 2.0, "source": "cycle_target"}],
        )  # fmt: skip
    return run_dir


def test_light_graph_replayed_allreduce_is_not_measured(tmp_path: Path) -> None:
    run = _light(tmp_path / "tp2", (0, 1))
    bd = analyze(run).breakdown
    rows = {(r["rank"], r["phase"]): r for r in bd.iter_rows(named=True)}
    assert rows[(0, "verify")]["graph_replayed"] is True
    assert rows[(0, "verify")]["allreduce_measured"] is False
    assert rows[(0, "draft")]["allreduce_measured"] is True
    assert rows[(0, "draft")]["allreduce_ns"] == 500
    s = summarize(run).to_json()
    assert s["allreduce_measured"] is True  # the run saw allreduce calls (draft's)
    assert s["phases"]["verify"]["allreduce_pct"] is None
    assert s["phases"]["verify"]["allreduce_note"] == IN_GRAPH
    assert s["phases"]["draft"]["allreduce_pct"] == pytest.approx(50.0)
    assert s["phases"]["draft"]["allreduce_note"] is None


def test_light_graph_replay_on_one_rank_is_a_measured_zero(tmp_path: Path) -> None:
    s = summarize(_light(tmp_path / "tp1", (0,))).to_json()
    assert s["phases"]["verify"]["allreduce_pct"] == 0.0
    assert s["phases"]["verify"]["allreduce_note"] is None


CUSTOM = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 2>(vllm::RankData*, int)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
SYMM = "void c10d::symmetric_memory::two_shot_all_reduce_kernel<c10::BFloat16, 16, 2>()"


def test_full_graph_replay_kernels_and_allreduce_inside_it(tmp_path: Path) -> None:
    # one cycle [0, ...): verify's only runtime call is a cudaGraphLaunch at 50 whose graph
    # runs gemm 100-400, custom allreduce 400-500, gemm 500-700, NCCL 700-750, symmetric
    # memory 750-800. forward = 300 + 200 = 500, allreduce = 100 + 50 + 50 = 200, overhead =
    # the idle 0-100 before its first kernel = 100; wall 800; every kernel from the graph.
    traces = {}
    for rank in (0, 1):
        t = RankTrace(pid=100 + rank, tid=7)
        t.range("tracekit/cycle", 0, 1000)
        t.range("tracekit/verify", 0, 1000)
        kernels = [("gemm", 100, 400), (CUSTOM, 400, 500), ("gemm", 500, 700), (NCCL, 700, 750)]
        t.launch(50, [*kernels, (SYMM, 750, 800)], graph=True)
        traces[rank] = t
    bd = analyze(write_events(tmp_path / "full", traces)).breakdown
    for r in bd.iter_rows(named=True):
        assert (r["phase"], r["wall_ns"], r["forward_ns"], r["allreduce_ns"]) == (
            "verify", 800, 500, 200,
        )  # fmt: skip
        assert r["overhead_ns"] == 100
        assert r["graph_replayed"] is True
        assert r["graph_kernel_frac"] == 1.0
        assert r["allreduce_measured"] is True
        assert r["kernels"] == 5
        assert r["allreduce_impl"] == "custom_ar+nccl:RING/LL/bf16+torch_symm_mem"


def test_light_allreduce_hidden_in_compiled_calls_is_not_measured(tmp_path: Path) -> None:
    # GIVEN the TP2 light run above without graph replays, whose collectors said the allreduce
    # target ran inside torch.compile'd calls (merge's manifests row compiled/hidden_allreduce)
    run = _light(tmp_path / "compiled", (0, 1), replays=0)
    before = summarize(run).to_json()
    assert before["phases"]["verify"]["allreduce_pct"] == 0.0  # nothing says it is hidden
    for rank in (0, 1):
        write_rows(
            run, "manifests", rank,
            [{"section": "compiled", "key": "hidden_allreduce", "value": "true"}],
        )  # fmt: skip
    # WHEN summarised
    s = summarize(run).to_json()
    # THEN verify (no allreduce call of its own) is not measured, draft (its call) is 50%
    assert s["phases"]["verify"]["allreduce_pct"] is None
    assert s["phases"]["verify"]["allreduce_note"] == IN_COMPILED
    assert s["phases"]["draft"]["allreduce_pct"] == pytest.approx(50.0)
