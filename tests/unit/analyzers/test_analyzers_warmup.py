"""The warm-up rule (issue 23 deliverable 3): MSER-5 truncation, the obvious-warm-up rule,
profiled cycles and sequence boundaries, on hand-built cycle times whose answer is known.

Steady cycles are 10 ms with a fixed pattern of noise (+0.2, -0.2, +0.1, -0.1, 0 ms: mean 10,
population sd 0.141), so every expected cut below follows from the rule in
docs/DEFINITIONS.md ("Steady state") by hand.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.unit.analyzers.builders import write_rows
from tests.unit.analyzers.test_analyzers_steady import light_run
from tracekit.analyzers.run_analysis import analyze
from tracekit.analyzers.steady import (
    mser_length,
    mser_statistic,
    mser_warmup,
    warmup_cut,
    warmup_length,
)
from tracekit.analyzers.summary import summarize

NOISE = (0.2, -0.2, 0.1, -0.1, 0.0)


def steady(n: int, base: float = 10.0) -> list[float]:
    return [base + NOISE[i % 5] for i in range(n)]


def cut(values: list[float], **kw: object) -> int:
    return warmup_cut(list(range(len(values))), values, **kw)  # type: ignore[arg-type]


def test_worked_example_single_cycles_23() -> None:
    # GIVEN DEFINITIONS.md's example: 8 cycles (fewer than 20: MSER on single cycles)
    v = [20.0, 14.0, 10.0, 11.0, 9.0, 10.0, 11.0, 10.0]
    # THEN rule 1 finds nothing (the later half's median is 10: 20 is not above 2 x 10) ...
    assert warmup_length(v) == 0
    # ... and MSER's statistic, sum of squares over the kept / their count squared, is least
    # at d = 2: 90.875/64, 15.43/49, 2.833/36, 2.8/25, 2/16
    stats = [mser_statistic(v, d) for d in range(5)]
    assert stats == pytest.approx([1.41992, 0.31487, 0.07870, 0.112, 0.125], abs=1e-5)
    assert mser_length(v) == 2
    # dropped mean 17 against kept 10.17: 67% slower, more than 10%: cycles 0-1 are warm-up
    assert mser_warmup(v) == 2
    assert cut(v) == 2


@pytest.mark.parametrize("tail", [15.0, 17.0, 19.0])
def test_warmup_sequence_whose_tail_is_1_5_to_1_9x_steady_23(tail: float) -> None:
    # GIVEN a warm-up sequence of 6 cycles ending 1.5-1.9x the steady 10 ms, then 34 steady
    v = [30.0, 28.0, 25.0, 22.0, 21.0, tail, *steady(34)]
    # THEN the old rule (above 2 x the later half's median, 20 ms) stops before cycle 5 and
    # would count it as steady; MSER-5 drops batch 0 and refines to one past the last cycle
    # above 10 + 3 x 0.141 ms: cycles 0-5
    assert warmup_length(v) == 5
    assert cut(v) == 6


def test_run_without_warmup_excludes_nothing_23() -> None:
    assert cut(steady(40)) == 0
    assert cut(steady(8)) == 0


@pytest.mark.parametrize("slope", [0.01, -0.01])
def test_steady_run_with_a_slow_drift_excludes_nothing_23(slope: float) -> None:
    # GIVEN 60 cycles drifting 0.6 ms (6%) up or down over the run
    start = 10.0 if slope > 0 else 10.6
    v = [start + slope * i + NOISE[i % 5] for i in range(60)]
    # THEN MSER alone would cut a drift (the variance of a trend falls as it is truncated) ...
    assert mser_length(v) > 0
    # ... but the cycles it drops are faster (up) or under 10% slower (down): not warm-up
    assert mser_warmup(v) == 0
    assert cut(v) == 0


def test_warmup_half_the_run_long_23() -> None:
    # GIVEN 20 cycles at 15 ms (1.5x: under rule 1's 2x) then 20 at 10 ms
    v = steady(20, 15.0) + steady(20)
    # THEN MSER-5 over 8 batches cuts 4 batches (the most it may: half the run)
    assert warmup_length(v) == 0
    assert mser_length(v) == 20
    assert cut(v) == 20


def test_profiled_cycles_are_not_warmup_23() -> None:
    # GIVEN a full-mode run: 3 warm-up cycles, then steady, with profiled cycles 6-8 slowed to
    # 25 ms by the profiler
    v = [30.0, 30.0, 30.0, *steady(3), 25.0, 25.0, 25.0, *steady(21)]
    profiled = [6 <= i <= 8 for i in range(30)]
    # THEN without knowing they are profiled, MSER drops them as warm-up; knowing, it drops
    # cycles 0-2 only
    assert cut(v) == 9
    assert cut(v, profiled=profiled) == 3


def test_sequence_boundaries_extend_the_warmup_to_its_sequence_end_23() -> None:
    # GIVEN sequences of 6 cycles; the first one's last cycle is only 3% slower (10.3 ms)
    v = [30.0] * 5 + [10.3, *steady(24)]
    starts = set(range(0, 30, 6))
    # THEN statistics alone cannot tell cycle 5 from steady ones; the sequence boundary does
    assert cut(v) == 5
    assert cut(v, seq_starts=starts) == 6
    # a warm-up that ends at a boundary stays; one whose sequence ends past half the run too
    assert cut([30.0] * 6 + steady(24), seq_starts=starts) == 6
    assert cut(v, seq_starts={0, 20}) == 5


def test_summary_leaves_the_slow_tail_out_23(tmp_path: Path) -> None:
    # GIVEN a light-mode run of the tail case, 2 tokens a cycle
    ms = [30.0, 28.0, 25.0, 22.0, 21.0, 17.0, *steady(34)]
    run = light_run(tmp_path / "run", ms, [2.0] * len(ms))
    # WHEN summarised
    s = summarize(run).to_json()
    # THEN cycles 0-5 are warm-up and tokens/s is 34 x 2 tokens over the 34 steady cycles'
    # 340 ms: 200 tokens/s (the old rule kept cycle 5: 70 tokens / 357 ms = 196.1)
    assert s["warmup_cycles"] == [0, 5]
    assert s["tokens_per_s"] == pytest.approx(200.0)


def test_worked_example_in_the_summary_23(tmp_path: Path) -> None:
    # GIVEN DEFINITIONS.md's worked example as a light-mode run
    run = light_run(tmp_path / "run", [20.0, 14.0, 10.0, 11.0, 9.0, 10.0, 11.0, 10.0])
    # WHEN summarised
    s = summarize(run).to_json()
    # THEN the fields the example names
    assert (s["cycle_selection"], s["steady_cycles"], s["warmup_cycles"]) == (
        "auto",
        [2, 7],
        [0, 1],
    )
    assert (s["excluded"], s["warmup_ms_p50"], s["steady_ms_p50"]) == (2, 17.0, 10.0)
    assert s["steady_note"] == (
        "cycles 0-1 excluded as warm-up: median 17 ms against 10 ms after "
        "(--all-cycles to keep them)"
    )


def test_a_new_requests_prefill_starts_a_sequence_23(tmp_path: Path) -> None:
    # GIVEN a light-mode run of 4 requests, 6 cycles each, a 5 ms prefill (a phase of no
    # cycle) before each; the first request's cycles are 30 ms, then 10.3 ms (3% slower than
    # the steady 10 ms, which no statistic can tell from steady)
    ms = [30.0] * 5 + [10.3] + steady(18)
    phases, cycles, t = [], [], 0
    for c, dur in enumerate(ms):
        if c % 6 == 0:  # the request's prefill
            end = t + 5 * 1_000_000
            phases.append(_row(-1, "prefill", t, end, seq=len(phases)))
            t = end
        end = t + round(dur * 1_000_000)
        phases.append(_row(c, "verify", t, end, seq=len(phases)))
        cycles.append(
            {"cycle": c, "start_ns": t, "end_ns": end, "accept_len": 2.0, "source": "cycle_target"}
        )
        t = end
    run = tmp_path / "run"
    write_rows(run, "phases", 0, phases)
    write_rows(run, "cycles", 0, cycles)
    # WHEN summarised
    s = summarize(run).to_json()
    # THEN cycles 6, 12 and 18 start sequences (a prefill ran before them), and the warm-up
    # (cycles 0-4 by rule 2) extends to the end of its sequence: cycles 0-5; the prefills are
    # no cycle's time, so tokens/s = 36 tokens / 180.1 ms (18 steady cycles: 3 x 50 ms plus
    # 10.2 + 9.8 + 10.1)
    assert s["warmup_cycles"] == [0, 5]
    assert s["tokens_per_s"] == pytest.approx(36 / 0.1801)
    rec = analyze(run).recorded
    assert rec.filter(pl.col("seq_start"))["cycle"].to_list() == [6, 12, 18]


def _row(cycle: int, phase: str, start: int, end: int, *, seq: int) -> dict[str, object]:
    return {
        "pid": 1,
        "tid": 1,
        "ok": True,
        "cycle": cycle,
        "phase": phase,
        "depth": 0,
        "seq": seq,
        "start_ns": start,
        "end_ns": end,
        "graph_replays": 0,
    }
