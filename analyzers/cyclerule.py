"""How a run's cycles were to be found, in words, for the message of a run that has none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tracekit.errors import TracekitError


def _from_phasemap(path: str) -> str | None:
    from tracekit.analyzers.allreduce import _load_toml

    try:
        data = _load_toml(Path(path).read_text(encoding="utf-8"), path)
    except (OSError, ValueError, TracekitError):
        return None
    cycle = data.get("cycle")
    return _from_phasemap_table(cycle) if isinstance(cycle, dict) else None


def cycle_rule(run_dir: Path) -> str | None:
    """The run's [cycle] rule as written in its phase map (`starts_with = "draft"`), from
    run.json (`cycle_rule`, else the phase map file it names, else `cycle_source`)."""
    try:
        run: Any = json.loads((Path(run_dir) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(run, dict):
        return None
    rule = run.get("cycle_rule")
    if isinstance(rule, str) and rule:
        return rule
    if isinstance(rule, dict):
        found = _from_phasemap_table(rule)
        if found:
            return found
    if isinstance(run.get("phasemap"), str):
        found = _from_phasemap(run["phasemap"])
        if found:
            return found
    source = run.get("cycle_source")
    if isinstance(source, str) and source.startswith("starts_with:"):
        return f'starts_with = "{source.removeprefix("starts_with:")}"'
    if source == "cycle_target":
        return "targets = [...]"
    if source == "none":
        return "no [cycle] table"
    return None


def _from_phasemap_table(cycle: dict[str, Any]) -> str | None:
    if cycle.get("targets"):
        return f"targets = {json.dumps(list(cycle['targets']))}"
    if cycle.get("starts_with"):
        return f'starts_with = "{cycle["starts_with"]}"'
    return None


def no_cycle_message(run_dir: Path, instances: dict[str, int]) -> str:
    """One line: what the run recorded, which cycle rule found nothing, and what to change."""
    total = sum(instances.values())
    parts = ", ".join(f"{name} {n}" for name, n in sorted(instances.items()))
    rule = cycle_rule(run_dir)
    rule_text = (
        f"the cycle rule `{rule}` matched nothing"
        if rule
        else "no cycle rule matched (no `tracekit/cycle` range, no collector cycle)"
    )
    return (
        f"{run_dir}: {total} phase instances ({parts}) but no cycle: {rule_text}; "
        "set [cycle] in the phase map (`targets` = the function one call of which is one "
        "cycle, or `starts_with` = the phase that opens a cycle) and run again"
    )
