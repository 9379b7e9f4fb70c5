"""The GPU suite: tracekit's demo on one CUDA GPU under `tracekit launch`, in one call.

Run on the GPU machine (docs/BENCHMARKS.md, "GPU (H200)"); everything it makes goes to `--out`:

    python bench/gpu_suite.py --out $OUT [--budget-s 540]

In priority order, each step written out before the next starts (the budget skips the tail):

1. versions (torch, CUDA, cuDNN, NCCL, driver, GPU) and the CPU cost of one wrapped call
   (tracekit's light recorder, in this process: outermost calls record two CUDA events, nested
   ones an NVTX range and two host clocks);
2. the sample runs (`--ranks N`: N ranks, one a GPU, NCCL): baseline decode with CUDA graphs,
   speculative with verify `extend` and verify `graph`, each under `tracekit launch --no-merge`
   in light mode and in full mode (a torch.profiler window of 3 cycles); tarred to
   `runs_main.tar.gz`;
3. two ranks on the one GPU (NCCL refuses two ranks a GPU, so the demo uses gloo, eager);
   `runs_gloo.tar.gz`;
4. the overhead runs: uninstrumented and light-mode runs of each path alternating, more cycles,
   the demo's own step times (synchronised before and after each step) compared;
5. whether NCCL refuses two ranks on one GPU (a two-process all_reduce, bounded in time).

`results.json` (all figures and each run's command, exit code, wall time and the tail of its
output) is rewritten after every run. `--device cpu --model-size tiny` runs the same steps on a
CPU machine, to check the script before spending device time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

PATHS: dict[str, list[str]] = {
    "baseline": ["--baseline"],
    "extend": ["--verify-mode", "extend"],
    "graph": ["--verify-mode", "graph"],
}


class Suite:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.work = Path(args.work).resolve()
        self.runs = self.work / "runs"
        self.t0 = time.monotonic()
        self.results: dict[str, Any] = {"args": vars(args), "runs": [], "skipped": []}
        self.out.mkdir(parents=True, exist_ok=True)
        self.runs.mkdir(parents=True, exist_ok=True)

    # -- bookkeeping ------------------------------------------------------------------------
    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.t0)

    def save(self) -> None:
        path = self.out / "results.json"
        path.write_text(json.dumps(self.results, indent=1, default=str) + "\n")

    def log(self, msg: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {msg}", flush=True)

    def demo_cmd(self, path: str, cycles: int, result: Path, ranks: int = 1) -> list[str]:
        a = self.args
        return [
            sys.executable,
            "-m",
            "tracekit.demo",
            "--device",
            a.device,
            "--ranks",
            str(ranks),
            "--model-size",
            a.model_size,
            "--cycles",
            str(cycles),
            "-q",
            "--result",
            str(result),
            *PATHS[path],
        ]

    def run(
        self,
        name: str,
        path: str,
        *,
        cycles: int,
        mode: str | None,
        profile: str | None = None,
        ranks: int = 1,
        timeout: float = 150.0,
    ) -> dict[str, Any] | None:
        """One demo run, plain (`mode=None`) or under `tracekit launch --no-merge`."""
        run_dir = self.runs / name
        if mode is None:
            run_dir.mkdir(parents=True, exist_ok=True)
        result = run_dir / "demo_result.json"
        cmd = self.demo_cmd(path, cycles, result, ranks)
        if mode == "off":
            # launched (bootstrap on PYTHONPATH, NVML sampled at 10 Hz) but recording disabled
            # in the program: tells the launcher's own cost from the recorder's
            cmd = ["env", "TRACEKIT_DISABLE=1", *cmd]
        if mode is not None:
            launch = [
                sys.executable,
                "-m",
                "tracekit",
                "launch",
                "--mode",
                mode.replace("off", "light"),
                "--gpu-sample",  # every cycle timed, as the committed sample traces
                "1",
            ]
            if profile:
                launch += ["--profile-cycles", profile]
            cmd = [*launch, "--out", str(self.runs), "--name", name, "--no-merge", "--", *cmd]
        self.log(f"run {name}: {' '.join(cmd[1:])}")
        t = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, cwd=self.work, check=False
            )
            rc, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            rc = -1
            output = f"timed out after {timeout} s\n{exc.stdout or ''}{exc.stderr or ''}"
        wall = time.monotonic() - t
        entry: dict[str, Any] = {
            "name": name,
            "path": path,
            "mode": mode or "plain",
            "profile_cycles": profile,
            "ranks": ranks,
            "cycles": cycles,
            "rc": rc,
            "wall_s": round(wall, 2),
            "cmd": cmd[1:],
            "output_tail": output[-2500:],
        }
        demo: dict[str, Any] | None = None
        if result.exists():
            demo = json.loads(result.read_text())
            entry["demo"] = {k: v for k, v in demo.items() if k != "model"}
        self.results["runs"].append(entry)
        self.save()
        summary = (
            f"step p50 {demo['step_ms_p50']:.3f} ms, accept {demo['accept_len_mean']:.2f}, "
            f"tok/s {demo['tokens_per_s']:.1f}"
            if demo
            else "no result"
        )
        self.log(f"  rc {rc}, {wall:.1f} s, {summary}")
        if rc != 0:
            print(output[-3000:], flush=True)
        return demo

    def tar(self, names: list[str], archive: str) -> None:
        path = self.out / archive
        with tarfile.open(path, "w:gz") as tf:
            for n in names:
                if (self.runs / n).exists():
                    tf.add(self.runs / n, arcname=n)
        self.log(f"wrote {archive}: {path.stat().st_size / 1e6:.2f} MB")

    # -- steps --------------------------------------------------------------------------------
    def versions(self) -> None:
        import torch

        v: dict[str, Any] = {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version()
            if torch.backends.cudnn.is_available()
            else None,
        }
        try:
            v["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
        except Exception as exc:
            v["nccl"] = f"unavailable ({exc})"
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            v.update(
                gpu=p.name,
                gpu_count=torch.cuda.device_count(),
                sm_count=p.multi_processor_count,
                gpu_mem_gib=round(p.total_memory / 2**30, 1),
                capability=f"{p.major}.{p.minor}",
            )
        try:
            smi = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
                    "--format=csv,noheader",
                ],
                capture_output=True,
                text=True,
                timeout=20,
                check=False,
            )
            v["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            v["nvidia_smi"] = f"unavailable ({exc})"
        for mod in ("nvtx", "pyarrow", "msgspec", "pynvml"):
            try:
                m = __import__(mod)
                v[mod] = getattr(m, "__version__", "present")
            except Exception as exc:
                v[mod] = f"missing ({exc})"
        self.results["versions"] = v
        self.save()
        self.log(f"versions: {json.dumps(v)}")

    def micro(self) -> None:
        """CPU cost of one wrapped call, in a child process (keeps this one light)."""
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--micro",
            "--device",
            self.args.device,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        try:
            self.results["wrapped_call"] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            self.results["wrapped_call"] = {"error": (proc.stdout + proc.stderr)[-2000:]}
        self.save()
        self.log(f"wrapped call: {json.dumps(self.results['wrapped_call'])}")

    def samples(self) -> None:
        a = self.args
        names = []
        prefix = f"tp{a.ranks}_" if a.ranks > 1 else ""
        for path in PATHS:
            for mode in ("light", "full"):
                name = f"{prefix}{path}_{mode}"
                prof = a.profile if mode == "full" else None
                self.run(name, path, cycles=a.sample_cycles, mode=mode, profile=prof, ranks=a.ranks)
                names.append(name)
        self.tar(names, "runs_main.tar.gz")

    def gloo(self) -> None:
        a = self.args
        if self.left() < 90:
            self.results["skipped"].append("gloo")
            return
        names = []
        for mode in ("light", "full"):
            name = f"gloo2_extend_{mode}"
            prof = a.gloo_profile if mode == "full" else None
            self.run(name, "extend", cycles=a.gloo_cycles, mode=mode, profile=prof, ranks=2)
            names.append(name)
        self.tar(names, "runs_gloo.tar.gz")

    def overhead(self) -> None:
        a = self.args
        per_round = 0.0
        for r in range(a.rounds):
            t = time.monotonic()
            if self.left() < max(150.0, 1.1 * per_round):
                self.results["skipped"].append(f"overhead rounds {r}..{a.rounds - 1}")
                break
            for path in PATHS:
                order = ["plain", "light"] if r % 2 == 0 else ["light", "plain"]
                if path == "extend":
                    order.insert(1, "off")
                for mode in order:
                    name = f"ovh_{path}_{mode}_{r}"
                    self.run(
                        name,
                        path,
                        cycles=a.overhead_cycles,
                        mode=None if mode == "plain" else mode,
                    )
                    shutil.rmtree(self.runs / name, ignore_errors=True)
            per_round = time.monotonic() - t
        self.results["overhead"] = overhead_table(self.results["runs"])
        self.save()

    def nccl_duplicate(self) -> None:
        if self.args.device != "cuda" or self.left() < 45:
            self.results["skipped"].append("nccl duplicate-GPU check")
            return
        cmd = [sys.executable, str(Path(__file__).resolve()), "--nccl-dup"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=40, check=False)
            out = {"rc": proc.returncode, "tail": (proc.stdout + proc.stderr)[-1500:]}
        except subprocess.TimeoutExpired:
            out = {"rc": None, "tail": "timed out after 40 s (hang)"}
        self.results["nccl_two_ranks_one_gpu"] = out
        self.save()
        self.log(f"NCCL, 2 ranks on 1 GPU: rc {out['rc']}")


def overhead_table(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per path: each run's median step, then the median over runs of plain vs light."""
    table: dict[str, Any] = {}
    for path in PATHS:
        rows: dict[str, list[float]] = {"plain": [], "light": [], "off": []}
        for e in runs:
            if e["name"].startswith(f"ovh_{path}_") and "demo" in e:
                steps = e["demo"]["step_ms"][5:]  # the first steps warm caches and clocks
                rows[e["mode"]].append(statistics.median(steps))
        if rows["plain"] and rows["light"]:
            p, lt = statistics.median(rows["plain"]), statistics.median(rows["light"])
            table[path] = {
                "plain_step_ms": rows["plain"],
                "light_step_ms": rows["light"],
                "plain_p50_ms": p,
                "light_p50_ms": lt,
                "light_overhead_pct": 100.0 * (lt - p) / p,
            }
            if rows["off"]:
                off = statistics.median(rows["off"])
                table[path].update(
                    off_step_ms=rows["off"],
                    off_p50_ms=off,
                    off_overhead_pct=100.0 * (off - p) / p,
                )
    return table


