"""`tracekit launch`: run a command with every Python process of its tree instrumented.

1. Create a fresh run directory (never shared: `mkdir` without exist_ok, a numeric suffix on a
   clash) and copy the phase map into `raw/phasemap.toml`.
2. Check the map's targets against this environment's sources (AST, no import) and list the
   unresolved ones once.
3. Put the bootstrap directory (only `sitecustomize.py`) at the front of PYTHONPATH and pass the
   configuration in `TRACEKIT_*` variables.
4. Run the command as a child in its own session / process group; sample NVML at 10 Hz; watch
   `/proc` for the processes of that group (to list which were instrumented and which not).
5. Forward SIGINT / SIGTERM to the whole group; wait (bounded by `grace_s`, then SIGKILL).
6. Write `run.json`; merge unless told not to; return the child's exit code (128+N for a
   signal N).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit._version import __version__
from tracekit.collectors import phasemap as pm
from tracekit.collectors import runtime as rt
from tracekit.collectors.recorder import EXIT_DEADLINE_S, PROCESS_FILE
from tracekit.collectors.redact import redact_argv
from tracekit.collectors.resolve import FOUND, UNKNOWN, installed_module_file, resolve_all
from tracekit.errors import CollectorError, TracekitError
from tracekit.store.layout import RunLayout
from tracekit.store.schema import SCHEMA_VERSION

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"


@dataclass
class LaunchOptions:
    command: list[str]
    phasemap_path: Path
    mode: str = "light"
    profile_cycles: str | None = None
    out: Path = Path("tracekit-runs")
    name: str | None = None
    merge: bool = True
    grace_s: float = 30.0
    flush_records: int = 1000
    flush_seconds: float = 1.0
    nvml: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    node_rank: int | None = None  # multi-node: this node's part goes to out/name/parts/node-K
    nnodes: int | None = None
    keep_bytes: int = 0  # retention of each process's records (collectors/segments.py); 0: all
    keep_seconds: float = 0.0
    metrics_port: int | None = None  # serve Prometheus metrics from here (tracekit/live)
    metrics_host: str = "127.0.0.1"


@dataclass
class LaunchResult:
    run_dir: Path
    exit_code: int
    run_manifest: dict[str, Any]
    merge_result: Any = None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:40] or "run"


def default_name(command: list[str]) -> str:
    prog = Path(command[0]).name if command else "run"
    if prog.startswith("python") and len(command) > 2 and command[1] == "-m":
        prog = command[2]
    elif prog.startswith("python") and len(command) > 1:
        prog = Path(command[1]).stem
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{_slug(prog)}"


def create_run_dir(out: Path, name: str) -> Path:
    """A new directory `out/name` (or `name-1`, `name-2`, ...): two launches never share one."""
    out.mkdir(parents=True, exist_ok=True)
    for i in range(10000):
        cand = out / (name if i == 0 else f"{name}-{i}")
        try:
            cand.mkdir()
        except FileExistsError:
            continue
        return cand
    msg = f"{out}: could not create a new run directory named {name}; pass another `--name` or `--out`"
    raise CollectorError(msg)


def check_targets(pmap: pm.PhaseMap, roots: list[Path] | None = None) -> list[tuple[str, str]]:
    """(target, why) for every target of the map that does not resolve in these sources."""
    locate = installed_module_file if roots is None else None
    bad: list[tuple[str, str]] = []
    for res in resolve_all(pmap.targets(), roots or [], locate):
        if res.status not in (FOUND, UNKNOWN):
            bad.append(
                (str(res.target), f"{res.status}: {res.detail}" if res.detail else res.status)
            )
    return bad


class ProcessWatcher:
    """Samples /proc for the processes of one session (the child's)."""

    def __init__(self, sid: int, period: float = 0.2) -> None:
        self.sid = sid
        self.period = period
        self.seen: dict[int, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tracekit-procs", daemon=True)

    def start(self) -> None:
        if Path("/proc/self/stat").exists():
            self._thread.start()

    def scan(self) -> list[int]:
        alive: list[int] = []
        try:
            entries = os.listdir("/proc")
        except OSError:
            return alive
        for entry in entries:
            if not entry.isdigit():
                continue
            pid = int(entry)
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
                fields = stat[stat.rindex(")") + 2 :].split()
                sid = int(fields[3])
            except (OSError, ValueError, IndexError):
                continue
            if sid != self.sid or fields[0] == "Z":
                continue
            alive.append(pid)
            if pid not in self.seen:
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                    cmd = [a.decode(errors="replace") for a in argv if a]
                except OSError:
                    cmd = []
                self.seen[pid] = {"pid": pid, "ppid": int(fields[1]), "argv": redact_argv(cmd)}
        return alive

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scan()
            self._stop.wait(self.period)

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=max(0.0, timeout))


def _warn(msg: str) -> None:
    sys.stderr.write(f"tracekit: {msg}\n")
    sys.stderr.flush()


def _python_flags_warning(command: list[str]) -> str | None:
    if command and Path(command[0]).name.startswith("python"):
        for arg in command[1:]:
            if not arg.startswith("-") or arg in ("-m", "-c"):
                break
            if arg in ("-E", "-I", "-S") or (
                arg.startswith("-") and not arg.startswith("--") and set(arg[1:]) & set("EIS")
            ):
                return (
                    f"`{arg}` makes Python ignore PYTHONPATH/site, so the bootstrap cannot load in "
                    "that interpreter (nor in children started with the same flags); servers with a "
                    "plugin entry point (sglang, vllm) are still covered through it"
                )
    return None


def build_env(
    run_dir: Path, opts: LaunchOptions, pmap: pm.PhaseMap, phases_copy: Path
) -> dict[str, str]:
    env = dict(os.environ)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + old if old else "")
    env[rt.ENV_RUN_DIR] = str(run_dir.resolve())
    env[rt.ENV_PHASES] = str(phases_copy.resolve())
    env[rt.ENV_ADAPTER] = pmap.name
    env[rt.ENV_MODE] = opts.mode
    env[rt.ENV_FLUSH_RECORDS] = str(opts.flush_records)
    env[rt.ENV_FLUSH_SECONDS] = str(opts.flush_seconds)
    if opts.profile_cycles:
        env[rt.ENV_PROFILE_CYCLES] = opts.profile_cycles
    if opts.keep_bytes:
        env[rt.ENV_KEEP_BYTES] = str(opts.keep_bytes)
    if opts.keep_seconds:
        env[rt.ENV_KEEP_SECONDS] = str(opts.keep_seconds)
    # TRACEKIT_DISABLE passes through: `TRACEKIT_DISABLE=1 tracekit launch ...` runs the tree
    # launched (bootstrap on PYTHONPATH, NVML sampled) but not recorded, the launcher's own cost.
    env.update(opts.extra_env)
    return env


