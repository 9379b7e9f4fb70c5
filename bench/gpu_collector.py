"""Light mode's collector cost on one GPU: per-call CPU, GPU sampling, A/B inside one process.

Run on the GPU machine from the repository root (docs/BENCHMARKS.md, "Collector overhead" and
"Overhead inside one process"); everything goes to `--out`:

    python bench/gpu_collector.py --out $OUT --budget-s 400

In order, each part written out before the next starts (the budget skips what does not fit):

1. `micro`: CPU per wrapped call, in one child process, amortised over many calls (thread CPU
   and wall clock; medians of `--repeat`): bare call; a lone outermost phase (consecutive calls
   share boundary events), the same with sharing off (2 events a call, the old behaviour) and
   with `--gpu-sample 8`; a demo-shaped cycle (cycle target + draft, verify, draft_extend:
   4 wrapped calls) with the defaults (native hot path, torch's events), with
   `--gpu-sample 8`, with driver-API events, and on the Python path, per wrapped call; a nested
   phase (native, Python); the inactive wrapper; one `torch.cuda.Event.record` against one
   driver-API `CudaEvent.record`, the capture check, and one span timed both ways.
2. `ab`: each demo path (baseline decode graph, verify extend, verify graph), every cycle
   GPU-timed (`--gpu-sample 1`; the default is 8: `ab8`), under
   `tracekit launch --no-merge` with `python -m tracekit.demo --ab-blocks B`: recording off and
   on in ABBA blocks inside one process; light mode's cost in % of the cycle with 95%
   intervals (bench/overhead_ab.py).
3. `abtorch`: part 2 with torch's CUDA events (`TRACEKIT_GPU_EVENTS=torch`; driver-API events
   are the default); `abnoev`: part 2 with `--gpu-sample 1000000` (CPU clocks only after the
   first cycle: what the CUDA events cost); `abnoflush`: part 2 with no flush while the
   cycles run; `abbare`: neither events nor flush (the hot path alone); `ab8`: part 2
   with `--gpu-sample 8` (launch's default), `ab8noflush` the same with no flush while the
   cycles run; `abpy`: part 2 on the Python hot path (`TRACEKIT_NATIVE=0`);
   `abprof` (last): part 2 with the demo's thread under cProfile, one profile for the "on"
   blocks and one for the "off" (bench/ab_profile.py; OUT/prof_abprof_PATH/diff.json): which
   functions run only while recording, and how often. Beside each A/B: on minus off in µs
   a step of the wall time, of the demo thread's CPU time and of garbage collection
   (`diff_step_ms`, `diff_step_cpu_ms`, `diff_step_gc_ms`; `overhead_ab.step_difference`),
   of the host time inside the eager paths' nested all_reduce calls (`diff_step_comm_ms`)
   and of the host time crossing into and out of the step's top-level calls, `step`,
   `draft`, `verify`, `draft_extend` (`diff_step_boundary_ms`, by phase
   `diff_boundary_PHASE_ms`): the recorder's cost at its calls, timed from the callers.
4. `sampling`: each path under `--gpu-sample 1` and `--gpu-sample 8` (separate runs,
   alternated): per-phase median GPU span (CUDA events) of the top-level phases, read from the
   raw records (pyarrow only: no merge, no polars), sampled / unsampled - 1; and, inside the
   unsampled run, the median of the cycles `--gpu-sample 8` would time against all cycles' (the sampling error alone).

`gpu_collector.json` (all figures, each run's command, exit code, wall time and output tail) is
rewritten after every step; `gpu_collector.log` has the log. Every part runs in try/except:
one failure loses only itself. `--device cpu --tiny` runs the same code on a CPU (a 1-rank tiny
model, few cycles and calls) to check the script before spending device time.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PATHS: dict[str, list[str]] = {
    "baseline": ["--baseline"],
    "extend": ["--verify-mode", "extend"],
    "graph": ["--verify-mode", "graph"],
    # the target under torch.compile (reduce-overhead on CUDA), verify extend: issue 22
    "compiled": ["--compile"],
}
WARMUP_CYCLES = 5
# the recorder's flush interval and batch size (collectors/runtime.py) past any A/B run's length
NO_FLUSH_ENV = {"TRACEKIT_FLUSH_SECONDS": "100000", "TRACEKIT_FLUSH_RECORDS": "100000000"}


def _overhead_ab() -> Any:
    spec = importlib.util.spec_from_file_location("overhead_ab", ROOT / "bench" / "overhead_ab.py")
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["overhead_ab"] = mod
    spec.loader.exec_module(mod)
    return mod


def child_env() -> dict[str, str]:
    """The repository root on PYTHONPATH (tracekit from this checkout), tracekit's own
    variables of an outer run removed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    old = env.get("PYTHONPATH", "")
    # appended: a tracekit layout already on PYTHONPATH (the device's _pp) keeps precedence
    env["PYTHONPATH"] = (old + os.pathsep if old else "") + str(ROOT)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="gpu_collector_"))
        self.t0 = time.monotonic()
        self.results: dict[str, Any] = {"args": vars(args), "runs": [], "skipped": [], "errors": {}}
        self._log = (self.out / "gpu_collector.log").open("a", encoding="utf-8")
        self.run_s: list[float] = []

    def left(self) -> float:
        return float(self.a.budget_s - (time.monotonic() - self.t0))

    def log(self, msg: str) -> None:
        line = f"[{time.monotonic() - self.t0:6.1f}s] {msg}"
        print(line, flush=True)
        self._log.write(line + "\n")
        self._log.flush()

    def save(self) -> None:
        self.results["elapsed_s"] = round(time.monotonic() - self.t0, 1)
        path = self.out / "gpu_collector.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.results, indent=1, default=str) + "\n")
        tmp.replace(path)

    def fits(self, what: str, need: float) -> bool:
        if self.left() >= need:
            return True
        self.results["skipped"].append(
            f"{what} ({self.left():.0f} s left, about {need:.0f} needed)"
        )
        self.log(f"skip {what}: {self.left():.0f} s left")
        self.save()
        return False

    def est_run(self) -> float:
        return 1.2 * max(self.run_s) if self.run_s else 60.0

    # -- one demo run under tracekit launch ---------------------------------------------------
    def demo(
        self,
        name: str,
        path: str,
        *,
        cycles: int,
        gpu_sample: int = 1,
        ab_blocks: int = 0,
        env: dict[str, str] | None = None,
        profile: bool = False,
        program_env: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        a = self.a
        result = self.work / f"{name}.json"
        # `profile`: the demo's thread under cProfile split by recording state (ab_profile.py)
        prof = [sys.executable, str(ROOT / "bench" / "ab_profile.py"), "--skip", "4"]
        prof += ["--out", str(self.out / f"prof_{name}"), "--"]
        demo = [
            *(prof if profile else []), sys.executable, "-m", "tracekit.demo",
            "--device", a.device, "--ranks", "1",
            "--model-size", a.model_size, "--cycles", str(cycles), "-q", "--result", str(result),
            *PATHS[path],
        ]  # fmt: skip
        if ab_blocks:
            demo += ["--ab-blocks", str(ab_blocks)]
        if program_env:  # set inside the launched program: the launcher's own values yield
            demo = ["env", *(f"{k}={v}" for k, v in program_env.items()), *demo]
        cmd = [
            sys.executable, "-m", "tracekit", "launch", "--mode", "light", "--gpu-sample",
            str(gpu_sample), "--out", str(self.work), "--name", name, "--no-merge", "--", *demo,
        ]  # fmt: skip
        timeout = max(10.0, min(a.run_timeout_s, self.left() - 5))
        self.log(f"run {name}: {' '.join(cmd[2:])}")
        t = time.monotonic()
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                env={**child_env(), **(env or {})}, check=False,
            )  # fmt: skip
            rc, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            partial = [
                v.decode() if isinstance(v, bytes) else (v or "") for v in (exc.stdout, exc.stderr)
            ]
            rc, output = -1, f"timed out after {timeout:.0f} s\n{''.join(partial)}"
        wall = time.monotonic() - t
        self.run_s.append(wall)
        entry: dict[str, Any] = {
            "name": name, "path": path, "gpu_sample": gpu_sample, "ab_blocks": ab_blocks,
            "cycles": cycles, "rc": rc, "wall_s": round(wall, 1), "cmd": cmd[1:],
            "output_tail": output[-2000:] if rc else output[-300:],
        }  # fmt: skip
        data = json.loads(result.read_text()) if result.exists() else None
        procs = []
        for proc_file in sorted((self.work / name / "raw").glob("pid-*/process.json")):
            info = json.loads(proc_file.read_text())
            procs.append({k: info.get(k) for k in ("pid", "records", "hot_path", "gpu_events")})
            procs[-1]["flush_cost"] = info.get("flush_cost")
            procs[-1]["flushes"] = info.get("flushes")
        entry["processes"] = procs
        used = [p for p in procs if p["gpu_events"]] or procs[:1]
        if used:
            entry["hot_path"], entry["gpu_events"] = used[0]["hot_path"], used[0]["gpu_events"]
        if data is not None:
            entry["step_ms_p50"] = data.get("step_ms_p50")
            entry["ab_recorder"] = data.get("ab_recorder")
        self.results["runs"].append(entry)
        self._log.write(output[-4000:] + "\n")
        self.save()
        p50 = f"{data['step_ms_p50']:.3f} ms" if data else "no result"
        self.log(f"  rc {rc}, {wall:.1f} s, step p50 {p50}")
        return data if rc == 0 else None

    # -- parts --------------------------------------------------------------------------------
    def micro(self) -> None:
        a = self.a
        cmd = [sys.executable, str(Path(__file__).resolve()), "--micro", "--device", a.device,
               "--calls", str(a.calls), "--repeat", str(a.repeat)]  # fmt: skip
        timeout = max(10.0, min(240.0, self.left() - 5))
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=child_env(),
            check=False,
        )  # fmt: skip
        self._log.write(proc.stderr[-4000:] + "\n")
        try:
            self.results["micro"] = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            self.results["micro"] = {"error": (proc.stdout + proc.stderr)[-2000:]}
        self.save()
        self.log(f"micro: {json.dumps(self.results['micro'])}")

    def ab(
        self,
        key: str,
        gpu_sample: int,
        env: dict[str, str] | None = None,
        profile: bool = False,
        program_env: dict[str, str] | None = None,
    ) -> None:
        a = self.a
        ab = _overhead_ab()
        out: dict[str, Any] = self.results.setdefault(key, {})
        for path in self.paths():
            if not self.fits(f"{key} {path}", self.est_run()):
                return
            data = self.demo(
                f"{key}_{path}", path, cycles=a.ab_cycles, gpu_sample=gpu_sample,
                ab_blocks=a.ab_block, env=env, profile=profile, program_env=program_env,
            )  # fmt: skip
            if data is None:
                out[path] = {"error": "run failed"}
            elif not data.get("ab_recorder"):
                out[path] = {"error": "the demo found no recorder to switch (not launched?)"}
            else:
                try:
                    r = ab.analyse(data, skip_groups=1)
                    out[path] = {**r.__dict__, "step_ms_p50": data["step_ms_p50"]}
                    # beside it: the steps after a prefill kept, and each block's median
                    kept = ab.analyse(data, skip_groups=1, prefill_steps=True)
                    med = ab.analyse(data, skip_groups=1, stat="median")
                    out[path]["with_prefill_steps"] = [kept.cost_pct, kept.t_lo_pct, kept.t_hi_pct]
                    out[path]["median_stat"] = [med.cost_pct, med.t_lo_pct, med.t_hi_pct]
                    out[path]["step_ms"] = data.get("step_ms")
                    out[path]["after_prefill"] = data.get("after_prefill")
                    out[path]["step_cpu_ms"] = data.get("step_cpu_ms")
                    out[path]["step_gc_ms"] = data.get("step_gc_ms")
                    out[path]["step_comm_ms"] = data.get("step_comm_ms")
                    out[path]["comm_calls"] = data.get("comm_calls")
                    # on - off a step, µs: wall, the thread's CPU, garbage collection, and the
                    # host time inside the row-parallel all_reduce calls (nested phase calls
                    # timed from their caller: no device in it; eager paths)
                    for series in ("step_ms", "step_cpu_ms", "step_gc_ms", "step_comm_ms"):
                        out[path][f"diff_{series}"] = ab.step_difference(data, series)
                    out[path].update(boundary_differences(ab, data))
                except ValueError as exc:
                    out[path] = {"error": str(exc)}
            self.save()
            self.log(f"{key} {path}: {json.dumps(out[path])[:300]}")

    def sampling(self) -> None:
        a = self.a
        out: dict[str, Any] = self.results.setdefault("sampling", {})
        for path in self.paths():
            spans: dict[int, dict[str, list[float]]] = {}
            pair = (1, a.sample_n) if len(out) % 2 == 0 else (a.sample_n, 1)
            for n in (1,) if a.sampling_error_only else pair:
                if not self.fits(f"sampling {path} n={n}", self.est_run()):
                    return
                name = f"sampling_{path}_n{n}"
                if self.demo(name, path, cycles=a.sample_cycles, gpu_sample=n) is None:
                    continue
                spans[n] = phase_spans(self.work / name)
            out[path] = compare_sampling(spans.get(1), spans.get(a.sample_n), a.sample_n)
            self.save()
            self.log(f"sampling {path}: {json.dumps(out[path])[:400]}")

    def paths(self) -> list[str]:
        if self.a.paths:
            return [p for p in self.a.paths.split(",") if p]
        return ["baseline", "extend"] if self.a.device == "cpu" else list(PATHS)


