"""What merge and launch say from process.json's `compiled` report (collectors/compiled.py)."""

from __future__ import annotations

from tracekit.store.merge_checks import compiled_boundaries, compiled_unseen, hides_allreduce

REC = {"target": "m:Model.forward", "phase": "decode", "traced": 2, "compiled": "m:Model.__call__"}
AR = {"target": "m:all_reduce", "phase": "allreduce", "traced": 1, "compiled": "m:Net.__call__"}


def test_unattached_targets_are_one_warning_with_counts() -> None:
    infos = [
        {"compiled": {"unattached": [{"target": "m:step", "phase": "draft", "traced": 2}]}},
        {"compiled": {"unattached": [{"target": "m:step", "phase": "draft", "traced": 3}]}},
        {"pid": 3},  # a process without the report
    ]
    msg = compiled_unseen(infos)
    assert msg is not None
    assert "m:step (phase draft, traced 5 time(s) in 2 process(es))" in msg
    assert "map the function that calls the compiled code instead" in msg
    assert compiled_unseen([{"compiled": {"unattached": []}}]) is None


def test_boundaries_and_inner_targets_are_listed_once() -> None:
    infos = [{"compiled": {"boundaries": [REC], "inner": [AR]}}] * 2
    lines = compiled_boundaries(infos)
    assert lines == [
        "m:Model.forward (phase decode) recorded at the compiled boundary: each call of the "
        "torch.compile'd m:Model.__call__ is one decode instance",
        "m:all_reduce (phase allreduce) runs inside the torch.compile'd m:Net.__call__: its "
        "calls are not recorded one by one (light mode cannot measure them; full mode sees "
        "their work)",
    ]


def test_hides_allreduce() -> None:
    assert hides_allreduce({"compiled": {"inner": [AR]}})
    assert not hides_allreduce({"compiled": {"inner": [REC]}})
    assert not hides_allreduce({"compiled": "bad"})
    assert not hides_allreduce({})
