"""Write a run directory as one native Perfetto trace (`.pftrace`, protobuf).

Layout, per rank (one process each, named `rank R · HOST · pid PID`):

- `cycles`: one slice a cycle (args: accept_len, wall/forward/allreduce/overhead ns summed
  from the breakdown, graph_replayed, allreduce_impl);
- `phases`: one slice a phase instance (args: its breakdown row: wall_ns, forward_ns,
  allreduce_ns, overhead_ns, graph_replayed, graph_kernel_frac, allreduce_impl, kernels,
  accept_len); nested phases below their parent;
- `GPU D` with a child track a stream (`stream S`); kernels that overlap on a stream go to lane
  tracks `stream S · lane K` (never dropped);
- the rank's CPU threads (Kineto CPU events; partially overlapping ones on `· overlap K` tracks);
- NVML counters, one counter track a (GPU, metric);
- with `flows=True`, an arrow from each runtime call to each kernel it launched (one flow id a
  kernel: a flow id cannot fork).

All timestamps are the store's absolute ns, one time base for all ranks. Ranks are written one
after the other, each on its own packet sequence with its own interned names, so memory is
bounded by the largest rank. Descriptors, interning and slices with arguments are built with
the `perfetto` package's `StreamingTraceProtoBuilder`; the bulk of plain slices (kernels, CPU
ops) is encoded vectorised by `tracekit.export._pbenc`, the same framing, into the same file.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from tracekit._version import __version__
from tracekit.errors import InputError, StoreError, TracekitError
from tracekit.export import _pbenc
from tracekit.export._lanes import disjoint_lanes, nested_lanes_and_order, sweep_order
from tracekit.store import reader
from tracekit.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    import polars as pl
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

    from tracekit.analyzers.model import RankAnalysis, RunAnalysis

SLICE_BEGIN = 1
SLICE_END = 2
INSTANT = 3
COUNTER = 4

META_SEQUENCE = 1
# Track uuids: rank r owns [(r + 1) << 32, (r + 2) << 32).
_RANK_SHIFT = 32
# Flow ids: rank r's GPU row i gets ((r + 1) << 40) + i + 1.
_FLOW_SHIFT = 40
_FLOW_TAG = bytes([0xF9, 0x02])  # TrackEvent.flow_ids, field 47, fixed64
_FEW_FLOWS = 8  # launches with more kernels than this are written with protobuf objects

COUNTER_UNITS = {
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "power_w": "W",
    "temperature_c": "°C",
    "gpu_util_pct": "%",
    "mem_util_pct": "%",
}

# The events table's columns the export reads (the rest is never loaded).
EVENT_COLUMNS = (
    "cat",
    "name",
    "ph",
    "start_ns",
    "dur_ns",
    "pid",
    "tid",
    "device",
    "stream",
    "correlation",
)


BREAKDOWN_ARGS = (
    "wall_ns",
    "forward_ns",
    "allreduce_ns",
    "overhead_ns",
    "graph_replayed",
    "graph_kernel_frac",
    "allreduce_impl",
    "kernels",
    "accept_len",
    "approximate",
)


@dataclass
class ExportStats:
    """What `write_perfetto` wrote (for the CLI and the tests)."""

    path: Path
    ranks: list[int] = field(default_factory=list)
    slices: int = 0
    kernel_lanes: int = 0
    flows: int = 0
    counters: int = 0
    notes: list[str] = field(default_factory=list)

    def merge(self, other: ExportStats) -> None:
        self.slices += other.slices
        self.kernel_lanes += other.kernel_lanes
        self.flows += other.flows
        self.counters += other.counters
        self.notes += other.notes


def write_perfetto(
    run_dir: Path, out_path: Path, *, flows: bool = False, jobs: int | None = None
) -> Path:
    """Write `run_dir` as a native Perfetto trace at `out_path`; return the path."""
    return export_run(run_dir, out_path, flows=flows, jobs=jobs).path


# Below this many events, ranks are written in this process (starting workers costs ~1 s).
PARALLEL_MIN_EVENTS = 400_000
# Nor with fewer CPUs: a rank takes about 1 s a 500k events, so on 2 CPUs the workers' start
# and the copy of their files cost more than they save (docs/BENCHMARKS.md, "Outputs").
PARALLEL_MIN_CPUS = 4

NO_PHASES = (
    "no phases found (no `tracekit/<phase>` or known annotation ranges, "
    "no collector `phases` table)"
)


def export_run(
    run_dir: Path, out_path: Path, *, flows: bool = False, jobs: int | None = None
) -> ExportStats:
    """`write_perfetto`, returning what was written: the run analysed once (`analyze`), then
    exported.

    A run the analysis refuses as a whole (no phases anywhere, no cycle anywhere, a rank whose
    rows it cannot read) is still exported: each rank's own analysis where it has one
    (`analyze_rank`: the phases of a run without cycles), a note for each rank without.
    """
    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    from tracekit.analyzers.model import analyze

    try:
        analysis = analyze(run_dir)
    except TracekitError:
        ranks, notes = _ranks_one_by_one(run_dir)
        return _export(run_dir, ranks, notes, out_path, flows=flows, jobs=jobs)
    return export(analysis, out_path, flows=flows, jobs=jobs)


def export(
    analysis: RunAnalysis, out_path: Path, *, flows: bool = False, jobs: int | None = None
) -> ExportStats:
    """Write the run `analysis` describes as a native Perfetto trace at `out_path`.

    Its phases, cycles and their breakdown come from `analysis`; each rank's events, counters
    and process names are read from the store, one rank at a time. Ranks are independent
    packet sequences, so with `jobs` > 1 (default: one per CPU for runs of at least
    PARALLEL_MIN_EVENTS events on PARALLEL_MIN_CPUS CPUs or more) worker processes write ranks
    to temporary files, which are then appended in rank order; each worker holds one rank.
    """
    run_dir = Path(analysis.run_dir)
    _check_run_dir(run_dir)
    ranks = {r.rank: r for r in analysis.ranks}
    return _export(run_dir, ranks, {}, out_path, flows=flows, jobs=jobs)


def _check_run_dir(run_dir: Path) -> None:
    if not run_dir.is_dir():
        msg = f"{run_dir}: not a run directory; give the directory `tracekit launch`, `tracekit demo` or `tracekit ingest -o` wrote"
        raise InputError(msg)
    if not any(reader.has_table(run_dir, t) for t in ("events", "phases", "cycles")):
        msg = (
            f"{run_dir}: no `events`, `phases` or `cycles` table in the store; "
            "create it with `tracekit ingest TRACES -o RUN_DIR` or `tracekit merge RUN_DIR`"
        )
        raise StoreError(msg)


def _ranks_one_by_one(run_dir: Path) -> tuple[dict[int, RankAnalysis], dict[int, str]]:
    """Each rank's analysis on its own, for a run `analyze` refused as a whole; a note for
    each rank without one (no phases, or an error reading them)."""
    from tracekit.analyzers.allreduce import load_impl_table
    from tracekit.analyzers.model import analyze_rank
    from tracekit.analyzers.rules import load_rules

    rules, table = load_rules(None), load_impl_table(None)
    ranks: dict[int, RankAnalysis] = {}
    notes: dict[int, str] = {}
    for rank in _all_ranks(run_dir, _tables(run_dir)):
        try:
            ra = analyze_rank(run_dir, rank, rules, table)
        except TracekitError as exc:
            notes[rank] = f"phases and breakdown unavailable: {exc}"
            continue
        if ra is not None:
            ranks[rank] = ra
    return ranks, notes


def _tables(run_dir: Path) -> dict[str, bool]:
    return {
        t: reader.has_table(run_dir, t)
        for t in ("events", "phases", "cycles", "counters", "manifests")
    }


def _all_ranks(run_dir: Path, tables: dict[str, bool]) -> list[int]:
    return sorted(
        {r for t, present in tables.items() if present for r in reader.ranks(run_dir, t)}
    )


def _jobs(run_dir: Path, tables: dict[str, bool], n_ranks: int, jobs: int | None) -> int:
    if jobs is None:
        jobs = 1
        if n_ranks > 1 and tables["events"] and (os.cpu_count() or 1) >= PARALLEL_MIN_CPUS:
            n_events = sum(pq_rows(f) for _, f in reader.table_files(run_dir, "events"))
            if n_events >= PARALLEL_MIN_EVENTS:
                jobs = min(n_ranks, os.cpu_count() or 1)
    return max(1, min(jobs, n_ranks or 1))


def _export(
    run_dir: Path,
    ranks: dict[int, RankAnalysis],
    notes: dict[int, str],
    out_path: Path,
    *,
    flows: bool,
    jobs: int | None,
) -> ExportStats:
    """The trace of `run_dir` with the ranks' analyses `ranks` (`notes`: why a rank has none,
    by rank; default NO_PHASES)."""
    out_path = Path(out_path)
    _keep_freed_memory()
    tables = _tables(run_dir)
    all_ranks = _all_ranks(run_dir, tables)
    stats = ExportStats(path=out_path, ranks=all_ranks)
    jobs = _jobs(run_dir, tables, len(all_ranks), jobs)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    parts: list[Path] = []
    work = [
        _RankWork(run_dir, r, ranks.get(r), notes.get(r, NO_PHASES), flows, tables)
        for r in all_ranks
    ]
    try:
        with tmp.open("wb") as f:
            if jobs == 1:
                context = _RunContext.load(run_dir, tables)
                writer = _Writer.on(f)
                for w in work:
                    _RankExport(writer, context, w, stats=stats).write()
            else:
                parts = [tmp.with_name(f"{tmp.name}.rank{w.rank}") for w in work]
                _parallel(work, parts, jobs, f, stats)
            # last: the run's metadata, with the notes of every rank
            _Writer.on(f).metadata(run_dir, tables, stats)
        tmp.replace(out_path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        for part in parts:
            part.unlink(missing_ok=True)
        raise
    return stats


def _parallel(
    work: list[_RankWork], parts: list[Path], jobs: int, f: IO[bytes], stats: ExportStats
) -> None:
    """Each rank written by a worker process into its part, the parts appended in order."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = [pool.submit(_rank_to_file, w, part) for w, part in zip(work, parts)]
        for fut, part in zip(futures, parts):
            stats.merge(fut.result())
            with part.open("rb") as pf:
                shutil.copyfileobj(pf, f, 1 << 22)
            part.unlink()


