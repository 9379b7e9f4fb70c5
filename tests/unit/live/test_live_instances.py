"""The live side (issue 17): tailing flushed records, light-mode instances, top's snapshot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from click.testing import CliRunner
from rich.console import Console

from tracekit.cli import cli
from tracekit.live.feed import LiveFeed, Polled
from tracekit.live.instances import DEFAULT_RULE, Cycle, Instance, nested, run_cycle_rule
from tracekit.live.render import render
from tracekit.live.snapshot import TopState, quantile
from tracekit.live.tail import ProcessTail
from tracekit.store.raw.schema import raw_schema

SITES = [
    {"code": 0, "kind": "phase", "phase": "draft", "target": "m:draft"},
    {"code": 1, "kind": "phase", "phase": "verify", "target": "m:verify"},
    {"code": 2, "kind": "phase", "phase": "allreduce", "target": "m:ar"},
    {"code": 3, "kind": "cycle", "phase": "cycle", "target": "m:step"},
]


def _row(
    code: int, cycle: int, depth: int, start: int, end: int, seq: int, **kw: Any
) -> dict[str, Any]:
    return {
        "code": code, "cycle": cycle, "depth": depth, "parent": kw.get("parent", -1), "tid": 7,
        "seq": seq, "start_ns": start, "end_ns": end, "graph_replays": kw.get("replays", 0),
        "accept_len": kw.get("accept"), "ok": True, "gpu_start_ns": None, "gpu_end_ns": None,
    }  # fmt: skip


def _cycle_rows(c: int, t0: int, seq0: int) -> list[dict[str, Any]]:
    """DEFINITIONS.md's light-mode example, shifted by t0: draft [1000, 1900], verify
    [2100, 3900] with an allreduce sub-phase [3200, 3700], the cycle [1000, 4000], accept 3;
    then a phase after the cycle's record (between cycles: in no cycle)."""
    return [
        _row(0, c, 0, t0 + 1000, t0 + 1900, seq0 + 1, replays=1),
        _row(2, c, 1, t0 + 3200, t0 + 3700, seq0 + 3, parent=1),
        _row(1, c, 0, t0 + 2100, t0 + 3900, seq0 + 2),
        _row(3, c, 0, t0 + 1000, t0 + 4000, -(seq0 + 4), accept=3.0),
        _row(1, c, 0, t0 + 4100, t0 + 4500, seq0 + 5),
    ]


def _write_raw(raw: Path, pid: int, rank: int, batches: list[list[dict[str, Any]]]) -> Path:
    d = raw / f"pid-{pid}"
    d.mkdir(parents=True)
    # the map's cycle rule (cycle target m:step) as the launcher writes it into run.json
    rule = {"targets": ["m:step"], "starts_with": None, "require": None, "delta_phases": {}}
    (raw.parent / "run.json").write_text(json.dumps({"cycle_rule": {**rule, "cycle_delta": None}}))
    (d / "sites.json").write_text(json.dumps({"sites": SITES}))
    (d / "process.json").write_text(
        json.dumps({"pid": pid, "rank_info": {"env_rank": rank}, "finished": True})
    )
    data = raw_schema().serialize().to_pybytes()
    for rows in batches:
        data += pa.RecordBatch.from_pylist(rows, schema=raw_schema()).serialize().to_pybytes()
    (d / "records.arrow").write_bytes(data + b"\xff\xff\xff\xff\x00\x00\x00\x00")
    return d


def _splits(polled: Polled) -> list[tuple[str, int, int, int, int]]:
    """(phase, wall, forward, allreduce, overhead) of each instance polled."""
    return [
        (i.phase, i.wall_ns, i.forward_ns, i.allreduce_ns, i.overhead_ns) for i in polled.instances
    ]


def test_instances_follow_the_light_mode_definition(tmp_path: Path) -> None:
    # GIVEN: one rank, one cycle of DEFINITIONS.md's light-mode example
    _write_raw(tmp_path / "raw", 11, 0, [_cycle_rows(0, 0, 0)])
    # WHEN
    polled = LiveFeed(tmp_path / "raw").poll()
    # THEN: draft forward 900 (idle 0 since the cycle start); verify forward 1300, allreduce
    # 500, overhead 200; the phase after the cycle record is in no cycle
    assert _splits(polled) == [
        ("draft", 900, 900, 0, 0),
        ("verify", 2000, 1300, 500, 200),
    ]
    assert polled.instances[0].graph_replayed
    assert not polled.instances[1].graph_replayed
    assert [(c.rank, c.cycle, c.accept_len) for c in polled.cycles] == [(0, 0, 3.0)]


