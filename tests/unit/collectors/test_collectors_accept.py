"""Accept rules of phase maps (`accept = {...}`): parsing, evaluation, the recorder, merge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.store._records import phases_and_cycles
from tracekit.collectors import accept as acc
from tracekit.collectors import phasemap as pm
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.wrappers import make_wrapper
from tracekit.errors import CollectorError
from tracekit.store.raw.files import RECORDS_FILE, SITES_FILE
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import decoded


def decode(table: Any, sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded records, one dict a row."""
    rows: list[dict[str, Any]] = decoded(table, sites).to_dicts()
    return rows


HEAD = "[[phase]]\nname = 'draft'\ntargets = ['m:f']\n"


def test_parse_value_grammar() -> None:
    assert acc.parse_value("shape[-1]", "w") == (("attr", "shape"), ("index", -1))
    assert acc.parse_value("out.tokens[0]", "w") == (
        ("attr", "out"),
        ("attr", "tokens"),
        ("index", 0),
    )
    assert acc.parse_value("len(ids[*])", "w") == (("attr", "ids"), ("each", None), ("len", None))
    assert acc.parse_value("", "w") == ()
    assert acc.parse_value("len()", "w") == (("len", None),)


@pytest.mark.parametrize(
    ("accept", "needle"),
    [
        ('{ from = "arg:x", value = "a b" }', 'value = "a b"'),
        ('{ from = "arg:x", value = "__import__(\'os\')" }', "is not a path"),
        ('{ from = "args" }', 'use "return" or "arg:NAME"'),
        ('{ from = "return", kind = "sum" }', 'use "count"'),
        ('{ from = "return", what = 1 }', "unknown key(s) ['what']"),
        ('[{ kind = "count" }, { kind = "delta" }]', "must share `kind`"),
        ('{ from = "arg:x", kind = "count", state = "after" }', 'for kind = "delta" only'),
        ('{ from = "arg:x", kind = "delta", state = "later" }', 'use "before"'),
        ('"accept_len"', "must be a table"),
    ],
)
def test_bad_accept_rules_name_file_and_key(accept: str, needle: str) -> None:
    with pytest.raises(CollectorError) as err:
        pm.parse(HEAD + f"accept = {accept}\n", source="maps/hf.toml")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("maps/hf.toml: [[phase]] #1 (draft) key `accept`")
    assert needle in msg


def test_cycle_accept_needs_cycle_targets() -> None:
    text = HEAD + "[cycle]\nstarts_with = 'draft'\naccept = { from = 'return' }\n"
    with pytest.raises(CollectorError, match="needs cycle `targets`"):
        pm.parse(text, source="x.toml")


def test_rule_binds_named_argument_by_position_and_default() -> None:
    rules = (
        pm.parse(
            HEAD + 'accept = [{ from = "arg:missing" }, { from = "arg:ids", value = "len()" }]\n'
        )
        .phases[0]
        .accept
    )

    def f(self: object, ids: list[int], extra: int = 0) -> None: ...

    b = acc.bind_accept(rules, f)
    assert b is not None
    assert b.rule.arg == "ids"
    assert b.position == 1
    assert b.read(None, (object(), [1, 2, 3]), {}) == 3
    assert b.read(None, (object(),), {"ids": [1]}) == 1

    def g(x: int) -> None: ...

    assert acc.bind_accept(rules, g) is None


def test_evaluate_each_len_and_dict_keys() -> None:
    class Out:
        def __init__(self) -> None:
            self.sampled = [[1, 2], [3], [4, 5, 6]]

    assert acc.evaluate(acc.parse_value("len(sampled[*])", "w"), Out()) == [2, 1, 3]
    assert acc.evaluate(acc.parse_value("a.b[1]", "w"), {"a": {"b": [7, 8]}}) == 8
    with pytest.raises(TypeError, match=r"`\[\*\]` needs a list"):
        acc.evaluate(acc.parse_value("[*]", "w"), 3)
    # on a mapping, `[*]` is each value (vLLM's request id -> draft token ids)
    spec = {"scheduled_spec_decode_tokens": {"r1": [5, 6], "r2": [7]}}
    assert acc.evaluate(acc.parse_value("len(scheduled_spec_decode_tokens[*])", "w"), spec) == [
        2,
        1,
    ]