_MALLOC_TUNED = False


def _keep_freed_memory() -> None:
    """Let glibc keep freed memory for reuse instead of returning it to the OS at once.

    The encoder's numpy temporaries are a few MB each; with glibc's defaults they are unmapped
    (or trimmed off the heap) when freed and faulted in again for the next chunk. Where page
    faults are slow (VMs) that doubled the cost of the numpy work. glibc raises these limits
    by itself after large frees, up to the same 32 MB mmap threshold; setting them up front
    also keeps up to 512 MB freed in the heap (never beyond what the export used at its peak).
    Process-wide, set once; a no-op off glibc.
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED or not sys.platform.startswith("linux"):
        return
    _MALLOC_TUNED = True
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD (glibc's upper bound for it)
        libc.mallopt(-1, 512 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


def pq_rows(path: Path) -> int:
    import pyarrow.parquet as pq

    reader.check_schema_version(path)  # a damaged or newer file: StoreError / SchemaError
    return int(pq.ParquetFile(path).metadata.num_rows)


@dataclass(frozen=True)
class _RankWork:
    """One rank to write: its analysis (None: `note` says why there is none)."""

    run_dir: Path
    rank: int
    analysis: RankAnalysis | None
    note: str
    flows: bool
    tables: dict[str, bool]


def _rank_to_file(work: _RankWork, part: Path) -> ExportStats:
    """Worker: one rank's packets into `part`."""
    _keep_freed_memory()
    stats = ExportStats(path=part, ranks=[work.rank])
    context = _RunContext.load(work.run_dir, work.tables)
    with part.open("wb") as f:
        _RankExport(_Writer.on(f), context, work, stats=stats).write()
    return stats


