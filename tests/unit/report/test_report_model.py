"""The report's model (tracekit/report/section_data.py): every figure against a known answer.

Two hand-built runs: `scenarios.two_rank_gpu` (its breakdown worked out to the nanosecond in
tests/unit/analyzers/test_analyzers_breakdown.py and docs/DEFINITIONS.md) for the per-rank
sections, and the synthetic runs of tests/outputs_synth.py for the headline, break-even, NVML,
manifest and diff. The page itself is checked in test_report_html.py and the browser test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.outputs_synth import make_run
from tests.unit.analyzers import scenarios
from tracekit.report import build_run, build_store
from tracekit.report.build import Run, breakeven_numbers, build_model, comparison
from tracekit.report.section_data import (
    Breakeven,
    BreakevenCurve,
    Diff,
    Distributions,
    GraphsAllreduce,
    Headline,
    Kernels,
    Manifest,
    Nvml,
    OverTime,
    Skew,
)

MS = 1e-6  # ns -> ms


@pytest.fixture(scope="module")
def gpu(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return Run.load(scenarios.two_rank_gpu(tmp_path_factory.mktemp("gpu") / "run"))


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run]:
    root = tmp_path_factory.mktemp("synth")
    make_run(root / "spec", ranks=2, cycles=6, graph=True)
    make_run(root / "base", ranks=2, cycles=6, baseline=True, cycle_ns=1_600_000)
    return Run.load(root / "spec"), Run.load(root / "base")


def test_over_time_is_the_mean_over_ranks_of_each_cycle(gpu: Run) -> None:
    # two_rank_gpu (ns): draft cycle 0 fwd 500 / 500, ovh 200 / 300 on ranks 0 / 1; cycle 1
    # fwd 400 / 500, ovh 1900 / 1800. verify cycle 0 fwd 500 / 700, allreduce 500 / 300, ovh
    # 600 / 500; cycle 1 fwd 700 / 800, allreduce 400 / 300, ovh 600 / 600.
    data = build_run.over_time(gpu).data
    assert isinstance(data, OverTime)
    draft, verify = data.phases
    assert (draft.phase, draft.cycles, verify.phase) == ("draft", [0, 1], "verify")
    want = {
        "draft": {"forward": [500, 450], "allreduce": [0, 0], "overhead": [250, 1850]},
        "verify": {"forward": [600, 750], "allreduce": [400, 350], "overhead": [550, 600]},
    }
    for p in (draft, verify):
        for c, ns in want[p.phase].items():
            assert p.ms[c] == pytest.approx([v * MS for v in ns]), (p.phase, c)  # type: ignore[index]


def test_distributions_hold_each_instance_by_rank(gpu: Run) -> None:
    data = build_run.distributions(gpu).data
    assert isinstance(data, Distributions)
    draft, verify = data.phases
    assert draft.ranks == [0, 0, 1, 1]
    assert draft.wall_ms == pytest.approx([700 * MS, 2300 * MS, 800 * MS, 2300 * MS])
    assert verify.wall_ms == pytest.approx([1600 * MS, 1700 * MS, 1500 * MS, 1700 * MS])


def test_skew_lag_and_per_phase_rows(gpu: Run) -> None:
    # work = wall - allreduce wait. verify c0: NCCL 500 (rank 0) vs 300 -> rank 0 waited 200:
    # work 1400 vs 1500; c1: custom AR 500 vs 300 -> work 1700 - 200 = 1500 vs 1700. draft has no
    # collective: work = wall, 700 vs 800 and 2300 vs 2300. Per cycle: rank 0 2100 / 3800,
    # rank 1 2300 / 4000 -> rank 1 lags 200 ns = 0.2 µs in both cycles.
    data = build_run.skew(gpu).data
    assert isinstance(data, Skew)
    assert (data.ranks, data.cycles) == ([0, 1], [0, 1])
    assert data.lag_us == [[0.0, 0.0], [pytest.approx(0.2), pytest.approx(0.2)]]
    draft, verify = data.phases
    # draft: spreads 100 and 0 ns -> p50 0.05 µs, p90 0.09 µs; slowest rank 1 then a tie (rank
    # 0): one cycle each, the lowest wins with half the cycles
    assert (draft.cycles, draft.slowest_rank, draft.slowest_frac) == (2, 0, 0.5)
    assert (draft.spread_us_p50, draft.spread_us_p90) == pytest.approx((0.05, 0.09))
    assert draft.wait_us_p50 == 0
    # verify: spreads 100 and 200 -> p50 0.15, p90 0.19; most-waiting rank 200 ns both times
    assert (verify.slowest_rank, verify.slowest_frac) == (1, 1.0)
    assert (verify.spread_us_p50, verify.spread_us_p90) == pytest.approx((0.15, 0.19))
    assert verify.wait_us_p50 == pytest.approx(0.2)


def test_graphs_and_allreduce_implementations(gpu: Run) -> None:
    # draft of cycle 0 replays a graph on both ranks (all its busy time, 500 ns each), cycle 1
    # does not (busy 400 and 500): 2 of 4 replayed, graph share of busy time 1000 / 1900
    # (DEFINITIONS.md "graph_replayed, graph_kernel_frac"). verify: NCCL in cycle 0, custom_ar
    # in 1.
    data = build_run.graphs_allreduce(gpu).data
    assert isinstance(data, GraphsAllreduce)
    graphs = [(g.phase, g.instances, g.replayed, g.replayed_frac) for g in data.graphs]
    assert graphs == [("draft", 4, 2, 0.5), ("verify", 4, 0, 0.0)]
    assert [g.graph_kernel_frac for g in data.graphs] == [pytest.approx(1000 / 1900), 0.0]
    assert [(i.phase, i.impl, i.instances) for i in data.impls] == [
        ("draft", None, None),
        ("verify", "custom_ar", 2),
        ("verify", "nccl:RING/LL/bf16", 2),
    ]


def test_kernels_sum_each_name_over_ranks(gpu: Run) -> None:
    # verify: gemm 500 + 700 (rank 0) + 700 + 800 (rank 1) = 2,700 ns over 4; NCCL 500 + 300,
    # custom AR 500 + 300 (equal totals: by name). draft: k3 400 + 400, k1 300 + 200, k2 200 +
    # 300, rank 1's memcpy 100; the stray kernel is in no phase.
    data = build_run.kernels(gpu).data
    assert isinstance(data, Kernels)
    verify = [(k.name[:8], k.count, k.total_ms, k.mean_us) for k in data.phases["verify"]]
    assert verify == [
        ("gemm", 4, pytest.approx(2700 * MS), pytest.approx(0.675)),
        ("ncclDevK", 2, pytest.approx(800 * MS), pytest.approx(0.4)),
        ("void cro", 2, pytest.approx(800 * MS), pytest.approx(0.4)),
    ]
    assert [k.allreduce_impl for k in data.phases["verify"]] == [
        None,
        "nccl:RING/LL/bf16",
        "custom_ar",
    ]
    assert [(k.name[:6], k.count) for k in data.phases["draft"]] == [
        ("k3", 2),
        ("k1", 2),
        ("k2", 2),
        ("Memcpy", 1),
    ]


def test_headline_and_breakeven_known_answers(synth: tuple[Run, Run]) -> None:
    # By hand (tests/outputs_synth.py, DEFINITIONS.md "Cycle time", "Acceptance length,
    # throughput, break-even, speedup"): a cycle's recorded time is its CPU range; the last
    # phase ends 10 + 3 x 100 + 50 + 20 + 4 x 150 + 100 = 1,080 µs after the cycle's start, so
    # cycle 0 takes 1.08 ms and cycles 1-5 2.0 ms: 11.08 ms on each rank. Tokens 1, 2, 3, 4, 1,
    # 2: 13 in 6 cycles. The baseline step: 0.78 ms, then 1.6 ms x 5 = 8.78 ms for 6 steps.
    run, base = synth
    be = breakeven_numbers(run, base)
    assert isinstance(be, Breakeven)
    h = build_run.headline(run, be).data
    assert isinstance(h, Headline)
    sm = h.summary  # `tracekit summary`'s typed model, as it is
    assert (sm.ranks, sm.cycles) == (2, 6)
    assert sm.cycle_ms_mean == pytest.approx(11.08 / 6)
    assert sm.cycle_ms_p50 == pytest.approx(2.0)
    assert sm.accept_len_mean == pytest.approx(13 / 6)
    assert sm.tokens_per_s == pytest.approx(13 / 11.08e-3)
    assert be.breakeven_accept_len == pytest.approx(11.08 / 8.78)
    assert be.speedup == pytest.approx((13 / 6) * (8.78 / 6) / (11.08 / 6))
    assert h.graph_cycle_frac == 1.0  # every verify replays a graph
    # device timeline per rank (µs): draft 300 in cycle 0 (from the cycle's start), then 1,300
    # (from the previous verify's last kernel): busy 110 + 60 - 10 overlap + 60 = 220 a cycle;
    # verify 700: three 100 µs GEMMs, one 100 µs NCCL, 300 idle. Forward 6 x (220 + 300) =
    # 3,120, allreduce 600, overhead 80 + 5 x 1,080 + 6 x 300 = 7,280 of 11,000.
    assert h.device_pct == pytest.approx(
        {
            "forward": 100 * 3120 / 11000,
            "allreduce": 100 * 600 / 11000,
            "overhead": 100 * 7280 / 11000,
        }
    )
    assert list(sm.phases) == ["draft", "verify"]
    draft, verify = sm.phases.values()
    assert (draft.count, draft.wall_ms_p50) == (12, pytest.approx(1.3))
    assert (verify.count, verify.wall_ms_p50, verify.graph_replayed_frac) == (
        12,
        pytest.approx(0.7),
        1.0,
    )
    assert verify.allreduce_pct == pytest.approx(100 * 100 / 700)


def test_breakeven_curve(synth: tuple[Run, Run]) -> None:
    # the grid runs from 1 to max(8, ceil(13/6 + 2), ceil(1.26 + 1)) = 8; speedup is linear in L
    run, base = synth
    curve = build_store.breakeven_curve(breakeven_numbers(run, base)).data
    assert isinstance(curve, BreakevenCurve)
    assert (curve.top, len(curve.accept_len)) == (8.0, 101)
    assert (curve.accept_len[0], curve.accept_len[50], curve.accept_len[-1]) == (1.0, 4.5, 8.0)
    assert curve.speedup[-1] == pytest.approx(8 * 8.78 / 11.08)


def test_breakeven_needs_a_plain_decoding_baseline(synth: tuple[Run, Run]) -> None:
    run, _ = synth
    assert "--baseline RUN" in str(breakeven_numbers(run, None))
    not_plain = breakeven_numbers(run, run)
    assert isinstance(not_plain, str)
    assert "['draft', 'verify'], expected only `decode`" in not_plain
    section = build_store.breakeven_curve(not_plain)
    assert (section.data, section.unavailable) == (None, not_plain)


def test_nvml_series_and_thinning(synth: tuple[Run, Run]) -> None:
    # 6 cycles x 4 samples 0.5 ms apart per rank and metric; values base + (i % 3)
    data = build_store.nvml(synth[0].run_dir).data
    assert isinstance(data, Nvml)
    assert [(g.group, g.unit, len(g.series)) for g in data.groups] == [
        ("clocks", "MHz", 2),
        ("power", "W", 2),
        ("temperature", "°C", 2),
    ]
    power1 = data.groups[1].series[1]
    assert (power1.rank, power1.metric, len(power1.seconds)) == (1, "power_w", 24)
    assert power1.seconds[:3] == pytest.approx([0.0, 0.0005, 0.001])
    assert power1.values[:4] == [360.0, 361.0, 362.0, 360.0]
    assert not data.thinned
    # at most 5 points: every ceil(24 / 5) = 5th sample, 0, 5, 10, 15, 20
    thin = build_store.nvml(synth[0].run_dir, max_points=5).data
    assert isinstance(thin, Nvml)
    assert thin.thinned
    assert thin.groups[1].series[1].seconds == pytest.approx([0.0, 0.0025, 0.005, 0.0075, 0.01])


def test_manifest_sorts_rows_by_how_they_differ(synth: tuple[Run, Run]) -> None:
    data = build_store.manifest(synth[0].run_dir).data
    assert isinstance(data, Manifest)
    assert data.ranks == [0, 1]
    assert [(r.section, r.key, r.values) for r in data.differ] == [
        ("versions", "nccl", ["2.28.9", "2.27.7"])
    ]
    assert [(r.key, r.values) for r in data.per_rank] == [("pid", ["4000", "4001"])]
    # sorted by (section, key): device, env, process, process, versions
    assert [r.key for r in data.same] == ["name", "NCCL_ALGO", "argv", "host", "torch"]


def test_diff_of_two_runs_known_answer(tmp_path: Path) -> None:
    # GIVEN the same run with cycles 2.0 ms and 2.5 ms apart: draft is charged the idle time
    # before it (1.3 -> 1.8 ms in cycles 1-5, 0.3 ms in cycle 0 in both), verify unchanged
    make_run(tmp_path / "a", ranks=2, cycles=6)
    make_run(tmp_path / "b", ranks=2, cycles=6, cycle_ns=2_500_000)
    sec = comparison(Run.load(tmp_path / "b"), Run.load(tmp_path / "a"))
    assert sec.title == "What changed: a (A) -> b (B)"
    d = sec.data
    assert isinstance(d, Diff)
    draft, verify = d.phases
    assert (draft.a_ms_p50, draft.b_ms_p50, draft.delta_ms) == pytest.approx((1.3, 1.8, 0.5))
    assert draft.significant
    assert draft.ci95_ms == pytest.approx((0.5, 0.5))  # every instance moved by exactly 0.5
    assert (draft.forward_delta_ms, draft.overhead_delta_ms) == pytest.approx((0.0, 0.5))
    assert verify.delta_ms == pytest.approx(0.0)
    assert not verify.significant
    assert d.headline[0].startswith("draft is 0.50 ms slower in B (1.30 ms -> 1.80 ms median")
    assert d.manifest == []


def test_the_model_of_a_comparison_and_each_run_analysed_once(
    synth: tuple[Run, Run], monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracekit.analyzers.run_analysis as model

    calls: list[int] = []
    real = model.analyze_rank

    def counted(*args: object, **kw: object) -> object:
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(model, "analyze_rank", counted)
    run, base = synth
    m = build_model(run.run_dir, baseline=base.run_dir)
    assert len(calls) == 4  # 2 runs x 2 ranks: one analysis of each rank of each run
    assert [s.id for s in m.sections] == [
        "diff",
        "headline",
        "over-time",
        "distributions",
        "skew",
        "graphs-allreduce",
        "kernels",
        "nvml",
        "breakeven",
        "manifest",
    ]
    assert all(s.unavailable is None for s in m.sections)
    assert m.title == "tracekit report: spec vs base"


def test_a_light_run_says_what_it_lacks(tmp_path: Path) -> None:
    make_run(tmp_path / "light", ranks=1, cycles=3, events=False, counters=False)
    m = build_model(tmp_path / "light")
    missing = {s.id: s.unavailable for s in m.sections if s.unavailable}
    assert set(missing) == {"kernels", "nvml", "breakeven"}
    assert "light-mode run records no kernels" in str(missing["kernels"])
    h = m.section("headline")
    assert h is not None
    assert isinstance(h.data, Headline)
    assert h.data.summary.approximate
    assert h.data.breakeven is None
