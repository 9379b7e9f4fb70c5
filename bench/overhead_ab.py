"""Light mode's cost inside one process: the demo's A/B blocks, with a 95% interval.

`python -m tracekit.demo ... --ab-blocks B --result R.json` under `tracekit launch` switches
recording on and off in blocks of B cycles (on, off, off, on, repeated: `ab_schedule`) and writes
each cycle's step time (`step_ms`, synchronised before and after the step) and state (`ab_on`).
This script reads such results and reports, per result (one demo path each):

- each block's mean (or median, `--stat`) step time;
- per group of four blocks (ABBA), the relative cost r = (mean of its 2 on blocks) / (mean of
  its 2 off blocks) - 1; the first `--skip-groups` groups are dropped (warm-up);
- light mode's cost = the mean of r over groups, in % of the off cycle, with a 95% t-interval
  (mean +- t(0.975, G-1) x sd / sqrt(G), G groups) and a percentile bootstrap interval (2,000
  resamples of the groups, fixed seed) beside it.

Same GPU clocks, same process and machine state for both arms, so the run-to-run spread of
separate processes (±5% on the H200) drops out. docs/BENCHMARKS.md, "Overhead inside one process".

Usage:
    python bench/overhead_ab.py RESULT.json [RESULT.json ...] [--skip-groups 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from tracekit.analyzers.tquantile import t975


@dataclass(frozen=True)
class ABResult:
    """Light mode's cost in % of the off cycle (mean over ABBA groups) and its intervals."""

    groups: int
    cost_pct: float
    t_lo_pct: float | None
    t_hi_pct: float | None
    boot_lo_pct: float | None
    boot_hi_pct: float | None
    on_ms: float  # mean of the on blocks' statistic
    off_ms: float
    group_pct: list[float]
    # the median of the groups' r with its distribution-free 95% interval (order statistics,
    # `median_interval`): one slow block moves the mean and its t-interval, not these
    median_pct: float | None = None
    median_lo_pct: float | None = None
    median_hi_pct: float | None = None


def median_interval(r: list[float]) -> tuple[float, float] | None:
    """The median's 95% interval from order statistics: the k-th smallest and k-th largest of
    n values, k the largest with P(Binomial(n, 1/2) < k) <= 0.025 (so it covers at least 95%
    whatever the distribution). None below 6 values (no such k)."""
    n = len(r)
    below = 0.0  # P(B < k), B ~ Binomial(n, 1/2)
    k = 0
    while True:
        nxt = below + math.comb(n, k) / 2**n
        if nxt > 0.025:
            break
        below, k = nxt, k + 1
    if k < 1:
        return None
    x = sorted(r)
    return x[k - 1], x[n - k]


def blocks(
    step_ms: list[float],
    on: list[bool],
    block: int,
    stat: Literal["mean", "median"] = "mean",
    left_out: list[bool] | None = None,
) -> list[tuple[bool, float]]:
    """(state, statistic of its step times) of each block of `block` cycles, in order (an
    incomplete last block is dropped). Cycles marked in `left_out` (the first step after a
    prefill) count in neither state: the demo's requests are as long as whole ABBA groups
    (a baseline request of 64 tokens is 2 groups of blocks of 8), so every prefill lands in an
    "on" block and the step after it would weigh on one state only."""
    if len(step_ms) != len(on):
        msg = f"{len(step_ms)} step times but {len(on)} on/off states"
        raise ValueError(msg)
    if left_out is not None and len(left_out) != len(on):
        msg = f"{len(left_out)} prefill marks but {len(on)} on/off states"
        raise ValueError(msg)
    if block < 1:
        msg = f"blocks of {block} cycles: the demo ran without --ab-blocks"
        raise ValueError(msg)
    fn = statistics.fmean if stat == "mean" else statistics.median
    out: list[tuple[bool, float]] = []
    for start in range(0, len(on) - block + 1, block):
        states = set(on[start : start + block])
        if len(states) != 1:
            msg = f"cycles {start}..{start + block - 1} mix on and off: not blocks of {block}"
            raise ValueError(msg)
        kept = [
            t
            for k, t in enumerate(step_ms[start : start + block], start)
            if left_out is None or not left_out[k]
        ]
        out.append((on[start], fn(kept or step_ms[start : start + block])))
    return out


