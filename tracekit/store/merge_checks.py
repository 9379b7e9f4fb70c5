"""What merge says about the phase map's rules when the records show they found nothing: a
cycle rule whose phase never ran, accept rules the collector switched off after a failure,
ranks that count different steps as cycles; and about the side files of a rank that merged
(a manifest, a Kineto trace, the NVML samples) that are missing or damaged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.store.raw.files import KINETO_FILE, MANIFEST_FILE, read_json
from tracekit.store.raw.nvml import COUNTERS_FILE, GPUS_FILE, NVML_DIR
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


def side_file_warnings(procs: list[ProcessData], run: dict[str, Any], raw: Path) -> list[str]:
    """One warning a missing or damaged side file of a run that merged: a rank's manifest.json,
    a full-mode rank's kineto.json.gz (when other ranks have one, or none has), the NVML
    samples run.json says were taken, their GPU table."""
    out: list[str] = []
    ranked = [p for p in procs if p.rank is not None and p.n_records]
    ranks = {p.rank for p in ranked if p.rank is not None}
    traced = {p.rank for p in ranked if p.kineto is not None}
    for p in ranked:
        if p.manifest_error:
            out.append(
                f"{p.dir / MANIFEST_FILE}: {p.manifest_error}; rank {p.rank}'s manifest "
                "(device, versions, environment) is unknown, its records are merged"
            )
    if run.get("mode") == "full" and ranked:
        without = sorted(r for r in ranks if r not in traced)
        if without:
            example = next(p for p in ranked if p.rank == without[0])
            out.append(
                f"{example.dir / KINETO_FILE}: missing, and so on ranks {without} of this "
                "full-mode run: they have no kernel events (the profiled window was not "
                "reached, or the file was lost); their phases and cycles are merged"
            )
    nvml = raw / NVML_DIR
    sampled = str(run.get("nvml", "")).startswith("sampled")
    if sampled and ranked and not (nvml / COUNTERS_FILE).exists():
        out.append(
            f"{nvml / COUNTERS_FILE}: missing though run.json says NVML was sampled; the run "
            "has no GPU counters"
        )
    if (nvml / COUNTERS_FILE).exists():
        _gpus, why = read_json(nvml / GPUS_FILE)
        if why or not (nvml / GPUS_FILE).exists():
            out.append(
                f"{nvml / GPUS_FILE}: {why or 'missing'}; GPU counters are filed by NVML index, "
                "not by the rank that used the GPU"
            )
    return out


def _compiled_rows(infos: list[dict[str, Any]], kind: str) -> dict[tuple[str, str], list[Any]]:
    """process.json `compiled` rows of `kind` over processes: (target, compiled callable) ->
    [phase, times traced, processes]."""
    out: dict[tuple[str, str], list[Any]] = {}
    for info in infos:
        comp = info.get("compiled")
        rows = comp.get(kind) if isinstance(comp, dict) else None
        for r in rows if isinstance(rows, list) else []:
            if not isinstance(r, dict):
                continue
            key = (str(r.get("target", "")), str(r.get("compiled", "")))
            row = out.setdefault(key, [str(r.get("phase", "")), 0, 0])
            row[1] += int(r.get("traced", 0) or 0)
            row[2] += 1
    return out


def compiled_unseen(infos: list[dict[str, Any]]) -> str | None:
    """One warning naming each mapped target that Dynamo traced with no torch.compile'd
    callable around it (process.json `compiled.unattached`): its calls were not recorded."""
    rows = _compiled_rows(infos, "unattached")
    if not rows:
        return None
    parts = [
        f"{target} (phase {phase}, traced {n} time(s) in {procs} process(es))"
        for (target, _), (phase, n, procs) in sorted(rows.items())
    ]
    return (
        f"target(s) ran only inside code torch.compile traced, called by compiled code that "
        f"tracekit did not see made by torch.compile, so their calls were not recorded: "
        f"{'; '.join(parts)}; map the function that calls the compiled code instead "
        '(docs/DEFINITIONS.md, "Compiled boundary")'
    )


def compiled_boundaries(infos: list[dict[str, Any]]) -> list[str]:
    """One line a target recorded at a compiled boundary, and one a target hidden inside a
    compiled call (process.json `compiled.boundaries` / `compiled.inner`)."""
    lines = [
        f"{target} (phase {phase}) recorded at the compiled boundary: each call of the "
        f"torch.compile'd {compiled} is one {phase} instance"
        for (target, compiled), (phase, _n, _p) in sorted(
            _compiled_rows(infos, "boundaries").items()
        )
    ]
    lines += [
        f"{target} (phase {phase}) runs inside the torch.compile'd {compiled}: its calls are "
        "not recorded one by one (light mode cannot measure them; full mode sees their work)"
        for (target, compiled), (phase, _n, _p) in sorted(_compiled_rows(infos, "inner").items())
    ]
    return lines


def hides_allreduce(info: dict[str, Any]) -> bool:
    """True when the process ran an `allreduce` target inside a torch.compile'd call
    (process.json `compiled.inner`): its light-mode allreduce time is unknown, not 0 (merge
    writes the manifests row `compiled` / `hidden_allreduce`)."""
    comp = info.get("compiled")
    inner = comp.get("inner") if isinstance(comp, dict) else None
    rows = inner if isinstance(inner, list) else []
    return any(isinstance(r, dict) and r.get("phase") == "allreduce" for r in rows)