def boundary_differences(ab: Any, data: dict[str, Any]) -> dict[str, Any]:
    """On minus off a step of the host time crossing into and out of the step's top-level
    calls (the demo's `step_boundary_ms`, by phase, and summed: `diff_step_boundary_ms`),
    the wrappers' whole cost at those calls, with no device time or work of the call in it."""
    by_phase = data.get("step_boundary_ms")
    if not by_phase:
        return {}
    out: dict[str, Any] = {"step_boundary_ms": by_phase}
    total = [sum(step) for step in zip(*by_phase.values(), strict=True)]
    out["diff_step_boundary_ms"] = ab.step_difference({**data, "x": total}, "x")
    for phase, series in by_phase.items():
        out[f"diff_boundary_{phase}_ms"] = ab.step_difference({**data, "x": series}, "x")
    # inside each call, first line to last: its work, nested calls and device waits
    for phase, series in (data.get("step_inside_ms") or {}).items():
        out[f"diff_inside_{phase}_ms"] = ab.step_difference({**data, "x": series}, "x")
    return out


# -- reading raw records (pyarrow only) -------------------------------------------------------


def phase_spans(run_dir: Path) -> dict[str, list[float]]:
    """Per phase name: the GPU span (ms) of each GPU-timed top-level call of cycles past the
    warm-up, by cycle order; CPU span where the run has no GPU times (a CPU run). Keys
    `<phase>` (timed calls) and `<phase>@cycles` (their cycle numbers)."""
    import pyarrow as pa

    out: dict[str, list[float]] = {}
    for pid_dir in sorted((run_dir / "raw").glob("pid-*")):
        rec = pid_dir / "records.arrow"
        if not rec.exists() or not (pid_dir / "sites.json").exists():
            continue
        sites = {s["code"]: s for s in json.loads((pid_dir / "sites.json").read_text())["sites"]}
        batches = []
        with pa.OSFile(str(rec), "rb") as f:
            try:
                reader = pa.ipc.open_stream(f)
                for b in reader:
                    batches.append(b)
            except (pa.ArrowInvalid, OSError):
                pass  # a truncated stream: the complete batches
        if not batches:
            continue
        rows = pa.Table.from_batches(batches).to_pylist()
        gpu = any(r["gpu_start_ns"] is not None for r in rows)
        for r in rows:
            site = sites.get(r["code"], {})
            if site.get("kind") != "phase" or r["depth"] != 0 or r["cycle"] < WARMUP_CYCLES:
                continue
            if gpu:
                if r["gpu_start_ns"] is None or r["gpu_end_ns"] is None:
                    continue
                span = r["gpu_end_ns"] - r["gpu_start_ns"]
            else:
                span = r["end_ns"] - r["start_ns"]
            out.setdefault(site["phase"], []).append(span / 1e6)
            out.setdefault(f"{site['phase']}@cycles", []).append(float(r["cycle"]))
    return out