def test_first_cycle_flushed_before_its_cycle_record(tmp_path: Path) -> None:
    # GIVEN the timer flush cut cycle 0 after its draft (started 300 ns after the cycle's
    # start): the first batch holds the draft, the second the rest and the cycle record
    rows = _cycle_rows(0, 0, 0)
    rows[0] = _row(0, 0, 0, 1300, 1900, 1)
    _write_raw(tmp_path / "raw", 12, 0, [rows[:1], rows[1:]])
    # WHEN
    polled = LiveFeed(tmp_path / "raw").poll()
    # THEN the draft's overhead counts from the cycle's start (1000), as the breakdown's does:
    # 300 idle, forward 600
    assert _splits(polled) == [
        ("draft", 900, 600, 0, 300),
        ("verify", 2000, 1300, 500, 200),
    ]


def test_sub_phase_flushed_before_its_enclosing_call(tmp_path: Path) -> None:
    # GIVEN the timer flush cut cycle 0 between verify's allreduce sub-phase (recorded when it
    # returned) and verify itself: the first batch ends with the sub-phase
    rows = _cycle_rows(0, 0, 0)
    _write_raw(tmp_path / "raw", 13, 0, [rows[:2], rows[2:]])
    # WHEN
    polled = LiveFeed(tmp_path / "raw").poll()
    # THEN the sub-phase waited for verify: allreduce 500 of verify's 1800
    assert _splits(polled) == [
        ("draft", 900, 900, 0, 0),
        ("verify", 2000, 1300, 500, 200),
    ]


def _decoded(phase: str, depth: int, start: int, end: int, seq: int) -> dict[str, Any]:
    return {
        "kind": "phase", "phase": phase, "depth": depth, "tid": 7, "seq": seq,
        "start_ns": start, "end_ns": end, "gpu_start_ns": None, "gpu_end_ns": None,
    }  # fmt: skip


def test_nesting_waits_for_the_enclosing_call_and_drops_orphans() -> None:
    # GIVEN verify [2100, 3900] with an allreduce [3200, 3700] inside, flushed apart
    sub = _decoded("allreduce", 1, 3200, 3700, 3)
    verify = _decoded("verify", 0, 2100, 3900, 2)
    # WHEN / THEN the sub-phase alone waits; with verify it is verify's allreduce
    assert nested([], [sub], 11) == ({}, [sub])
    assert nested([sub], [verify], 11) == ({id(verify): [(3200, 3700)]}, [])
    # a sub-phase whose enclosing call never came (ended before the next top-level call on its
    # thread started) is dropped; one after the last top-level call still waits
    orphan = _decoded("allreduce", 1, 500, 800, 1)
    later = _decoded("allreduce", 1, 4000, 4200, 4)
    draft = _decoded("draft", 0, 1000, 1900, 5)
    assert nested([orphan], [draft, later], 11) == ({id(draft): []}, [later])


def test_sites_are_read_again_for_a_new_code(tmp_path: Path) -> None:
    # GIVEN a process whose site table gains code 4 after its first batch
    d = tmp_path / "pid-6"
    d.mkdir()
    (d / "sites.json").write_text(json.dumps({"sites": SITES}))
    tail = ProcessTail(6, d)
    batch = pa.RecordBatch.from_pylist([_row(4, 0, 0, 10, 20, 1)], schema=raw_schema())
    assert [r["phase"] for r in tail.decode(batch)] == ["code4"]
    score = {"code": 4, "kind": "phase", "phase": "score", "target": "m:score"}
    (d / "sites.json").write_text(json.dumps({"sites": [*SITES, score]}))
    # WHEN the next batch uses it
    rows = tail.decode(batch)
    # THEN it is named, as merge names it
    assert [(r["kind"], r["phase"], r["target"]) for r in rows] == [("phase", "score", "m:score")]


def test_tail_reads_only_complete_batches_as_they_are_appended(tmp_path: Path) -> None:
    # GIVEN: a stream written in pieces, the second batch cut in the middle
    d = tmp_path / "pid-5"
    d.mkdir()
    (d / "sites.json").write_text(json.dumps({"sites": SITES}))
    head = raw_schema().serialize().to_pybytes()
    b1 = (
        pa.RecordBatch.from_pylist(_cycle_rows(0, 0, 0), schema=raw_schema())
        .serialize()
        .to_pybytes()
    )
    b2 = (
        pa.RecordBatch.from_pylist(_cycle_rows(1, 5000, 10), schema=raw_schema())
        .serialize()
        .to_pybytes()
    )
    path = d / "records.arrow"
    tail = ProcessTail(5, d)
    # WHEN / THEN
    path.write_bytes(head + b1 + b2[:40])
    assert [b.num_rows for b in tail.poll()] == [5]
    assert tail.poll() == []  # the cut batch waits
    with path.open("ab") as f:
        f.write(b2[40:])
    assert [b.num_rows for b in tail.poll()] == [5]
    # a rotation: the segment is closed, the next one is read from its start
    with path.open("ab") as f:
        f.write(b"\xff\xff\xff\xff\x00\x00\x00\x00")
    (d / "records.1.arrow").write_bytes(head + b1)
    assert [b.num_rows for b in tail.poll()] == [5]
    assert tail.segment is not None
    assert tail.segment.index == 1
    assert tail.skipped == 0


