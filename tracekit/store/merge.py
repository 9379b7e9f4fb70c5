"""`tracekit merge`: raw per-process collector output -> the Parquet store.

Reads `RUN_DIR/raw/pid-*/` (records.arrow, process.json, manifest.json, kineto.json.gz) and
`raw/nvml/` through tracekit/store/raw/, the phase map's cycle rule from run.json
(`cycle_rule`, written by the launcher), resolves each process to its rank, and writes the `phases`, `cycles`, `manifests`
and `counters` tables, plus `events` by ingesting full mode's Kineto traces. Missing and partial
ranks are reported (warnings) and the rest is merged. Re-running merge rewrites these tables.

Rank of a process: `torch.distributed` rank it recorded, else the `RANK` environment variable;
a single process with records and no rank is rank 0. Cycle numbers (run-wide, from the raw
numbers the recorder stamps, so a lost segment moves no rank's numbers): store/cycle_numbers.py;
a rank's `phases` rows (nesting, written as `inst`/`top`/`depth`/`parent`, and cycle
membership: store/placement.py's rules) and `cycles` rows: store/rank_tables.py. Records stay
in columns from the raw reader to Parquet (Arrow, then polars). The per-rank work runs on a
thread pool (polars and Arrow release the GIL).
Damaged record files: tracekit/store/merge_damage.py (one warning each; nothing readable at
all is an error).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.errors import InputError
from tracekit.store.cycle_numbers import CycleIds, cycle_ids, raw_cycle_status
from tracekit.store.layout import RunLayout
from tracekit.store.merge_checks import (
    accept_failures,
    compiled_unseen,
    hides_allreduce,
    ranks_disagree,
    side_file_warnings,
    unseen_cycle_phase,
)
from tracekit.store.merge_damage import (
    damage_warnings,
    lost_spans,
    partial_words,
    refuse_if_nothing_readable,
    report_dropped,
)
from tracekit.store.rank_tables import write_rank_tables
from tracekit.store.raw.cycle_rule import read_cycle_rule
from tracekit.store.raw.files import PROCESS_FILE, read_json
from tracekit.store.raw.nvml import COUNTERS_FILE, GPUS_FILE, NVML_DIR, read_samples
from tracekit.store.raw.processes import ProcessData, read_processes
from tracekit.store.raw.threads import thread_map
from tracekit.store.writer import write_partition

MERGED_TABLES = ("phases", "cycles", "counters")
COLLECTOR_MANIFEST_PART = 0


@dataclass
class MergeResult:
    run_dir: Path
    ranks: list[int] = field(default_factory=list)
    phases: int = 0
    cycles: int = 0
    counters: int = 0
    events: int = 0
    missing_ranks: list[int] = field(default_factory=list)
    partial_ranks: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _load_json(path: Path) -> dict[str, Any]:
    return read_json(path)[0]


def _as_int(value: Any, low: int = 0, high: int = 2**31) -> int | None:
    """A rank or world size from a JSON value: an int (or a string of digits) in [low, high)."""
    if isinstance(value, str) and value.strip().isdecimal() and len(value.strip()) < 10:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if low <= value < high else None


def _rank_info(p: ProcessData) -> dict[str, Any]:
    ri = p.info.get("rank_info")
    return ri if isinstance(ri, dict) else {}


def _assign_ranks(procs: list[ProcessData], warnings: list[str]) -> None:
    bad: dict[int, str] = {}
    for p in procs:
        ri = _rank_info(p)
        for key, source in (("dist_rank", "torch.distributed"), ("env_rank", "RANK")):
            if key in ri:
                rank = _as_int(ri[key])
                if rank is not None:
                    p.rank, p.rank_source = rank, source
                    break
                bad[p.pid] = f"{p.dir / PROCESS_FILE} gives rank {str(ri[key])[:40]!r}"
    with_records = [p for p in procs if p.n_records]
    unranked = [p for p in with_records if p.rank is None]
    if unranked and len(with_records) == 1 and not bad and not unranked[0].damaged:
        unranked[0].rank, unranked[0].rank_source = 0, "single process"
    elif unranked:
        for p in unranked:
            why = (
                bad.get(p.pid)
                or p.damaged
                or p.info_error
                or "no torch.distributed rank, no RANK variable"
            )
            warnings.append(
                f"pid {p.pid} recorded {p.n_records} calls but its rank is unknown ({why}); its "
                "records are left out"
            )
            p.damaged = None  # said here


def _world_size(procs: list[ProcessData]) -> int | None:
    sizes = []
    for p in procs:
        ri = _rank_info(p)
        for key in ("dist_world_size", "env_world_size"):
            size = _as_int(ri.get(key), low=1)
            if size is not None:
                sizes.append(size)
                break
    return max(sizes) if sizes else None


def _manifest_rows(p: ProcessData, run: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    for section, values in p.manifest.items():
        for key, value in values.items():
            yield section, str(key), str(value)
    yield "process", "rank_source", p.rank_source
    yield "process", "finished", str(bool(p.info.get("finished")) and p.complete).lower()
    yield "process", "records", str(p.n_records)
    yield "process", "via", str(p.info.get("via", ""))
    if run.get("adapter"):
        yield "process", "run_adapter", str(run["adapter"])
    patched = p.info.get("patched")
    for t in patched if isinstance(patched, list) else []:
        yield "targets", str(t), "patched"
    unresolved = p.info.get("unresolved")
    for t, why in (unresolved if isinstance(unresolved, dict) else {}).items():
        yield "targets", str(t), f"unresolved: {why}"
    if hides_allreduce(p.info):
        yield "compiled", "hidden_allreduce", "true"


def _counters(raw: Path, procs: list[ProcessData], warnings: list[str]) -> dict[int, pa.Table]:
    path = raw / NVML_DIR / COUNTERS_FILE
    if not path.exists():
        return {}
    table, read_warnings = read_samples(path)
    warnings.extend(read_warnings)
    if table is None:
        return {}
    gpus = _load_json(raw / NVML_DIR / GPUS_FILE).get("gpus", [])
    uuid_to_index = {
        str(g["uuid"]): g["index"]
        for g in (gpus if isinstance(gpus, list) else [])
        if isinstance(g, dict) and g.get("uuid") and _as_int(g.get("index")) is not None
    }
    index_to_rank: dict[int, int] = {}
    for p in procs:
        uuid = str(p.manifest.get("device", {}).get("uuid", ""))
        if p.rank is None or not uuid:
            continue
        for u, idx in uuid_to_index.items():
            if u == uuid or u.endswith(uuid) or uuid.endswith(u.removeprefix("GPU-")):
                index_to_rank.setdefault(idx, p.rank)
    parts: dict[int, list[pa.Table]] = {}
    gpu_col = table.column("gpu")
    for idx in sorted(g for g in pc.unique(gpu_col).to_pylist() if g is not None):
        mask = pc.equal(gpu_col, idx)
        parts.setdefault(index_to_rank.get(idx, idx), []).append(table.filter(mask))
    return {rank: pa.concat_tables(tables) for rank, tables in parts.items()}


def merge(run_dir: Path | str, *, threads: int | None = None) -> MergeResult:
    """Merge `run_dir/raw/` into the run's store (the module's docstring says how); the
    per-rank work on up to `threads` threads (default: one a core)."""
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    if not layout.raw.is_dir():
        msg = f"{run_dir}: no `raw/` directory, so nothing to merge; pass the directory `tracekit launch` printed"
        raise InputError(msg)
    run, run_why = read_json(layout.manifest)
    result = MergeResult(run_dir=run_dir)
    warnings = result.warnings
    rule, rule_warning = read_cycle_rule(run, layout.manifest, run_why)
    if rule_warning:
        warnings.append(rule_warning)
    cycle_cfg: dict[str, Any] = dict(rule) if rule is not None else {}

    procs = read_processes(layout.raw, threads)
    refuse_if_nothing_readable(layout.raw, procs)
    _assign_ranks(procs, warnings)
    explained = _report_damaged(procs, warnings)
    by_rank: dict[int, list[ProcessData]] = {}
    for p in procs:
        if p.rank is not None and (p.n_records or p.manifest):
            by_rank.setdefault(p.rank, []).append(p)
    first_cycle = report_dropped(by_rank, warnings)
    recs = {rank: _rank_records(group, first_cycle) for rank, group in by_rank.items()}
    ids, statuses = _cycle_ids(recs, cycle_cfg, procs, warnings)
    for p in procs:
        if p.n_records and p.rank is not None:
            have = {r for r, is_cycle in (statuses.get(p.rank) or {}).items() if is_cycle}
            warnings.extend(damage_warnings(p, ids, have))

    for table in MERGED_TABLES:
        shutil.rmtree(layout.table_dir(table), ignore_errors=True)
    for old in layout.table_dir("manifests").glob(f"rank=*/part-{COLLECTOR_MANIFEST_PART}.parquet"):
        old.unlink()  # merge's own manifests (ingest's parts stay): a rank left out has none
    ranks = [r for r in sorted(by_rank) if recs[r].height]
    counts = thread_map(
        lambda r: write_rank_tables(run_dir, r, recs[r], cycle_cfg, ids), ranks, threads
    )
    rows = dict(zip(ranks, counts, strict=True))
    seen_phases: set[str] = set()
    for rank in sorted(by_rank):
        seen_phases |= _merge_rank(run_dir, rank, by_rank[rank], recs[rank], run, result)
        result.phases += rows.get(rank, (0, 0))[0]
        result.cycles += rows.get(rank, (0, 0))[1]
    if result.phases:
        missing = unseen_cycle_phase(cycle_cfg, seen_phases)
        if missing is not None:
            warnings.append(missing)
    _report_missing_ranks(procs, run, explained, result)
    failed = accept_failures(procs)
    if failed is not None:
        warnings.append(failed)
    warnings.extend(side_file_warnings(procs, run, layout.raw))
    unseen = compiled_unseen([p.info for p in procs])
    if unseen is not None:
        warnings.append(unseen)

    for rank, table in _counters(
        layout.raw, [p for g in by_rank.values() for p in g], warnings
    ).items():
        write_partition(run_dir, "counters", rank, table)
        result.counters += table.num_rows

    traces: dict[Path, int] = {
        p.kineto: p.rank for p in procs if p.kineto is not None and p.rank is not None
    }
    if traces:
        result.events = _ingest_traces(run_dir, traces, warnings)
    return result


def _report_damaged(procs: list[ProcessData], warnings: list[str]) -> set[int]:
    """One warning a process nothing of which could be read; returns the ranks so explained."""
    explained: set[int] = set()
    for p in procs:
        if p.damaged:
            who = f"rank {p.rank} (pid {p.pid})" if p.rank is not None else f"pid {p.pid}"
            warnings.append(
                f"{p.damaged}; nothing of {who} could be merged (killed before its first flush, "
                "or the file is damaged); merged the others"
            )
            if p.rank is not None:
                explained.add(p.rank)
    return explained


def _rank_records(group: list[ProcessData], first_cycle: int) -> pl.DataFrame:
    """A rank's decoded records (with `pid`), those of raw cycles before `first_cycle` left out."""
    frames = [p.records for p in group if p.n_records]
    recs = pl.concat(frames) if len(frames) > 1 else frames[0] if frames else group[0].records
    return recs.filter(pl.col("cycle") >= first_cycle) if first_cycle else recs


