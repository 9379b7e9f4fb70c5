"""Acceptance as the server counts it (tracekit/store/acceptance.py, analyzers/acceptance.py):
hand-built steps whose pooled figures were computed by hand (DEFINITIONS.md "Acceptance
length"), and the delta rule's last cycle (accept_deltas.apply_deltas)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.unit.store._records import phases_and_cycles
from tracekit.analyzers.acceptance import DETAIL, pooled
from tracekit.analyzers.steady import CycleChoice
from tracekit.store.acceptance import pooled_steps

LISTS = pl.List(pl.Float64)


def step_accept(tokens: list[list[float]], drafted: list[list[float]]) -> dict[str, Any] | None:
    """One step's counts from its readings (each a row's list), by `pooled_steps`."""
    rows = [(0, t, None) for t in tokens] + [(0, None, d) for d in drafted]
    frame = pl.DataFrame(
        rows, schema={"k": pl.Int64, "acc_tokens": LISTS, "acc_drafted": LISTS}, orient="row"
    )
    got = pooled_steps(frame, ["k"]).drop("k").to_dicts()
    return got[0] if got else None


def test_step_pools_over_the_requests_that_drafted() -> None:
    # GIVEN a step of 3 requests drafting 4, 4 and 0 tokens, of which the first accepted 2
    # (it emits 3 tokens), the second 0 (1 token) and the third drafted none (1 token)
    s = step_accept(tokens=[[3, 1, 1]], drafted=[[4, 4, 0]])
    # THEN vLLM's counts: 2 drafts, 8 draft tokens, 2 accepted: 1 + 2 / 2 = 2.0 tokens a
    # drafting request (not the mean of the per-request lengths, 5 / 3 = 1.67), acceptance
    # rate 2 / 8 = 0.25, position 0 and 1 accepted once (the first request)
    assert s is not None
    assert s == {
        "drafts": 2,
        "drafted_tokens": 8,
        "accepted_tokens": 2.0,
        "requests": 3,
        "accepted_per_pos": [1, 1, 0, 0],
        "accept_len": 2.0,
    }


def test_step_without_drafts_carries_none_and_without_drafted_rule_each_request_drafted() -> None:
    # a step where no request drafted (n-gram found no match): no acceptance
    s = step_accept(tokens=[[1, 1]], drafted=[[]])
    assert s is not None
    assert (s["drafts"], s["accepted_tokens"], s["requests"], s["accept_len"]) == (0, 0.0, 2, None)
    # no drafted rule in the map: each request that emitted a token counts as one that drafted
    # (a discarded request, 0 tokens, does not): 1 + (2 + 0) / 2 = 2.0
    s = step_accept(tokens=[[3, 1, 0]], drafted=[])
    assert s is not None
    assert (s["drafts"], s["accepted_tokens"], s["requests"], s["accept_len"]) == (2, 2.0, 2, 2.0)
    assert s["drafted_tokens"] is None
    assert s["accepted_per_pos"] == [1, 1]
    # a fraction of a token accepted (a mean read as the count): no per-position counts
    s = step_accept(tokens=[[2.5]], drafted=[[3]])
    assert s is not None
    assert (s["accepted_tokens"], s["accepted_per_pos"]) == (1.5, None)
    assert step_accept([], []) is None


def _steps(rows: list[tuple[Any, ...]]) -> pl.DataFrame:
    cols = ["cycle", "accept_len", *DETAIL]
    return pl.DataFrame(
        [dict(zip(cols, r, strict=True)) for r in rows],
        schema={"cycle": pl.Int64, "accept_len": pl.Float64, "drafts": pl.Int64,
                "drafted_tokens": pl.Int64, "accepted_tokens": pl.Float64,
                "requests": pl.Int64, "accepted_per_pos": pl.List(pl.Int64)},
    )  # fmt: skip


def test_pooled_over_cycles_is_vllms_mean_not_the_mean_of_cycles() -> None:
    # GIVEN three steps: the one above (2 drafts, 2 accepted of 8); one request drafting 4
    # and accepting all 4; two requests that drafted nothing
    a = step_accept([[3, 1, 1]], [[4, 4, 0]])
    b = step_accept([[5]], [[4]])
    c = step_accept([[1, 1]], [[]])
    assert a is not None
    assert b is not None
    assert c is not None
    rows = [(i, s["accept_len"], *(s[k] for k in DETAIL)) for i, s in enumerate((a, b, c))]
    got = pooled(_steps(rows))
    # THEN 1 + (2 + 4) / (2 + 1) = 3.0 (the mean of the cycles' 2.0 and 5.0 would be 3.5),
    # rate 6 / 12 = 0.5, positions [2, 2, 1, 1] / 3 drafts, requests a step (3 + 1 + 2) / 3
    assert got is not None
    assert got["accept_len_mean"] == pytest.approx(3.0)
    assert got["drafts"] == 3
    assert got["drafted_tokens"] == 12
    assert got["accept_rate"] == pytest.approx(0.5)
    assert got["accept_rate_per_pos"] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert got["requests_per_step"] == pytest.approx(2.0)


def test_pooled_counts_a_cycle_without_requests_as_one_drafting_request() -> None:
    # a cycle of one sequence (accept_len only, 4 tokens) next to a batched one (2 drafts, 2
    # accepted): 1 + (3 + 2) / (1 + 2) = 2.667
    rows = [(0, 4.0, None, None, None, None, None), (1, 2.0, 2, 8, 2.0, 3, [1, 1, 0, 0])]
    got = pooled(_steps(rows))
    assert got is not None
    assert got["accept_len_mean"] == pytest.approx(1 + 5 / 3)
    assert pooled(_steps([(0, None, 0, 0, 0.0, 2, [])])) is None  # nothing drafted


def _row(i: int, phase: str, length: float | None, start: int, **kw: Any) -> dict[str, Any]:
    return {
        "kind": "phase", "phase": phase, "cycle": i, "depth": 0, "parent": None, "pid": 1,
        "tid": 1, "seq": start, "start_ns": start, "end_ns": start + 5, "accept_len": length,
        "gpu_start_ns": None, "gpu_end_ns": None, "graph_replays": 0, "ok": True, "target": "",
        **kw,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("lengths", "want"),
    [
        # a generate of 2 cycles from an 8-token prompt: 8 -> 11 -> 12
        ([(8, 11), (11, 12)], [3.0, 1.0]),
        # 3 cycles: 8 -> 9 -> 14 -> 16
        ([(8, 9), (9, 14), (14, 16)], [1.0, 5.0, 2.0]),
    ],
)
def test_delta_before_and_after_gives_every_cycle_its_tokens(
    lengths: list[tuple[int, int]], want: list[float]
) -> None:
    # GIVEN the length before each cycle (get_candidates' input_ids) and after it
    # (update_candidate_strategy's input_ids), two generates in a row
    rows = []
    t = 0
    for c, (before, after) in enumerate(lengths + lengths):
        rows.append(_row(c, "draft", float(before), t))
        rows.append(_row(c, "verify", None, t + 10))
        rows.append(_row(c, "accept", float(after), t + 20))
        t += 100
    cfg = {"starts_with": "draft", "delta_phases": {"draft": "before", "accept": "after"}}
    _phases, cycles = phases_and_cycles(rows, cfg)
    # THEN every cycle has its tokens, the last of each generate too
    assert [c["accept_len"] for c in cycles] == want + want
    # AND with the "before" length alone (the older rule) the last cycle of each has none
    for r in rows:
        r["accept_len"] = {"draft": r["accept_len"], "accept": None}.get(r["phase"])
    rows = [r for r in rows if r["phase"] != "accept"]
    for c, (before, _after) in enumerate(lengths + lengths):
        rows[2 * c]["accept_len"] = float(before)
    _phases, cycles = phases_and_cycles(
        rows, {"starts_with": "draft", "delta_phases": {"draft": "arg"}}
    )
    got = [c["accept_len"] for c in cycles]
    assert got == [*want[:-1], None, *want[:-1], None]


MAP = """
[[phase]]
name = "verify"
targets = ["m:W.verify"]
accept = { from = "arg:so", value = "len(spec[*])", kind = "drafted" }
[[phase]]
name = "draft"
targets = ["m:W.draft"]
[[phase]]
name = "accept"
targets = ["m:parse"]
accept = { from = "return", value = "len([*])" }
[cycle]
starts_with = "verify"
require = "draft"
"""


def test_merge_writes_the_steps_counts_and_summary_pools_them_once_per_cycle(
    tmp_path: Path,
) -> None:
    from tests.unit.store.test_store_merge import rec, write_map, write_proc
    from tracekit.analyzers.acceptance import step_counts
    from tracekit.store.merge import merge
    from tracekit.store.raw.accepts import ACCEPTS_FILE, accepts_lines
    from tracekit.store.reader import read_table

    # GIVEN two TP ranks that recorded the same two steps (3 rows a step: verify, accept,
    # draft), with the steps' readings in accepts.jsonl: step 0 drafted 4/4/0 and emitted
    # 3/1/1, step 1 drafted 4 and emitted 5 (row seq = its index)
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP)
    for rank in (0, 1):
        rows = []
        for c in range(2):
            t = 100 * c
            rows += [
                rec("phase", c, "verify", t + 1, t + 10),
                rec("phase", c, "accept", t + 11, t + 12),
                rec("phase", c, "draft", t + 13, t + 20),
            ]
        write_proc(raw, 10 + rank, rows, rank=rank, world=2)
        (raw / f"pid-{10 + rank}" / ACCEPTS_FILE).write_bytes(
            accepts_lines([(0, "d", [4, 4, 0]), (1, "t", [3, 1, 1]), (3, "d", [4]), (4, "t", [5])])
        )
    # WHEN merged
    merge(tmp_path)
    # THEN each rank's cycles carry the steps' counts
    cyc = read_table(tmp_path, "cycles").filter(pl.col("rank") == 0).sort("cycle")
    assert cyc["drafts"].to_list() == [2, 1]
    assert cyc["accepted_tokens"].to_list() == [2.0, 4.0]
    assert cyc["accept_len"].to_list() == [2.0, 5.0]
    assert cyc["accepted_per_pos"].to_list() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    # AND the pooled figures count each cycle once, not once a rank: 1 + 6 / 3
    steps = step_counts(tmp_path)
    assert steps is not None
    got = pooled(steps)
    assert got is not None
    assert got["accept_len_mean"] == pytest.approx(3.0)
    assert got["drafts"] == 3
    # AND the summary says so, in JSON and in its text line
    from tracekit.analyzers.summary import summarize
    from tracekit.cli.summary import accept_line

    sm = summarize(tmp_path, choice=CycleChoice("all"))
    assert sm.accept_len_mean == pytest.approx(3.0)
    assert sm.accept is not None
    assert sm.to_json()["accept"]["accept_rate_per_pos"] == pytest.approx(
        [2 / 3, 2 / 3, 1 / 3, 1 / 3]
    )
    assert accept_line(sm.accept) == (
        "Acceptance pooled over 3 drafting request(s) in 2 step(s): 1 + 6 accepted / 3 drafts; "
        "rate 0.500 of 12 drafted; per position 0.667 0.667 0.333 0.333; 2.00 requests a step."
    )


def test_runs_without_readings_read_as_before(tmp_path: Path) -> None:
    from tracekit.analyzers.acceptance import step_counts
    from tracekit.store.raw.accepts import ACCEPTS_FILE, read_accepts

    assert read_accepts(tmp_path) == {}  # no file: no readings
    (tmp_path / ACCEPTS_FILE).write_text(
        '{"k":3,"t":[3,1]}\n{"k":-4,"d":[2]}\nnot json\n{"k":5,"t":[1,'
    )
    # a cut last line (a killed process) and a damaged one are skipped
    assert read_accepts(tmp_path) == {("phase", 3): {"t": [3.0, 1.0]}, ("cycle", 4): {"d": [2.0]}}
    assert step_counts(tmp_path) is None  # no store: no per-request counts


def _one_by_one(tokens: list[list[float]], drafted: list[list[float]]) -> dict[str, Any] | None:
    """The step's counts request by request, as DEFINITIONS.md "Acceptance length" says them
    (the oracle of the columnar `pooled_steps`)."""
    toks = [t for lst in tokens for t in lst]

    def per_pos(acc: list[float], width: int) -> list[int] | None:
        if any(a != int(a) for a in acc):
            return None
        return [sum(1 for a in acc if a > p) for p in range(width)]

    if drafted:
        dl = [d for lst in drafted for d in lst]
        acc = [max(t - 1.0, 0.0) for t in toks]
        drafts, requests = sum(1 for d in dl if d > 0), sum(1 for t in toks if t >= 1)
        out = {"drafts": drafts, "drafted_tokens": int(sum(dl)), "accepted_tokens": sum(acc)}
        out |= {"requests": requests if tokens else None}
        out |= {"accepted_per_pos": per_pos(acc, int(max(dl + acc, default=0)))}
    elif tokens:
        acc = [t - 1.0 for t in toks if t >= 1]
        out = {"drafts": len(acc), "drafted_tokens": None, "accepted_tokens": float(sum(acc))}
        out |= {"requests": len(acc), "accepted_per_pos": per_pos(acc, int(max(acc, default=0)))}
    else:
        return None
    out["accept_len"] = 1.0 + out["accepted_tokens"] / out["drafts"] if out["drafts"] else None
    return out


def test_pooled_steps_agree_with_the_definition_request_by_request() -> None:
    # GIVEN 300 random steps: 0-3 readings of each rule, 0-4 requests a reading, tokens
    # 0-6 (a few fractional), draft tokens 0-5
    rng = random.Random(26)

    def reading() -> list[float]:
        return [
            rng.choice([float(rng.randint(0, 6)), rng.randint(0, 12) / 2])
            for _ in range(rng.randint(0, 4))
        ]

    for _ in range(300):
        tokens = [reading() for _ in range(rng.randint(0, 3))]
        drafted = [
            [float(rng.randint(0, 5)) for _ in r]
            for r in (reading() for _ in range(rng.randint(0, 3)))
        ]
        # THEN the columns equal the request-by-request counts
        want = _one_by_one(tokens, drafted)
        got = step_accept(tokens, drafted)
        assert got == want, (tokens, drafted)
