"""run.json: written at the start (what was launched, with the phase map's cycle rule, so merge
never parses the map again) and rewritten at the end (how it ended, which processes were
instrumented, which targets were patched)."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from tracekit._version import __version__
from tracekit.collectors import phasemap as pm
from tracekit.collectors.accept import AcceptRule
from tracekit.collectors.redact import redact_argv
from tracekit.launch.options import LaunchOptions
from tracekit.launch.supervise import ProcessWatcher, Supervision
from tracekit.store.merge_checks import compiled_boundaries
from tracekit.store.raw.cycle_rule import CYCLE_RULE_KEY, AcceptSource, CycleRule
from tracekit.store.raw.files import PROCESS_FILE, process_dirs, read_json
from tracekit.store.schema import SCHEMA_VERSION


def _delta_source(accept: tuple[AcceptRule, ...]) -> AcceptSource | None:
    """What a rule of kind "delta" reads: the length before or after the call's cycle (merge
    turns lengths into tokens)."""
    if accept and accept[0].kind == "delta":
        return "before" if accept[0].state == "before" else "after"
    return None


def cycle_rule(pmap: pm.PhaseMap) -> CycleRule:
    """The map's [cycle] rule and delta accept rules, as run.json holds them
    (tracekit/store/raw/cycle_rule.py)."""
    deltas = {ph.name: _delta_source(ph.accept) for ph in pmap.phases}
    return CycleRule(
        targets=[str(t) for t in pmap.cycle.targets],
        starts_with=pmap.cycle.starts_with,
        require=pmap.cycle.require,
        delta_phases={name: src for name, src in deltas.items() if src is not None},
        cycle_delta=_delta_source(pmap.cycle.accept),
    )


def start_manifest(
    opts: LaunchOptions,
    pmap: pm.PhaseMap,
    node: tuple[int | None, int | None, str],
    unresolved: list[tuple[str, str]],
) -> dict[str, Any]:
    """run.json as written before the command starts (`status` "running")."""
    node_rank, nnodes, node_source = node
    return {
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
        CYCLE_RULE_KEY: cycle_rule(pmap),
        "mode": opts.mode,
        "profile_cycles": opts.profile_cycles,
        "start_ns": time.time_ns(),
        "status": "running",
        "unresolved_at_start": [{"target": t, "why": w} for t, w in unresolved],
    }


def read_process_states(raw: Path) -> dict[int, dict[str, Any]]:
    """pid -> process.json of every process that recorded (or at least started recording)."""
    out: dict[int, dict[str, Any]] = {}
    for _pid, d in process_dirs(raw):
        data, _why = read_json(d / PROCESS_FILE)
        try:
            out[int(data["pid"])] = data
        except (KeyError, TypeError, ValueError):
            continue
    return out


def targets_seen(
    pmap: pm.PhaseMap, procs: dict[int, dict[str, Any]]
) -> tuple[set[str], dict[str, str], dict[str, str], list[str]]:
    """(patched, unresolved in the program, via base class, never imported) over processes."""
    unresolved: dict[str, str] = {}
    patched: set[str] = set()
    via_base: dict[str, str] = {}
    for p in procs.values():
        patched.update(p.get("patched") or [])
        via_base.update(p.get("via_base") or {})
        for t, why in (p.get("unresolved") or {}).items():
            unresolved.setdefault(t, why)
    never = sorted(set(map(str, pmap.targets())) - patched - set(unresolved))
    return patched, unresolved, via_base, never


def finish_manifest(
    manifest: dict[str, Any],
    pmap: pm.PhaseMap,
    procs: dict[int, dict[str, Any]],
    watcher: ProcessWatcher,
    sup: Supervision,
) -> None:
    """Add how the run ended to `manifest` (`status` "finished"), in place."""
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
    patched, unresolved, via_base, never = targets_seen(pmap, procs)
    manifest.update(
        status="finished",
        end_ns=time.time_ns(),
        exit_code=sup.exit_code,
        returncode=sup.returncode,
        signals_forwarded=[signal.Signals(s).name for s in sup.forwarded],
        flush_before_signal=sup.flush_ask,
        killed_after_grace=sup.killed,
        processes={"instrumented": instrumented, "not_instrumented": not_instrumented},
        targets={
            "patched": sorted(patched),
            "unresolved": [{"target": t, "why": w} for t, w in sorted(unresolved.items())],
            "module_never_imported": never,
            "via_base": dict(sorted(via_base.items())),
            "compiled": compiled_boundaries(list(procs.values())),
        },
        components=components(procs),
    )


def components(procs: dict[int, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
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
