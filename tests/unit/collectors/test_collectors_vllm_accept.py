"""The built-in vllm map's acceptance on recorded call shapes (vLLM 0.32's signatures and
return values), with known answers: model runner V1 without async scheduling (what the CPU build
runs; tests/servers checks it against vLLM's counters), V1 with async scheduling and model
runner V2, where `RejectionSampler.parse_output` is not on the step's path and the step's output
is fetched by `get_output`, on another thread and a step late (the CPU build forces async
scheduling off, so these two are checked here only).

Five steps of four requests a, b, c, d (3 draft tokens a drafting request):

| step | drafted (request: tokens) | emitted tokens a, b, c, d | accepted |
|------|---------------------------|---------------------------|----------|
| 0    | none (prefill)            | 1, 1, 1, 1                | -        |
| 1    | a 3, b 3, d 3             | 3, 1, 1, 4                | 2, 0, 3  |
| 2    | a 3                       | 2, 1, 1, 1                | 1        |
| 3    | none (no n-gram match)    | 1, 1, 1, 1                | -        |
| 4    | b 3, c 3                  | 1, 4, 1, 1                | 3, 0     |

vLLM's counters (scheduler.update_from_output): 6 drafts, 18 draft tokens, 9 accepted, per
position [4, 3, 2]: mean acceptance length 1 + 9 / 6 = 2.5, acceptance rate 0.5, position rates
[4/6, 3/6, 2/6]. The mean of the per-request lengths of the steps that parsed output (tracekit's
old figure) is (2.25 + 1.25 + 1.75) / 3 = 1.75.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.unit.store._records import phases_and_cycles
from tracekit.analyzers.acceptance import DETAIL, pooled
from tracekit.collectors import phasemap as pm
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.processes import read_processes

STEPS: list[tuple[dict[str, list[int]], list[int]]] = [
    ({}, [1, 1, 1, 1]),
    ({"a": [0, 0, 0], "b": [0, 0, 0], "d": [0, 0, 0]}, [3, 1, 1, 4]),
    ({"a": [0, 0, 0]}, [2, 1, 1, 1]),
    ({}, [1, 1, 1, 1]),
    ({"b": [-1, -1, -1], "c": [-1, -1, -1]}, [1, 4, 1, 1]),  # async: placeholder ids
]
CFG = {"starts_with": "verify", "require": "draft"}


class SchedulerOutput:  # vllm.v1.core.sched.output.SchedulerOutput, the field read
    def __init__(self, spec: dict[str, list[int]]) -> None:
        self.scheduled_spec_decode_tokens = spec


class ModelRunnerOutput:  # vllm.v1.outputs.ModelRunnerOutput, the field read
    def __init__(self, sampled: list[list[int]]) -> None:
        self.sampled_token_ids = sampled


def execute_model(
    self: object, scheduler_output: SchedulerOutput, intermediate_tensors: object = None
) -> None:
    return None


def propose_draft_token_ids(self: object, *args: object) -> None:
    return None


def parse_output(
    output_token_ids: list[list[int]], vocab_size: int, discard_req_indices: object = (),
    logprobs_tensors: object = None,
) -> tuple[list[list[int]], None]:  # fmt: skip
    return output_token_ids, None


def _site(pmap: pm.PhaseMap, target: str) -> pm.Site:
    return next(s for sites in pmap.sites().values() for s in sites if str(s.target) == target)


class Runner:
    """The wrapped call sites of one recorded process."""

    def __init__(self, rec: Recorder) -> None:
        vllm = pm.load_builtin("vllm")
        v1 = "vllm.v1.worker.gpu_model_runner:"
        self.execute = make_wrapper(
            execute_model, _site(vllm, v1 + "GPUModelRunner.execute_model"), rec
        )
        self.draft = make_wrapper(
            propose_draft_token_ids, _site(vllm, v1 + "GPUModelRunner.propose_draft_token_ids"), rec
        )
        self.parse = make_wrapper(
            parse_output,
            _site(vllm, "vllm.v1.sample.rejection_sampler:RejectionSampler.parse_output"),
            rec,
        )
        parse = self.parse

        def get_output_v1(self: Any) -> ModelRunnerOutput:  # parse_output inside when drafted
            sampled = self.sampled
            if self.drafted:
                sampled = parse(sampled, 96)[0]
            return ModelRunnerOutput(sampled)

        def get_output_v2(self: Any) -> ModelRunnerOutput:
            return ModelRunnerOutput(self.sampled)

        self.get_v1 = make_wrapper(
            get_output_v1, _site(vllm, v1 + "AsyncGPUModelRunnerOutput.get_output"), rec
        )
        self.get_v2 = make_wrapper(
            get_output_v2, _site(vllm, "vllm.v1.worker.gpu.async_utils:AsyncOutput.get_output"), rec
        )


class Pending:  # an AsyncModelRunnerOutput of one step
    def __init__(self, spec: dict[str, list[int]], lens: list[int]) -> None:
        self.sampled = [[7] * n for n in lens]
        self.drafted = bool(spec)


def _run(tmp: Path, shape: str) -> list[dict[str, Any]]:
    rec = Recorder(RecorderConfig(raw_dir=tmp))
    r = Runner(rec)
    pending: Pending | None = None
    get = r.get_v1 if shape == "v1-async" else r.get_v2

    def fetch(p: Pending) -> None:  # the worker's output thread
        t = threading.Thread(target=get, args=(p,))
        t.start()
        t.join()

    for spec, lens in STEPS:
        r.execute(object(), SchedulerOutput(spec))
        if shape == "v1-sync":
            if spec:  # max_gen_len > 1: parse_output on the step's path
                r.parse([[7] * n for n in lens], 96)
        elif pending is not None:
            fetch(pending)  # the previous step's output, fetched while this one runs
        r.draft(object())
        pending = Pending(spec, lens)
    if shape != "v1-sync" and pending is not None:
        fetch(pending)
    rec.close()
    (proc,) = read_processes(tmp)
    records = proc.records.to_dicts()  # with its pid
    return phases_and_cycles(records, CFG)[1]


def _pooled(cycles: list[dict[str, Any]]) -> dict[str, Any]:
    frame = pl.DataFrame(
        [{k: c.get(k) for k in ("cycle", "accept_len", *DETAIL)} for c in cycles],
        schema={"cycle": pl.Int64, "accept_len": pl.Float64, "drafts": pl.Int64,
                "drafted_tokens": pl.Int64, "accepted_tokens": pl.Float64,
                "requests": pl.Int64, "accepted_per_pos": pl.List(pl.Int64)},
    )  # fmt: skip
    got = pooled(frame)
    assert got is not None
    return got


@pytest.mark.parametrize("shape", ["v1-sync", "v1-async", "v2"])
def test_vllm_map_pools_acceptance_as_vllms_counters(tmp_path: Path, shape: str) -> None:
    cycles = _run(tmp_path, shape)
    assert len(cycles) == 5
    got = _pooled(cycles)
    assert got["accept_len_mean"] == pytest.approx(2.5)  # 1 + 9 / 6, not 1.75
    assert got["drafts"] == 6
    assert got["drafted_tokens"] == 18
    assert got["accept_rate"] == pytest.approx(0.5)
    assert got["accept_rate_per_pos"] == pytest.approx([4 / 6, 3 / 6, 2 / 6])
    if shape == "v1-sync":
        # per cycle: the step's own drafts and tokens; steps 0 and 3 drafted nothing
        assert [c["drafts"] for c in cycles] == [0, 3, 1, 0, 2]
        assert [c["accepted_tokens"] for c in cycles] == [0.0, 5.0, 1.0, 0.0, 3.0]
        assert [c["accept_len"] for c in cycles] == [None, 1 + 5 / 3, 2.0, None, 2.5]
        assert [c["requests"] for c in cycles] == [None, 4, 4, None, 4]
    else:
        # a step's output is read during the next step (its cycle): cycle k pairs step k's
        # drafts with step k-1's tokens, the last cycle holds the last two steps' outputs;
        # pooled over the run the counts are vLLM's (above)
        assert [c["drafts"] for c in cycles] == [0, 3, 1, 0, 2]
        assert [c["accepted_tokens"] for c in cycles] == [0.0, 0.0, 5.0, 1.0, 3.0]