def compare_sampling(
    full: dict[str, list[float]] | None, sampled: dict[str, list[float]] | None, n: int
) -> dict[str, Any]:
    """Per phase: median span unsampled, sampled (one cycle in n), their ratio - 1 in %, and
    the median of the unsampled run's cycles that sampling would time against its own median
    (the sampling error alone, without the spread between processes)."""
    from tracekit.collectors.recording.gpu import sampled as picked

    if not full:
        return {"error": "the unsampled run failed"}
    res: dict[str, Any] = {}
    for phase, spans in full.items():
        if phase.endswith("@cycles"):
            continue
        cycles = [int(c) for c in full[f"{phase}@cycles"]]
        m_full = statistics.median(spans)
        # the cycles `--gpu-sample n` would time (collectors/recording/gpu.py `sampled`), and
        # the same rule shifted by 1..7 cycles: 8 different samples of the same calls
        errs = []
        for shift in range(8):
            sub = [s for s, c in zip(spans, cycles, strict=True) if picked(c + shift, n)]
            errs.append(100.0 * (statistics.median(sub) / m_full - 1.0) if sub else None)
        m_samp = statistics.median(sampled[phase]) if sampled and sampled.get(phase) else None
        res[phase] = {
            "unsampled_p50_ms": m_full,
            "sampled_p50_ms": m_samp,
            "sampled_vs_unsampled_pct": 100.0 * (m_samp / m_full - 1.0) if m_samp else None,
            "calls": [len(spans), len(sampled[phase]) if sampled and phase in sampled else 0],
            "subsample_vs_all_pct": errs[0],
            "shifted_subsamples_pct": errs,
        }
    return res


