"""The phase map's cycle rule, as the launcher writes it into run.json at launch and merge reads
it (merge never parses the phase map again).

`run.json["cycle_rule"]`:

    {"targets": ["pkg.mod:Worker.step"],   # cycle targets: one call is one cycle
     "starts_with": null,                  # or the phase whose outermost call opens a cycle
     "require": "draft",                   # a cycle counts only if this phase ran inside it
     "delta_phases": {"verify": "before"}, # phases whose accept rule is of kind "delta": what
                                           # the length is: "before" or "after" the call's cycle
                                           # ("arg" / "return" in runs launched before `state`)
     "cycle_delta": null}                  # the same for the cycle targets' accept rule
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, TypedDict

from tracekit.errors import InputError

CYCLE_RULE_KEY = "cycle_rule"
AcceptSource = Literal["before", "after", "arg", "return"]
_SOURCES = ("before", "after", "arg", "return")


def state_of(source: str) -> str:
    """A delta rule's state: "before" ("arg" in older runs) or "after" ("return")."""
    return "before" if source in ("before", "arg") else "after"


class CycleRule(TypedDict):
    targets: list[str]
    starts_with: str | None
    require: str | None
    delta_phases: dict[str, AcceptSource]
    cycle_delta: AcceptSource | None


def _bad(path: Path, key: str, value: object) -> InputError:
    where = f"{CYCLE_RULE_KEY}.{key}" if key else CYCLE_RULE_KEY
    return InputError(
        f"{path}: `{where}` is {repr(value)[:60]}, not what `tracekit launch` "
        "writes; restore the run.json the launch wrote (or launch the run again)"
    )


def _name(rule: dict[str, Any], key: str, path: Path) -> str | None:
    value = rule.get(key)
    if value is not None and not (isinstance(value, str) and value):
        raise _bad(path, key, value)
    return value


def _source(value: object, path: Path, key: str) -> AcceptSource | None:
    if value is None:
        return None
    if value not in _SOURCES:
        raise _bad(path, key, value)
    out: AcceptSource = value  # type: ignore[assignment]  # one of _SOURCES, as written
    return out


def parse_cycle_rule(rule: object, path: Path) -> CycleRule:
    """The cycle rule of a run.json (`path`, for the message); InputError when malformed."""
    if not isinstance(rule, dict):
        raise _bad(path, "", rule)
    targets = rule.get("targets") or []
    if not (isinstance(targets, list) and all(isinstance(t, str) for t in targets)):
        raise _bad(path, "targets", targets)
    deltas = rule.get("delta_phases") or {}
    if not isinstance(deltas, dict):
        raise _bad(path, "delta_phases", deltas)
    delta_phases: dict[str, AcceptSource] = {}
    for name, src in deltas.items():
        source = _source(src, path, f"delta_phases.{name}")
        if source is not None:
            delta_phases[str(name)] = source
    return CycleRule(
        targets=list(targets),
        starts_with=_name(rule, "starts_with", path),
        require=_name(rule, "require", path),
        delta_phases=delta_phases,
        cycle_delta=_source(rule.get("cycle_delta"), path, "cycle_delta"),
    )


def read_cycle_rule(
    run: dict[str, Any], path: Path, why: str | None = None
) -> tuple[CycleRule | None, str | None]:
    """The cycle rule of a run (`run`: its run.json, read from `path`; `why` it could not be
    read, if so): (rule, None); for a run launched before run.json held it, (what
    `cycle_source` still says, one warning); without a readable run.json, (None, one warning)."""
    if CYCLE_RULE_KEY in run:
        return parse_cycle_rule(run[CYCLE_RULE_KEY], path), None
    if not run:
        return None, (
            f"{path}: {why or 'missing'}, so the phase map's cycle rule is unknown: "
            "cycles are merged without its `require`, `starts_with` and delta accept rules; "
            "merge the directory `tracekit launch` wrote"
        )
    source = run.get("cycle_source")
    starts_with = None
    if isinstance(source, str) and source.startswith("starts_with:"):
        starts_with = source.removeprefix("starts_with:") or None
    rule = CycleRule(
        targets=[], starts_with=starts_with, require=None, delta_phases={}, cycle_delta=None
    )
    return rule, (
        f"{path}: no `{CYCLE_RULE_KEY}` (a run launched by an older tracekit), so cycles are "
        "merged by its `cycle_source` only, without the phase map's `require` and delta accept "
        "rules; launch the run again with this tracekit to apply them"
    )
