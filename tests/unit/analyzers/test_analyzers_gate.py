"""The regression gate (`tracekit diff --fail-on-regression PCT`), issue 17."""

from __future__ import annotations

from typing import Any

from tracekit.analyzers.gate import regressions


def _p(a: float, b: float, ci: tuple[float, float], sig: bool, n: int = 2000) -> dict[str, Any]:
    return {"a_ms_p50": a, "b_ms_p50": b, "ci95_ms": list(ci), "significant": sig,
            "a_count": n, "b_count": n}  # fmt: skip


def test_regressed_phase_named_with_its_evidence() -> None:
    # GIVEN: verify 19.0 -> 29.0 ms (+52.6%), significant; draft 10 -> 10.4 (+4%, interval
    # +0.35 to +0.5 ms: at least +3.5%)
    phases = {
        "verify": _p(19.0, 29.0, (9.6, 10.4), True),
        "draft": _p(10.0, 10.4, (0.35, 0.5), True),
    }
    # WHEN
    found = regressions(phases, 5)
    # THEN
    assert [r.phase for r in found] == ["verify"]
    assert found[0].line() == (
        "verify regressed 52.6% (19.00 -> 29.00 ms median, 95% CI +9.6 to +10.4 ms, "
        "2,000 instances each; run-to-run noise unknown (one baseline))"
    )
    assert [r.phase for r in regressions(phases, 3)] == ["verify", "draft"]  # worst first
    assert regressions(phases, 60) == []


def test_gate_ignores_noise_speedups_and_missing_phases() -> None:
    phases = {
        "noisy": _p(10.0, 20.0, (-1.0, 15.0), False),  # interval includes 0
        "faster": _p(20.0, 10.0, (-10.5, -9.5), True),
        "gone": {"a_ms_p50": 5.0, "b_ms_p50": None, "ci95_ms": None, "significant": False},
        "new": {"a_ms_p50": None, "b_ms_p50": 5.0, "ci95_ms": None, "significant": False},
    }
    assert regressions(phases, 0) == []


def test_gate_needs_the_whole_interval_above_the_threshold() -> None:
    # GIVEN verify 10 -> 13 ms (+30%), significant, but the interval +0.5 to +5.5 ms reaches
    # down to +5%: a 10% gate cannot tell a >10% regression from noise; a 4% gate can
    phases = {"verify": _p(10.0, 13.0, (0.5, 5.5), True)}
    assert regressions(phases, 10) == []
    assert [r.phase for r in regressions(phases, 4)] == ["verify"]
    # the interval's low end exactly at the threshold does not fire (strictly above)
    assert regressions({"verify": _p(10.0, 13.0, (1.0, 5.0), True)}, 10) == []


def test_unequal_counts_and_small_times() -> None:
    phases = {"allreduce": {**_p(0.2, 0.3, (0.08, 0.12), True), "b_count": 1500}}
    (r,) = regressions(phases, 10)
    assert r.line() == (
        "allreduce regressed 50.0% (0.20 -> 0.30 ms median, 95% CI +0.080 to +0.120 ms, "
        "2,000 and 1,500 instances; run-to-run noise unknown (one baseline))"
    )
