"""The rank's `cycles` and `phases` tracks, from its analysis (analyzers/run_analysis.py).

`cycles`: one slice a cycle (args: accept_len; with breakdown rows, wall_ns from the cycle
frame and forward/allreduce/overhead ns summed from the breakdown, graph_replayed,
allreduce_impl). `phases`: one slice a phase instance, nested below its parent; a top-level
instance's args are its breakdown row, joined on (rank, inst).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from tracekit.export.perfetto.packets import debug_annotations
from tracekit.store import reader

if TYPE_CHECKING:
    import polars as pl

    from tracekit.analyzers.run_analysis import RankAnalysis
    from tracekit.export.perfetto.rank import RankExport
    from tracekit.export.perfetto.slices import Slices

BREAKDOWN_EXTRAS = ("accept_len", "approximate")  # after DESIGN's fields (analyzers/breakdown.py)


def cycle_slices(rx: RankExport, proc: int) -> list[Slices]:
    import polars as pl

    ra = rx.analysis
    summed = ra is not None and ra.breakdown is not None and ra.breakdown.height > 0
    cyc = _cycle_ranges(rx)
    if cyc is None or cyc.height == 0:
        return []
    if ra is not None and summed:
        sums = _cycle_sums(ra).with_columns(pl.col("cycle").cast(cyc["cycle"].dtype))
        cyc = cyc.join(sums, on="cycle", how="left", maintain_order="left")
    cyc = cyc.sort("start_ns")
    track = rx.descriptor("cycles", parent=proc, rank_order=0)
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
    return rx.lane_split(
        track,
        proc,
        "cycles",
        starts,
        ends,
        rx.intern(names),
        args=debug_annotations(cols, cyc.height),
        nested=False,
    )


def _cycle_ranges(rx: RankExport) -> pl.DataFrame | None:
    """The rank's cycles as slices (cycle, start_ns, end_ns, accept_len): every cycle the
    collector recorded (the store's `cycles` table: CPU ranges, in full mode beyond the
    profiled window), else those of the breakdown, each from its first phase's start to
    its last phase's end (start_ns + wall_ns)."""
    import polars as pl

    if rx.ctx.tables["cycles"] and rx.rank in reader.ranks(rx.run_dir, "cycles"):
        table: pl.DataFrame = reader.read_table(rx.run_dir, "cycles", rank=rx.rank)
        return table.select("cycle", "start_ns", "end_ns", "accept_len")
    bd = None if rx.analysis is None else rx.analysis.breakdown
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


def phase_slices(rx: RankExport, proc: int) -> list[Slices]:
    import polars as pl

    from tracekit.analyzers.breakdown import DESIGN_FIELDS

    ra = rx.analysis
    if ra is None or ra.phases.instances.height == 0:
        return []
    top = (
        ra.phases.instances.sort("start_ns")
        .select("rank", "inst", "cycle", "phase", "start_ns", "end_ns", "depth", "parent")
        .with_columns(pl.col("phase").cast(pl.String), pl.col("parent").cast(pl.String))
    )
    # a run without cycles has phase instances but no breakdown rows: phases only
    bd = ra.breakdown
    args = (*DESIGN_FIELDS, *BREAKDOWN_EXTRAS)
    present = [k for k in args if bd is not None and bd.height and k in bd.columns]
    if bd is not None and present:
        # a breakdown row is a top-level phase instance: the same (rank, inst)
        right = bd.select("rank", "inst", *present)
        top = top.join(right, on=["rank", "inst"], how="left", maintain_order="left")
    track = rx.descriptor("phases", parent=proc, rank_order=1)
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
    return rx.lane_split(
        track,
        proc,
        "phases",
        starts,
        ends,
        rx.intern_column(names),
        args=debug_annotations(cols, top.height),
        nested=True,
    )


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
