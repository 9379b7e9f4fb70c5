"""Break-even acceptance length: how many tokens a cycle must emit to beat plain decoding.

break-even acceptance length = mean cycle time / mean baseline decode step time;
speedup = acceptance length x baseline step / cycle time, the times and the acceptance length
being totals over the steady-state cycles of each run (total time / cycles, total tokens /
cycles), so the speedup is the ratio of the two runs' tokens/s.
A 12.2 ms baseline step and a 30 ms cycle need 30 / 12.2 = 2.46 tokens a cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.analyzers.acceptance import kept_acceptance
from tracekit.analyzers.run_analysis import RunAnalysis, analyze
from tracekit.analyzers.steady import CycleChoice, decide
from tracekit.analyzers.summary import cycle_totals
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


def run_cycles(analysis: RunAnalysis, choice: CycleChoice | None = None) -> dict[str, Any]:
    """A run's steady-state cycle figures (summary.cycle_totals) and its steady state."""
    recorded = analysis.recorded
    steady = decide(recorded, choice)
    totals = cycle_totals(steady.keep(recorded))
    accept = kept_acceptance(analysis.run_dir, steady)  # pooled over requests, when read
    if accept:
        totals["accept_len_mean"] = accept["accept_len_mean"]
    if not (totals["cycle_ms_mean"] or 0) > 0:
        msg = f"{analysis.run_dir}: no cycle with device time; is this a run directory with phases?"
        raise InputError(msg)
    return {**totals, "steady": steady.to_json()}


def breakeven_runs(
    baseline: Path,
    spec: Path,
    *,
    accept_len: float | None = None,
    verify_faster_ms: float | None = None,
    choice: CycleChoice | None = None,
) -> dict[str, Any]:
    """`breakeven_of` the runs in two run directories."""
    return breakeven_of(
        analyze(baseline),
        analyze(spec),
        accept_len=accept_len,
        verify_faster_ms=verify_faster_ms,
        choice=choice,
    )


def breakeven_of(
    baseline: RunAnalysis,
    spec: RunAnalysis,
    *,
    accept_len: float | None = None,
    verify_faster_ms: float | None = None,
    choice: CycleChoice | None = None,
) -> dict[str, Any]:
    """From totals over each run's steady state (docs/DEFINITIONS.md, "Throughput"):
    baseline step = the baseline run's mean cycle (one decode step a cycle), cycle = the
    speculative run's mean cycle, acceptance length = its tokens / cycles unless given. The
    medians and p90s are descriptive (`*_p50`, `*_p90`)."""
    base = run_cycles(baseline, choice)
    run = run_cycles(spec, choice)
    out = breakeven(
        baseline_ms=base["cycle_ms_mean"],
        cycle_ms=run["cycle_ms_mean"],
        accept_len=accept_len if accept_len is not None else run["accept_len_mean"],
        verify_faster_ms=verify_faster_ms,
    )
    out.update(
        {
            "baseline_ms_p50": base["cycle_ms_p50"],
            "baseline_ms_p90": base["cycle_ms_p90"],
            "cycle_ms_p50": run["cycle_ms_p50"],
            "cycle_ms_p90": run["cycle_ms_p90"],
            "baseline_cycles": base["cycles"],
            "spec_cycles": run["cycles"],
            "baseline_tokens_per_s": base["tokens_per_s"] or 1000.0 / base["cycle_ms_mean"],
            "spec_tokens_per_s": run["tokens_per_s"],
            "steady": {"baseline": base["steady"], "spec": run["steady"]},
        }
    )
    return out