def _records(rec: Recorder) -> list[dict[str, Any]]:
    table, _complete, err = read_stream(rec.dir / RECORDS_FILE)
    assert err is None
    assert table is not None
    sites = json.loads((rec.dir / SITES_FILE).read_text())["sites"]
    return decode(table, sites)


def test_recorder_reads_argument_at_exit_and_merge_makes_deltas(tmp_path: Path) -> None:
    # GIVEN an HF-like loop: get_candidates(ids) at each cycle's start, ids grow by the
    # tokens the cycle emitted (3, 1, 2), then a new sequence (shorter ids) of 2 cycles (4, ?)
    pmap = pm.parse(
        HEAD.replace("'m:f'", "'m:get_candidates'")
        + 'accept = { from = "arg:input_ids", value = "len()", kind = "delta" }\n'
        + "[cycle]\nstarts_with = 'draft'\n"
    )
    (site,) = pmap.sites()["m"]
    rec = Recorder(RecorderConfig(raw_dir=tmp_path))

    def get_candidates(input_ids: list[int]) -> str:
        return "candidates"

    gc = make_wrapper(get_candidates, site, rec)
    for n in (5, 8, 9, 11, 4, 8):
        assert gc(list(range(n))) == "candidates"  # return value unchanged
    rec.close()
    rows = [dict(r, pid=1) for r in _records(rec)]
    assert [r["accept_len"] for r in rows] == [5.0, 8.0, 9.0, 11.0, 4.0, 8.0]  # raw lengths
    # WHEN merge applies the delta rule (from an argument: growth to the next call)
    cfg = {"starts_with": "draft", "delta_phases": {"draft": "arg"}}
    phases, cycles = phases_and_cycles(rows, cfg)
    # THEN tokens per cycle; the growth into a new sequence (11 -> 4) and the last call: none
    assert [c["accept_len"] for c in cycles] == [3.0, 1.0, 2.0, None, 4.0, None]
    assert [p["accept_len"] for p in phases] == [3.0, 1.0, 2.0, None, 4.0, None]


def test_delta_from_return_value_is_growth_from_previous_call() -> None:
    rows = [
        {"kind": "phase", "phase": "verify", "cycle": i, "depth": 0, "parent": None, "pid": 1,
         "tid": 1, "seq": i + 1, "start_ns": 10 * i, "end_ns": 10 * i + 5, "accept_len": v,
         "gpu_start_ns": None, "gpu_end_ns": None, "graph_replays": 0, "ok": True, "target": ""}
        for i, v in enumerate([10.0, 12.0, 15.0])
    ]  # fmt: skip
    cfg = {"starts_with": "verify", "delta_phases": {"verify": "return"}}
    _phases, cycles = phases_and_cycles(rows, cfg)
    assert [c["accept_len"] for c in cycles] == [None, 2.0, 3.0]


def test_failing_rule_is_disabled_and_said_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = pm.parse(HEAD + 'accept = { from = "return", value = "tokens" }\n').phases[0].accept
    site = Site(Target("m", "f"), phase="draft", accept=rules)
    rec = Recorder(RecorderConfig(raw_dir=tmp_path))
    w = make_wrapper(lambda x: x, site, rec)
    assert [w(i) for i in range(3)] == [0, 1, 2]  # the program goes on, results unchanged
    rec.close()
    err = capsys.readouterr().err
    assert err.count("accept rule") == 1
    assert "AttributeError" in err
    assert "m:f" in err
    assert [r["accept_len"] for r in _records(rec)] == [None, None, None]
    assert rec.active  # only the rule is off, not the recorder
    # and process.json says so, so merge can warn once, naming the rule, target and rank
    from tracekit.store.merge_checks import accept_failures
    from tracekit.store.raw.processes import read_processes

    procs = read_processes(tmp_path)
    (failed,) = procs[0].info["accept_failed"]
    assert failed == {
        "rule": "from=return value=tokens kind=count",
        "where": "<phase map>: [[phase]] #1 (draft) key `accept`",
        "target": "m:f",
        "why": "AttributeError: 'int' object has no attribute 'tokens'",
    }
    said = accept_failures(procs)
    assert said is not None
    assert "\n" not in said
    assert said.startswith("accept rule(s) switched off after a failure: ")
    assert "from=return value=tokens kind=count (<phase map>: [[phase]] #1 (draft) key " in said
    assert "on m:f on pid " in said  # no rank outside a launch
    assert accept_failures([]) is None


