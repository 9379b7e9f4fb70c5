"""Compiled programs on one GPU (issue 22): every compiled step recorded, replays flagged, cost.

Runs, each a subprocess whose output is kept under OUT (a tar of the runs at the end, merged
and analysed elsewhere: the GPU machine may lack polars):

1. `python -m tracekit.demo --compile` under `tracekit launch --adapter demo --no-merge`, light
   and full mode (the target under torch.compile, mode reduce-overhead on CUDA);
2. bench/hf_static_compile.py (HF static-cache generate compiled by transformers, inductor
   reduce-overhead on CUDA), alone and under `tracekit launch` (light, `--ab`: recording
   switched off and on between generates in the same process), and with `--kinds` also under
   launch with TRACEKIT_DISABLE=1 (the launcher's cost alone), alternated `--pairs` times.

    python bench/compiled_gpu.py --out OUT [--device cuda] [--pairs 2]
    python bench/compiled_gpu.py --out /tmp/x --device cpu --quick     # the script's CPU check

Each step's JSON result and stderr tail go to OUT/steps.json as soon as the step ends, so a run
cut short by a time limit still brings back what finished. tracekit's own figures (records,
replays flagged) come from merging the runs afterwards (bench/compiled_report.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
HF = HERE / "hf_static_compile.py"
TRACED_KINDS = (
    "traced", "disabled", "nonvml", "sample8", "noevents", "torchevents", "noflush", "profile",
    "assisted", "assisted8", "every", "assisted1", "bare", "step", "stepbare", "stepnorep",
    "stepbarec", "stepgeneric", "assistedx",
)  # fmt: skip
# kinds that switch recording inside the generates, in blocks of this many decode calls
# (hf_static_compile.py --step-ab), each call timed on the host
STEP_AB_BLOCK = 8
# kinds that set --gpu-sample (the others: launch's default); noevents: no CUDA event after
# the first cycle
GPU_SAMPLE = {"sample8": 8, "assisted8": 8, "every": 1, "assisted1": 1, "noevents": 1_000_000}
AB_PROFILE = HERE / "ab_profile.py"


def _run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )
        rc, out, err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, str(exc.stdout or ""), str(exc.stderr or "")
    return {
        "cmd": cmd,
        "rc": rc,
        "wall_s": time.perf_counter() - t0,
        "stdout_tail": out[-2000:],
        "stderr_tail": err[-4000:],
    }


def _launch(out: Path, name: str, mode: str, extra: list[str], program: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "tracekit", "launch", *extra, "--mode", mode]
    cmd += ["--no-merge", "--out", str(out / "runs"), "--name", name, "--", *program]
    if mode == "full":
        cmd[cmd.index("--mode") : cmd.index("--mode")] = ["--profile-cycles", "20:4"]
    return cmd


def _record(out: Path, steps: list[dict[str, Any]], step: dict[str, Any]) -> None:
    steps.append(step)
    (out / "steps.json").write_text(json.dumps(steps, indent=1) + "\n", encoding="utf-8")
    print(f"[{step['name']}] rc={step['rc']} {step['wall_s']:.1f}s", flush=True)


def demo_steps(args: argparse.Namespace, out: Path, steps: list[dict[str, Any]]) -> None:
    size = "tiny" if args.quick else "small"
    cycles = "8" if args.quick else "60"
    for mode in ("light", "full"):
        name = f"demo-compile-{mode}"
        result = out / f"{name}.json"
        program = [
            sys.executable, "-m", "tracekit.demo", "--device", args.device, "--compile",
            "--model-size", size, "--cycles", cycles, "--ranks", "1", "--result", str(result),
        ]  # fmt: skip
        step = _run(_launch(out, name, mode, ["--adapter", "demo"], program), args.step_timeout)
        step["name"] = name
        if result.exists():
            step["result"] = json.loads(result.read_text())
        _record(out, steps, step)


def hf_steps(args: argparse.Namespace, out: Path, steps: list[dict[str, Any]]) -> None:
    sys.path.insert(0, str(HERE))
    from hf_static_compile import ASSISTED_TOML, PHASES_TOML

    static_phases = out / "hf_phases.toml"
    static_phases.write_text(PHASES_TOML)
    assisted_phases = out / "hf_assisted.toml"
    assisted_phases.write_text(ASSISTED_TOML)
    prog = [sys.executable, str(HF), "--device", args.device]
    if args.device.startswith("cuda"):
        prog += ["--backend", "inductor", "--mode", "reduce-overhead", "--size", "large"]
        prog += ["--layers", "4", "--new-tokens", "48", "--rounds", str(args.hf_rounds)]
    else:
        prog += ["--backend", "eager", "--new-tokens", "4", "--rounds", "5"]
    kinds = args.kinds.split(",")
    for i in range(args.pairs):
        for kind in kinds if i % 2 == 0 else kinds[::-1]:
            name = f"hf-{kind}-{i}"
            res = out / f"{name}.json"
            cmd = [*prog, "--out", str(res)]
            env = None
            phases = static_phases
            if kind.startswith("assisted"):  # HF assisted generation (eager), its own map
                cmd.append("--assisted")
                phases = assisted_phases
            if kind == "noflush":
                cmd.append("--no-flush")
            if kind in ("bare", "stepbare", "stepnorep"):
                cmd.append("--bare-boundary")  # the boundary's recorded call: a plain call
            if kind in ("stepbarec", "stepgeneric"):  # ... made from C; Python enter / exit
                cmd += ["--bare-boundary", "c" if kind == "stepbarec" else "generic"]
            if kind == "stepnorep":
                cmd.append("--no-replay-count")
            if kind == "profile":  # the program's thread profiled by recording state
                cmd = [cmd[0], str(AB_PROFILE), "--out", str(out / f"prof-{i}"), "--", *cmd]
            if kind in TRACED_KINDS:
                extra = ["--phases", str(phases)] + (["--no-nvml"] if kind == "nonvml" else [])
                if kind in GPU_SAMPLE:
                    extra += ["--gpu-sample", str(GPU_SAMPLE[kind])]
                extra += ["--flush-interval", "600"] if kind == "noflush" else []
                ab = ["--step-ab", str(STEP_AB_BLOCK)] if kind.startswith("step") else ["--ab"]
                if kind == "assistedx":  # switched at the cycles' starts, their calls timed
                    ab = ["--crossings", str(STEP_AB_BLOCK)]
                cmd = _launch(out, name, "light", extra, [*cmd, *ab])
            elif kind != "alone":
                raise SystemExit(f"compiled_gpu.py: unknown kind {kind!r} (see --kinds)")
            if kind == "torchevents":  # torch's CUDA events, not the driver API's (the default)
                env = {**os.environ, "TRACEKIT_GPU_EVENTS": "torch"}
            if kind == "disabled":  # launched, recording nothing: the launcher's own cost
                env = {**os.environ, "TRACEKIT_DISABLE": "1"}
            step = _run(cmd, args.step_timeout, env)
            step["name"] = name
            if res.exists():
                step["result"] = json.loads(res.read_text())
            _record(out, steps, step)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--pairs", type=int, default=1)
    p.add_argument(
        "--kinds",
        default="alone,traced",
        help="HF runs of each round, in order (reversed every other round): alone, traced "
        "(launch's defaults: --gpu-sample 8 since 2026-12-02), every (traced, --gpu-sample 1), "
        "disabled (under launch with TRACEKIT_DISABLE=1), nonvml (traced, launched with --no-nvml), "
        "sample8 (traced, --gpu-sample 8), noevents (traced, --gpu-sample 1000000: no CUDA "
        "event after the first cycle), torchevents (traced, TRACEKIT_GPU_EVENTS=torch), noflush "
        "(traced, flush interval 600 s and the batch raised past the run: no flush, so no event "
        "resolution on the flush thread, while the generates run), profile (traced, the program's "
        "thread under cProfile split by recording state: bench/ab_profile.py), assisted / "
        "assisted1 / assisted8 (HF assisted generation, eager, a 1-layer draft; traced with its "
        "map, the defaults / --gpu-sample 1 / 8), bare (traced, the compiled boundary's recorded "
        "call replaced by a plain call: hf_static_compile.py --bare-boundary); step / stepbare / "
        "stepnorep / stepbarec / stepgeneric: traced / bare / bare without the replay count / "
        "bare called from C / recorded by the Python enter and exit, recording switched "
        "inside the generates every 8 decode calls, each call timed (--step-ab 8); assistedx: "
        "assisted, recording switched at the cycles' starts every 8 cycles, each wrapped "
        "call's crossings timed from its caller (--crossings 8, bench/crossings.py)",
    )
    p.add_argument("--step-timeout", type=float, default=240.0)
    p.add_argument(
        "--hf-rounds", type=int, default=13, help="generates a CUDA HF run (ABBA after the first)"
    )
    p.add_argument("--quick", action="store_true", help="small sizes (the CPU check)")
    p.add_argument("--only", choices=["demo", "hf"], default=None)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TRACEKIT_EXIT_DEADLINE_S", "10")
    steps: list[dict[str, Any]] = []
    if args.only in (None, "hf"):
        hf_steps(args, out, steps)
    if args.only in (None, "demo"):
        demo_steps(args, out, steps)
    with tarfile.open(out / "runs.tar.gz", "w:gz") as tar:
        if (out / "runs").exists():
            tar.add(out / "runs", arcname="runs")
    print(json.dumps([{k: s.get(k) for k in ("name", "rc", "wall_s")} for s in steps]))


if __name__ == "__main__":
    main()
