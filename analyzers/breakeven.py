"""Break-even acceptance length: how many tokens a cycle must emit to beat plain decoding.

break-even acceptance length = cycle time / baseline decode step time;
speedup = acceptance length x baseline step / cycle time.
A 12.2 ms baseline step and a 30 ms cycle need 30 / 12.2 = 2.46 tokens a cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from tracekit.analyzers.breakdown import analyze

from tracekit.errors import InputError

NS_PER_MS = 1_000_000


def breakeven(
    *,
    baseline_ms: float,
    cycle_ms: float,
    accept_len: float | None = None,
    verify_faster_ms: float | None = None,
) -> dict[str, Any]:
    """DESIGN's breakeven fields; with `verify_faster_ms`, also the what-if cycle (the cycle
    shortened by that much) and its break-even length and speedup."""
    if not baseline_ms > 0 or not cycle_ms > 0:
        msg = (
            f"baseline step ({baseline_ms} ms) and cycle ({cycle_ms} ms) must be positive; "
            "pass times in milliseconds"
        )
        raise InputError(msg)
    if accept_len is not None and not accept_len > 0:
        msg = f"acceptance length must be positive, got {accept_len}"
        raise InputError(msg)
    out: dict[str, Any] = {
        "breakeven_accept_len": cycle_ms / baseline_ms,
        "speedup": None if accept_len is None else accept_len * baseline_ms / cycle_ms,
        "accept_len": accept_len,
        "baseline_ms": baseline_ms,
        "cycle_ms": cycle_ms,
    }
    if verify_faster_ms is not None:
        what_if = cycle_ms - verify_faster_ms
        if not what_if > 0:
            msg = (
                f"--verify-faster-ms {verify_faster_ms} is not less than the cycle ({cycle_ms} ms)"
            )
            raise InputError(msg)
        out["what_if"] = {
            "verify_faster_ms": verify_faster_ms,
            "cycle_ms": what_if,
            "breakeven_accept_len": what_if / baseline_ms,
            "speedup": None if accept_len is None else accept_len * baseline_ms / what_if,
        }
    return out


def median_cycle_ms(run_dir: Path) -> tuple[float, float | None]:
    """(median cycle wall time in ms over all ranks and cycles, mean acceptance length)."""
    cyc = analyze(run_dir).cycles
    med = cyc["wall_ns"].median()
    if med is None or not float(med) > 0:
        msg = f"{run_dir}: no cycle with device time; is this a run directory with phases?"
        raise InputError(msg)
    accept = (
        cyc.filter(pl.col("accept_len").is_not_null())
        .group_by("cycle")
        .agg(pl.col("accept_len").first())["accept_len"]
        .mean()
    )
    return float(med) / NS_PER_MS, None if accept is None else float(accept)


def breakeven_runs(
    baseline: Path,
    spec: Path,
    *,
    accept_len: float | None = None,
    verify_faster_ms: float | None = None,
) -> dict[str, Any]:
    """Baseline step = the baseline run's median cycle (one decode step a cycle); cycle = the
    speculative run's median cycle; acceptance length from the speculative run's cycles unless
    given."""
    baseline_ms, _ = median_cycle_ms(baseline)
    cycle_ms, run_accept = median_cycle_ms(spec)
    return breakeven(
        baseline_ms=baseline_ms,
        cycle_ms=cycle_ms,
        accept_len=accept_len if accept_len is not None else run_accept,
        verify_faster_ms=verify_faster_ms,
    )
