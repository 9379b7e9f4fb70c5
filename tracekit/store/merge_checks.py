"""What merge says about the phase map's rules when the records show they found nothing: a
cycle rule whose phase never ran, accept rules the collector switched off after a failure,
ranks that count different steps as cycles."""

from __future__ import annotations

from typing import Any

from tracekit.store.raw.processes import ProcessData


def unseen_cycle_phase(cycle_cfg: dict[str, Any], seen: set[str]) -> str | None:
    """One warning when the phase the map's cycle rule needs (`require`, or `starts_with`
    without cycle targets) never ran in any rank: then no step was counted as a cycle."""
    for key in ("require", "starts_with"):
        name = cycle_cfg.get(key)
        if name and name not in seen:
            ran = ", ".join(sorted(seen)) or "none"
            return (
                f'the phase map\'s cycle rule `{key} = "{name}"` needs phase `{name}`, which '
                f"never ran in any rank (phases that ran: {ran}), so those steps are no cycles; "
                "the drafter in use may not be in the map: see run.json's `targets`, or add its "
                "function to the phase with `--phases FILE.toml`"
            )
    return None


def accept_failures(procs: list[ProcessData]) -> str | None:
    """One warning naming each accept rule a collector switched off after it failed or gave no
    number (process.json `accept_failed`), with the ranks and the first reason; None if none."""
    seen: dict[tuple[str, str, str], tuple[str, set[str]]] = {}
    for p in procs:
        failed = p.info.get("accept_failed")
        if not isinstance(failed, list):
            continue
        for f in failed:
            if not isinstance(f, dict):
                continue
            key = (str(f.get("rule", "")), str(f.get("where", "")), str(f.get("target", "")))
            _, who = seen.setdefault(key, (str(f.get("why", "")), set()))
            who.add(f"rank {p.rank}" if p.rank is not None else f"pid {p.pid}")
    if not seen:
        return None
    parts = [
        f"{rule} ({where}) on {target} on {', '.join(sorted(who))}: {why}"
        for (rule, where, target), (why, who) in seen.items()
    ]
    return (
        f"accept rule(s) switched off after a failure: {'; '.join(parts)}; cycles after it have "
        "no acceptance from that rule (tokens/s and break-even need it): fix its `value` path "
        '(docs/phasemaps.md, "accept")'
    )


def ranks_disagree(raws: list[int], statuses: dict[int, dict[int, bool]]) -> str | None:
    """One warning when a raw cycle is a cycle on some ranks and not on others (the `require`
    phase ran on some only): cycle numbers then follow the ranks where it is one."""
    if not raws:
        return None
    raw = raws[0]
    yes = sorted(r for r, s in statuses.items() if s.get(raw) is True)
    no = sorted(r for r, s in statuses.items() if s.get(raw) is False)
    return (
        f"ranks count different steps as cycles at {len(raws)} raw cycle(s) (first: raw cycle "
        f"{raw} is a cycle on ranks {yes}, not on ranks {no}, whose records of it lack the "
        "cycle rule's `require` phase); cycle numbers follow the ranks where it is one, so "
        "those ranks have no cycle of that number"
    )
