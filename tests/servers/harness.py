"""Running vLLM (CPU build) with and without `tracekit launch`, and reading what each run gave.

vLLM's CPU platform wants `VLLM_CPU_KVCACHE_SPACE` (GiB of KV cache), and for TP 2 one core a
rank (`VLLM_CPU_OMP_THREADS_BIND=0|1`, no reserved core): these machines have two.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from tracekit.store.reader import read_table, table_files

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TRACEKIT = str(BIN / "tracekit")
RESULTS = Path(__file__).resolve().parent / ".results"
RUN_TIMEOUT_S = 600


def vllm_env(tp: int) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env["PYTHONPATH"] = str(REPO) + (
        os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
    )
    if tp > 1:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i) for i in range(tp)))
        env.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
    env.pop("TRACEKIT_RUN_DIR", None)
    return env


@dataclass
class Run:
    """One offline run: what the driver printed (tokens, vLLM's counters, tokens/s) and, when
    instrumented, the run directory and the launcher's stderr."""

    result: dict[str, Any]
    rc: int
    stderr: str
    wall_s: float
    run_dir: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def offline(
    tmp: Path,
    method: str,
    *,
    tp: int = 1,
    compiled: bool = False,
    instrumented: bool = True,
    mode: str = "light",
    profile_cycles: str | None = None,
    name: str = "run",
    seqs: int = 1,
) -> Run:
    out = tmp / f"{name}.json"
    driver = [
        sys.executable, "-m", "tests.servers.offline", "--method", method, "--tp", str(tp),
        "--max-num-seqs", str(seqs), "--out", str(out),
    ]  # fmt: skip
    if compiled:
        driver.append("--compiled")
    cmd = driver
    run_dir = None
    if instrumented:
        cmd = [
            TRACEKIT,
            "launch",
            "--adapter",
            "vllm",
            "--mode",
            mode,
            "--out",
            str(tmp),
            "--name",
            name,
        ]
        if profile_cycles:
            cmd += ["--profile-cycles", profile_cycles]
        cmd += ["--", *driver]
        run_dir = tmp / name
    retried: list[str] = []
    for attempt in range(1 + CRASH_RETRIES):
        if attempt:
            out.unlink(missing_ok=True)
            if run_dir is not None:
                shutil.rmtree(run_dir, ignore_errors=True)
        t0 = time.perf_counter()
        proc = subprocess.run(
            cmd, env=vllm_env(tp), cwd=REPO, capture_output=True, text=True,
            timeout=RUN_TIMEOUT_S, check=False,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        (tmp / f"{name}.stderr{'.' + str(attempt) if attempt else ''}").write_text(proc.stderr)
        crash = interpreter_crash(proc.stderr)
        if crash is None:
            break
        retried.append(crash)
    assert out.is_file(), (
        f"{' '.join(cmd)} wrote no result (rc {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
    extra: dict[str, Any] = {"retried_after": retried} if retried else {}
    return Run(json.loads(out.read_text()), proc.returncode, proc.stderr, wall, run_dir, extra)


# vLLM 0.32's CPU build sometimes kills a worker while torch.compile warms the model up: its
# oneDNN GEMM handler's __del__ (`handler_tensor.item()`) runs from the garbage collector under
# FakeTensorMode, the AssertionError's message formats the tensor, which calls `.item()` again,
# and the interpreter dies ("Fatal Python error: _Py_CheckRecursiveCall: Cannot recover from
# stack overflow"; the engine then reports "Engine core initialization failed"). The same
# `Exception ignored in: CPUDNNLGEMMHandler.__del__` shows without tracekit; whether it turns
# fatal depends on when the garbage collector runs. A run in which an interpreter died so is
# run again (at most CRASH_RETRIES times), also when the driver wrote its result (a worker
# that dies at shutdown takes what it buffered since its last flush, and these runs serve
# for less than the flush interval); the retry is listed in the results.
CRASH_RETRIES = 2
_CRASH = re.compile(r"^Fatal Python error: .*$", re.M)


def interpreter_crash(stderr: str) -> str | None:
    """The first "Fatal Python error" line of a run's stderr (a worker's interpreter died),
    else None."""
    m = _CRASH.search(stderr)
    return m.group(0) if m else None


def cli_json(*args: str) -> Any:
    proc = subprocess.run(
        [TRACEKIT, *args, "--json"], capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, f"tracekit {' '.join(args)}: {proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def cycles(run_dir: Path) -> pl.DataFrame:
    return read_table(run_dir, "cycles")


def vllm_accept(counters: dict[str, float]) -> float | None:
    """vLLM's mean acceptance length: 1 + accepted / drafts (vllm/v1/spec_decode/metrics.py)."""
    drafts = counters.get("vllm:spec_decode_num_drafts", 0.0)
    if not drafts:
        return None
    return 1.0 + counters.get("vllm:spec_decode_num_accepted_tokens", 0.0) / drafts


def tracekit_accept(cyc: pl.DataFrame, rank: int = 0) -> tuple[float | None, int]:
    """tracekit's mean acceptance over every cycle of `rank` (warm-up included, as vLLM's
    counters count), pooled over the requests that drafted (analyzers/acceptance.py), and
    its drafts (requests that drafted, summed over the cycles: vLLM's `num_drafts`)."""
    from tracekit.analyzers.acceptance import DETAIL, pooled

    got = cyc.filter(pl.col("rank") == rank).select("cycle", "accept_len", *DETAIL)
    acc = pooled(got)
    if acc is None:
        return None, 0
    return float(acc["accept_len_mean"]), int(acc["drafts"])


def clean_exit(run: Run) -> None:
    assert run.rc == 0, f"exit code {run.rc}:\n{run.stderr[-3000:]}"
    # vLLM prints tracebacks of its own (an "Exception ignored in" a oneDNN handler's __del__
    # under torch.compile): only one through tracekit's code fails the run
    for tb in run.stderr.split("Traceback (most recent call last)")[1:]:
        frames = re.findall(r'File "([^"]+)"', tb.split("\n\n")[0])
        assert not any("/collectors/" in f or "/tracekit/" in f for f in frames), tb[:3000]
    assert "tracekit: recorder failed" not in run.stderr, run.stderr[-3000:]
    if run.run_dir is not None:
        manifest = json.loads((run.run_dir / "run.json").read_text())
        assert manifest["status"] == "finished"
        assert manifest["exit_code"] == 0
        assert "could not merge" not in run.stderr
        assert table_files(run.run_dir, "cycles"), f"no cycles merged; {diagnosis(run)}"


def diagnosis(run: Run) -> str:
    """What a failed check needs from a run that is gone once CI ends: what tracekit printed
    (its own lines of the command's stderr, with any interpreter crash and vLLM's shutdown
    lines) and what each process's process.json says it wrote, flushed and finished."""
    keep = ("tracekit", "fatal python error", "sigterm", "sigkill", "[shutdown]")
    lines = [ln for ln in run.stderr.splitlines() if any(k in ln.lower() for k in keep)]
    procs = []
    if run.run_dir is not None:
        for f in sorted((run.run_dir / "raw").glob("pid-*/process.json")):
            try:
                d = json.loads(f.read_text())
            except (OSError, ValueError) as exc:
                procs.append(f"{f.parent.name}: unreadable ({exc})")
                continue
            keys = ("records", "buffered", "flushes", "flush_requests", "finished", "rank_info")
            procs.append(f"{f.parent.name}: " + ", ".join(f"{k}={d.get(k)}" for k in keys))
    return "\n".join(["tracekit's lines:", *lines[-40:], "processes:", *procs])


def record(row: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    with (RESULTS / "results.jsonl").open("a") as f:
        f.write(json.dumps(row, sort_keys=True) + "\n")


def component_lines(stderr: str) -> list[str]:
    """The collectors' component lines ("tracekit: pid N: drafter ..."), wherever they start:
    the program's progress bar (tqdm, which ends its updates with a carriage return, not a
    newline) can share their line."""
    return re.findall(r"tracekit: pid \d+: (.*)$", stderr, flags=re.M)
