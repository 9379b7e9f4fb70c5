"""What `tracekit launch` checks before the command starts: the options, the command, the phase
map's targets against this environment's sources (AST, no import), Python flags that would keep
the bootstrap out."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from tracekit.collectors import phasemap as pm
from tracekit.collectors.recorder import MODES
from tracekit.collectors.resolve import FOUND, UNKNOWN, installed_module_file, resolve_all
from tracekit.errors import CollectorError
from tracekit.launch.options import LaunchOptions


def check_options(opts: LaunchOptions) -> None:
    """CollectorError (one line, what to change) for a launch that cannot start."""
    if not opts.command:
        msg = "no command to run; put it after `--`, e.g. `tracekit launch --adapter demo -- python -m tracekit.demo`"
        raise CollectorError(msg)
    if opts.mode not in MODES:
        msg = f"--mode {opts.mode!r}: expected light or full"
        raise CollectorError(msg)
    if opts.profile_cycles:
        from tracekit.collectors.profiler import CycleWindow

        CycleWindow.parse(opts.profile_cycles)


def check_command(command: list[str]) -> None:
    if shutil.which(command[0]) is None:
        msg = f"command not found: {command[0]!r}; check the command after `--`"
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


def _package(target: str) -> str:
    return target.split(".")[0].split(":")[0]


def unresolved_targets(pmap: pm.PhaseMap, warn: Callable[[str], None]) -> list[tuple[str, str]]:
    """The map's targets that do not resolve here, said once; targets in packages this Python
    does not have are said once as a package (the server may run in another environment) and
    left out of the list."""
    unresolved = check_targets(pmap)
    missing = sorted(
        {
            _package(t)
            for t, _why in unresolved
            if installed_module_file(_package(t)) is None and "__main__" not in t
        }
    )
    if missing:
        warn(
            f"package(s) {', '.join(missing)} not found by this Python ({sys.executable}); "
            f"targets of adapter `{pmap.name}` there could not be checked before the run"
        )
        shown = [(t, w) for t, w in unresolved if _package(t) not in missing]
    else:
        shown = unresolved
    if not shown:
        return unresolved
    lines = "; ".join(f"{t} ({why})" for t, why in shown)
    warn(
        f"{len(shown)} of {len(pmap.targets())} targets of adapter `{pmap.name}` do not resolve here and are skipped: {lines}"
    )
    return shown


def python_flags_warning(command: list[str]) -> str | None:
    """A warning when the command's Python runs with -E / -I / -S (no PYTHONPATH / site)."""
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