def _exit_deadline() -> float:
    text: str = os.environ.get(rt.ENV_EXIT_DEADLINE, "")
    try:
        value = float(text) if text else float(EXIT_DEADLINE_S)
        return max(0.0, value)
    except ValueError:
        return float(EXIT_DEADLINE_S)


def _read_processes(raw: Path) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for f in raw.glob(f"pid-*/{PROCESS_FILE}"):
        try:
            data = json.loads(f.read_text())
            out[int(data["pid"])] = data
        except (OSError, ValueError, KeyError):
            continue
    return out


def launch(opts: LaunchOptions, *, warn: Callable[[str], None] = _warn) -> LaunchResult:
    if not opts.command:
        msg = "no command to run; put it after `--`, e.g. `tracekit launch --adapter demo -- python -m tracekit.demo`"
        raise CollectorError(msg)
    if opts.mode not in ("light", "full"):
        msg = f"--mode {opts.mode!r}: expected light or full"
        raise CollectorError(msg)
    if opts.profile_cycles:
        from tracekit.collectors.profiler import CycleWindow

        CycleWindow.parse(opts.profile_cycles)
    pmap = pm.load(opts.phasemap_path)
    exe = shutil.which(opts.command[0])
    if exe is None:
        msg = f"command not found: {opts.command[0]!r}; check the command after `--`"
        raise CollectorError(msg)

    from tracekit.collectors import multinode

    node_rank, nnodes, node_source = multinode.detect(
        opts.command, node_rank=opts.node_rank, nnodes=opts.nnodes
    )
    if node_rank is None:
        run_dir = create_run_dir(Path(opts.out), opts.name or default_name(opts.command))
    else:
        run_dir = multinode.create_part_dir(Path(opts.out), opts.name, node_rank)
    layout = RunLayout(run_dir)
    layout.raw.mkdir()
    phases_copy = layout.raw / "phasemap.toml"
    phases_copy.write_text(pmap.text)

    unresolved = check_targets(pmap)
    missing_pkgs = sorted(
        {
            t.split(".")[0].split(":")[0]
            for t, why in unresolved
            if installed_module_file(t.split(".")[0].split(":")[0]) is None and "__main__" not in t
        }
    )
    if missing_pkgs:
        warn(
            f"package(s) {', '.join(missing_pkgs)} not found by this Python ({sys.executable}); "
            f"targets of adapter `{pmap.name}` there could not be checked before the run"
        )
        unresolved_shown = [
            (t, w) for t, w in unresolved if t.split(".")[0].split(":")[0] not in missing_pkgs
        ]
    else:
        unresolved_shown = unresolved
    if unresolved_shown:
        unresolved = unresolved_shown
        lines = "; ".join(f"{t} ({why})" for t, why in unresolved)
        warn(
            f"{len(unresolved)} of {len(pmap.targets())} targets of adapter `{pmap.name}` do not resolve here and are skipped: {lines}"
        )
    flag_warning = _python_flags_warning(opts.command)
    if flag_warning:
        warn(flag_warning)

    manifest: dict[str, Any] = {
        "tracekit_version": __version__,
        "schema_version": SCHEMA_VERSION,
        "command": redact_argv(opts.command),
        "cwd": os.getcwd(),
        "host": socket.gethostname(),
        "node_rank": node_rank,
        "nnodes": nnodes,
        "node_source": node_source or None,
        "adapter": pmap.name,
        "phasemap": str(opts.phasemap_path),
        "package": pmap.package,
        "cycle_source": pmap.cycle.source,
        "mode": opts.mode,
        "profile_cycles": opts.profile_cycles,
        "start_ns": time.time_ns(),
        "status": "running",
        "unresolved_at_start": [{"target": t, "why": w} for t, w in unresolved],
    }
    _write_manifest(layout.manifest, manifest)

    live = None
    if opts.metrics_port is not None:  # launch-side (tracekit/live), fed by the flushed records
        from tracekit.live.metrics import serve_metrics

        live = serve_metrics(layout.raw, opts.metrics_port, host=opts.metrics_host, warn=warn)
        warn(f"serving live metrics on {live.url}")

    from tracekit.collectors.nvml import NvmlSampler

    sampler = NvmlSampler(layout.raw / "nvml")
    if opts.nvml:
        sampler.start(warn)
    manifest["nvml"] = (
        "sampled at 10 Hz"
        if sampler.available
        else f"not available ({sampler.reason or 'disabled'})"
    )

    env = build_env(run_dir, opts, pmap, phases_copy)
    try:
        child = subprocess.Popen(opts.command, env=env, start_new_session=True)
    except OSError as exc:
        sampler.stop()
        if live is not None:
            live.stop()
        msg = f"cannot start {opts.command[0]!r} ({exc.strerror or exc}); check the command after `--`"
        raise CollectorError(msg) from exc
    watcher = ProcessWatcher(child.pid)
    watcher.start()

    forwarded: list[int] = []
    deadline: list[float] = []

    def forward(signum: int, frame: Any) -> None:
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)
        if not deadline:
            deadline.append(time.monotonic() + opts.grace_s)

    old_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            old_handlers[sig] = signal.signal(sig, forward)
    killed = False
    try:
        while True:
            try:
                rc = child.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
            if deadline and time.monotonic() > deadline[0] and not killed:
                warn(
                    f"the command did not stop within {opts.grace_s:.0f} s of the signal; killing its process group"
                )
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(child.pid, signal.SIGKILL)
                killed = True
        # Children of the command that outlive it (ranks of a killed main process): give them
        # the grace period to flush and exit, then stop them.
        _reap_group(child.pid, watcher, opts.grace_s if not killed else 1.0, warn)
    finally:
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)
        # one deadline for the launcher's own threads too
        until = time.monotonic() + _exit_deadline()
        watcher.stop(timeout=until - time.monotonic())
        sampler.stop(timeout=until - time.monotonic())
        if live is not None:
            live.stop(timeout=until - time.monotonic())

    exit_code = rc if rc >= 0 else 128 - rc
    procs = _read_processes(layout.raw)
    instrumented = [
        {
            "pid": pid,
            "argv": p.get("argv"),
            "via": p.get("via"),
            "records": p.get("records", 0),
            "finished": p.get("finished", False),
        }
        for pid, p in sorted(procs.items())
    ]
    not_instrumented = [
        {"pid": pid, "argv": info["argv"]}
        for pid, info in sorted(watcher.seen.items())
        if pid not in procs
    ]
    unresolved_run: dict[str, str] = {}
    patched: set[str] = set()
    via_base: dict[str, str] = {}
    for p in procs.values():
        patched.update(p.get("patched") or [])
        via_base.update(p.get("via_base") or {})
        for t, why in (p.get("unresolved") or {}).items():
            unresolved_run.setdefault(t, why)
    never = sorted(set(map(str, pmap.targets())) - patched - set(unresolved_run))
    components = _components(procs)
    manifest.update(
        status="finished",
        end_ns=time.time_ns(),
        exit_code=exit_code,
        returncode=rc,
        signals_forwarded=[signal.Signals(s).name for s in forwarded],
        killed_after_grace=killed,
        processes={"instrumented": instrumented, "not_instrumented": not_instrumented},
        targets={
            "patched": sorted(patched),
            "unresolved": [{"target": t, "why": w} for t, w in sorted(unresolved_run.items())],
            "module_never_imported": never,
            "via_base": dict(sorted(via_base.items())),
        },
        components=components,
    )
    try:
        _write_manifest(layout.manifest, manifest)
    except OSError as exc:  # disk full: the child's exit code and raw data still matter most
        warn(f"could not write {layout.manifest} ({exc.strerror or exc}); the raw data is kept")
    new_unresolved = [t for t in unresolved_run if t not in {u for u, _ in unresolved}]
    if new_unresolved:
        warn(f"targets that did not resolve in the program: {', '.join(sorted(new_unresolved))}")
    disabled = os.environ.get(rt.ENV_DISABLE, "") not in ("", "0")
    if disabled:
        warn(
            f"{rt.ENV_DISABLE} is set, so the command ran launched but not recorded (the "
            "launcher's own cost); unset it to record"
        )
    elif not patched and never:
        modules = sorted({t.split(":")[0] for t in never})
        warn(
            f"nothing was recorded: the program never imported the modules of adapter "
            f"`{pmap.name}` ({', '.join(modules)}), so none of its targets was patched "
            f"({', '.join(never)}); check that the command runs the server the phase map is for"
        )

    result = LaunchResult(run_dir=run_dir, exit_code=exit_code, run_manifest=manifest)
    if opts.merge:
        from tracekit.store.merge import merge

        try:
            result.merge_result = merge(run_dir)
            _check_collectives_seen(run_dir, opts.mode, pmap, result.merge_result, warn)
        except OSError as exc:
            warn(
                f"could not merge {run_dir} ({exc.strerror or exc}); the raw data is kept: "
                f"free some space, then run `tracekit merge {run_dir}`"
            )
        except TracekitError as exc:
            warn(f"could not merge {run_dir}: {exc}; the raw data is kept")
        except Exception as exc:  # a bug in merge must not change the command's exit code
            warn(
                f"could not merge {run_dir} ({type(exc).__name__}: {exc}); the raw data is "
                f"kept: run `tracekit merge {run_dir}` to see the error, and report it"
            )
    return result