# -- child modes ------------------------------------------------------------------------------


def micro(device: str) -> dict[str, Any]:
    """Nanoseconds of CPU per call: bare, wrapped (nested: NVTX + clocks), wrapped outermost."""
    import tempfile
    import types

    import torch

    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.recorder import Recorder, RecorderConfig
    from tracekit.collectors.wrappers import install

    cuda = device == "cuda"
    x = torch.zeros(16, device="cuda" if cuda else "cpu")
    if cuda:
        torch.cuda.synchronize()

    def op(t: torch.Tensor) -> torch.Tensor:
        return t

    mod = types.ModuleType("tk_bench_mod")
    mod.inner = op  # type: ignore[attr-defined]
    mod.outer = op  # type: ignore[attr-defined]
    bare = op
    tmp = Path(tempfile.mkdtemp())
    rec = Recorder(RecorderConfig(raw_dir=tmp, flush_records=1000, flush_seconds=1.0))
    inner_site = Site(target=Target.parse("tk_bench_mod:inner"), phase="allreduce")
    outer_site = Site(target=Target.parse("tk_bench_mod:outer"), phase="verify")
    install(mod, inner_site, rec)
    install(mod, outer_site, rec)
    inner, outer = mod.inner, mod.outer  # type: ignore[attr-defined]
    n = 20000

    def per_call(fn: Any) -> float:
        times = []
        for _ in range(5):
            t = time.perf_counter_ns()
            for _ in range(n):
                fn(x)
            times.append((time.perf_counter_ns() - t) / n)
        return statistics.median(times)

    outer(x)  # first call: NVTX domain, torch probe, GPU clock calibration
    res: dict[str, Any] = {"calls": n, "repeats": 5, "nvtx": rec._nvtx is not None}
    res["bare_ns"] = per_call(bare)
    frame = rec.enter(outer_site)  # an open outermost phase: inner calls are nested ones
    res["nested_ns"] = per_call(inner)
    rec.exit(frame, True, None)
    res["outermost_ns"] = per_call(outer)
    rec.active = False
    res["inactive_ns"] = per_call(inner)
    rec.active = True
    if cuda:
        ev = torch.cuda.Event(enable_timing=True)
        res["event_record_ns"] = per_call(lambda _t: ev.record())
        torch.cuda.synchronize()
    res["nested_cost_ns"] = res["nested_ns"] - res["bare_ns"]
    res["outermost_cost_ns"] = res["outermost_ns"] - res["bare_ns"]
    rec.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return res