# --------------------------------------------------------------------------------------------
# run-wide inputs


@dataclass
class _RunContext:
    tables: dict[str, bool]
    processes: dict[int, dict[str, str]]

    @classmethod
    def load(cls, run_dir: Path, tables: dict[str, bool]) -> _RunContext:
        import polars as pl

        processes: dict[int, dict[str, str]] = {}
        if tables["manifests"]:
            man = reader.read_table(run_dir, "manifests").filter(pl.col("section") == "process")
            for row in man.iter_rows(named=True):
                processes.setdefault(int(row["rank"]), {})[str(row["key"])] = str(row["value"])
        return cls(tables=tables, processes=processes)


# --------------------------------------------------------------------------------------------
# packet writing


class _Writer:
    """Writes packets through the perfetto builder, and pre-encoded bulk packets beside them."""

    def __init__(self, f: IO[bytes], builder: Any) -> None:
        self.f = f
        self.builder = builder

    @classmethod
    def on(cls, f: IO[bytes]) -> _Writer:
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

        return cls(f, StreamingTraceProtoBuilder(f))

    def packet(self, sequence: int, *, first: bool = False, ts: int | None = None) -> TracePacket:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

        p: TracePacket = self.builder.create_packet()
        p.trusted_packet_sequence_id = sequence
        if first:
            p.first_packet_on_sequence = True
            p.previous_packet_dropped = 1
            p.sequence_flags = (
                TracePacket.SEQ_INCREMENTAL_STATE_CLEARED | TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
            )
        else:
            p.sequence_flags = TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if ts is not None:
            p.timestamp = ts
        return p

    def write(self, p: TracePacket) -> None:
        self.builder.write_packet(p)

    def raw(self, data: bytes | memoryview) -> None:
        self.f.write(data)

    def metadata(self, run_dir: Path, tables: dict[str, bool], stats: ExportStats) -> None:
        """An instant on a `tracekit` track: version, schema, run, notes (what is missing)."""
        uuid = 1
        p = self.packet(META_SEQUENCE, first=True)
        d = p.track_descriptor
        d.uuid = uuid
        d.name = "tracekit"
        self.write(p)
        ts = _first_ts(run_dir, tables)
        e = self.packet(META_SEQUENCE, ts=ts)
        e.track_event.type = INSTANT
        e.track_event.track_uuid = uuid
        e.track_event.name = "tracekit run"
        _annotate(
            e,
            {
                "tracekit_version": __version__,
                "schema_version": SCHEMA_VERSION,
                "run_dir": str(run_dir),
                "ranks": len(stats.ranks),
                "notes": "; ".join(stats.notes) or "none",
            },
        )
        self.write(e)


def _annotate(p: TracePacket, args: dict[str, Any]) -> None:
    for key, val in args.items():
        if val is None:
            continue
        if isinstance(val, float) and val != val:  # NaN: leave out
            continue
        a = p.track_event.debug_annotations.add()
        a.name = key
        if isinstance(val, bool | np.bool_):
            a.bool_value = bool(val)
        elif isinstance(val, int | np.integer):
            a.int_value = int(val)
        elif isinstance(val, float | np.floating):
            a.double_value = float(val)
        else:
            a.string_value = str(val)