def _inst(
    rank: int, phase: str, end_s: float, wall_ms: float, ar_ms: float = 0.0, cycle: int = 0
) -> Instance:
    w = int(wall_ms * 1e6)
    a = int(ar_ms * 1e6)
    end = int(end_s * 1e9)
    return Instance(rank, phase, cycle, end, w, w - a, a, 0, w, False)


def test_snapshot_known_answers() -> None:
    # GIVEN: two ranks, verify 10 ms (rank 1: 12 ms, of which 1 ms allreduce) for 60 s,
    # then verify 15 ms on both for the last 30 s; a cycle a second

    st = TopState(window_s=30, baseline_s=60)
    insts, cycles = [], []
    for t in range(1, 91):
        late = t > 60
        insts.append(_inst(0, "verify", t, 15 if late else 10, cycle=t))
        insts.append(_inst(1, "verify", t, 15 if late else 12, ar_ms=1, cycle=t))
        cycles += [Cycle(0, t, int(t * 1e9), 3.0), Cycle(1, t, int(t * 1e9), 2.0)]
    st.add(insts, cycles)
    # WHEN
    s = st.snapshot(run="r")
    # THEN: the window is [60 s, 90 s]: 31 instances, 30 of them 15 ms
    r0, r1 = s.rank(0), s.rank(1)
    assert r0.phases[0].count == 31
    assert r0.phases[0].p50_ms == pytest.approx(15.0)
    assert r0.cycles == 90
    assert r0.cycles_per_s == pytest.approx(31 / 30)
    assert r0.accept_len == 3.0
    assert r1.accept_len == 2.0
    # work per cycle: rank 0 (30x15 + 10)/31, rank 1 (30x14 + 11)/31 -> rank 0 lags
    assert s.lagging_rank == 0
    assert s.lagging_excess_ms == pytest.approx((460 - 431) / 31 / 2)
    # per cycle: -0.5 ms at cycle 60 (10 against the ranks' median 10.5), +0.5 at 61-90: mean
    # +0.468, far above 2 standard errors (0.065), and 3.2% of the median rank's work: a lag
    assert s.lag_note is None
    # change: the first 60 s before the window (which starts at 60 s): instances ending at
    # 1..59 s (the one ending at 60 s is the window's), p50 of [10]*59 and [12]*59 pooled =
    # 11 ms; now 15 ms. The first instance (rank 1, 12 ms) starts at 0.988 s: the reference is 59.012 s
    # and a note says the window's own instances are not in it
    assert s.reference_s == pytest.approx(59.012)
    assert s.change_note is not None
    assert "never the window itself" in s.change_note
    (ch,) = s.changes
    assert ch.baseline_p50_ms == pytest.approx(11.0)
    assert ch.now_p50_ms == pytest.approx(15.0)
    assert ch.change_pct == pytest.approx(100 * (15 / 11 - 1))
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.99) == pytest.approx(3.97)


def test_top_short_run_never_compares_the_window_with_itself_23() -> None:
    # GIVEN: a 20 s run (shorter than the 30 s window), verify 10 ms then 14 ms
    st = TopState(window_s=30, baseline_s=120)
    st.add([_inst(0, "verify", t, 10 if t < 10 else 14, cycle=t) for t in range(1, 21)], [])
    # WHEN
    s = st.snapshot(run="r")
    # THEN: the first 120 s and the window are the same 20 s: no change (today's +0.0% came
    # from comparing the window with itself), and the note says why
    assert s.changes == ()
    assert s.change_note is not None
    assert s.change_note.startswith("no change yet: the last 30 s cover the whole run")