def nccl_dup() -> None:
    """Two NCCL ranks on GPU 0: does NCCL refuse them?"""
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp

    from tracekit.demo.ranks import free_port

    port = free_port()
    mp.spawn(_nccl_rank, args=(port,), nprocs=2, join=True)  # type: ignore[attr-defined,no-untyped-call]
    _ = (torch, dist)


def _nccl_rank(rank: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", 0))
    t = torch.ones(4, device="cuda")
    dist.all_reduce(t)
    torch.cuda.synchronize()
    print(f"rank {rank}: all_reduce gave {t.tolist()}", flush=True)
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--out", default="gpu_suite_out")
    ap.add_argument("--work", default="/tmp/gpu_suite")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--model-size", default="large")
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument(
        "--ranks", type=int, default=1, help="ranks of the sample runs (one a GPU, NCCL)"
    )
    ap.add_argument("--sample-cycles", type=int, default=40)
    ap.add_argument("--profile", default="10:3", help="full mode's --profile-cycles")
    ap.add_argument("--gloo-cycles", type=int, default=16)
    ap.add_argument("--gloo-profile", default="6:2")
    ap.add_argument("--overhead-cycles", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip", default="", help="comma-separated steps to skip")
    ap.add_argument("--micro", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--nccl-dup", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.micro:
        print(json.dumps(micro(args.device)), flush=True)
        return 0
    if args.nccl_dup:
        nccl_dup()
        return 0
    suite = Suite(args)
    skip = set(filter(None, args.skip.split(",")))
    for step in ("versions", "micro", "samples", "gloo", "overhead", "nccl_duplicate"):
        if step in skip:
            continue
        try:
            getattr(suite, step)()
        except Exception as exc:  # one broken step must not lose the others' results
            suite.results.setdefault("errors", {})[step] = f"{type(exc).__name__}: {exc}"
            suite.save()
            suite.log(f"step {step} failed: {type(exc).__name__}: {exc}")
    suite.results["elapsed_s"] = round(time.monotonic() - suite.t0, 1)
    suite.save()
    ovh = suite.results.get("overhead", {})
    for path, row in ovh.items():
        suite.log(
            f"overhead {path}: plain {row['plain_p50_ms']:.3f} ms, light {row['light_p50_ms']:.3f} "
            f"ms, {row['light_overhead_pct']:+.2f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
