"""What merge says about records it cannot have: the segments retention deleted (one line, and
the first raw cycle every rank kept), one warning a damaged or missing segment (its name, the
records lost, the cycles affected), the line of a partial process, and the one-line refusal
when no record of any process could be read (docs/RELIABILITY.md, "Fault matrix")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.errors import InputError
from tracekit.store.cycle_numbers import CycleIds
from tracekit.store.raw.processes import ProcessData, SegmentDamage


def _count(value: object) -> int:
    return value if type(value) is int and value > 0 else 0


def records_lost(p: ProcessData) -> int | None:
    """Records the process wrote (process.json `records`) that are neither read nor deleted by
    retention; None when process.json does not say."""
    written = _count(p.info.get("records"))
    if not written:
        return None
    dropped = p.info.get("dropped")
    gone = _count(dropped.get("records")) if isinstance(dropped, dict) else 0
    return max(0, written - gone - p.rows_read)


def lost_spans(procs: list[ProcessData]) -> list[tuple[int, int]]:
    """The raw cycles the damage of these processes may have lost (inclusive), where records
    were read on both sides: from the last one read before it (its end may be lost) to the
    first after it (its start may be)."""
    return [
        (d.before, d.after)
        for p in procs
        for d in p.damage
        if d.before is not None and d.after is not None and d.after > d.before
    ]


def _cycles(d: SegmentDamage, ids: CycleIds, rank: int | None, have: set[int]) -> str:
    """The cycles a damage took from the rank: the numbered raw cycles from the last one read
    before it to the first one after it that the rank has no cycle of."""
    who = f"rank {rank}'s" if rank is not None else "its"
    if d.before is None and d.after is None:
        return "no cycle of it was read"
    lo = d.before if d.before is not None else -1
    hi = d.after if d.after is not None else 1 << 62
    gone = sorted(n for r, n in ids.numbers.items() if lo <= r <= hi and r not in have)
    if not gone:
        return "no whole cycle was lost"
    first, last, n = gone[0], gone[-1], len(gone)
    if d.after is None:
        return f"{who} cycles from {first} on ({n} cycles) are lost"
    if d.before is None:
        return f"{who} cycles before {last + 1} ({n} cycles) are lost"
    return (
        f"{who} cycles {first}-{last} ({n} cycles) are missing; the cycles after them keep "
        "their numbers (every rank's cycle N is the same step)"
    )


def _lost_words(p: ProcessData, share: bool) -> str:
    lost = records_lost(p)
    if lost is None:
        return "records lost: unknown (process.json does not count them)"
    where = f" in its {len(p.damage)} damaged segments" if share else ""
    return f"{lost:,} records lost{where} (process.json counts {_count(p.info.get('records')):,})"


def _what(why: str) -> str:
    if why in ("missing", "empty file") or why.startswith("cut "):
        return why
    return f"damaged in the middle ({why[:100]})"


def damage_warnings(p: ProcessData, ids: CycleIds, have: set[int]) -> list[str]:
    """One warning a damaged segment of a process that is not its newest (that one is the
    partial process's line, `partial_words`); `have`: the raw cycles of its rank merged."""
    middle = [d for d in p.damage if not d.last]
    who = f"rank {p.rank} (pid {p.pid})" if p.rank is not None else f"pid {p.pid}"
    return [
        f"{d.path}: {_what(d.why)}; {who}: read {d.rows:,} records of it and every segment after "
        f"it, {_lost_words(p, len(p.damage) > 1)}; {_cycles(d, ids, p.rank, have)}"
        for d in middle
    ]


def partial_words(p: ProcessData) -> str:
    """Why a process is partial, naming its newest segment when that one is damaged."""
    last = p.damage[-1] if p.damage and p.damage[-1].last else None
    if last is None:
        return (
            p.read_error
            if p.read_error and not p.damage
            else "the process did not finish (killed?)"
        )
    return f"{last.path}: {last.why}; {_lost_words(p, len(p.damage) > 1)}"


def refuse_if_nothing_readable(raw: Path, procs: list[ProcessData]) -> None:
    """InputError (one line, exit 2) when not one record of any process could be read and some
    record file is damaged or missing: there is nothing to merge, and it is not the program's
    silence."""
    if any(p.n_records for p in procs):
        return
    why: list[str] = []
    for p in procs:
        files = [f"{d.path}: {d.why}" for d in p.damage]
        if p.damaged and not files:
            files = [p.damaged]
        why += files
    if why:
        msg = (
            f"nothing readable in {raw}: {len(why)} record file(s) damaged, first {why[0]}; "
            "nothing was merged (copy the run directory again from where it was written)"
        )
        raise InputError(msg)


def _dropped(p: ProcessData) -> dict[str, Any]:
    d = p.info.get("dropped")
    return d if isinstance(d, dict) and _count(d.get("segments")) else {}


def report_dropped(by_rank: dict[int, list[ProcessData]], warnings: list[str]) -> int:
    """One warning line naming the record segments retention (`--keep`, `--keep-hours`)
    deleted; returns the first raw cycle every rank kept whole (records of earlier cycles are
    left out, so cycle numbers still line up across ranks), 0 when nothing was dropped."""
    import datetime as dt

    parts: list[str] = []
    firsts: list[int] = []
    align = all(len([p for p in g if p.n_records]) <= 1 for g in by_rank.values())
    for rank in sorted(by_rank):
        for p in by_rank[rank]:
            started = p.records["cycle"].filter(p.records["cycle"] >= 0)
            first = int(started.min()) if started.len() else None  # type: ignore[arg-type]
            d = _dropped(p)
            if not d:
                if first is not None:
                    firsts.append(first)
                continue
            when = ""
            until = _count(d.get("until_ns"))
            if until:
                stamp = dt.datetime.fromtimestamp(until / 1e9, tz=dt.timezone.utc)
                when = f", records up to {stamp:%Y-%m-%d %H:%M:%S} UTC"
            i0, i1 = d.get("first_index"), d.get("last_index")
            which = f"segment {i0}" if i0 == i1 else f"segments {i0}-{i1}"
            reasons = "/".join(f"--{k}" for k in sorted(d.get("reasons") or {})) or "--keep"
            parts.append(
                f"rank {rank} (pid {p.pid}) {which} ({d.get('records', 0):,} records, "
                f"{int(d.get('bytes', 0)) / 1e6:.1f} MB{when}; {reasons})"
            )
            if first is not None:
                firsts.append(first + 1)  # the first kept cycle may have lost its start
    if not parts:
        return 0
    common = max(firsts) if align and firsts else 0
    tail = (
        f"; every rank's cycles from raw cycle {common} on are merged (cycle 0 is that one)"
        if common
        else ""
    )
    warnings.append(f"retention dropped the oldest records: {'; '.join(parts)}{tail}")
    return common
