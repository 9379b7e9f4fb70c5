"""The run's device split (docs/DEFINITIONS.md, "Summary"): forward / allreduce / overhead of
the cycles' phase instances, from the GPU-timed ones when `--gpu-sample` left some untimed."""

from __future__ import annotations

import polars as pl
import pytest

from tracekit.analyzers.summary import device_split


def _rows(*rows: tuple[int, int, int, int, bool | None]) -> pl.DataFrame:
    cycle, fwd, ar, ovh, timed = zip(*rows, strict=True)
    return pl.DataFrame(
        {
            "cycle": list(cycle),
            "forward_ns": list(fwd),
            "allreduce_ns": list(ar),
            "overhead_ns": list(ovh),
            "wall_ns": [f + a + o for f, a, o in zip(fwd, ar, ovh, strict=True)],
            "gpu_timed": list(timed),
        },
        schema_overrides={"gpu_timed": pl.Boolean},
    )


def test_sampled_run_takes_only_its_gpu_timed_instances() -> None:
    # GIVEN two GPU-timed instances (forward 600, allreduce 200, overhead 200 ns in all) and an
    # untimed one whose device interval is its CPU range (forward 1000 ns)
    bd = _rows((0, 400, 200, 0, True), (0, 200, 0, 200, True), (1, 1000, 0, 0, False))
    # THEN the split is 60 / 20 / 20 %, not the 80 / 10 / 10 % of all three together
    assert device_split(bd) == pytest.approx({"forward": 60.0, "allreduce": 20.0, "overhead": 20.0})


def test_trace_rows_and_phases_outside_cycles() -> None:
    # GIVEN trace rows (gpu_timed null) in cycles 0 and 1, and a prefill outside any cycle
    bd = _rows((0, 300, 100, 100, None), (1, 100, 0, 400, None), (-1, 5000, 0, 0, None))
    # THEN every row in a cycle counts (400 / 100 / 500 of 1000 ns), the prefill not at all
    assert device_split(bd) == pytest.approx({"forward": 40.0, "allreduce": 10.0, "overhead": 50.0})


def test_no_device_time_is_none() -> None:
    assert device_split(_rows((0, 0, 0, 0, None))) is None