def _first_ts(run_dir: Path, tables: dict[str, bool]) -> int:
    import polars as pl

    best: int | None = None
    for table, col in (("events", "start_ns"), ("phases", "start_ns"), ("cycles", "start_ns")):
        if tables.get(table):
            v = reader.scan_table(run_dir, table).select(pl.col(col).min()).collect().item()
            if v is not None:
                best = int(v) if best is None else min(best, int(v))
    return best or 0


# --------------------------------------------------------------------------------------------
# one rank


@dataclass
class _Slices:
    """Slices bound for one track, in the caller's order."""

    track: int
    start: np.ndarray
    end: np.ndarray
    name_iid: np.ndarray
    correlation: np.ndarray | None = None
    flow: np.ndarray | None = None
    instant: np.ndarray | None = None  # bool: instant events (no end)
    special: np.ndarray | None = None  # int: index into the special packets, -1 for none
    args: _pbenc.Piece | None = None  # pre-encoded extra TrackEvent fields of each begin
    order: tuple[np.ndarray, np.ndarray] | None = None  # sweep_order(start, end), if known


@dataclass
class _Points:
    """Begin/end (or instant) packets of one track, in writing order."""

    track: int
    ts: np.ndarray
    type: np.ndarray
    iid: np.ndarray  # 0 on ends
    corr: np.ndarray | None = None  # 0 on ends
    flow: np.ndarray | None = None  # 0 on ends
    special: np.ndarray | None = None  # -1: no protobuf-built packet

    def rows(self, sel: slice) -> _Points:
        def cut(x: np.ndarray | None) -> np.ndarray | None:
            return None if x is None else x[sel]

        return _Points(
            self.track,
            self.ts[sel],
            self.type[sel],
            self.iid[sel],
            cut(self.corr),
            cut(self.flow),
            cut(self.special),
        )


