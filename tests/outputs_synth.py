"""Synthetic run directories with known contents, for the outputs' tests and benchmark.

`make_run` writes what `tracekit launch` + `tracekit merge` would write for a speculative
decoder on R ranks: per rank a main thread with `tracekit/cycle`, `tracekit/draft` and
`tracekit/verify` user annotations, `aten::mm` CPU ops, one `cudaLaunchKernel` (or one
`cudaGraphLaunch` for the whole verify phase when `graph=True`) a kernel, the kernels on stream 7
(two of each cycle's draft kernels overlap, as with programmatic dependent launch), an NCCL
allreduce kernel in verify, plus the `phases`, `cycles`, `counters` and `manifests` tables.
Everything is a deterministic function of the arguments, so tests can count what must come out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from tracekit.store.writer import write_partition

T0 = 1_764_400_000_000_000_000  # 2025-11-29, absolute ns like the store's
GEMM = "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_tn_align8>(Params)"
FILL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul>>(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


@dataclass(frozen=True)
class SynthCounts:
    """What a synthetic run holds, per rank."""

    cycles: int
    draft_kernels: int  # per cycle
    verify_kernels: int  # per cycle, the allreduce kernel included
    overlapping_pairs: int  # per cycle: draft kernel pairs that overlap on stream 7

    @property
    def kernels_per_rank(self) -> int:
        return self.cycles * (self.draft_kernels + self.verify_kernels)


def make_run(
    run_dir: Path,
    *,
    ranks: int = 2,
    cycles: int = 4,
    draft_kernels: int = 3,
    verify_kernels: int = 4,
    graph: bool = False,
    events: bool = True,
    counters: bool = True,
    cycle_ns: int = 2_000_000,
    baseline: bool = False,
) -> SynthCounts:
    """Write a synthetic run into `run_dir`; return its counts.

    `baseline=True` writes plain decoding instead: no draft, the verify-like step is named
    `decode` and emits one token a cycle.
    """
    run_dir = Path(run_dir)
    nd = 0 if baseline else draft_kernels
    for rank in range(ranks):
        _rank(
            run_dir, rank, cycles, nd, verify_kernels, graph, events, counters, cycle_ns, baseline
        )
    return SynthCounts(cycles, draft_kernels, verify_kernels, 1 if draft_kernels >= 2 else 0)


def _rank(
    run_dir: Path,
    rank: int,
    cycles: int,
    nd: int,
    nv: int,
    graph: bool,
    with_events: bool,
    with_counters: bool,
    cycle_ns: int,
    baseline: bool = False,
) -> None:
    pid, tid = 4000 + rank, 4000 + rank
    cycle_ns = max(
        cycle_ns, 10_000 + nd * 100_000 + 50_000 + 20_000 + nv * 150_000 + 100_000 + 60_000
    )
    skew = 20_000 * rank  # rank r starts 20 µs * r late: the skew heatmap has a known answer
    ev: dict[str, list[object]] = {
        k: []
        for k in (
            "cat",
            "name",
            "ph",
            "start_ns",
            "dur_ns",
            "pid",
            "tid",
            "device",
            "stream",
            "correlation",
            "graph_launched",
        )
    }

    def add(
        cat: str,
        name: str,
        start: int,
        dur: int,
        *,
        gpu: bool = False,
        corr: int | None = None,
        graphed: bool | None = None,
    ) -> None:
        ev["cat"].append(cat)
        ev["name"].append(name)
        ev["ph"].append("X")
        ev["start_ns"].append(start)
        ev["dur_ns"].append(dur)
        ev["pid"].append(rank if gpu else pid)
        ev["tid"].append(7 if gpu else tid)
        ev["device"].append(rank if gpu else None)
        ev["stream"].append(7 if gpu else None)
        ev["correlation"].append(corr)
        ev["graph_launched"].append(graphed if gpu else None)

    phases: dict[str, list[object]] = {
        k: []
        for k in (
            "cycle",
            "phase",
            "depth",
            "parent",
            "pid",
            "tid",
            "seq",
            "start_ns",
            "end_ns",
            "graph_replays",
            "accept_len",
            "ok",
            "target",
        )
    }
    cyc: dict[str, list[object]] = {
        k: [] for k in ("cycle", "start_ns", "end_ns", "accept_len", "source")
    }
    corr = 1000 * (rank + 1)
    seq = 0
    for c in range(cycles):
        c0 = T0 + c * cycle_ns + skew
        accept = 1.0 if baseline else float(1 + (c % 4))  # 1, 2, 3, 4, 1, ...
        vname = "decode" if baseline else "verify"
        draft0, draft1 = c0 + 10_000, c0 + 10_000 + nd * 100_000 + 50_000
        verify0, verify1 = draft1 + 20_000, draft1 + 20_000 + nv * 150_000 + 100_000
        c1 = verify1 + 30_000
        add("user_annotation", "tracekit/cycle", c0, c1 - c0)
        if not baseline:
            add("user_annotation", "tracekit/draft", draft0, draft1 - draft0)
        add("user_annotation", f"tracekit/{vname}", verify0, verify1 - verify0)
        steps = (
            [(vname, verify0, verify1)]
            if baseline
            else [("draft", draft0, draft1), ("verify", verify0, verify1)]
        )
        for row in steps:
            phases["cycle"].append(c)
            phases["phase"].append(row[0])
            phases["depth"].append(0)
            phases["parent"].append(None)
            phases["pid"].append(pid)
            phases["tid"].append(tid)
            phases["seq"].append(seq)
            seq += 1
            phases["start_ns"].append(row[1])
            phases["end_ns"].append(row[2])
            phases["graph_replays"].append(1 if (graph and row[0] == vname) else 0)
            phases["accept_len"].append(accept if row[0] == vname else None)
            phases["ok"].append(True)
            phases["target"].append(f"tracekit.demo.speculative:SpeculativeDecoder.{row[0]}")
        cyc["cycle"].append(c)
        cyc["start_ns"].append(c0)
        cyc["end_ns"].append(c1)
        cyc["accept_len"].append(accept)
        cyc["source"].append("cycle_target")
        # draft: an aten::mm around each launch; kernel i+1 starts before kernel i ends for i=0
        for i in range(nd):
            t = draft0 + 10_000 + i * 100_000
            corr += 1
            add("cpu_op", "aten::mm", t, 30_000)
            add("cuda_runtime", "cudaLaunchKernel", t + 5_000, 10_000, corr=corr)
            k0 = t + 20_000
            add(
                "kernel",
                GEMM if i % 2 == 0 else FILL,
                k0,
                110_000 if i == 0 else 60_000,
                gpu=True,
                corr=corr,
                graphed=False,
            )
        # verify: eager launches, or one graph launch whose kernels share its correlation
        if graph:
            corr += 1
            t = verify0 + 10_000
            add("cuda_runtime", "cudaGraphLaunch", t, 20_000, corr=corr)
        for i in range(nv):
            t = verify0 + 10_000 + i * 150_000
            if not graph:
                corr += 1
                add("cuda_runtime", "cudaLaunchKernel", t + 40_000, 10_000, corr=corr)
            name = NCCL if i == nv - 1 else GEMM
            add("kernel", name, t + 60_000, 100_000, gpu=True, corr=corr, graphed=graph)
    if with_events:
        write_partition(run_dir, "events", rank, pa.table(ev))
    write_partition(run_dir, "phases", rank, pa.table(phases))
    write_partition(run_dir, "cycles", rank, pa.table(cyc))
    if with_counters:
        n = cycles * 4
        ts = T0 + np.arange(n, dtype=np.int64) * (cycle_ns // 4)
        rows: dict[str, list[object]] = {
            "gpu": [],
            "host": [],
            "metric": [],
            "ts_ns": [],
            "value": [],
        }
        for metric, base in (
            ("sm_clock_mhz", 1980.0),
            ("power_w", 350.0 + 10 * rank),
            ("temperature_c", 45.0),
        ):
            for i, t in enumerate(ts.tolist()):
                rows["gpu"].append(rank)
                rows["host"].append("node-a")
                rows["metric"].append(metric)
                rows["ts_ns"].append(t)
                rows["value"].append(base + (i % 3))
        write_partition(run_dir, "counters", rank, pa.table(rows))
    manifest = [
        ("process", "host", "node-a"),
        ("process", "pid", str(pid)),
        ("process", "argv", "python -m tracekit.demo --ranks 2 </code><script>alert(1)</script>"),
        ("versions", "torch", "2.13.0"),
        ("versions", "nccl", "2.28.9" if rank == 0 else "2.27.7"),
        ("env", "NCCL_ALGO", "Ring"),
        ("device", "name", "NVIDIA H200"),
    ]
    write_partition(
        run_dir,
        "manifests",
        rank,
        pa.table(
            {
                "section": [m[0] for m in manifest],
                "key": [m[1] for m in manifest],
                "value": [m[2] for m in manifest],
            }
        ),
    )
