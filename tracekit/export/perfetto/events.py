"""The rank's events as slices: a `GPU D` track with a child track a stream (`stream S`;
overlapping kernels on lane tracks `stream S · lane K`, GPU annotations on `stream S ·
annotations`), and its CPU threads (partially overlapping slices on `· overlap K` tracks).

With flows, an arrow goes from each runtime call to each kernel it launched (one flow id a
kernel: a flow id cannot fork).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracekit.export.perfetto.slices import Slices
from tracekit.export.perfetto.wire import Piece, ragged

if TYPE_CHECKING:
    import polars as pl

    from tracekit.export.perfetto.rank import RankExport

# The events table's columns the export reads besides those the analysis reads (cat, name, ph,
# start_ns, dur_ns, pid, tid, correlation: analyzers/_load.py), which `rank_events` loads with
# them, once; the rest is never loaded.
EXPORT_COLUMNS = ("device", "stream")
# Flow ids: rank r's GPU row i gets ((r + 1) << 40) + i + 1.
FLOW_SHIFT = 40
FLOW_TAG = bytes([0xF9, 0x02])  # TrackEvent.flow_ids, field 47, fixed64
FEW_FLOWS = 8  # launches with more kernels than this are written with protobuf objects


def event_slices(
    rx: RankExport, proc: int, events: pl.DataFrame, main_pid: int | None
) -> list[Slices]:
    """The rank's GPU and CPU slices (their tracks declared on the way)."""
    gpu, cpu = _split(rx, events)
    launch_flows: dict[int, list[int]] = {}
    if rx.flows and gpu.height:
        gpu, launch_flows = _flow_ids(rx, gpu, cpu)
    out: list[Slices] = []
    if gpu.height:
        out += _gpu_slices(rx, proc, gpu)
    if cpu.height:
        out += _cpu_slices(rx, proc, cpu, main_pid, launch_flows)
    return out