def test_count_rule_mean_over_list_on_return(tmp_path: Path) -> None:
    rules = (
        pm.parse(HEAD + 'accept = { from = "return", value = "len(sampled[*])" }\n')
        .phases[0]
        .accept
    )
    site = Site(Target("m", "f"), phase="draft", accept=rules)
    rec = Recorder(RecorderConfig(raw_dir=tmp_path))

    class Out:
        def __init__(self, *lens: int) -> None:
            self.sampled = [[0] * n for n in lens]

    w = make_wrapper(lambda *lens: Out(*lens), site, rec)
    w(1, 3)
    w(4, 4, 1)
    rec.close()
    assert [r["accept_len"] for r in _records(rec)] == [2.0, 3.0]


class FakeProfile:
    """A profiler window that notes when its ranges open and close."""

    def __init__(self) -> None:
        self.active = True
        self.events: list[tuple[str, str, int]] = []

    marks_cycle_at_start = True

    def cycle_start(self, cycle: int, *, target: bool = False) -> None:
        return None

    def phase_start(self, phase: str | None, cycle: int) -> bool:
        return False

    def take_cycle_range(self, cycle: int) -> None:
        return None

    def cycle_end(self, cycle: int) -> None:
        pass

    def range(self, name: str) -> str:
        import time

        self.events.append(("open", name, time.time_ns()))
        return name

    def range_exit(self, rf: str) -> None:
        import time

        self.events.append(("close", rf, time.time_ns()))

    def close(self) -> None:
        pass


def test_full_mode_ranges_lie_inside_their_records(tmp_path: Path) -> None:
    # GIVEN a recorder with a profiler window and a cycle target that is also a phase
    rec = Recorder(RecorderConfig(raw_dir=tmp_path, mode="full"))
    prof = FakeProfile()
    rec.profile = prof  # type: ignore[assignment]
    inner = make_wrapper(lambda: None, Site(Target("m", "verify"), phase="verify"), rec)

    def body() -> None:
        inner()

    step = make_wrapper(body, Site(Target("m", "step"), phase="step", cycle=True), rec)
    step()
    step()
    rec.close()
    rows = _records(rec)
    # THEN every range opens at or after its record's start and closes at or before its end
    opened = [(n, t) for k, n, t in prof.events if k == "open"]
    closed = [(n, t) for k, n, t in prof.events if k == "close"]
    assert len(opened) == len(closed) == 6  # 2 x (cycle, step, verify)
    for r in rows:
        name = "tracekit/cycle" if r["kind"] == "cycle" else f"tracekit/{r['phase']}"
        o = [t for n, t in opened if n == name and r["start_ns"] <= t <= r["end_ns"]]
        c = [t for n, t in closed if n == name and r["start_ns"] <= t <= r["end_ns"]]
        assert o, (r, prof.events)
        assert c, (r, prof.events)


def test_builtin_vllm_map_reads_the_rejection_samplers_parsed_output() -> None:
    """`RejectionSampler.parse_output` returns (valid tokens a request, logprobs); the accept
    phase reads each request's count (1 + accepted): here 3 and 1, mean 2.0. Checked against
    vLLM's own counters on the CPU build in tests/servers/test_vllm.py."""
    accept = next(p for p in pm.load_builtin("vllm").phases if p.name == "accept")
    assert [str(t) for t in accept.targets] == [
        "vllm.v1.sample.rejection_sampler:RejectionSampler.parse_output"
    ]

    def parse_output(  # vLLM 0.10 .. 0.33, a staticmethod
        output_token_ids: object, vocab_size: int, discard_req_indices: object = (),
        logprobs_tensors: object = None,
    ) -> tuple[list[list[int]], object]: ...  # fmt: skip

    bound = acc.bind_accept(accept.accept, parse_output)
    assert bound is not None
    assert bound.read(([[5, 6, 7], [8]], None), (), {}) == [3, 1]
    # verify reads the drafted counts, output the async paths' tokens, the others nothing (no
    # rule to switch off, no message); tests/unit/collectors/test_collectors_vllm_accept.py
    reading = {p.name: p.accept[0].kind for p in pm.load_builtin("vllm").phases if p.accept}
    assert reading == {"verify": "drafted", "accept": "count", "output": "count"}
