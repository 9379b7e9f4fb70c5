"""`tracekit launch`: run a command with every Python process of its tree instrumented.

1. Create a fresh run directory (never shared: `mkdir` without exist_ok, a numeric suffix on a
   clash) and copy the phase map into `raw/phasemap.toml` (`rundir`, `multinode`).
2. Check the map's targets against this environment's sources (AST, no import) and list the
   unresolved ones once (`preflight`).
3. Write run.json, with the map's cycle rule for merge (`runjson`).
4. Put the bootstrap directory (only `sitecustomize.py`) at the front of PYTHONPATH and pass the
   configuration in `TRACEKIT_*` variables (`env`).
5. Run the command as a child in its own session / process group; sample NVML at 10 Hz
   (`nvml`); watch `/proc` for the processes of that group (to list which were instrumented and
   which not); forward SIGINT / SIGTERM to the whole group; wait (bounded by `grace_s`, then
   SIGKILL) (`supervise`).
6. Rewrite `run.json`; merge unless told not to; return the child's exit code (128+N for a
   signal N).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracekit.collectors import phasemap as pm
from tracekit.collectors.runtime import ENV_DISABLE
from tracekit.errors import CollectorError, TracekitError
from tracekit.launch import multinode
from tracekit.launch.env import build_env, exit_deadline, recording_disabled
from tracekit.launch.flushask import ask_to_flush
from tracekit.launch.nvml import NvmlSampler
from tracekit.launch.options import LaunchOptions, LaunchResult
from tracekit.launch.preflight import (
    check_command,
    check_options,
    python_flags_warning,
    unresolved_targets,
)
from tracekit.launch.rundir import create_run_dir, default_name
from tracekit.launch.runjson import finish_manifest, read_process_states, start_manifest
from tracekit.launch.supervise import ProcessWatcher, Supervision, wait_child
from tracekit.store.layout import RunLayout
from tracekit.store.raw.files import PHASEMAP_FILE, write_json
from tracekit.store.raw.nvml import NVML_DIR


def _warn(msg: str) -> None:
    sys.stderr.write(f"tracekit: {msg}\n")
    sys.stderr.flush()


def _make_run_dir(opts: LaunchOptions) -> tuple[Path, tuple[int | None, int | None, str]]:
    node = multinode.detect(opts.command, node_rank=opts.node_rank, nnodes=opts.nnodes)
    if node[0] is None:
        run_dir = create_run_dir(Path(opts.out), opts.name or default_name(opts.command))
    else:
        run_dir = multinode.create_part_dir(Path(opts.out), opts.name, node[0])
    return run_dir, node


def _remove_unused(run_dir: Path) -> None:
    """Remove the run directory of a launch that failed before its command started: it holds
    only what the launcher wrote (run.json, the phase map copy), no record."""
    shutil.rmtree(run_dir, ignore_errors=True)


def launch(opts: LaunchOptions, *, warn: Callable[[str], None] = _warn) -> LaunchResult:
    check_options(opts)
    pmap = pm.load(opts.phasemap_path)
    check_command(opts.command)
    run_dir, node = _make_run_dir(opts)
    layout = RunLayout(run_dir)
    layout.raw.mkdir()
    phases_copy = layout.raw / PHASEMAP_FILE
    phases_copy.write_text(pmap.text)

    unresolved = unresolved_targets(pmap, warn)
    flag_warning = python_flags_warning(opts.command)
    if flag_warning:
        warn(flag_warning)
    manifest = start_manifest(opts, pmap, node, unresolved)
    write_json(layout.manifest, manifest)

    live = None
    if opts.metrics_port is not None:  # launch-side (tracekit/live), fed by the flushed records
        from tracekit.live.metrics import serve_metrics

        try:
            live = serve_metrics(layout.raw, opts.metrics_port, host=opts.metrics_host, warn=warn)
        except CollectorError:
            _remove_unused(run_dir)
            raise
        warn(f"serving live metrics on {live.url}")

    sampler = NvmlSampler(layout.raw / NVML_DIR)
    if opts.nvml:
        sampler.start(warn)
    manifest["nvml"] = (
        "sampled at 10 Hz"
        if sampler.available
        else f"not available ({sampler.reason or 'disabled'})"
    )

    control = Path(tempfile.mkdtemp(prefix="tracekit-control-"))
    env = build_env(run_dir, opts, pmap, phases_copy, control)
    try:
        child = subprocess.Popen(opts.command, env=env, start_new_session=True)
    except OSError as exc:
        shutil.rmtree(control, ignore_errors=True)
        sampler.stop()
        if live is not None:
            live.stop()
        _remove_unused(run_dir)
        msg = f"cannot start {opts.command[0]!r} ({exc.strerror or exc}); check the command after `--`"
        raise CollectorError(msg) from exc
    watcher, sup = ProcessWatcher(child.pid), Supervision()
    try:
        _supervise(child, watcher, sup, opts.grace_s, (control, layout.raw), warn)
    finally:
        until = time.monotonic() + exit_deadline()  # one deadline for the launcher's threads
        watcher.stop(timeout=until - time.monotonic())
        sampler.stop(timeout=until - time.monotonic())
        if live is not None:
            live.stop(timeout=until - time.monotonic())

    procs = read_process_states(layout.raw)
    finish_manifest(manifest, pmap, procs, watcher, sup)
    try:
        write_json(layout.manifest, manifest)
    except OSError as exc:  # disk full: the child's exit code and raw data still matter most
        warn(f"could not write {layout.manifest} ({exc.strerror or exc}); the raw data is kept")
    _say_what_was_recorded(pmap, manifest, unresolved, warn, sup.exit_code)

    result = LaunchResult(run_dir=run_dir, exit_code=sup.exit_code, run_manifest=manifest)
    if opts.merge:
        result.merge_result = _merge(run_dir, opts.mode, pmap, warn)
    return result


def _supervise(
    child: subprocess.Popen[bytes],
    watcher: ProcessWatcher,
    sup: Supervision,
    grace_s: float,
    dirs: tuple[Path, Path],
    warn: Callable[[str], None],
) -> None:
    """Wait for the child; before the first signal is forwarded every recording process is
    asked to flush (`dirs`: the control directory, removed at the end, and raw/)."""
    control, raw = dirs
    watcher.start()
    try:
        wait_child(child, watcher, grace_s, warn, sup, lambda: ask_to_flush(control, raw).to_json())
    finally:
        shutil.rmtree(control, ignore_errors=True)


def _say_what_was_recorded(
    pmap: pm.PhaseMap,
    manifest: dict[str, Any],
    unresolved: list[tuple[str, str]],
    warn: Callable[[str], None],
    exit_code: int = 0,
) -> None:
    """The command's exit status when it failed, then targets that did not resolve in the
    program, or why nothing was recorded: once each. A failed command that recorded nothing
    is said to be the cause (it stopped before importing the server, e.g. on its arguments)."""
    targets = manifest["targets"]
    nothing = not targets["patched"] and bool(targets["module_never_imported"])
    if exit_code:
        names = ", ".join(sorted({t.split(":")[0] for t in targets["module_never_imported"]}))
        cause = (
            f" before importing the modules of adapter `{pmap.name}` ({names}): that is why "
            "nothing was recorded, not the phase map; see the command's output above"
            if nothing and not recording_disabled()
            else ""
        )
        warn(f"the command exited with status {exit_code}{cause}")
    at_start = {u for u, _ in unresolved}
    new_unresolved = [u["target"] for u in targets["unresolved"] if u["target"] not in at_start]
    if new_unresolved:
        warn(f"targets that did not resolve in the program: {', '.join(sorted(new_unresolved))}")
    for line in targets.get("compiled", []):
        warn(line)
    never = targets["module_never_imported"]
    if recording_disabled():
        warn(
            f"{ENV_DISABLE} is set, so the command ran launched but not recorded (the "
            "launcher's own cost); unset it to record"
        )
    elif nothing and not exit_code:
        modules = sorted({t.split(":")[0] for t in never})
        warn(
            f"nothing was recorded: the program never imported the modules of adapter "
            f"`{pmap.name}` ({', '.join(modules)}), so none of its targets was patched "
            f"({', '.join(never)}); check that the command runs the server the phase map is for"
        )


def _merge(run_dir: Path, mode: str, pmap: pm.PhaseMap, warn: Callable[[str], None]) -> Any:
    """Merge the run; a failure is said (the raw data is kept) and never raised: the command's
    exit code is what `tracekit launch` returns."""
    from tracekit.store.merge import merge

    try:
        merged = merge(run_dir)
        _check_collectives_seen(run_dir, mode, pmap, merged, warn)
        return merged
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
    return None


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