def _cycle_ids(
    recs: dict[int, pl.DataFrame],
    cycle_cfg: dict[str, Any],
    procs: list[ProcessData],
    warnings: list[str],
) -> tuple[CycleIds, dict[int, dict[int, bool]]]:
    """The run's cycle numbers (cycle_numbers.py) and each rank's raw cycles (none for a rank of
    several processes); one warning if ranks count steps apart."""
    got = {rank: raw_cycle_status(r, cycle_cfg) for rank, r in recs.items()}
    statuses = {r: s for r, s in got.items() if s is not None}
    spans = {rank: lost_spans([p for p in procs if p.rank == rank]) for rank in statuses}
    ids = cycle_ids([(s, spans[rank]) for rank, s in statuses.items()])
    said = ranks_disagree(ids.disagree, statuses)
    if said is not None:
        warnings.append(said)
    return ids, statuses


def _merge_rank(
    run_dir: Path,
    rank: int,
    group: list[ProcessData],
    recs: pl.DataFrame,
    run: dict[str, Any],
    result: MergeResult,
) -> set[str]:
    """Write one rank's manifests, say what is partial; returns the phase names that ran
    (its phases and cycles: `write_rank_tables`)."""
    warnings = result.warnings
    for p in group:
        if p.n_records and (not p.complete or not p.info.get("finished")):
            why = partial_words(p)
            warnings.append(
                f"rank {rank} (pid {p.pid}) is partial: {why}; kept its {p.n_records} records up to the last flush"
            )
            if rank not in result.partial_ranks:
                result.partial_ranks.append(rank)
    owners = sorted(recs.filter(pl.col("kind") == "cycle")["pid"].unique().to_list())
    if len(owners) > 1:
        warnings.append(
            f"rank {rank}: processes {', '.join(map(str, owners))} each recorded cycles (a "
            "restarted rank, or two processes with one RANK); all kept, numbered in time "
            "order; check the RANK of each process if that is not expected"
        )
    main = max(group, key=lambda p: p.n_records)
    rows = list(_manifest_rows(main, run))
    manifests = pa.table(
        {
            "section": [r[0] for r in rows],
            "key": [r[1] for r in rows],
            "value": [r[2] for r in rows],
        }
    )
    write_partition(run_dir, "manifests", rank, manifests, part=COLLECTOR_MANIFEST_PART)
    if recs.height:
        result.ranks.append(rank)
    ran = recs.filter((pl.col("kind") == "phase") & (pl.col("phase") != ""))["phase"]
    return set(ran.unique().to_list())


