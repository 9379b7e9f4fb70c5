from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.collectors import phasemap as pm
from tracekit.collectors.accept import read_attr_path
from tracekit.errors import CollectorError

MAP = """
[adapter]
name = "mine"
package = "mypkg"

[[phase]]
name = "draft"
targets = ["mypkg.spec:Worker.draft"]

[[phase]]
name = "verify"
targets = ["mypkg.spec:Worker.verify", "mypkg.old:verify"]
accept_len = "out.accept_len"

[cycle]
targets = ["mypkg.spec:Worker.step"]
accept_len = "accept_len"
require = "draft"
"""


def test_parse_map_and_sites() -> None:
    # GIVEN / WHEN
    m = pm.parse(MAP, source="mine.toml")
    # THEN
    assert m.name == "mine"
    assert m.package == "mypkg"
    assert m.phase_names == ["draft", "verify"]
    assert m.cycle.source == "cycle_target"
    assert m.cycle.require == "draft"
    assert [str(t) for t in m.targets()] == [
        "mypkg.spec:Worker.draft",
        "mypkg.spec:Worker.verify",
        "mypkg.old:verify",
        "mypkg.spec:Worker.step",
    ]
    sites = m.sites()
    assert sorted(sites) == ["mypkg.old", "mypkg.spec"]
    step = next(s for s in sites["mypkg.spec"] if s.target.qualname == "Worker.step")
    assert step.cycle
    assert step.phase is None
    assert step.cycle_accept_len == "accept_len"
    verify = next(s for s in sites["mypkg.spec"] if s.target.qualname == "Worker.verify")
    assert verify.phase == "verify"
    assert verify.accept_len == "out.accept_len"
    assert not verify.cycle


def test_target_that_is_phase_and_cycle_gets_one_site() -> None:
    m = pm.parse(
        """
[[phase]]
name = "decode"
targets = ["m:D.step"]
[cycle]
targets = ["m:D.step"]
"""
    )
    (site,) = m.sites()["m"]
    assert site.phase == "decode"
    assert site.cycle


def test_default_cycle_starts_with_draft() -> None:
    m = pm.parse('[[phase]]\nname = "draft"\ntargets = ["m:f"]\n')
    assert m.cycle.starts_with == "draft"
    assert m.sites()["m"][0].starts_cycle


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[[phase]]\nname = 'x'\ntargets = ['no_colon']\n", "not of the form"),
        ("[[phase]]\nname = 'x'\ntargets = []\n", "`targets` is empty"),
        ("[[phase]]\nname = 'x'\ntargets = ['m:f']\nbogus = 1\n", "unknown key"),
        (
            "[[phase]]\nname = 'x'\ntargets = ['m:f']\n[[phase]]\nname = 'x'\ntargets = ['m:g']\n",
            "appears twice",
        ),
        (
            "[[phase]]\nname = 'x'\ntargets = ['m:f']\n[cycle]\nstarts_with = 'y'\n",
            "is not a phase",
        ),
        (
            "[[phase]]\nname = 'x'\ntargets = ['m:f']\n[cycle]\nstarts_with = 'x'\ntargets = ['m:g']\n",
            "keep one",
        ),
        ("[phase\n", "not valid TOML"),
        ("[adapter]\nname = 'a'\n", "no [[phase]]"),
        ("[[phase]]\nname = 'x'\ntargets = ['m:f']\naccept_len = 'a b'\n", "attribute path"),
    ],
)
def test_bad_maps_name_the_file_and_the_fix(text: str, needle: str) -> None:
    with pytest.raises(CollectorError, match=r"bad\.toml") as info:
        pm.parse(text, source="bad.toml")
    assert needle in str(info.value)


def test_missing_file_and_unknown_adapter(tmp_path: Path) -> None:
    with pytest.raises(CollectorError, match="cannot read the phase map"):
        pm.load(tmp_path / "nope.toml")
    with pytest.raises(
        CollectorError, match="unknown adapter `nope`; built-in adapters are demo, sglang, vllm"
    ):
        pm.builtin_path("nope")


@pytest.mark.parametrize("name", ["demo", "sglang", "vllm"])
def test_builtin_maps_load(name: str) -> None:
    m = pm.load_builtin(name)
    assert m.name == name
    assert {"draft", "verify", "allreduce"} <= set(m.phase_names)


def test_demo_map_matches_the_contract() -> None:
    m = pm.load_builtin("demo")
    targets = {p.name: [str(t) for t in p.targets] for p in m.phases}
    assert targets["draft"] == ["tracekit.demo.speculative:SpeculativeDecoder.draft"]
    assert targets["verify"] == ["tracekit.demo.speculative:SpeculativeDecoder.verify"]
    assert targets["draft_extend"] == ["tracekit.demo.speculative:SpeculativeDecoder.draft_extend"]
    assert targets["allreduce"] == ["tracekit.demo.parallel:TensorParallelGroup.all_reduce"]
    assert targets["decode"] == ["tracekit.demo.speculative:BaselineDecoder.step"]
    assert [str(t) for t in m.cycle.targets] == [
        "tracekit.demo.speculative:SpeculativeDecoder.step",
        "tracekit.demo.speculative:BaselineDecoder.step",
    ]


def test_read_attr_path() -> None:
    class Out:
        accept_len = 3
        items = ({"k": 5},)

    assert read_attr_path(Out(), "accept_len") == 3
    assert read_attr_path(Out(), "items.0.k") == 5
    with pytest.raises(AttributeError):
        read_attr_path(Out(), "missing")