def _check_collectives_seen(
    run_dir: Path, mode: str, pmap: pm.PhaseMap, merged: Any, warn: Callable[[str], None]
) -> None:
    """Light mode, several ranks, an allreduce phase in the map, and not one allreduce call
    recorded: the collectives ran where the wrappers cannot fire. Say so once."""
    if mode != "light" or "allreduce" not in pmap.phase_names or len(merged.ranks) < 2:
        return
    from tracekit.store.reader import read_table

    phases = read_table(run_dir, "phases")
    if phases.height == 0 or "allreduce" in set(phases["phase"].to_list()):
        return
    warn(
        f"no allreduce call was recorded on {len(merged.ranks)} ranks: the collectives ran inside "
        "a torch.compile graph or a captured CUDA graph, where Python wrappers do not fire. "
        "Allreduce is not measured in this run (summary and report say so); for its share "
        "run with --mode full, or eager (vLLM: --enforce-eager)"
    )


def _components(procs: dict[int, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each component named by a process's probe (collectors/components.py): one entry per
    distinct class, with the pids that use it."""
    out: dict[str, list[dict[str, Any]]] = {}
    for pid, p in sorted(procs.items()):
        for name, info in (p.get("components") or {}).items():
            entries = out.setdefault(name, [])
            for e in entries:
                if e.get("class") == info.get("class"):
                    e["pids"].append(pid)
                    break
            else:
                entries.append({**info, "pids": [pid]})
    return out


def _reap_group(
    sid: int, watcher: ProcessWatcher, grace_s: float, warn: Callable[[str], None]
) -> None:
    end = time.monotonic() + grace_s
    alive = watcher.scan()
    if not alive:
        return
    while alive and time.monotonic() < end:
        time.sleep(0.1)
        alive = watcher.scan()
    if alive:
        warn(f"{len(alive)} process(es) of the command outlived it; sending SIGTERM then SIGKILL")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(sid, sig)
            for pid in alive:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            t = time.monotonic() + 5
            while alive and time.monotonic() < t:
                time.sleep(0.1)
                alive = watcher.scan()
            if not alive:
                break


def _write_manifest(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(data, indent=1, default=str))
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