def _split(rx: RankExport, events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(GPU rows, CPU rows), names interned (`_iid`), each with its row number (`_row`)."""
    import polars as pl

    # `_x`: a complete event (ph X; a missing ph counts as X); `_inst`: an instant (i, I)
    ev = events.with_columns(
        pl.col("dur_ns").fill_null(0).clip(lower_bound=0),
        (pl.col("ph") == "X").fill_null(True).alias("_x"),
        pl.col("ph").is_in(["i", "I"]).fill_null(False).alias("_inst"),
        pl.col("correlation").fill_null(0),
        (pl.col("cat") == "gpu_user_annotation").fill_null(False).alias("_ann"),
    )
    ev = ev.with_columns(pl.Series("_iid", rx.intern_column(ev["name"]))).drop("name", "cat", "ph")
    ev = ev.with_row_index("_row")
    is_gpu = ev["stream"].is_not_null() & ev["_x"]
    gpu = ev.filter(is_gpu).drop("tid", "_x", "_inst").rename({"pid": "_pid"})
    cpu = ev.filter(ev["stream"].is_null() & (ev["_x"] | ev["_inst"])).drop(
        "device", "stream", "_ann", "_inst"
    )
    return gpu, cpu


def _flow_ids(
    rx: RankExport, gpu: pl.DataFrame, cpu: pl.DataFrame
) -> tuple[pl.DataFrame, dict[int, list[int]]]:
    """GPU rows with `_flow` (their flow id; 0 without a launch on the CPU), and each launch's
    correlation id -> the flow ids of its kernels."""
    import polars as pl

    launch_corr = cpu.filter((pl.col("correlation") != 0) & pl.col("_x"))["correlation"].unique()
    gpu = gpu.with_columns(
        pl.when((pl.col("correlation") != 0) & pl.col("correlation").is_in(launch_corr.implode()))
        .then(
            pl.lit((rx.rank + 1) << FLOW_SHIFT, dtype=pl.Int64) + pl.col("_row").cast(pl.Int64) + 1
        )
        .otherwise(0)
        .alias("_flow")
    )
    linked = gpu.filter(pl.col("_flow") != 0)
    launch_flows: dict[int, list[int]] = {}
    for c, fids in linked.group_by("correlation").agg(pl.col("_flow").sort()).iter_rows():
        launch_flows[int(c)] = [int(f) for f in fids]
    rx.stats.flows += linked.height
    return gpu, launch_flows


def _gpu_slices(rx: RankExport, proc: int, gpu: pl.DataFrame) -> list[Slices]:
    """A track a (device, stream), lanes where kernels overlap."""
    import polars as pl

    gpu = gpu.with_columns(pl.col("device").fill_null(pl.col("_pid")).fill_null(-1)).drop(
        "_pid", "_row"
    )
    out: list[Slices] = []
    dev_tracks: dict[int, int] = {}
    for (device, stream, ann), sel in sorted(
        gpu.partition_by("device", "stream", "_ann", as_dict=True, maintain_order=True).items()
    ):
        if device not in dev_tracks:
            dev_tracks[device] = rx.descriptor(
                f"GPU {device}", parent=proc, rank_order=2 + len(dev_tracks)
            )
        st = sel["start_ns"].to_numpy().astype(np.int64)
        en = st + sel["dur_ns"].to_numpy().astype(np.int64)
        # GPU annotations (gpu_user_annotation) span kernels: a nested track of their own
        tname = f"stream {stream} · annotations" if ann else f"stream {stream}"
        track = rx.descriptor(tname, parent=dev_tracks[device])
        out += rx.lane_split(
            track,
            dev_tracks[device],
            tname,
            st,
            en,
            sel["_iid"].to_numpy(),
            nested=bool(ann),
            correlation=sel["correlation"].to_numpy().astype(np.int64),
            flow=sel["_flow"].to_numpy().astype(np.uint64) if "_flow" in sel.columns else None,
        )
    rx.stats.slices += gpu.height
    return out


def _cpu_slices(
    rx: RankExport,
    proc: int,
    cpu: pl.DataFrame,
    main_pid: int | None,
    launch_flows: dict[int, list[int]],
) -> list[Slices]:
    """Thread tracks, strictly nested; crossing slices on overlap tracks."""
    import polars as pl

    cpu = cpu.with_columns(pl.col("pid").fill_null(-1), pl.col("tid").fill_null(-1))
    out: list[Slices] = []
    for (tpid, tid), sel in sorted(
        cpu.partition_by("pid", "tid", as_dict=True, maintain_order=True).items()
    ):
        tname = (
            f"thread {tid}" if tpid == main_pid or main_pid is None else f"pid {tpid} thread {tid}"
        )
        out += _thread_slices(
            rx, proc, _thread_track(rx, proc, tid, tname), tname, sel, launch_flows
        )
    rx.stats.slices += cpu.height
    return out


def _thread_track(rx: RankExport, proc: int, tid: int, tname: str) -> int:
    uuid = rx.uuid()
    p = rx.packet()
    d = p.track_descriptor
    d.uuid = uuid
    d.parent_uuid = proc
    d.thread.pid = 1_000_000 + rx.rank
    d.thread.tid = int(tid) if tid >= 0 else 0
    d.thread.thread_name = tname
    rx.w.write(p)
    return uuid


def _thread_slices(
    rx: RankExport,
    proc: int,
    uuid: int,
    tname: str,
    sel: pl.DataFrame,
    launch_flows: dict[int, list[int]],
) -> list[Slices]:
    """One thread's complete events (lanes where they cross) and instants."""
    inst = ~sel["_x"].to_numpy()
    st = sel["start_ns"].to_numpy().astype(np.int64)
    en = st + sel["dur_ns"].to_numpy().astype(np.int64)
    iids = sel["_iid"].to_numpy()
    corr = sel["correlation"].to_numpy().astype(np.int64)
    special = None
    flow_args = None
    if launch_flows:
        special, flow_args = _launch_flow_args(rx, corr, inst, launch_flows)
    x = ~inst
    out = rx.lane_split(
        uuid,
        proc,
        tname,
        st[x],
        en[x],
        iids[x],
        nested=True,
        special=None if special is None else special[x],
        correlation=corr[x],
        args=None if flow_args is None else Piece(flow_args.data[x], flow_args.lens[x]),
        lane_prefix="overlap",
    )
    if inst.any():
        out.append(
            Slices(
                track=uuid,
                start=st[inst],
                end=st[inst],
                name_iid=iids[inst],
                instant=np.ones(int(inst.sum()), dtype=bool),
            )
        )
    return out


def _launch_flow_args(
    rx: RankExport, corr: np.ndarray, inst: np.ndarray, launch_flows: dict[int, list[int]]
) -> tuple[np.ndarray, Piece]:
    """The flow ids on each launch of this thread (taken out of `launch_flows`): up to
    FEW_FLOWS pre-encoded per row; more as a special (protobuf-built) packet."""
    special = np.full(corr.shape[0], -1, dtype=np.int64)
    few: list[bytes] = [b""] * corr.shape[0]
    for i in np.flatnonzero(np.isin(corr, np.fromiter(launch_flows, np.int64)) & ~inst).tolist():
        fl = launch_flows.pop(int(corr[i]), None)
        if fl and len(fl) <= FEW_FLOWS:
            few[i] = b"".join(FLOW_TAG + f.to_bytes(8, "little") for f in fl)
        elif fl:
            special[i] = rx.add_special({}, fl)
    return special, ragged(few)
