"""`tracekit merge`: raw per-process collector output -> the Parquet store.

Reads `RUN_DIR/raw/pid-*/` (records.arrow, process.json, manifest.json, kineto.json.gz) and
`raw/nvml/`, resolves each process to its rank, and writes the `phases`, `cycles`, `manifests`
and `counters` tables, plus `events` by ingesting full mode's Kineto traces. Missing and partial
ranks are reported (warnings) and the rest is merged. Re-running merge rewrites these tables.

Rank of a process: `torch.distributed` rank it recorded, else the `RANK` environment variable;
a single process with records and no rank is rank 0. Cycle numbers: with a cycle target, every
outermost call is a cycle (dropped when the map's `require` phase did not run inside it, e.g. a
prefill batch), renumbered from 0 per rank; with `starts_with`, a cycle starts at each
outermost call of that phase. Phases outside any cycle get cycle -1.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from tracekit.errors import InputError
from tracekit.store.layout import RunLayout
from tracekit.store.writer import write_partition

MERGED_TABLES = ("phases", "cycles", "counters")
COLLECTOR_MANIFEST_PART = 0


@dataclass
class ProcessData:
    pid: int
    dir: Path
    info: dict[str, Any]
    manifest: dict[str, dict[str, str]]
    records: list[dict[str, Any]]
    complete: bool  # record stream ended with its end-of-stream marker
    read_error: str | None = None
    rank: int | None = None
    rank_source: str = ""
    kineto: Path | None = None

    @property
    def n_records(self) -> int:
        return len(self.records)


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


def read_stream(path: Path) -> tuple[pa.Table | None, bool, str | None]:
    """Every complete batch of an Arrow IPC stream; (table, ended cleanly, error)."""
    from tracekit.collectors.recorder import raw_schema

    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, False, str(exc)
    if not data:
        return None, False, "empty file"
    batches = []
    err = None
    complete = False
    try:
        reader = pa.ipc.open_stream(pa.BufferReader(data))
        schema = reader.schema
        while True:
            try:
                batches.append(reader.read_next_batch())
            except StopIteration:
                complete = data.endswith(b"\xff\xff\xff\xff\x00\x00\x00\x00")
                break
    except (pa.ArrowInvalid, OSError) as exc:
        err = str(exc)
        schema = batches[0].schema if batches else None
    if schema is None:
        schema = raw_schema()
    return pa.Table.from_batches(batches, schema=schema), complete, err


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def read_processes(raw: Path) -> list[ProcessData]:
    from tracekit.collectors.profiler import KINETO_FILE
    from tracekit.collectors.recorder import (
        MANIFEST_FILE,
        PROCESS_FILE,
        RECORDS_FILE,
        SITES_FILE,
        decode,
    )

    out = []
    for d in sorted(raw.glob("pid-*"), key=lambda p: p.name):
        try:
            pid = int(d.name[4:])
        except ValueError:
            continue
        info = _load_json(d / PROCESS_FILE)
        manifest = _load_json(d / MANIFEST_FILE)
        rec_path = d / RECORDS_FILE
        records: list[dict[str, Any]] = []
        complete, err = False, None
        if rec_path.exists():
            table, complete, err = read_stream(rec_path)
            if table is not None and table.num_rows:
                records = decode(table, _load_json(d / SITES_FILE).get("sites", []))
        kineto = d / KINETO_FILE
        out.append(
            ProcessData(
                pid=pid,
                dir=d,
                info=info,
                manifest={k: v for k, v in manifest.items() if isinstance(v, dict)},
                records=records,
                complete=complete,
                read_error=err,
                kineto=kineto if kineto.exists() else None,
            )
        )
    return out


def _assign_ranks(procs: list[ProcessData], warnings: list[str]) -> None:
    for p in procs:
        ri = p.info.get("rank_info") or {}
        if "dist_rank" in ri:
            p.rank, p.rank_source = int(ri["dist_rank"]), "torch.distributed"
        elif "env_rank" in ri:
            p.rank, p.rank_source = int(ri["env_rank"]), "RANK"
    with_records = [p for p in procs if p.n_records]
    unranked = [p for p in with_records if p.rank is None]
    if unranked and len(with_records) == 1:
        unranked[0].rank, unranked[0].rank_source = 0, "single process"
    elif unranked:
        for p in unranked:
            warnings.append(
                f"pid {p.pid} recorded {p.n_records} calls but its rank is unknown (no torch.distributed "
                "rank, no RANK variable); its records are left out"
            )


def _world_size(procs: list[ProcessData]) -> int | None:
    sizes = []
    for p in procs:
        ri = p.info.get("rank_info") or {}
        for key in ("dist_world_size", "env_world_size"):
            if key in ri:
                sizes.append(int(ri[key]))
                break
    return max(sizes) if sizes else None


def _phases_and_cycles(
    records: list[dict[str, Any]], pmap_cycle: dict[str, Any]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    rows = list(records)
    rows.sort(key=lambda r: (r["start_ns"], r["seq"]))
    phase_rows = [r for r in rows if r["kind"] == "phase"]
    cycle_rows = [r for r in rows if r["kind"] == "cycle"]
    require = pmap_cycle.get("require")
    starts_with = pmap_cycle.get("starts_with")
    by_cycle: dict[int, list[dict[str, Any]]] = {}
    for r in phase_rows:
        by_cycle.setdefault(r["cycle"], []).append(r)

    def qualifies(raw_cycle: int) -> bool:
        return require is None or any(r["phase"] == require for r in by_cycle.get(raw_cycle, []))

    def phase_accept(raw_cycle: int) -> float | None:
        vals = [
            r["accept_len"]
            for r in by_cycle.get(raw_cycle, [])
            if r["accept_len"] is not None and r["depth"] == 0
        ]
        return vals[-1] if vals else None

    cycles: list[dict[str, Any]] = []
    renum: dict[int, int] = {}
    if cycle_rows:
        for c in sorted(cycle_rows, key=lambda r: r["cycle"]):
            if not qualifies(c["cycle"]) or c["cycle"] in renum:
                continue
            new = len(renum)
            renum[c["cycle"]] = new
            acc = c["accept_len"] if c["accept_len"] is not None else phase_accept(c["cycle"])
            cycles.append(
                {
                    "cycle": new,
                    "start_ns": c["start_ns"],
                    "end_ns": c["end_ns"],
                    "accept_len": acc,
                    "source": "cycle_target",
                }
            )
    elif starts_with:
        for raw_cycle in sorted(k for k in by_cycle if k >= 0):
            if not qualifies(raw_cycle):
                continue
            group = by_cycle[raw_cycle]
            new = len(renum)
            renum[raw_cycle] = new
            cycles.append(
                {
                    "cycle": new,
                    "start_ns": min(r["start_ns"] for r in group),
                    "end_ns": max(r["end_ns"] for r in group),
                    "accept_len": phase_accept(raw_cycle),
                    "source": f"starts_with:{starts_with}",
                }
            )
    # with a cycle target a call belongs to a cycle only inside that call's time range: calls
    # between two cycles (a new request's prefill) carry the last cycle's number in the raw rows
    spans = {c["cycle"]: (c["start_ns"], c["end_ns"]) for c in cycle_rows}

    def cycle_of(r: dict[str, Any]) -> int:
        new = renum.get(r["cycle"], -1)
        span = spans.get(r["cycle"])
        if new >= 0 and span is not None and not span[0] <= r["start_ns"] <= span[1]:
            return -1
        return new

    out_phases = []
    for r in phase_rows:
        out_phases.append(
            {
                "cycle": cycle_of(r),
                "phase": r["phase"],
                "depth": r["depth"],
                "parent": r["parent"],
                "pid": r["pid"],
                "tid": r["tid"],
                "seq": r["seq"],
                "start_ns": r["start_ns"],
                "end_ns": r["end_ns"],
                "gpu_start_ns": r["gpu_start_ns"],
                "gpu_end_ns": r["gpu_end_ns"],
                "graph_replays": r["graph_replays"],
                "accept_len": r["accept_len"],
                "ok": r["ok"],
                "target": r["target"],
            }
        )
    return out_phases, cycles


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
    for t in p.info.get("patched") or []:
        yield "targets", t, "patched"
    for t, why in (p.info.get("unresolved") or {}).items():
        yield "targets", t, f"unresolved: {why}"


def _counters(raw: Path, procs: list[ProcessData], warnings: list[str]) -> dict[int, pa.Table]:
    from tracekit.collectors.nvml import COUNTERS_FILE, GPUS_FILE

    path = raw / "nvml" / COUNTERS_FILE
    if not path.exists():
        return {}
    table, _complete, err = read_stream(path)
    if err:
        warnings.append(
            f"{path}: damaged after its last complete batch ({err}); kept what was readable"
        )
    if table is None or table.num_rows == 0:
        return {}
    gpus = _load_json(raw / "nvml" / GPUS_FILE).get("gpus", [])
    uuid_to_index = {str(g.get("uuid")): int(g.get("index")) for g in gpus if g.get("uuid")}
    index_to_rank: dict[int, int] = {}
    for p in procs:
        uuid = p.manifest.get("device", {}).get("uuid", "")
        if p.rank is None or not uuid:
            continue
        for u, idx in uuid_to_index.items():
            if u == uuid or u.endswith(uuid) or uuid.endswith(u.removeprefix("GPU-")):
                index_to_rank.setdefault(idx, p.rank)
    parts: dict[int, list[pa.Table]] = {}
    gpu_col = table.column("gpu").to_pylist()
    for idx in sorted(set(gpu_col)):
        mask = pa.array([g == idx for g in gpu_col])
        parts.setdefault(index_to_rank.get(idx, idx), []).append(table.filter(mask))
    return {rank: pa.concat_tables(tables) for rank, tables in parts.items()}


def merge(run_dir: Path | str) -> MergeResult:
    run_dir = Path(run_dir)
    layout = RunLayout(run_dir)
    if not layout.raw.is_dir():
        msg = f"{run_dir}: no `raw/` directory, so nothing to merge; pass the directory `tracekit launch` printed"
        raise InputError(msg)
    run = _load_json(layout.manifest)
    result = MergeResult(run_dir=run_dir)
    warnings = result.warnings
    from tracekit.collectors import phasemap as pm

    cycle_cfg: dict[str, Any] = {}
    pmap_path = layout.raw / "phasemap.toml"
    if pmap_path.exists():
        pmap = pm.load(pmap_path)
        cycle_cfg = {"require": pmap.cycle.require, "starts_with": pmap.cycle.starts_with}

    procs = read_processes(layout.raw)
    _assign_ranks(procs, warnings)
    by_rank: dict[int, list[ProcessData]] = {}
    for p in procs:
        if p.rank is not None and (p.n_records or p.manifest):
            by_rank.setdefault(p.rank, []).append(p)

    for table in MERGED_TABLES:
        shutil.rmtree(layout.table_dir(table), ignore_errors=True)

    for rank in sorted(by_rank):
        group = by_rank[rank]
        recs = [dict(r, pid=p.pid) for p in group for r in p.records]
        for p in group:
            if p.n_records and (not p.complete or not p.info.get("finished")):
                why = p.read_error or "the process did not finish (killed?)"
                warnings.append(
                    f"rank {rank} (pid {p.pid}) is partial: {why}; kept its {p.n_records} records up to the last flush"
                )
                if rank not in result.partial_ranks:
                    result.partial_ranks.append(rank)
        if recs:
            phases, cycles = _phases_and_cycles(recs, cycle_cfg)
            write_partition(run_dir, "phases", rank, pa.Table.from_pylist(phases))
            write_partition(
                run_dir,
                "cycles",
                rank,
                pa.Table.from_pylist(cycles)
                if cycles
                else pa.table({"cycle": pa.array([], pa.int64())}),
            )
            result.phases += len(phases)
            result.cycles += len(cycles)
        main = max(group, key=lambda p: p.n_records)
        rows = list(_manifest_rows(main, run))
        write_partition(
            run_dir,
            "manifests",
            rank,
            pa.table(
                {
                    "section": [r[0] for r in rows],
                    "key": [r[1] for r in rows],
                    "value": [r[2] for r in rows],
                }
            ),
            part=COLLECTOR_MANIFEST_PART,
        )
        if recs:
            result.ranks.append(rank)

    world = _world_size(procs)
    if world is not None:
        result.missing_ranks = [r for r in range(world) if r not in result.ranks]
        if result.missing_ranks:
            warnings.append(
                f"ranks {result.missing_ranks} of {world} recorded nothing (not instrumented, or killed before "
                "their first flush); merged the others"
            )

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


def _ingest_traces(run_dir: Path, traces: dict[Path, int], warnings: list[str]) -> int:
    try:
        from tracekit.store.ingest import ingest
    except ImportError:
        warnings.append(
            "events skipped: tracekit.store.ingest is not available in this installation"
        )
        return 0
    from tracekit.errors import TracekitError

    overrides = {Path(p): int(r) for p, r in traces.items()}
    try:
        res = ingest(list(overrides), run_dir, rank_overrides=overrides)
    except TracekitError as exc:
        warnings.append(f"some Kineto traces could not be ingested: {exc}")
        return 0
    warnings.extend(res.warnings)
    return int(res.events)