def group_ratios(bl: list[tuple[bool, float]], skip_groups: int = 0) -> list[tuple[float, float]]:
    """(mean of the on blocks, mean of the off blocks) of each complete group of four blocks
    (on, off, off, on); an incomplete last group is dropped, and the first `skip_groups`."""
    groups = []
    for g in range(len(bl) // 4):
        four = bl[4 * g : 4 * g + 4]
        states = [s for s, _ in four]
        if states != [True, False, False, True]:
            msg = f"block group {g} is {states}, not on, off, off, on (ab_schedule)"
            raise ValueError(msg)
        groups.append(((four[0][1] + four[3][1]) / 2, (four[1][1] + four[2][1]) / 2))
    return groups[skip_groups:]


def interval(groups: list[tuple[float, float]], *, boot: int = 2000, seed: int = 0) -> ABResult:
    """Light mode's cost from (on, off) group means: per group r = on / off - 1, in %."""
    if not groups:
        msg = "no complete group of four blocks (on, off, off, on): run more cycles"
        raise ValueError(msg)
    r = [100.0 * (on / off - 1.0) for on, off in groups]
    g = len(r)
    mean = statistics.fmean(r)
    t_lo = t_hi = b_lo = b_hi = None
    if g >= 2:
        half = t975(g - 1) * statistics.stdev(r) / math.sqrt(g)
        t_lo, t_hi = mean - half, mean + half
        rng = random.Random(seed)
        means = sorted(statistics.fmean(rng.choices(r, k=g)) for _ in range(boot))
        b_lo, b_hi = means[int(0.025 * boot)], means[int(0.975 * boot) - 1]
    med = median_interval(r)
    return ABResult(
        groups=g,
        cost_pct=mean,
        t_lo_pct=t_lo,
        t_hi_pct=t_hi,
        boot_lo_pct=b_lo,
        boot_hi_pct=b_hi,
        on_ms=statistics.fmean(on for on, _ in groups),
        off_ms=statistics.fmean(off for _, off in groups),
        group_pct=r,
        median_pct=statistics.median(r),
        median_lo_pct=None if med is None else med[0],
        median_hi_pct=None if med is None else med[1],
    )


def analyse(
    result: dict[str, Any],
    *,
    skip_groups: int = 1,
    stat: Literal["mean", "median"] = "mean",
    prefill_steps: bool = False,
) -> ABResult:
    """ABResult of one demo `--result` payload written with `--ab-blocks`; the first step
    after each prefill is left out (`blocks`) unless `prefill_steps`."""
    on = result.get("ab_on")
    if not on:
        msg = "the demo result has no `ab_on`: run the demo with --ab-blocks N"
        raise ValueError(msg)
    left_out = None if prefill_steps else result.get("after_prefill")
    bl = blocks(result["step_ms"], on, int(result.get("ab_blocks") or 0), stat, left_out)
    groups = group_ratios(bl, 0)
    # keep at least 2 groups for the interval: skip fewer when there are few
    skip = min(skip_groups, max(0, len(groups) - 2))
    return interval(groups[skip:])


def step_difference(
    result: dict[str, Any], key: str, *, skip_groups: int = 1
) -> dict[str, float] | None:
    """On minus off of a per-step series of the demo result (`step_cpu_ms`: the step's thread
    CPU time, `step_gc_ms`: its garbage collections; `step_ms`: its wall time), in µs a step:
    the mean over ABBA groups of (mean of the on blocks - mean of the off blocks), with its
    95% t-interval over groups, and the two states' means. None when the result lacks it.
    Where the wall time grows and the thread's CPU time does not, the step waited (the GIL,
    the driver, the device), it did not work."""
    series = result.get(key)
    on = result.get("ab_on")
    if not series or not on:
        return None
    left_out = result.get("after_prefill")
    bl = blocks(series, on, int(result.get("ab_blocks") or 0), "mean", left_out)
    groups = group_ratios(bl, 0)
    groups = groups[min(skip_groups, max(0, len(groups) - 2)) :]
    d = [1e3 * (a - b) for a, b in groups]
    out = {
        "diff_us": statistics.fmean(d),
        "on_us": 1e3 * statistics.fmean(a for a, _ in groups),
        "off_us": 1e3 * statistics.fmean(b for _, b in groups),
        "groups": float(len(d)),
    }
    if len(d) >= 2:
        half = t975(len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
        out["lo_us"], out["hi_us"] = out["diff_us"] - half, out["diff_us"] + half
    return out


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--skip-groups", type=int, default=1, help="warm-up groups dropped")
    ap.add_argument("--stat", choices=["mean", "median"], default="mean")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    out = {}
    for path in a.results:
        try:
            data = json.loads(path.read_text())
            out[str(path)] = asdict(analyse(data, skip_groups=a.skip_groups, stat=a.stat))
        except (OSError, ValueError, KeyError) as exc:
            print(f"overhead_ab: {path}: {exc}", file=sys.stderr)
            return 2
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    print("| result | groups | on ms | off ms | cost % | 95% t-interval | 95% bootstrap |")
    print("|---|---|---|---|---|---|---|")
    for name, r in out.items():
        print(
            f"| {name} | {r['groups']} | {r['on_ms']:.3f} | {r['off_ms']:.3f} | "
            f"{r['cost_pct']:+.2f} | [{_fmt(r['t_lo_pct'])}, {_fmt(r['t_hi_pct'])}] | "
            f"[{_fmt(r['boot_lo_pct'])}, {_fmt(r['boot_hi_pct'])}] |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
