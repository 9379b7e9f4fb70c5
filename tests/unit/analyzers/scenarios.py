"""Hand-built runs whose every number is computed by hand in the tests' comments."""

from __future__ import annotations

from pathlib import Path

from tests.unit.analyzers.builders import RankTrace, write_events, write_rows

NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CUSTOM = "void cross_device_reduce_1stage<__nv_bfloat16, 2>(RankData*, RankSignals, Signal*, __nv_bfloat16*, int, int)"


def two_rank_gpu(run_dir: Path) -> Path:
    return write_events(run_dir, two_rank_gpu_traces())


def two_rank_gpu_traces() -> dict[int, RankTrace]:
    """2 ranks x 2 cycles: graph-launched draft, eager verify with NCCL then custom allreduce,
    idle gaps, an unattributed kernel (rank 0), a memcpy (rank 1); rank 1 computes slower."""
    r0 = RankTrace(pid=100, tid=7)
    r0.range("tracekit/cycle", 1000, 5000)
    r0.range("tracekit/draft", 1000, 2000)
    r0.launch(1100, [("k1", 1200, 1500), ("k2", 1500, 1700)], graph=True)
    r0.range("tracekit/verify", 2000, 4000)
    r0.launch(2100, [("gemm", 2300, 2800)])
    r0.range("tracekit/allreduce", 2150, 2250)
    r0.launch(2200, [(NCCL, 2800, 3300)], stream=20)
    r0.launch(4500, [("stray", 4600, 4700)])  # inside the cycle, outside every phase
    r0.range("tracekit/cycle", 5000, 9000)
    r0.range("tracekit/draft", 5000, 6000)
    r0.launch(5100, [("k3", 5200, 5600)])
    r0.range("tracekit/verify", 6000, 8000)
    r0.launch(6100, [("gemm", 6200, 6900)])
    r0.launch(6150, [(CUSTOM, 6800, 7300)], stream=20)  # overlaps gemm by 100 ns

    r1 = RankTrace(pid=200, tid=9)
    r1.range("tracekit/cycle", 1000, 5000)
    r1.range("tracekit/draft", 1000, 2000)
    r1.launch(1100, [("k1", 1300, 1500), ("k2", 1500, 1800)], graph=True)
    r1.range("tracekit/verify", 2000, 4000)
    r1.launch(2100, [("gemm", 2300, 3000)])
    r1.range("tracekit/allreduce", 2150, 2250)
    r1.launch(2200, [(NCCL, 3000, 3300)], stream=20)
    r1.range("tracekit/cycle", 5000, 9000)
    r1.range("tracekit/draft", 5000, 6000)
    r1.launch(
        5050,
        [("Memcpy HtoD (Pageable -> Device)", 5100, 5200)],
        runtime="cudaMemcpyAsync",
        cat="gpu_memcpy",
    )
    r1.launch(5100, [("k3", 5200, 5600)])
    r1.range("tracekit/verify", 6000, 8000)
    r1.launch(6100, [("gemm", 6200, 7000)])
    r1.launch(6150, [(CUSTOM, 7000, 7300)], stream=20)
    return {0: r0, 1: r1}


def cpu_gloo(run_dir: Path) -> Path:
    return write_events(run_dir, cpu_gloo_traces())


def cpu_gloo_traces() -> dict[int, RankTrace]:
    """One CPU-only rank, shaped like a real gloo trace: the allreduce runs on gloo's thread."""
    r = RankTrace(pid=300, tid=1)
    r.range("tracekit/cycle", 0, 10000)
    r.range("tracekit/verify", 0, 9000)
    r.cpu_op("aten::matmul", 100, 2000)
    r.cpu_op("aten::mm", 150, 1900)  # nested: not on the timeline
    r.cpu_op("aten::relu", 2000, 3000)
    r.range("tracekit/allreduce", 3000, 8000)
    r.cpu_op("c10d::allreduce_", 3100, 3200)
    r.range("gloo:all_reduce", 3300, 7800, tid=2)
    return {0: r}


def light_mode(run_dir: Path) -> Path:
    """The collector's light-mode records only: phases (with CUDA-event times) and cycles."""
    base = {"pid": 1, "tid": 1, "ok": True}
    write_rows(
        run_dir,
        "phases",
        0,
        [
            {
                **base,
                "cycle": 0,
                "phase": "draft",
                "depth": 0,
                "seq": 0,
                "start_ns": 1000,
                "end_ns": 2000,
                "gpu_start_ns": 1100,
                "gpu_end_ns": 1900,
                "graph_replays": 1,
            },
            {
                **base,
                "cycle": 0,
                "phase": "verify",
                "depth": 0,
                "seq": 1,
                "start_ns": 2000,
                "end_ns": 4000,
                "gpu_start_ns": 2100,
                "gpu_end_ns": 3900,
                "graph_replays": 0,
                "accept_len": 3.0,
            },
            {
                **base,
                "cycle": 0,
                "phase": "allreduce",
                "depth": 1,
                "parent": "verify",
                "seq": 2,
                "start_ns": 3000,
                "end_ns": 3500,
                "gpu_start_ns": 3200,
                "gpu_end_ns": 3700,
                "graph_replays": 0,
            },
        ],
    )
    write_rows(
        run_dir,
        "cycles",
        0,
        [
            {
                "cycle": 0,
                "start_ns": 1000,
                "end_ns": 4000,
                "accept_len": 3.0,
                "source": "cycle_target",
            }
        ],
    )
    return run_dir


def sglang_spans(run_dir: Path) -> Path:
    return write_events(run_dir, sglang_spans_traces())


def sglang_spans_traces() -> dict[int, RankTrace]:
    """SGLang's built-in span names, no cycle marks: cycles start at each draft."""
    r = RankTrace(pid=400, tid=4)
    r.range("step[VERIFY bs=1]", 0, 500)  # before the first draft: outside every cycle
    r.launch(100, [("gemm", 100, 400)])
    r.range("draft", 1000, 2000)
    r.range("step[DRAFT bs=1]", 1100, 1900)  # nested: a sub-phase of draft
    r.launch(1200, [("k1", 1200, 1800)], graph=True)
    r.range("step[VERIFY bs=1]", 2000, 3000)
    r.launch(2100, [("gemm", 2100, 2900)])
    r.range("draft_extend", 3000, 3500)
    r.launch(3100, [("k2", 3100, 3400)])
    r.range("draft", 4000, 5000)
    r.launch(4100, [("k1", 4100, 4600)], graph=True)
    r.range("step[VERIFY bs=1]", 5000, 6000)
    r.launch(5100, [("gemm", 5100, 5900)])
    r.range("draft_extend", 6000, 6500)
    r.launch(6100, [("k2", 6100, 6400)])
    return {0: r}
