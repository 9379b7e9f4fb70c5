"""The incident of the project story, as two hand-built 2-rank Kineto runs.

Run A ("good"): verify replays a CUDA graph whose allreduce is the custom allreduce
`cross_device_reduce_1stage`; verify takes 19 ms. Run B ("slow"): verify runs eagerly with the
out-of-place NCCL allreduce `ncclDevKernel_AllReduce_Sum_bf16_RING_LL`; verify takes 29 ms. The
server commit changed between the runs; the NCCL environment did not.

Times in µs from the cycle start T, with a per-cycle jitter j (the same set in both runs):
  A: draft   [T, T+3000]        graph -> draft_gemm [T+100, T+2900]
     verify  [T+3000, T+21950+j] graph -> gemm [T+3100, T+12000+j],
                                  cross_device_reduce_1stage [T+12000+j, T+13000+j],
                                  gemm2 [T+13000+j, T+21900+j]
     draft_extend [T+22000+j, T+23000+j] -> dx [T+22100+j, T+22600+j];  next T = T+25000+j
  B: verify  [T+3000, T+31950+j] eager: gemm [T+3100, T+15000+j],
                                  NCCL (under tracekit/allreduce) [T+15000+j, T+19000+j],
                                  gemm2 [T+19000+j, T+31900+j]
     draft_extend [T+32000+j, T+33000+j] -> dx [T+32100+j, T+32600+j]; next T = T+35000+j
So verify's wall (device end of draft -> device end of verify) is 19000+j µs in A and
29000+j µs in B: a 10 ms change exactly, in every cycle.
"""

from __future__ import annotations

from pathlib import Path

from tests.unit.analyzers.builders import RankTrace, write_kineto, write_rows

US = 1000  # ns
CYCLES = 12
CUSTOM = "void cross_device_reduce_1stage<__nv_bfloat16, 2>(RankData*, RankSignals, Signal*, __nv_bfloat16*, int, int)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def jitter(cycle: int, rank: int) -> int:
    return ((cycle * 37 + rank * 11) % 9) * 50  # 0..400 µs


def _rank(slow: bool, rank: int) -> RankTrace:
    tr = RankTrace(pid=1000 + rank, tid=1000 + rank)
    t = 10_000
    for c in range(CYCLES):
        j = jitter(c, rank)
        end = t + (35_000 if slow else 25_000) + j
        tr.range("tracekit/cycle", t * US, end * US)
        tr.range("tracekit/draft", t * US, (t + 3000) * US)
        tr.launch((t + 50) * US, [("draft_gemm", (t + 100) * US, (t + 2900) * US)], graph=True)
        if slow:
            tr.range("tracekit/verify", (t + 3000) * US, (t + 31950 + j) * US)
            tr.launch((t + 3050) * US, [("gemm", (t + 3100) * US, (t + 15000 + j) * US)])
            tr.range("tracekit/allreduce", (t + 3055) * US, (t + 3065) * US)
            tr.launch(
                (t + 3060) * US, [(NCCL, (t + 15000 + j) * US, (t + 19000 + j) * US)], stream=30
            )
            tr.launch((t + 3070) * US, [("gemm2", (t + 19000 + j) * US, (t + 31900 + j) * US)])
            dx = t + 32000 + j
        else:
            tr.range("tracekit/verify", (t + 3000) * US, (t + 21950 + j) * US)
            tr.launch(
                (t + 3050) * US,
                [
                    ("gemm", (t + 3100) * US, (t + 12000 + j) * US),
                    (CUSTOM, (t + 12000 + j) * US, (t + 13000 + j) * US),
                    ("gemm2", (t + 13000 + j) * US, (t + 21900 + j) * US),
                ],
                graph=True,
            )
            dx = t + 22000 + j
        tr.range("tracekit/draft_extend", dx * US, (dx + 1000) * US)
        tr.launch((dx + 50) * US, [("dx", (dx + 100) * US, (dx + 600) * US)])
        t = end
    return tr


def _manifest(commit: str, power: str) -> list[dict[str, str]]:
    rows = {
        ("env", "NCCL_DEBUG"): "WARN",
        ("env", "NCCL_CUMEM_ENABLE"): "0",
        ("env", "CUDA_DEVICE_MAX_CONNECTIONS"): "8",
        ("packages", "sglang"): "0.5.23",
        ("packages", "sglang.commit"): commit,
        ("packages", "torch"): "2.11.0",
        ("versions", "nccl"): "2.28.9",
        ("versions", "cuda_runtime"): "13000",
        ("gpu", "sm_clock_mhz_p50"): "1980",
        ("gpu", "power_w_p50"): power,
    }
    return [{"section": s, "key": k, "value": v} for (s, k), v in rows.items()]


def write_traces(out: Path, *, slow: bool) -> list[Path]:
    """The run's two Kineto traces (rank0, rank1) under `out`."""
    return write_kineto(out, {r: _rank(slow, r) for r in (0, 1)})


def write_manifests(run_dir: Path, *, slow: bool) -> None:
    """The collector's manifest rows (env, packages, versions, GPU medians) for both ranks."""
    for rank in (0, 1):
        rows = _manifest("e4f5a6b" if slow else "a1b2c3d", "421" if slow else "420")
        write_rows(run_dir, "manifests", rank, rows, part=1)
