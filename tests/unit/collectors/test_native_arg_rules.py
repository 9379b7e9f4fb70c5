"""Acceptance rules that read an argument, read in C on the native path (readings.arg_plan):
a plain number without Python, any other value through `_accept_value`, a failure through
`_accept`, which says why and switches the rule off on both paths. The same rows, per-request
numbers and failure notes as the Python path."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collectors.test_native_hotpath import _rows
from tracekit.collectors.phasemap import parse
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import native
from tracekit.collectors.wrappers import install

MAP = """
[[phase]]
name = "draft"
targets = ["tk_plan_prog:Drafter.propose"]
accept = { from = "arg:ids", value = "n" }

[[phase]]
name = "accept"
targets = ["tk_plan_prog:update"]
accept = { from = "arg:ids", value = "n", kind = "delta", state = "after" }

[cycle]
starts_with = "draft"
"""

# the draft's `n` each cycle: numbers, a list (a "count" rule's per-request numbers), then a
# bool (no number: the rule is switched off) and a number it no longer reads
DRAFT_N: list[Any] = [3, 4.0, 7, 8.5, [1, 2], True, 5]
# the accept's: the 4th call passes no `ids` (its default None has no `n`: switched off)
ACCEPT_N: list[int | None] = [10, 20, 30, None, 40, 50, 60]


class Ids:
    def __init__(self, n: object) -> None:
        self.n = n


def _run(tmp_path: Path, name: str, use_native: bool) -> tuple[Recorder, dict[str, int]]:
    mod = types.ModuleType("tk_plan_prog")

    class Drafter:
        def propose(self, ids: Ids) -> int:
            return 0

    def update(ids: Ids | None = None) -> None:
        return None

    mod.Drafter, mod.update = Drafter, update  # type: ignore[attr-defined]
    rec = Recorder(
        RecorderConfig(raw_dir=tmp_path / name / "raw", flush_records=10**6, native=use_native)
    )
    calls = {"_accept": 0, "_accept_value": 0}
    for method in calls:
        original = getattr(rec, method)

        def counted(*a: Any, _m: str = method, _f: Any = original, **k: Any) -> float:
            calls[_m] += 1
            return float(_f(*a, **k))

        setattr(rec, method, counted)
    for site in parse(MAP).sites()["tk_plan_prog"]:
        install(mod, site, rec)
    d = mod.Drafter()
    for n, m in zip(DRAFT_N, ACCEPT_N, strict=True):
        d.propose(Ids(n)) if n != 7 else d.propose(ids=Ids(n))  # by keyword once
        mod.update() if m is None else mod.update(Ids(m))
    return rec, calls


def _acceptance(rec: Recorder, phase: str) -> list[float | None]:
    code = next(c for c, info in rec._info.items() if info[5].phase == phase)
    return [r[9] for r in _rows(rec) if r[0] == rec._codes[code]]


@pytest.mark.skipif(native.NATIVE is None, reason=native.WHY_NOT)
def test_argument_rules_read_in_c_write_the_python_paths_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN the program on a native and on a Python recorder
    nat, nat_calls = _run(tmp_path, "native", True)
    nat_err = capsys.readouterr().err
    py, py_calls = _run(tmp_path, "python", False)
    py_err = capsys.readouterr().err
    # THEN the draft rows carry the numbers, the list's mean, then nothing once switched off;
    # the accept rows the lengths until the call without its argument
    assert _acceptance(nat, "draft") == [3.0, 4.0, 7.0, 8.5, 1.5, None, None]
    assert _acceptance(nat, "accept") == [10.0, 20.0, 30.0, None, None, None, None]
    # and the same rows, per-request numbers and failure notes as the Python path
    assert _rows(nat) == _rows(py)
    assert (
        [k[1:] for k in nat._accept_detail]
        == [k[1:] for k in py._accept_detail]
        == [("t", [1.0, 2.0])]
    )
    assert [(f["rule"], f["why"]) for f in nat.accept_failed] == [
        (f["rule"], f["why"]) for f in py.accept_failed
    ]
    assert len(nat.accept_failed) == 2
    assert nat_err.count("acceptance is not read from this target") == 2
    assert nat_err == py_err
    # and on the native path Python read only what C does not: each site's first two calls
    # (the generic exit), the draft's list and bool (`_accept_value`), the accept's call
    # without its argument, and the calls after each rule was switched off
    assert py_calls == {"_accept": 14, "_accept_value": 0}
    assert nat_calls == {"_accept": 2 + 1 + 2 + 1 + 3, "_accept_value": 2}
    nat.close()
    py.close()
