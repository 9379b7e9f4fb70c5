"""The child's environment: the bootstrap directory at the front of PYTHONPATH and the run's
settings in `TRACEKIT_*` variables (read by collectors/runtime.py in every process)."""

from __future__ import annotations

import os
from pathlib import Path

import tracekit.collectors
from tracekit.collectors import phasemap as pm
from tracekit.collectors import runtime as rt
from tracekit.collectors.recorder import EXIT_DEADLINE_S
from tracekit.launch.options import LaunchOptions

# only `sitecustomize.py`: what Python imports at start-up in every process of the tree
BOOTSTRAP_DIR = Path(tracekit.collectors.__file__).resolve().parent / "bootstrap"


def build_env(
    run_dir: Path,
    opts: LaunchOptions,
    pmap: pm.PhaseMap,
    phases_copy: Path,
    control_dir: Path | None = None,
) -> dict[str, str]:
    env = dict(os.environ)
    old = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(BOOTSTRAP_DIR) + (os.pathsep + old if old else "")
    env[rt.ENV_RUN_DIR] = str(run_dir.resolve())
    env[rt.ENV_PHASES] = str(phases_copy.resolve())
    env[rt.ENV_PHASES_SOURCE] = str(Path(opts.phasemap_path).resolve())  # for messages
    env[rt.ENV_ADAPTER] = pmap.name
    env[rt.ENV_MODE] = opts.mode
    env[rt.ENV_FLUSH_RECORDS] = str(opts.flush_records)
    env[rt.ENV_FLUSH_SECONDS] = str(opts.flush_seconds)
    if control_dir is not None:
        env[rt.ENV_CONTROL_DIR] = str(control_dir)
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


def exit_deadline() -> float:
    """The exit deadline (TRACEKIT_EXIT_DEADLINE_S), which bounds the launcher's threads too."""
    text: str = os.environ.get(rt.ENV_EXIT_DEADLINE, "")
    try:
        value = float(text) if text else float(EXIT_DEADLINE_S)
        return max(0.0, value)
    except ValueError:
        return float(EXIT_DEADLINE_S)


def recording_disabled() -> bool:
    return os.environ.get(rt.ENV_DISABLE, "") not in ("", "0")
