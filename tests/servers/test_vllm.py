"""Real vLLM (CPU build 0.32.0) under `tracekit launch --adapter vllm`.

The matrix (each configuration costs a vLLM start-up of 40-120 s on two cores, so not every
combination runs; the whole file must stay inside the CI budget):

| test                         | entry        | proposer    | TP | graph    | mode  | in flight | baseline |
|------------------------------|--------------|-------------|----|----------|-------|-----------|----------|
| test_offline[ngram-tp1]      | LLM          | ngram       | 1  | eager    | light | 4         | yes      |
| test_offline[draft-tp2]      | LLM          | draft_model | 2  | eager    | light | 4         | yes      |
| test_offline[eagle-tp2-c]    | LLM          | EAGLE       | 2  | compiled | light | 1         | no       |
| test_offline[eagle-tp2-full] | LLM          | EAGLE       | 2  | eager    | full  | 1         | no       |
| test_api_server_sigint       | OpenAI API   | draft_model | 1  | eager    | light | 1         | no       |

Each asserts: the phases recorded (draft, verify; allreduce inside verify on TP 2), the cycles
(per rank equal across ranks), the acceptance length, pooled over the requests that drafted
(docs/DEFINITIONS.md "Acceptance length"), equal to vLLM's own counters (1 + accepted /
drafts) within 1% and tracekit's drafts equal to vLLM's `num_drafts` (with 4 requests in flight
a step verifies several requests' drafts, and n-gram requests without a match draft none), the
same tokens as the uninstrumented run, the drafter and communicator named at start-up, and a
clean exit. The uninstrumented run gives the overhead figure (tokens/s of the timed
`generate`).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.servers import harness as h
from tests.servers.models import PROMPTS, ensure_models

pytestmark = pytest.mark.server


@pytest.fixture(scope="session", autouse=True)
def _models() -> Path:
    return ensure_models()


CONFIGS = {
    "ngram-tp1": {
        "method": "ngram",
        "tp": 1,
        "compiled": False,
        "mode": "light",
        "baseline": True,
        "seqs": 4,
    },
    "draft-tp2": {
        "method": "draft_model",
        "tp": 2,
        "compiled": False,
        "mode": "light",
        "baseline": True,
        "seqs": 4,
    },
    "eagle-tp2-c": {
        "method": "eagle",
        "tp": 2,
        "compiled": True,
        "mode": "light",
        "baseline": False,
    },
    "eagle-tp2-full": {
        "method": "eagle",
        "tp": 2,
        "compiled": False,
        "mode": "full",
        "baseline": False,
    },
}
DRAFTERS = {
    "ngram": "NgramProposer",
    "draft_model": "DraftModelProposer",
    "eagle": "EagleProposer",
    "eagle3": "EagleProposer",
}


def _phase_shares(summary: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {
            k: p.get(k)
            for k in ("count", "wall_ms_p50", "forward_pct", "allreduce_pct", "overhead_pct")
        }
        for name, p in summary["phases"].items()
    }


@pytest.mark.parametrize("config", list(CONFIGS))
def test_offline(config: str, tmp_path: Path) -> None:
    c = CONFIGS[config]
    run = h.offline(
        tmp_path, c["method"], tp=c["tp"], compiled=c["compiled"], mode=c["mode"], name=config,
        profile_cycles="4:3" if c["mode"] == "full" else None, seqs=c.get("seqs", 1),
    )  # fmt: skip
    h.clean_exit(run)
    assert run.run_dir is not None
    manifest = json.loads((run.run_dir / "run.json").read_text())

    # the drafter and the communicator in use, named at start-up and covered by the map
    comps = manifest["components"]
    drafter = comps["drafter"][0]
    assert drafter["class"].endswith(DRAFTERS[c["method"]]), drafter
    assert drafter["covered"], drafter
    assert any(line.startswith("drafter ") for line in h.component_lines(run.stderr))
    if c["tp"] > 1:
        comm = comps["communicator"][0]
        assert comm["class"].endswith(":CpuCommunicator"), comm
        assert comm["covered"], comm
        assert len(comm["pids"]) == c["tp"]
    # an inherited proposer method that ran is resolved via its base class, not "never imported"
    if c["method"] in ("eagle", "eagle3"):
        targets = manifest["targets"]
        name = "vllm.v1.spec_decode.eagle:EagleProposer.propose"
        assert name not in targets["module_never_imported"]
        assert targets["via_base"][name].endswith("SpecDecodeBaseProposer.propose")

    summary = h.cli_json("summary", str(run.run_dir))
    assert summary["ranks"] == c["tp"]
    assert {"draft", "verify"} <= set(summary["phases"])
    cyc = h.cycles(run.run_dir)
    per_rank = cyc.group_by("rank").len().sort("rank")["len"].to_list()
    assert len(per_rank) == c["tp"], per_rank
    assert len(set(per_rank)) == 1, per_rank

    counters = run.result["spec_total"]
    vllm_acc = h.vllm_accept(counters)
    tk_acc, verified = h.tracekit_accept(cyc)

    if c["tp"] > 1 and c["mode"] == "light":
        # vLLM's CPU build calls CpuCommunicator from the compiled graph too (a custom op, not
        # traced into it), so the allreduce is measured with and without torch.compile
        assert summary["allreduce_measured"] is True
        assert summary["phases"]["verify"]["allreduce_pct"] > 0, summary["phases"]["verify"]
        assert "allreduce is not measured" not in run.stderr
    if c["mode"] == "full" and c["tp"] > 1:
        # full mode splits the communication ops (`_C::shm_allreduce`, ...) out of the profiled
        # cycles, from the profiler's ops, not from the wrappers
        bd = h.cli_json("breakdown", str(run.run_dir))
        comm = [r for r in bd if (r.get("allreduce_ns") or 0) > 0]
        assert comm, "no allreduce in full mode"
        impls = {r["allreduce_impl"] for r in comm if r.get("allreduce_impl")}
        # vLLM's CpuCommunicator uses its shared-memory allreduce when the group's ranks agree
        # on one SHM group name, else torch.distributed (gloo); one CI run on 2026-12-02 took
        # gloo for the whole profiled window (108 `c10d::allreduce_` ops, no `_C::shm_*`):
        # either is named, and nothing else
        assert impls, "no allreduce implementation named in full mode"
        assert all("vllm_cpu_shm" in i or i == "gloo" for i in impls), impls

    row: dict[str, Any] = {
        "config": config,
        **{k: c[k] for k in ("method", "tp", "compiled", "mode")},
        "cycles_per_rank": per_rank[0],
        "seqs": c.get("seqs", 1),
        "drafts_tracekit": verified,
        "drafts_vllm": counters.get("vllm:spec_decode_num_drafts"),
        "accept_tracekit": tk_acc,
        "accept_vllm": vllm_acc,
        "accept_old_mean_of_cycles": _old_mean(cyc),
        "accept_summary_steady": summary.get("accept_len_mean"),
        "accept_detail_steady": summary.get("accept"),
        "phases": _phase_shares(summary),
        "tokens_per_s": round(run.result["tokens_per_s"], 1),
        "wall_s": round(run.wall_s, 1),
    }
    if c["baseline"]:
        base = h.offline(
            tmp_path,
            c["method"],
            tp=c["tp"],
            compiled=c["compiled"],
            instrumented=False,
            name=f"{config}-base",
            seqs=c.get("seqs", 1),
        )
        h.clean_exit(base)
        assert run.result["tokens"] == base.result["tokens"], (
            "tracekit changed the generated tokens"
        )
        assert base.result["spec_total"] == counters, (base.result["spec_total"], counters)
        row["tokens_per_s_base"] = round(base.result["tokens_per_s"], 1)
        row["overhead_pct"] = round(
            100.0 * (1 - run.result["tokens_per_s"] / base.result["tokens_per_s"]), 1
        )
        row["wall_s_base"] = round(base.wall_s, 1)
        if base.extra.get("retried_after"):
            row["base_retried_after"] = base.extra["retried_after"]
    if run.extra.get("retried_after"):  # vLLM's compile warm-up crash (harness.CRASH_RETRIES)
        row["retried_after"] = run.extra["retried_after"]
    h.record(row)

    # acceptance: tracekit's cycles that verified drafts against vLLM's own counters
    assert vllm_acc is not None, counters
    assert tk_acc is not None, "no cycle carried an acceptance"
    assert abs(tk_acc - vllm_acc) <= 0.01 * vllm_acc, (tk_acc, vllm_acc)
    assert verified == counters["vllm:spec_decode_num_drafts"], (verified, counters)
    drafted_cycles = cyc.filter((pl.col("rank") == 0) & (pl.col("drafts") > 0)).height
    assert 0 < drafted_cycles <= per_rank[0]
    if c.get("seqs", 1) > 1:  # several requests verified in one step
        assert int(cyc.filter(pl.col("rank") == 0)["requests"].max()) > 1  # type: ignore[arg-type]


def _old_mean(cyc: pl.DataFrame) -> float | None:
    """What tracekit reported before pooling: the mean over the cycles of each cycle's mean
    of its requests' tokens (a request without drafts counting 1)."""
    sub = cyc.filter((pl.col("rank") == 0) & pl.col("requests").is_not_null())
    sub = sub.filter(pl.col("drafts") > 0)
    if sub.height == 0:
        return None
    per = (sub["accepted_tokens"] + sub["requests"]) / sub["requests"]
    return float(per.mean())  # type: ignore[arg-type]