def test_top_names_a_lagging_rank_only_above_noise_23() -> None:
    # GIVEN: two ranks over 40 cycles; rank 1 does 0.3% more work (10.03 against 10.00 ms),
    # steady: a 0.3% difference, significant but under 1%, is no lag
    st = TopState(window_s=60, baseline_s=5)
    insts = []
    for t in range(1, 41):
        insts.append(_inst(0, "verify", t, 10.0, cycle=t))
        insts.append(_inst(1, "verify", t, 10.03, cycle=t))
    st.add(insts, [Cycle(r, t, int(t * 1e9), 2.0) for t in range(1, 41) for r in (0, 1)])
    # WHEN
    s = st.snapshot(run="r")
    # THEN
    assert s.lagging_rank is None
    assert s.lagging_excess_ms == pytest.approx(0.015)  # over the median of 10.00 and 10.03
    assert s.lag_note is not None
    assert "under 1% of the median rank's work" in s.lag_note
    out = "".join(seg.text for seg in Console(width=200).render(render(s)))
    assert "lagging rank: none (rank 1's +0.015 ms (0.1%) a cycle" in out
    # GIVEN: rank 1 is 2 ms slower (12 against 10) on alternate cycles only, 10 against 10
    # on the others, in 4 cycles: the mean excess 0.5 ms (2 ms / 2 over 2 of 4 cycles) is 5%
    # but its cycle-to-cycle spread is as large: within noise
    st = TopState(window_s=60, baseline_s=5)
    insts = []
    for t in range(1, 5):
        insts.append(_inst(0, "verify", t, 10.0, cycle=t))
        insts.append(_inst(1, "verify", t, 12.0 if t % 2 else 10.0, cycle=t))
    st.add(insts, [Cycle(r, t, int(t * 1e9), 2.0) for t in range(1, 5) for r in (0, 1)])
    s = st.snapshot(run="r")
    # d(c) = 1, 0, 1, 0 ms (against the two ranks' median): mean 0.5, 2 x sd / sqrt(4) = 0.577
    assert s.lagging_rank is None
    assert s.lag_note is not None
    assert "within noise (cycle-to-cycle excess +0.500 +- 0.577 ms)" in s.lag_note


def test_top_once_draws_the_frame(tmp_path: Path) -> None:
    # GIVEN: a finished run's raw dir, two ranks, 3 cycles each
    run = tmp_path / "run"
    for rank in (0, 1):
        rows = [r for c in range(3) for r in _cycle_rows(c, c * 5000, c * 10)]
        _write_raw(run / "raw", 100 + rank, rank, [rows])
    # WHEN
    result = CliRunner().invoke(cli, ["top", str(run), "--once", "--width", "120"])
    # THEN
    assert result.exit_code == 0, result.output
    out = result.output
    assert "finished" in out
    assert "lagging rank" in out
    # verify 2000 ns every cycle; draft 900 ns, then 3000 ns (2100 ns idle since verify)
    verify_rows = [ln for ln in out.splitlines() if "│ verify" in ln and "│   " in ln]
    assert verify_rows
    assert all("0.002" in ln for ln in verify_rows)
    assert any("draft" in ln and "0.003" in ln for ln in out.splitlines())
    # a screen recorded with rich's Console(record=True)
    from tracekit.live.top import TopView

    console = Console(record=True, width=120)
    console.print(TopView(run).frame())
    text = console.export_text()
    assert "Ranks (over the window)" in text
    assert "0.002" in text  # verify's 2000 ns wall, in ms


def test_top_without_raw_dir_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["top", str(tmp_path)])
    assert result.exit_code == 2
    assert "no `raw/` directory" in result.output


@pytest.mark.parametrize(
    ("run_json", "starts_with", "require"),
    [
        # the launcher's cycle_rule, as merge reads it
        (
            {"cycle_rule": {"targets": ["m:step"], "starts_with": None, "require": "draft"}},
            None,
            "draft",
        ),
        ({"cycle_rule": {"targets": [], "starts_with": "verify", "require": None}}, "verify", None),
        # a run launched before run.json held the rule: its cycle_source, as merge reads it
        ({"cycle_source": "targets"}, None, None),
        ({"cycle_source": "starts_with:verify"}, "verify", None),
        # no run.json yet, or a damaged rule: the default maps' rule
        (None, "draft", None),
        ({"cycle_rule": {"starts_with": 3}}, "draft", None),
    ],
)
def test_run_cycle_rule_reads_run_json_as_merge_does(
    tmp_path: Path, run_json: dict[str, Any] | None, starts_with: str | None, require: str | None
) -> None:
    path = tmp_path / "run.json"
    if run_json is not None:
        path.write_text(json.dumps(run_json))
    rule = run_cycle_rule(path)
    assert (rule["starts_with"], rule["require"]) == (starts_with, require)
    if run_json is None:
        assert rule == DEFAULT_RULE
