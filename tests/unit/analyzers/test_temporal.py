"""Temporal breakdown (HTA 0.5.0 definitions) on hand-built traces with known answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner

from tests.unit.store._traces import cpu, kernel, runtime, trace, write
from tracekit.analyzers.temporal import busy_stats, hta_kernel_type, merge_intervals, temporal
from tracekit.cli import cli
from tracekit.store.ingest import ingest


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        (
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "COMMUNICATION",
        ),
        (
            "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "COMMUNICATION",
        ),
        ("Memcpy HtoD (Pageable -> Device)", "MEMORY"),
        ("Memset (Device)", "MEMORY"),
        ("void at::native::vectorized_elementwise_kernel<4>", "COMPUTATION"),
        # HTA 0.5.0 defects kept on purpose (docs/DEFINITIONS.md): custom allreduce is "compute"
        ("cross_device_reduce_1stage<__nv_bfloat16, 8>", "COMPUTATION"),
        ("Stream Sync", "OTHER"),
        ("foo_Memcpy_kernel", "OTHER"),
        ("ncclDevKernel_Generic_1", "COMMUNICATION"),
        ("nccl_without_the_k_word", "COMPUTATION"),  # 0.5.0: only ^nccl.*Kernel is comm
    ],
)
def test_hta_kernel_type(name: str, kind: str) -> None:
    assert hta_kernel_type(name) == kind


def test_merge_intervals_known_answer() -> None:
    s = np.array([5, 0, 20, 8, 30], dtype=np.int64)
    e = np.array([7, 10, 25, 12, 30], dtype=np.int64)
    gs, ge = merge_intervals(s, e)
    assert gs.tolist() == [0, 20, 30]
    assert ge.tolist() == [12, 25, 30]
    assert busy_stats(s, e) == (30, 12 + 5 + 0)


def _ingest(tmp_path: Path, events: list[dict[str, Any]], **kw: Any) -> Path:
    f = write(tmp_path / "t.json", trace(events, **kw))
    ingest([f], tmp_path / "run", jobs=1)
    return tmp_path / "run"


def test_temporal_known_answer(tmp_path: Path) -> None:
    # GIVEN compute [0,10] and [20,30], NCCL [5,15] on another stream, a memcpy [40,45] (µs)
    run = _ingest(
        tmp_path,
        [
            kernel("gemm", "0.000", "10.000", 1),
            kernel("ncclKernel_AllReduce_RING_LL_Sum_float", "5.000", "10.000", 2, stream=20),
            kernel("gemm", "20.000", "10.000", 3),
            {
                "ph": "X",
                "cat": "gpu_memcpy",
                "name": "Memcpy DtoH",
                "pid": 0,
                "tid": 7,
                "ts": "40.000",
                "dur": "5.000",
                "args": {"stream": 7, "correlation": 4, "device": 0},
            },
            # an annotation span on the stream is not GPU work
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "phase",
                "pid": 0,
                "tid": 7,
                "ts": "-1.000",
                "dur": "60.000",
                "args": {},
            },
            cpu("aten::mm", "0.000", "100.000"),
        ],
    )
    # WHEN
    row = temporal(run).to_dicts()[0]
    # THEN span 45, busy 15+10+5 = 30, idle 15, compute 20, non-compute 10
    assert row["span_us"] == 45.0
    assert row["idle_us"] == 15.0
    assert row["compute_us"] == 20.0
    assert row["non_compute_us"] == 10.0
    assert (row["idle_pct"], row["compute_pct"], row["non_compute_pct"]) == (33.33, 44.44, 22.22)
    assert row["gpu_events"] == 4
    assert row["step_filtered"] is False


def test_temporal_ns_versus_hta_rounding(tmp_path: Path) -> None:
    # GIVEN two kernels with fractional µs: [0.4, 1.6] and [2.2, 2.9]
    run = _ingest(tmp_path, [kernel("a", "0.400", "1.200", 1), kernel("b", "2.200", "0.700", 2)])
    # WHEN
    exact = temporal(run).to_dicts()[0]
    hta = temporal(run, hta_rounding=True).to_dicts()[0]
    # THEN exact: span 2.5, busy 1.9; HTA: a -> [1, 1], b -> [3, 2] (negative), span 1 ... as HTA
    assert exact["span_us"] == pytest.approx(2.5)
    assert exact["compute_us"] == pytest.approx(1.9)
    assert exact["idle_us"] == pytest.approx(0.6)
    # HTA: ts=ceil(0.4)=1, end=floor(1.6)=1; ts=ceil(2.2)=3, end=floor(2.9)=2
    # groups [1,1] and [3,2]: span = 2 - 1 = 1, busy = (1-1) + (2-3) = -1, idle = 2
    assert hta["span_us"] == 1.0
    assert hta["idle_us"] == 2.0
    assert hta["compute_us"] == -1.0


def test_temporal_profiler_step_filter(tmp_path: Path) -> None:
    # GIVEN steps #1 [0, 100) and #2 [100, 200): only work launched before step 2 counts
    run = _ingest(
        tmp_path,
        [
            cpu("ProfilerStep#1", "0.000", "100.000", cat="user_annotation"),
            cpu("ProfilerStep#2", "100.000", "100.000", cat="user_annotation"),
            runtime("cudaLaunchKernel", "10.000", "1.000", 1),
            runtime("cudaLaunchKernel", "20.000", "1.000", 2),
            runtime("cudaLaunchKernel", "150.000", "1.000", 3),  # in the last step: dropped
            kernel("k1", "30.000", "10.000", 1),
            kernel("k2", "50.000", "10.000", 2),
            kernel("k3", "160.000", "10.000", 3),
            kernel("orphan", "170.000", "10.000", 99),  # no launching call kept: dropped
        ],
    )
    row = temporal(run).to_dicts()[0]
    assert row["step_filtered"] is True
    assert row["gpu_events"] == 2
    assert row["span_us"] == 30.0
    assert row["idle_us"] == 10.0
    assert row["compute_us"] == 20.0


def test_temporal_one_step_marker_no_filter(tmp_path: Path) -> None:
    run = _ingest(
        tmp_path,
        [
            cpu("ProfilerStep#1", "0.000", "100.000", cat="user_annotation"),
            runtime("cudaLaunchKernel", "150.000", "1.000", 3),
            kernel("k3", "160.000", "10.000", 3),
        ],
    )
    row = temporal(run).to_dicts()[0]
    assert row["step_filtered"] is False
    assert row["span_us"] == 10.0


def test_temporal_cli_json_and_table(tmp_path: Path) -> None:
    run = _ingest(
        tmp_path, [kernel("gemm", "0.000", "10.000", 1), kernel("gemm", "20.000", "10.000", 2)]
    )
    res = CliRunner().invoke(cli, ["temporal", str(run), "--json"])
    assert res.exit_code == 0, res.output
    import json

    rows = json.loads(res.stdout)
    assert rows[0]["idle_us"] == 10.0
    for key in (
        "rank",
        "idle_us",
        "compute_us",
        "non_compute_us",
        "span_us",
        "idle_pct",
        "compute_pct",
        "non_compute_pct",
    ):
        assert key in rows[0]
    res = CliRunner().invoke(cli, ["temporal", str(run)])
    assert res.exit_code == 0, res.output
    assert "66.67" in res.output  # compute %


def test_temporal_cli_no_store(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["temporal", str(tmp_path)])
    assert res.exit_code == 2
    assert "tracekit ingest" in res.output