def _report_missing_ranks(
    procs: list[ProcessData], run: dict[str, Any], explained: set[int], result: MergeResult
) -> None:
    """The ranks of the world that recorded nothing: `result.missing_ranks`, one warning for
    those no damaged file explains."""
    world = _world_size(procs)
    if world is not None and run.get("node_rank") is not None:
        world = None  # one node's part: the other ranks are on other nodes (the join checks)
    if world is None:
        return
    result.missing_ranks = [r for r in range(world) if r not in result.ranks]
    unexplained = [r for r in result.missing_ranks if r not in explained]
    if unexplained:
        result.warnings.append(
            f"ranks {unexplained} of {world} recorded nothing (not instrumented, or killed before "
            "their first flush); merged the others"
        )


def _ingest_traces(run_dir: Path, traces: dict[Path, int], warnings: list[str]) -> int:
    from tracekit.errors import TracekitError
    from tracekit.store.ingest import ingest  # heavy (msgspec, the Kineto reader): only here

    overrides = {Path(p): int(r) for p, r in traces.items()}
    try:
        res = ingest(list(overrides), run_dir, rank_overrides=overrides)
    except TracekitError as exc:
        done = getattr(exc, "result", None)
        ok = {Path(f.path).resolve() for f in getattr(done, "files", [])}
        lost = sorted({r for p, r in overrides.items() if p.resolve() not in ok})
        warnings.append(
            f"some Kineto traces could not be ingested: {exc}; ranks {lost} have no kernel "
            "events (their phases and cycles are merged)"
        )
        return int(getattr(done, "events", 0))
    warnings.extend(res.warnings)
    return int(res.events)