# -- the OpenAI API server, stopped with SIGINT -------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


def _post(url: str, body: dict[str, Any], timeout: float = 120.0) -> dict[str, Any]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())  # type: ignore[no-any-return]


def _metric(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            key = line.split(" ")[0].split("{")[0]
            if key in (name, f"{name}_total"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_api_server_sigint(tmp_path: Path) -> None:
    """Requests through the OpenAI server, vLLM's drafts counter read from /metrics, then
    SIGINT to the launcher: the merged run must hold at least 99% of those cycles."""
    models = ensure_models()
    port = _free_port()
    # the draft model drafts at every decode step: ~40 drafted cycles for 4 x 32 tokens
    spec = {"method": "draft_model", "model": str(models / "draft"), "num_speculative_tokens": 3}
    cmd = [
        h.TRACEKIT, "launch", "--adapter", "vllm", "--out", str(tmp_path), "--name", "api", "--",
        str(h.BIN / "python"), "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(models / "target"), "--served-model-name", "tiny",
        "--host", "127.0.0.1", "--port", str(port),
        "--speculative-config", json.dumps(spec),
        "--enforce-eager", "--dtype", "float32", "--max-model-len", "512", "--max-num-seqs", "1",
        "--gpu-memory-utilization", "0.5", "--seed", "0",
    ]  # fmt: skip
    log = (tmp_path / "api.log").open("w")
    proc = subprocess.Popen(
        cmd, env=h.vllm_env(1), cwd=h.REPO, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 400
        while True:
            assert proc.poll() is None, (tmp_path / "api.log").read_text()[-4000:]
            try:
                if _get(f"http://127.0.0.1:{port}/health", 2.0) is not None:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the API server did not come up"
            time.sleep(1.0)
        texts = []
        for prompt in PROMPTS:
            out = _post(
                f"http://127.0.0.1:{port}/v1/completions",
                {
                    "model": "tiny",
                    "prompt": prompt,
                    "max_tokens": 32,
                    "temperature": 0.0,
                    "ignore_eos": True,
                },
            )
            texts.append(out["choices"][0]["text"])
        metrics = _get(f"http://127.0.0.1:{port}/metrics")
        drafts = _metric(metrics, "vllm:spec_decode_num_drafts")
        accepted = _metric(metrics, "vllm:spec_decode_num_accepted_tokens")
        assert drafts > 0, metrics[-2000:]
        t_sig = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=180)
        stop_s = time.monotonic() - t_sig
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    out = (tmp_path / "api.log").read_text()
    run_dir = tmp_path / "api"
    manifest = json.loads((run_dir / "run.json").read_text())
    assert manifest["signals_forwarded"] == ["SIGINT"]
    # vLLM's API server SIGKILLs its engine core and worker at once (shutdown timeout 0 s): the
    # launcher asked every recording process to flush before it forwarded the signal
    asked = manifest["flush_before_signal"]
    assert asked["asked"] >= 1, asked
    assert asked["answered"] == asked["asked"], asked
    assert "could not merge" not in out, out[-3000:]
    cyc = h.cycles(run_dir)
    tk_acc, verified = h.tracekit_accept(cyc)
    kept = verified / drafts
    h.record(
        {
            "config": "api-draft-tp1-sigint",
            "drafts_vllm": drafts,
            "verified_cycles": verified,
            "kept_pct": round(100 * kept, 2),
            "accept_tracekit": tk_acc,
            "accept_vllm": 1 + accepted / drafts,
            "stop_s": round(stop_s, 1),
            "exit_code": rc,
        }
    )
    assert kept >= 0.99, f"{verified} of vLLM's {drafts:.0f} drafted cycles in the merged run"
    assert tk_acc is not None
    assert abs(tk_acc - (1 + accepted / drafts)) <= 0.01 * (1 + accepted / drafts)
    # record counts are kept current: run.json's per-process counts cover the merged rows
    recorded = [p for p in manifest["processes"]["instrumented"] if p["records"]]
    assert recorded, manifest["processes"]
    phases = h.read_table(run_dir, "phases")
    assert sum(p["records"] for p in recorded) >= phases.height
    assert all(t for t in texts)