class _RankExport:
    def __init__(
        self,
        writer: _Writer,
        context: _RunContext,
        work: _RankWork,
        *,
        stats: ExportStats,
    ) -> None:
        self.w = writer
        self.ctx = context
        self.run_dir = work.run_dir
        self.rank = rank = work.rank
        self.analysis = work.analysis
        self.note = work.note
        self.flows = work.flows
        self.stats = stats
        self.seq = rank + 2
        self.base = (rank + 1) << _RANK_SHIFT
        self.next_uuid = self.base + 1
        self.names: dict[str, int] = {}
        self.pending_names: list[tuple[int, str]] = []
        self.first = True
        # special packets: (begin args, flow ids) for slices that need protobuf objects
        self.special_args: list[dict[str, Any]] = []
        self.special_flows: list[list[int]] = []

    # -- helpers ------------------------------------------------------------------------------

    def uuid(self) -> int:
        u = self.next_uuid
        self.next_uuid += 1
        return u

    def intern(self, names: list[str]) -> np.ndarray:
        out = np.empty(len(names), dtype=np.int64)
        for i, n in enumerate(names):
            iid = self.names.get(n)
            if iid is None:
                iid = len(self.names) + 1
                self.names[n] = iid
                self.pending_names.append((iid, n))
            out[i] = iid
        return out

    def intern_column(self, names: pl.Series) -> np.ndarray:
        """iids for a string column: Python work only once per distinct name.

        Names are interned in the order they first appear. A categorical column without nulls
        is interned on its codes (no string is built per row).
        """
        import polars as pl

        if names.dtype == pl.Categorical and names.len() and not names.null_count():
            codes = names.to_physical()
            firsts = (
                codes.to_frame("c")
                .with_row_index("i")
                .unique("c", keep="first", maintain_order=True)
            )
            iids = self.intern(names.gather(firsts["i"]).cast(pl.String).to_list())
            first_codes = firsts["c"].to_numpy().astype(np.int64)
            lut = np.zeros(int(first_codes.max()) + 1, dtype=np.int64)
            lut[first_codes] = iids
            out: np.ndarray = lut[codes.to_numpy()]
            return out

        names = names.cast(pl.String).fill_null("")
        uniq = names.unique(maintain_order=True)
        iids = self.intern(uniq.to_list())
        return names.replace_strict(
            uniq, pl.Series(iids, dtype=pl.Int64), return_dtype=pl.Int64
        ).to_numpy()

    def packet(self, ts: int | None = None) -> TracePacket:
        p = self.w.packet(self.seq, first=self.first, ts=ts)
        self.first = False
        if self.pending_names:
            for iid, name in self.pending_names:
                entry = p.interned_data.event_names.add()
                entry.iid = iid
                entry.name = name
            self.pending_names = []
        return p

    def descriptor(
        self,
        name: str,
        *,
        parent: int | None = None,
        rank_order: int | None = None,
        counter_unit: str | None = None,
    ) -> int:
        uuid = self.uuid()
        p = self.packet()
        d = p.track_descriptor
        d.uuid = uuid
        d.name = name
        if parent is not None:
            d.parent_uuid = parent
        if rank_order is not None:
            d.sibling_order_rank = rank_order
        d.sibling_merge_behavior = d.SIBLING_MERGE_BEHAVIOR_NONE
        if counter_unit is not None:
            d.counter.SetInParent()  # a counter track even when the unit is unknown ("")
            if counter_unit:
                d.counter.unit_name = counter_unit
        self.w.write(p)
        return uuid

    # -- the rank -----------------------------------------------------------------------------

    def write(self) -> None:
        import polars as pl

        events = (
            reader.scan_table(self.run_dir, "events", rank=self.rank)
            .select(EVENT_COLUMNS)
            .collect()
            if self.ctx.tables["events"] and self.rank in reader.ranks(self.run_dir, "events")
            else None
        )
        if self.analysis is None:
            self.stats.notes.append(f"rank {self.rank}: {self.note}")
        info = self.ctx.processes.get(self.rank, {})
        pid = _int_or_none(info.get("pid"))
        if pid is None and events is not None:
            cpu_pids = events.filter(pl.col("stream").is_null() & pl.col("pid").is_not_null())[
                "pid"
            ]
            if cpu_pids.len():
                pid = int(cpu_pids.mode().sort()[0])
        host = info.get("host", "")
        label = (
            f"rank {self.rank}"
            + (f" · {host}" if host else "")
            + (f" · pid {pid}" if pid is not None else "")
        )

        proc = self.uuid()
        p = self.packet()
        d = p.track_descriptor
        d.uuid = proc
        d.process.pid = 1_000_000 + self.rank  # unique per rank even across hosts
        d.process.process_name = label
        d.child_ordering = d.EXPLICIT
        self.w.write(p)

        groups: list[_Slices] = []
        groups += self.cycles(proc)
        groups += self.phases(proc)
        if events is not None:
            groups += self.events(proc, events, pid)
        self.emit(groups)
        self.counters(proc)

    def cycles(self, proc: int) -> list[_Slices]:
        import polars as pl

        ra = self.analysis
        summed = ra is not None and ra.breakdown is not None and ra.breakdown.height > 0
        cyc = self._cycle_ranges()
        if cyc is None or cyc.height == 0:
            return []
        if ra is not None and summed:
            sums = _cycle_sums(ra).with_columns(pl.col("cycle").cast(cyc["cycle"].dtype))
            cyc = cyc.join(sums, on="cycle", how="left", maintain_order="left")
        cyc = cyc.sort("start_ns")
        track = self.descriptor("cycles", parent=proc, rank_order=0)
        starts = cyc["start_ns"].to_numpy().astype(np.int64)
        ends = np.maximum(cyc["end_ns"].to_numpy().astype(np.int64), starts)
        names = [f"cycle {c}" for c in cyc["cycle"].to_list()]
        cols: dict[str, tuple[str, Any]] = {
            "cycle": ("int", cyc["cycle"]),
            "accept_len": ("double", cyc["accept_len"].cast(pl.Float64).fill_null(float("nan"))),
        }
        if summed:
            for key in ("wall_ns", "forward_ns", "allreduce_ns", "overhead_ns"):
                cols[key] = ("int", cyc[key])
            cols["graph_replayed"] = ("bool", cyc["graph_replayed"])
            cols["allreduce_impl"] = ("string", cyc["allreduce_impl"].cast(pl.String))
        return self._lane_split(
            track,
            proc,
            "cycles",
            starts,
            ends,
            self.intern(names),
            args=_pbenc.debug_annotations(cols, cyc.height),
            nested=False,
        )

    def _cycle_ranges(self) -> pl.DataFrame | None:
        """The rank's cycles as slices (cycle, start_ns, end_ns, accept_len): every cycle the
        collector recorded (the store's `cycles` table: CPU ranges, in full mode beyond the
        profiled window), else those of the breakdown, each from its first phase's start to
        its last phase's end (start_ns + wall_ns)."""
        import polars as pl

        if self.ctx.tables["cycles"] and self.rank in reader.ranks(self.run_dir, "cycles"):
            table: pl.DataFrame = reader.read_table(self.run_dir, "cycles", rank=self.rank)
            return table.select("cycle", "start_ns", "end_ns", "accept_len")
        bd = None if self.analysis is None else self.analysis.breakdown
        if bd is None or bd.height == 0:
            return None
        ranges: pl.DataFrame = (
            bd.group_by("cycle")
            .agg(
                pl.col("start_ns").min(),
                (pl.col("start_ns") + pl.col("wall_ns")).max().alias("end_ns"),
                pl.col("accept_len").max(),
            )
            .sort("cycle")
        )
        return ranges

    def phases(self, proc: int) -> list[_Slices]:
        import polars as pl

        ra = self.analysis
        if ra is None or ra.phases.instances.height == 0:
            return []
        top = (
            ra.phases.instances.sort("start_ns")
            .select("rank", "inst", "cycle", "phase", "start_ns", "end_ns", "depth", "parent")
            .with_columns(pl.col("phase").cast(pl.String), pl.col("parent").cast(pl.String))
        )
        # a run without cycles has phase instances but no breakdown rows: phases only
        bd = ra.breakdown
        present = [k for k in BREAKDOWN_ARGS if bd is not None and bd.height and k in bd.columns]
        if bd is not None and present:
            # a breakdown row is a top-level phase instance: the same (rank, inst)
            right = bd.select("rank", "inst", *present)
            top = top.join(right, on=["rank", "inst"], how="left", maintain_order="left")
        track = self.descriptor("phases", parent=proc, rank_order=1)
        starts = top["start_ns"].to_numpy().astype(np.int64)
        ends = np.maximum(top["end_ns"].to_numpy().astype(np.int64), starts)
        cols: dict[str, tuple[str, Any]] = {
            "cycle": ("int", top["cycle"]),
            "depth": ("int", top["depth"]),
            "parent": ("string", top["parent"]),
        }
        kinds = {
            pl.Boolean: "bool",
            pl.Float64: "double",
            pl.Float32: "double",
            pl.String: "string",
        }
        for k in present:
            col = top[k]
            kind = kinds.get(col.dtype.base_type(), "int")
            if kind == "double":
                cols[k] = (kind, col.cast(pl.Float64).fill_null(float("nan")))
            elif kind == "string":
                cols[k] = (kind, col.cast(pl.String))
            elif col.dtype.is_integer() or kind == "bool":
                cols[k] = (kind, col)
            else:
                cols[k] = ("string", col.cast(pl.String))
        names = top["phase"].fill_null("None")  # as str(None)
        return self._lane_split(
            track,
            proc,
            "phases",
            starts,
            ends,
            self.intern_column(names),
            args=_pbenc.debug_annotations(cols, top.height),
            nested=True,
        )

    def add_special(self, args: dict[str, Any], flows: list[int] | None = None) -> int:
        self.special_args.append(args)
        self.special_flows.append(flows or [])
        return len(self.special_args) - 1

    def _lane_split(
        self,
        track: int,
        parent: int,
        name: str,
        starts: np.ndarray,
        ends: np.ndarray,
        iids: np.ndarray,
        *,
        nested: bool,
        special: np.ndarray | None = None,
        correlation: np.ndarray | None = None,
        flow: np.ndarray | None = None,
        args: _pbenc.Piece | None = None,
        lane_prefix: str = "lane",
        rank_order: int | None = None,
    ) -> list[_Slices]:
        order = None
        if nested:
            lanes, order = nested_lanes_and_order(starts, ends)
        else:
            lanes = disjoint_lanes(starts, ends)
        out: list[_Slices] = []
        n_lanes = int(lanes.max()) + 1 if lanes.shape[0] else 1
        for lane in range(n_lanes):
            sel = lanes == lane
            if lane == 0:
                t = track
            else:
                t = self.descriptor(
                    f"{name} · {lane_prefix} {lane}", parent=parent, rank_order=rank_order
                )
                if not nested:
                    self.stats.kernel_lanes += 1
            out.append(
                _Slices(
                    track=t,
                    start=starts[sel],
                    end=ends[sel],
                    name_iid=iids[sel],
                    correlation=None if correlation is None else correlation[sel],
                    flow=None if flow is None else flow[sel],
                    special=None if special is None else special[sel],
                    args=None if args is None else _pbenc.Piece(args.data[sel], args.lens[sel]),
                    order=order if n_lanes == 1 else None,
                )
            )
        return out

    def events(self, proc: int, events: pl.DataFrame, main_pid: int | None) -> list[_Slices]:
        import polars as pl

        # `_x`: a complete event (ph X; a missing ph counts as X); `_inst`: an instant (i, I)
        ev = events.select(EVENT_COLUMNS).with_columns(
            pl.col("dur_ns").fill_null(0).clip(lower_bound=0),
            (pl.col("ph") == "X").fill_null(True).alias("_x"),
            pl.col("ph").is_in(["i", "I"]).fill_null(False).alias("_inst"),
            pl.col("correlation").fill_null(0),
            (pl.col("cat") == "gpu_user_annotation").fill_null(False).alias("_ann"),
        )
        ev = ev.with_columns(pl.Series("_iid", self.intern_column(ev["name"]))).drop(
            "name", "cat", "ph"
        )
        ev = ev.with_row_index("_row")
        out: list[_Slices] = []
        is_gpu = ev["stream"].is_not_null() & ev["_x"]
        gpu = ev.filter(is_gpu).drop("tid", "_x", "_inst").rename({"pid": "_pid"})
        cpu = ev.filter(ev["stream"].is_null() & (ev["_x"] | ev["_inst"])).drop(
            "device", "stream", "_ann", "_inst"
        )

        launch_flows: dict[int, list[int]] = {}
        if self.flows and gpu.height:
            launch_corr = cpu.filter((pl.col("correlation") != 0) & pl.col("_x"))[
                "correlation"
            ].unique()
            gpu = gpu.with_columns(
                pl.when(
                    (pl.col("correlation") != 0)
                    & pl.col("correlation").is_in(launch_corr.implode())
                )
                .then(
                    pl.lit((self.rank + 1) << _FLOW_SHIFT, dtype=pl.Int64)
                    + pl.col("_row").cast(pl.Int64)
                    + 1
                )
                .otherwise(0)
                .alias("_flow")
            )
            linked = gpu.filter(pl.col("_flow") != 0)
            for c, fids in linked.group_by("correlation").agg(pl.col("_flow").sort()).iter_rows():
                launch_flows[int(c)] = [int(f) for f in fids]
            self.stats.flows += linked.height

        # GPU: a track a (device, stream), lanes where kernels overlap
        if gpu.height:
            gpu = gpu.with_columns(pl.col("device").fill_null(pl.col("_pid")).fill_null(-1)).drop(
                "_pid", "_row"
            )
            dev_tracks: dict[int, int] = {}
            for (device, stream, ann), sel in sorted(
                gpu.partition_by(
                    "device", "stream", "_ann", as_dict=True, maintain_order=True
                ).items()
            ):
                if device not in dev_tracks:
                    dev_tracks[device] = self.descriptor(
                        f"GPU {device}", parent=proc, rank_order=2 + len(dev_tracks)
                    )
                st = sel["start_ns"].to_numpy().astype(np.int64)
                en = st + sel["dur_ns"].to_numpy().astype(np.int64)
                # GPU annotations (gpu_user_annotation) span kernels: a nested track of their own
                tname = f"stream {stream} · annotations" if ann else f"stream {stream}"
                track = self.descriptor(tname, parent=dev_tracks[device])
                out += self._lane_split(
                    track,
                    dev_tracks[device],
                    tname,
                    st,
                    en,
                    sel["_iid"].to_numpy(),
                    nested=bool(ann),
                    correlation=sel["correlation"].to_numpy().astype(np.int64),
                    flow=sel["_flow"].to_numpy().astype(np.uint64)
                    if "_flow" in sel.columns
                    else None,
                )
            self.stats.slices += gpu.height

        # CPU threads: thread tracks, strictly nested; crossing slices on overlap tracks
        if cpu.height:
            cpu = cpu.with_columns(pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1))
            for (tpid, tid), sel in sorted(
                cpu.partition_by("pid", "tid", as_dict=True, maintain_order=True).items()
            ):
                uuid = self.uuid()
                p = self.packet()
                d = p.track_descriptor
                d.uuid = uuid
                d.parent_uuid = proc
                d.thread.pid = 1_000_000 + self.rank
                d.thread.tid = int(tid) if tid >= 0 else 0
                tname = (
                    f"thread {tid}"
                    if tpid == main_pid or main_pid is None
                    else f"pid {tpid} thread {tid}"
                )
                d.thread.thread_name = tname
                self.w.write(p)
                inst = ~sel["_x"].to_numpy()
                st = sel["start_ns"].to_numpy().astype(np.int64)
                en = st + sel["dur_ns"].to_numpy().astype(np.int64)
                iids = sel["_iid"].to_numpy()
                corr = sel["correlation"].to_numpy().astype(np.int64)
                special = None
                flow_args = None
                if launch_flows:
                    special = np.full(sel.height, -1, dtype=np.int64)
                    few: list[bytes] = [b""] * sel.height
                    for i in np.flatnonzero(
                        np.isin(corr, np.fromiter(launch_flows, np.int64)) & ~inst
                    ).tolist():
                        fl = launch_flows.pop(int(corr[i]), None)
                        if fl and len(fl) <= _FEW_FLOWS:
                            few[i] = b"".join(_FLOW_TAG + f.to_bytes(8, "little") for f in fl)
                        elif fl:
                            special[i] = self.add_special({}, fl)
                    flow_args = _pbenc.ragged(few)
                x = ~inst
                out += self._lane_split(
                    uuid,
                    proc,
                    tname,
                    st[x],
                    en[x],
                    iids[x],
                    nested=True,
                    special=None if special is None else special[x],
                    correlation=corr[x],
                    args=None
                    if flow_args is None
                    else _pbenc.Piece(flow_args.data[x], flow_args.lens[x]),
                    lane_prefix="overlap",
                )
                if inst.any():
                    out.append(
                        _Slices(
                            track=uuid,
                            start=st[inst],
                            end=st[inst],
                            name_iid=iids[inst],
                            instant=np.ones(int(inst.sum()), dtype=bool),
                        )
                    )
            self.stats.slices += cpu.height
        return out

    # -- emission -----------------------------------------------------------------------------

    def emit(self, groups: list[_Slices]) -> None:
        """Write every group's begin/end packets, in nesting order per track.

        Groups are encoded one after the other (a group is one track), so a wide argument
        column (the phases' breakdown) never pads the rows of another track.
        """
        if self.pending_names or self.first:
            # interned names must precede their first use
            self.w.write(self.packet())
        for g in groups:
            n = g.start.shape[0]
            if n == 0:
                continue
            if g.instant is not None:
                idx = np.arange(n)
                is_begin = np.ones(n, dtype=bool)
                types = np.full(n, INSTANT)
                ts = g.start
            else:
                idx, is_begin = g.order or sweep_order(g.start, g.end)
                types = np.where(is_begin, SLICE_BEGIN, SLICE_END)
                ts = np.where(is_begin, g.start[idx], g.end[idx])
            # columns absent from the group stay None: nothing to encode
            a = _Points(
                track=g.track,
                ts=ts,
                type=types,
                iid=np.where(is_begin, g.name_iid[idx], 0),
                corr=None if g.correlation is None else np.where(is_begin, g.correlation[idx], 0),
                flow=None
                if g.flow is None
                else np.where(is_begin, g.flow[idx], 0).astype(np.uint64),
                special=None if g.special is None else np.where(is_begin, g.special[idx], -1),
            )
            extra = _pbenc.take(g.args, idx, is_begin) if g.args is not None else None
            for chunk in _chunks(idx.shape[0], 1 << 17):
                piece = None
                if extra is not None:
                    piece = _pbenc.Piece(extra.data[chunk], extra.lens[chunk])
                self._emit_chunk(a.rows(chunk), piece)

    def _emit_chunk(self, a: _Points, extra: _pbenc.Piece | None) -> None:
        """Encode the chunk vectorised; splice protobuf packets in for rows with arguments."""
        blob, lens = _pbenc.track_event_packets(
            ts=a.ts,
            event_type=a.type,
            track_uuid=np.int64(a.track),
            sequence_id=self.seq,
            name_iid=a.iid,
            correlation=a.corr,
            flow_id=a.flow,
            extra=extra if extra is not None and int(extra.lens.max()) else None,
        )
        positions = np.flatnonzero(a.special >= 0) if a.special is not None else None
        if positions is None or positions.shape[0] == 0:
            self.w.raw(blob)
            return
        ends = np.cumsum(lens)
        view = memoryview(blob)
        done = 0
        for pos in positions.tolist():
            row_start = int(ends[pos] - lens[pos])
            if row_start > done:
                self.w.raw(view[done:row_start])
            self._emit_special(a, pos)
            done = int(ends[pos])
        if done < len(blob):
            self.w.raw(view[done:])

    def _emit_special(self, a: _Points, pos: int) -> None:
        assert a.special is not None
        k = int(a.special[pos])
        p = self.packet(int(a.ts[pos]))
        e = p.track_event
        e.type = int(a.type[pos])
        e.track_uuid = a.track
        e.name_iid = int(a.iid[pos])
        if a.corr is not None and a.corr[pos]:
            e.correlation_id = int(a.corr[pos])
        e.flow_ids.extend(self.special_flows[k])
        _annotate(p, self.special_args[k])
        self.w.write(p)

    def counters(self, proc: int) -> None:
        import polars as pl

        if not self.ctx.tables["counters"] or self.rank not in reader.ranks(
            self.run_dir, "counters"
        ):
            return
        cnt = reader.read_table(self.run_dir, "counters", rank=self.rank).with_columns(
            pl.col("metric").cast(pl.String)
        )
        for gpu, metric in cnt.select("gpu", "metric").unique().sort("gpu", "metric").iter_rows():
            sel = cnt.filter((pl.col("gpu") == gpu) & (pl.col("metric") == metric)).sort("ts_ns")
            track = self.descriptor(
                f"GPU {gpu} {metric}",
                parent=proc,
                rank_order=100,
                counter_unit=COUNTER_UNITS.get(str(metric), ""),
            )
            self.w.raw(
                _pbenc.counter_packets(
                    ts=sel["ts_ns"].to_numpy().astype(np.int64),
                    track_uuid=track,
                    sequence_id=self.seq,
                    values=sel["value"].fill_null(float("nan")).to_numpy().astype(np.float64),
                )
            )
            self.stats.counters += sel.height


def _cycle_sums(ra: RankAnalysis) -> pl.DataFrame:
    """Per cycle of one rank: wall_ns (the cycle frame's: the sum of its phases), and the sums
    of its breakdown rows' forward, allreduce and overhead, whether any replayed a graph, the
    allreduce implementations (comma-joined; null for none)."""
    import polars as pl

    assert ra.breakdown is not None
    assert ra.cycles is not None
    sums = ra.breakdown.group_by("cycle").agg(
        pl.col("forward_ns").sum(),
        pl.col("allreduce_ns").sum(),
        pl.col("overhead_ns").sum(),
        pl.col("graph_replayed").any(),
        pl.col("allreduce_impl").drop_nulls().unique().sort().str.join(","),
    )
    out: pl.DataFrame = (
        ra.cycles.select("cycle", "wall_ns")
        .join(sums, on="cycle", how="left")
        .select(
            "cycle",
            "wall_ns",
            "forward_ns",
            "allreduce_ns",
            "overhead_ns",
            "graph_replayed",
            pl.when(pl.col("allreduce_impl") != "").then(pl.col("allreduce_impl")),
        )
    )
    return out


def _chunks(n: int, size: int) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def _int_or_none(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None