# -- micro (child process) --------------------------------------------------------------------


def micro(device: str, calls: int, repeat: int) -> dict[str, Any]:
    """CPU ns per wrapped call in light mode (see the module docstring, part 1)."""
    import gc
    import shutil
    import types

    import torch

    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.recorder import Recorder, RecorderConfig
    from tracekit.collectors.recording import native as native_mod
    from tracekit.collectors.wrappers import install

    cuda = device == "cuda"
    x = torch.zeros(16, device="cuda" if cuda else "cpu")
    if cuda:
        torch.cuda.synchronize()
    gc.collect()

    def op(t: Any = None) -> Any:
        return t

    tmp = Path(tempfile.mkdtemp())
    res: dict[str, Any] = {"calls": calls, "repeat": repeat, "device": device}

    def loop(fn: Any, n: int) -> tuple[float, float]:
        wall, cpu = [], []
        for _ in range(repeat):
            c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
            for _ in range(n):
                fn(x)
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            wall.append((t1 - t0) / n)
            cpu.append((c1 - c0) / n)
            if cuda:
                torch.cuda.synchronize()
        return statistics.median(wall), statistics.median(cpu)

    def recorder(
        name: str, gpu_sample: int, native: bool = True, driver_events: bool = True
    ) -> tuple[Recorder, Any]:
        rec = Recorder(
            RecorderConfig(
                raw_dir=tmp / name, flush_records=1000, gpu_sample=gpu_sample, native=native,
                driver_events=driver_events,
            )
        )  # fmt: skip
        mod = types.ModuleType(f"tk_bench_{name}")
        for fn_name in ("outer", "inner", "draft", "verify", "draft_extend"):
            setattr(mod, fn_name, op)

        def step(t: Any) -> Any:
            mod.draft(t)
            mod.verify(t)
            mod.draft_extend(t)
            return t

        mod.step = step  # type: ignore[attr-defined]
        sites = [
            Site(target=Target.parse(f"{mod.__name__}:outer"), phase="verify"),
            Site(target=Target.parse(f"{mod.__name__}:inner"), phase="allreduce"),
            Site(target=Target.parse(f"{mod.__name__}:draft"), phase="draft"),
            Site(target=Target.parse(f"{mod.__name__}:verify"), phase="verify"),
            Site(target=Target.parse(f"{mod.__name__}:draft_extend"), phase="draft_extend"),
            Site(target=Target.parse(f"{mod.__name__}:step"), cycle=True),
        ]
        for site in sites:
            install(mod, site, rec)
        mod.outer(x)  # first calls: registration, calibration
        mod.step(x)
        return rec, mod

    def bare_step(t: Any) -> Any:
        op(t)
        op(t)
        op(t)
        return t

    res["bare_ns"], res["bare_cpu_ns"] = loop(op, calls)
    res["bare_cycle_ns"], res["bare_cycle_cpu_ns"] = loop(bare_step, calls // 4)
    cases = [("outermost", 1, None), ("outermost_no_share", 1, -1), ("outermost_sample8", 8, None)]
    for name, n, gap in cases:
        rec, mod = recorder(name, n)
        rec._share_gap_ns = rec.config.share_gap_ns if gap is None else gap
        e0 = rec.events_recorded
        w, c = loop(mod.outer, calls)
        res[f"{name}_cost_ns"] = w - res["bare_ns"]
        res[f"{name}_cost_cpu_ns"] = c - res["bare_cpu_ns"]
        res[f"{name}_events_per_call"] = (rec.events_recorded - e0) / (calls * repeat)
        rec.close()
    res["hot_path"] = (
        "native" if native_mod.NATIVE is not None else f"python ({native_mod.WHY_NOT})"
    )
    cycle_cases = [
        ("cycle", 1, True, False),  # the defaults (native hot path, torch's events)
        ("cycle_sample8", 8, True, False),
        ("cycle_driver_events", 1, True, True),  # native hot path, driver-API events
        ("cycle_python", 1, False, False),  # the Python path (TRACEKIT_NATIVE=0)
        ("cycle_python_sample8", 8, False, False),
    ]
    for name, n, use_native, driver in cycle_cases:
        if use_native and native_mod.NATIVE is None:
            continue
        rec, mod = recorder(name, n, use_native, driver)
        res[f"{name}_gpu_events"] = rec.process_info.get("gpu_events") if cuda else None
        e0 = rec.events_recorded
        w, c = loop(mod.step, calls // 4)
        # per wrapped call: 4 a cycle (the cycle target and its three phases)
        res[f"{name}_cost_per_call_ns"] = (w - res["bare_cycle_ns"]) / 4
        res[f"{name}_cost_per_call_cpu_ns"] = (c - res["bare_cycle_cpu_ns"]) / 4
        res[f"{name}_events_per_cycle"] = (rec.events_recorded - e0) / ((calls // 4) * repeat)
        if name in ("cycle", "cycle_python"):
            tag = "" if name == "cycle" else "_python"
            fr = rec.enter(Site(target=Target.parse("tk_bench_x:o"), phase="verify"))
            w, c = loop(mod.inner, calls)
            rec.exit(fr, True, None)
            res[f"nested{tag}_cost_ns"], res[f"nested{tag}_cost_cpu_ns"] = (
                w - res["bare_ns"],
                c - res["bare_cpu_ns"],
            )
        if name != "cycle":
            rec.close()
            continue
            rec.set_recording(False)
            w, c = loop(mod.inner, calls)
            rec.set_recording(True)
            res["inactive_cost_ns"] = w - res["bare_ns"]
        rec.close()
    if cuda:
        ev = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        w, c = loop(lambda _t: ev.record(), calls)
        res["event_record_ns"], res["event_record_cpu_ns"] = w, c
        capturing = torch.cuda.is_current_stream_capturing
        res["capture_check_ns"], _ = loop(lambda _t: capturing(), calls)
        builtin = torch._C._cuda_isCurrentStreamCapturing
        res["capture_check_builtin_ns"], _ = loop(lambda _t: builtin(), calls)
        if native_mod.NATIVE is not None:
            try:
                tc = torch._C
                nev = native_mod.NATIVE.CudaEvent(tc._cuda_getCurrentRawStream, tc._cuda_getDevice)
                w, c = loop(lambda _t: nev.record(), calls)
                res["driver_event_record_ns"], res["driver_event_record_cpu_ns"] = w, c
                # the same two events timed both ways: the driver's elapsed time is torch's
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                na = native_mod.NATIVE.CudaEvent(tc._cuda_getCurrentRawStream, tc._cuda_getDevice)
                nb = native_mod.NATIVE.CudaEvent(tc._cuda_getCurrentRawStream, tc._cuda_getDevice)
                a.record()
                na.record()
                y = x
                for _ in range(50):
                    y = y @ torch.ones(16, 16, device="cuda")
                b.record()
                nb.record()
                torch.cuda.synchronize()
                res["span_torch_ms"] = a.elapsed_time(b)
                res["span_driver_ms"] = na.elapsed_time(nb)
                res.update(resolve_check(torch, native_mod.NATIVE))
            except Exception as exc:
                res["driver_event_error"] = f"{type(exc).__name__}: {exc}"
    shutil.rmtree(tmp, ignore_errors=True)
    return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in res.items()}


def resolve_check(torch: Any, native: Any, n: int = 2000) -> dict[str, Any]:
    """The flush's event resolution both ways on the same events: `n` calls, each call's end
    event the next one's start (shared boundaries), a small matmul chain in each; the native
    `resolve_events` (driver calls without the GIL) against the Python rule over the same
    events (collectors/recording/gpu.py `_event_times`): the largest difference in ns, and
    the wall time of each."""
    from tracekit.collectors.recording.gpu import GpuEvents

    tc = torch._C
    make = [tc._cuda_getCurrentRawStream, tc._cuda_getDevice]
    ref = native.CudaEvent(*make)
    ref.record()
    ref.synchronize()
    x = torch.ones(64, 64, device="cuda")
    prev = native.CudaEvent(*make)
    prev.record()
    entries = []
    for seq in range(n):
        for _ in range(3):
            x = x @ x * 0.01
        end = native.CudaEvent(*make)
        end.record()
        entries.append((seq, prev, end))
        prev = end
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fast = native.resolve_events(ref, 10**18, entries, n)
    t1 = time.perf_counter()
    holder = GpuEvents.__new__(GpuEvents)  # the Python rule alone (no recorder around it)
    holder._gpu_ref, holder._native, holder._yielding = (ref, 10**18), None, False
    slow = GpuEvents._event_times(holder, entries)
    t2 = time.perf_counter()
    both = [(f, s) for f, s in zip(fast, slow) if f is not None and s is not None]
    worst = max((abs(a - b) for f, s in both for a, b in zip(f, s)), default=-1)
    shared = max((abs(a[1] - b[0]) for a, b in itertools.pairwise(fast) if a and b), default=-1)
    return {
        "resolve_n": n,
        "resolve_native_us": (t1 - t0) * 1e6,
        "resolve_python_us": (t2 - t1) * 1e6,
        "resolve_max_diff_ns": worst,
        "resolve_shared_gap_ns": shared,
        "resolve_none": sum(f is None for f in fast),
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"


def summary_lines(results: dict[str, Any]) -> list[str]:
    """The short table printed last."""
    lines = []
    m = results.get("micro") or {}
    if "bare_ns" in m:
        lines.append("CPU per wrapped call, light mode (µs, thread CPU; wall in brackets):")
        for key, label in (
            ("outermost_no_share_cost", "outermost, 2 events a call (before)"),
            ("outermost_cost", "outermost, shared boundary events"),
            ("outermost_sample8_cost", "outermost, --gpu-sample 8"),
            ("cycle_cost_per_call", "demo-shaped cycle, per call"),
            ("cycle_sample8_cost_per_call", "demo-shaped cycle, --gpu-sample 8"),
            ("cycle_driver_events_cost_per_call", "cycle, native path, driver-API events"),
            ("cycle_python_cost_per_call", "cycle, Python path (torch's events)"),
            ("cycle_python_sample8_cost_per_call", "cycle, Python path, --gpu-sample 8"),
            ("nested_cost", "nested phase"),
            ("nested_python_cost", "nested phase, Python path"),
        ):
            if f"{key}_ns" in m:
                lines.append(
                    f"  {label:40} {m[f'{key}_cpu_ns'] / 1e3:7.2f} ({m[f'{key}_ns'] / 1e3:.2f})"
                )
        for key, label in (
            ("event_record_ns", "one torch.cuda.Event.record"),
            ("driver_event_record_ns", "one driver-API CudaEvent.record"),
            ("capture_check_ns", "torch.cuda.is_current_stream_capturing()"),
            ("capture_check_builtin_ns", "its builtin"),
        ):
            if key in m:
                lines.append(f"  {label}: {m[key] / 1e3:.2f} µs")
        if "resolve_n" in m:
            lines.append(
                f"  resolving {m['resolve_n']} calls: native {m['resolve_native_us']:.0f} µs, "
                f"Python {m['resolve_python_us']:.0f} µs, largest difference "
                f"{m['resolve_max_diff_ns']} ns, shared boundaries {m['resolve_shared_gap_ns']} ns"
            )
        if "span_driver_ms" in m:
            lines.append(
                f"  one span, torch {m['span_torch_ms']:.4f} ms, driver {m['span_driver_ms']:.4f} ms"
            )
        for k in ("cycle_events_per_cycle", "cycle_sample8_events_per_cycle"):
            if k in m:
                lines.append(f"  {k}: {m[k]}")
    for key in ("ab", "abtorch", "abnoev", "abdrv", "ab8", "ab8noflush", "abpy", "abprof"):
        for path, r in (results.get(key) or {}).items():
            if "cost_pct" in r:
                lines.append(
                    f"{key} {path}: light {r['cost_pct']:+.2f}% of the cycle, 95% t "
                    f"[{r['t_lo_pct']:+.2f}, {r['t_hi_pct']:+.2f}], bootstrap "
                    f"[{r['boot_lo_pct']:+.2f}, {r['boot_hi_pct']:+.2f}] ({r['groups']} groups,"
                    f" off {r['off_ms']:.3f} ms); median group {r['median_pct']:+.2f}% "
                    f"[{_pct(r.get('median_lo_pct'))}, {_pct(r.get('median_hi_pct'))}]"
                    if r.get("t_lo_pct") is not None
                    else f"{key} {path}: light {r['cost_pct']:+.2f}% ({r['groups']} group)"
                )
            else:
                lines.append(f"{key} {path}: {r.get('error')}")
            for series in ("diff_step_boundary_ms", "diff_step_comm_ms"):
                d = r.get(series)
                if d and d.get("lo_us") is not None:
                    lines.append(
                        f"  {series}: {d['diff_us']:+.2f} µs a step "
                        f"[{d['lo_us']:+.2f}, {d['hi_us']:+.2f}] (off {d['off_us']:.2f} µs)"
                    )
    for path, phases in (results.get("sampling") or {}).items():
        for phase, r in phases.items():
            if isinstance(r, dict) and r.get("subsample_vs_all_pct") is not None:
                shifted = [x for x in r["shifted_subsamples_pct"] if x is not None]
                lines.append(
                    f"sampling {path} {phase}: p50 {r['unsampled_p50_ms']:.3f} ms unsampled, "
                    f"sampled run {_pct(r['sampled_vs_unsampled_pct'])} %; the unsampled run's "
                    f"sampled cycles {r['subsample_vs_all_pct']:+.2f}% (8 shifted samples "
                    f"{min(shifted):+.2f} to {max(shifted):+.2f}%)"
                )
            elif phase == "error":
                lines.append(f"sampling {path}: {r}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--out", default="gpu_collector_out")
    ap.add_argument("--budget-s", type=float, default=400.0)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--model-size", default="large")
    ap.add_argument("--tiny", action="store_true", help="tiny model, few cycles and calls")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--ab-cycles", type=int, default=264, help="A/B run cycles")
    ap.add_argument("--ab-block", type=int, default=8, help="cycles a block")
    ap.add_argument("--sample-cycles", type=int, default=120)
    ap.add_argument("--sample-n", type=int, default=8)
    ap.add_argument(
        "--sampling-error-only",
        action="store_true",
        help="the sampling part runs the unsampled run alone (the sampling error inside it)",
    )
    ap.add_argument("--run-timeout-s", type=float, default=170.0)
    ap.add_argument("--skip", default="", help="comma-separated parts to skip")
    ap.add_argument(
        "--paths", default="", help=f"comma-separated demo paths (default: all of {list(PATHS)})"
    )
    ap.add_argument("--micro", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.tiny:
        a.model_size, a.calls, a.repeat = "tiny", min(a.calls, 2000), min(a.repeat, 3)
        a.ab_cycles, a.ab_block, a.sample_cycles = min(a.ab_cycles, 24), 2, min(a.sample_cycles, 16)
    if a.micro:
        print(json.dumps(micro(a.device, a.calls, a.repeat)), flush=True)
        return 0
    b = Bench(a)
    skip = set(filter(None, a.skip.split(",")))
    steps = [
        ("micro", b.micro, 30.0),
        ("ab", lambda: b.ab("ab", 1), 60.0),
        ("abtorch", lambda: b.ab("abtorch", 1, {"TRACEKIT_GPU_EVENTS": "torch"}), 60.0),
        ("abnoev", lambda: b.ab("abnoev", 1_000_000), 60.0),  # no CUDA events after cycle 0
        # no flush while the cycles run (the rows wait in the buffer for the exit's flush)
        ("abnoflush", lambda: b.ab("abnoflush", 1, program_env=NO_FLUSH_ENV), 60.0),
        # neither: the hot path alone (no CUDA event after cycle 0, no flush while it runs)
        ("abbare", lambda: b.ab("abbare", 1_000_000, program_env=NO_FLUSH_ENV), 60.0),
        ("ab8", lambda: b.ab("ab8", a.sample_n), 60.0),
        # the defaults (one cycle in `--sample-n` GPU-timed) with no flush while the cycles run
        ("ab8noflush", lambda: b.ab("ab8noflush", a.sample_n, program_env=NO_FLUSH_ENV), 60.0),
        ("abpy", lambda: b.ab("abpy", 1, {"TRACEKIT_NATIVE": "0"}), 60.0),
        ("sampling", b.sampling, 60.0),
        ("abprof", lambda: b.ab("abprof", 1, profile=True), 60.0),  # where the cost goes
    ]
    for name, fn, need in steps:
        if name in skip or not b.fits(name, need):
            continue
        try:
            fn()
        except Exception as exc:  # one broken part must not lose the others' results
            b.results["errors"][name] = f"{type(exc).__name__}: {exc}"
            b._log.write(traceback.format_exc())
            b.log(f"part {name} failed: {type(exc).__name__}: {exc}")
        b.save()
    for line in summary_lines(b.results):
        b.log(line)
    b.save()
    return 0


if __name__ == "__main__":
    sys.exit(main())
