"""One rank's packets: its packet sequence (its own interned names and track uuids), the
process track, and the begin/end packets of every slice, encoded in bulk (packets.py) with
protobuf-built packets spliced in where a slice needs one (many flow ids)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.export.perfetto.counters import write_counters
from tracekit.export.perfetto.events import EXPORT_COLUMNS, event_slices
from tracekit.export.perfetto.inputs import ExportStats, RankWork, RunContext
from tracekit.export.perfetto.lanes import disjoint_lanes, nested_lanes_and_order, sweep_order
from tracekit.export.perfetto.packets import track_event_packets
from tracekit.export.perfetto.phases import cycle_slices, phase_slices
from tracekit.export.perfetto.slices import Points, Slices, chunks
from tracekit.export.perfetto.wire import Piece, take
from tracekit.export.perfetto.writer import INSTANT, SLICE_BEGIN, SLICE_END, Writer, annotate

if TYPE_CHECKING:
    import polars as pl
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TracePacket

# Track uuids: rank r owns [(r + 1) << 32, (r + 2) << 32).
RANK_SHIFT = 32


class RankExport:
    """Writes one rank (`write`); the track writers (phases.py, events.py, counters.py) declare
    tracks (`descriptor`), intern names and split slices into lanes through it."""

    def __init__(
        self,
        writer: Writer,
        context: RunContext,
        work: RankWork,
        *,
        stats: ExportStats,
    ) -> None:
        self.w = writer
        self.ctx = context
        self.work = work
        self.run_dir = work.run_dir
        self.rank = rank = work.rank
        self.analysis = work.analysis
        self.note = work.note
        self.flows = work.flows
        self.stats = stats
        self.seq = rank + 2
        self.base = (rank + 1) << RANK_SHIFT
        self.next_uuid = self.base + 1
        self.names: dict[str, int] = {}
        self.pending_names: list[tuple[int, str]] = []
        self.first = True
        # special packets: (begin args, flow ids) for slices that need protobuf objects
        self.special_args: list[dict[str, Any]] = []
        self.special_flows: list[list[int]] = []

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

    def write(self) -> None:
        """The rank's process track, then its tracks and slices, then its counters.

        The rank's events are read here, once (the export's columns and the analysis's);
        with an analyser (`RankWork.analyser`) the rank's analysis is built from that read."""
        from tracekit.analyzers.run_analysis import rank_events

        an = self.work.analyser
        events = rank_events(self.run_dir, self.rank, also=EXPORT_COLUMNS)
        if an is not None:
            self.analysis, self.note = an.analyse(self.run_dir, self.rank, events)
        if self.analysis is None:
            self.stats.notes.append(f"rank {self.rank}: {self.note}")
        pid = self._main_pid(events)
        proc = self._process_track(pid)
        groups: list[Slices] = []
        groups += cycle_slices(self, proc)
        groups += phase_slices(self, proc)
        if events is not None:
            groups += event_slices(self, proc, events, pid)
        self.emit(groups)
        write_counters(self, proc)

    def _main_pid(self, events: pl.DataFrame | None) -> int | None:
        """The manifest's pid, else the most common pid of the rank's CPU events."""
        import polars as pl

        pid = _int_or_none(self.ctx.processes.get(self.rank, {}).get("pid"))
        if pid is None and events is not None:
            cpu_pids = events.filter(pl.col("stream").is_null() & pl.col("pid").is_not_null())[
                "pid"
            ]
            if cpu_pids.len():
                pid = int(cpu_pids.mode().sort()[0])
        return pid

    def _process_track(self, pid: int | None) -> int:
        host = self.ctx.processes.get(self.rank, {}).get("host", "")
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
        return proc

    def add_special(self, args: dict[str, Any], flows: list[int] | None = None) -> int:
        self.special_args.append(args)
        self.special_flows.append(flows or [])
        return len(self.special_args) - 1

    def lane_split(
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
        args: Piece | None = None,
        lane_prefix: str = "lane",
        rank_order: int | None = None,
    ) -> list[Slices]:
        order = None
        if nested:
            lanes, order = nested_lanes_and_order(starts, ends)
        else:
            lanes = disjoint_lanes(starts, ends)
        out: list[Slices] = []
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
                Slices(
                    track=t,
                    start=starts[sel],
                    end=ends[sel],
                    name_iid=iids[sel],
                    correlation=None if correlation is None else correlation[sel],
                    flow=None if flow is None else flow[sel],
                    special=None if special is None else special[sel],
                    args=None if args is None else Piece(args.data[sel], args.lens[sel]),
                    order=order if n_lanes == 1 else None,
                )
            )
        return out

    def emit(self, groups: list[Slices]) -> None:
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
            a = Points(
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
            extra = take(g.args, idx, is_begin) if g.args is not None else None
            for chunk in chunks(idx.shape[0], 1 << 17):
                piece = None
                if extra is not None:
                    piece = Piece(extra.data[chunk], extra.lens[chunk])
                self._emit_chunk(a.rows(chunk), piece)

    def _emit_chunk(self, a: Points, extra: Piece | None) -> None:
        """Encode the chunk vectorised; splice protobuf packets in for rows with arguments."""
        blob, lens = track_event_packets(
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

    def _emit_special(self, a: Points, pos: int) -> None:
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
        annotate(p, self.special_args[k])
        self.w.write(p)


def _int_or_none(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None
