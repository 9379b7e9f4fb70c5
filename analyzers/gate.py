"""The regression gate of `tracekit diff BASELINE... RUN --fail-on-regression PCT` (CI, cron).

A phase **regressed** when its steady-state median got slower by more than PCT percent of the
baseline's median (`b_ms_p50 / a_ms_p50 - 1 > PCT/100`; with several baselines their mean
median) and by more than the noise: `significant`, with the whole 95% interval of the change
above PCT percent of the baseline's median (`ci95_ms[0] > a_ms_p50 x PCT/100`: even the
interval's low end is a regression of more than PCT)
(docs/DEFINITIONS.md "Diff": with several baselines the interval is the run-to-run spread of
their medians, `noise: "runs"`; with one, the bootstrap over each run's instances,
`noise: "within-run"`, which knows nothing of how two runs of one command differ, and the line
says so). A faster phase, a change within PCT, or one the interval does not tell from noise
never fails the gate. Input: the `phases` map of `tracekit diff --json` (`a_ms_p50`,
`b_ms_p50`, `ci95_ms`, `significant`, `noise`, `a_count`, `b_count`, `a_runs_ms_p50`); pure,
no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

REGRESSION_EXIT_CODE = 3  # `tracekit diff --fail-on-regression`: some phase regressed


@dataclass(frozen=True)
class Regression:
    phase: str
    pct: float  # slower by this many percent of the baseline's median
    a_ms: float
    b_ms: float
    ci95_ms: tuple[float, float]
    a_count: int | None
    b_count: int | None
    noise: str = "within-run"
    baselines: int = 1

    def line(self) -> str:
        """One line: the phase and the evidence."""
        if self.a_count is None or self.b_count is None:
            n = ""
        elif self.a_count == self.b_count:
            n = f", {self.a_count:,} instances each"
        else:
            n = f", {self.a_count:,} and {self.b_count:,} instances"
        lo, hi = self.ci95_ms
        if self.noise == "runs":
            n = f", run-to-run noise of {self.baselines} baselines"
        else:
            n += "; run-to-run noise unknown (one baseline)"
        return (
            f"{self.phase} regressed {self.pct:.1f}% ({_ms(self.a_ms)} -> {_ms(self.b_ms)} ms "
            f"median, 95% CI {lo:+.{_dp(lo, hi)}f} to {hi:+.{_dp(lo, hi)}f} ms{n})"
        )


def _dp(*values: float) -> int:
    """Decimals that keep two significant digits of the smallest value shown (at least 1)."""
    small = min((abs(v) for v in values if v), default=1.0)
    return 1 if small >= 1 else 2 if small >= 0.1 else 3 if small >= 0.01 else 4


def _ms(v: float) -> str:
    return f"{v:.{max(2, _dp(v))}f}"


def regressions(phases: dict[str, dict[str, Any]], threshold_pct: float) -> list[Regression]:
    """The phases that regressed by more than `threshold_pct`, the worst first."""
    out: list[Regression] = []
    for phase, p in phases.items():
        a, b, ci = p.get("a_ms_p50"), p.get("b_ms_p50"), p.get("ci95_ms")
        if not p.get("significant") or a is None or b is None or ci is None or a <= 0:
            continue
        lo, hi = float(ci[0]), float(ci[1])
        pct = 100.0 * (b / a - 1.0)
        if lo > a * threshold_pct / 100.0 and lo > 0 and pct > threshold_pct:
            noise = str(p.get("noise") or "within-run")
            k = len(p.get("a_runs_ms_p50") or [None])
            out.append(
                Regression(phase, pct, a, b, (lo, hi), p.get("a_count"), p.get("b_count"), noise, k)
            )
    out.sort(key=lambda r: (-r.pct, r.phase))
    return out
