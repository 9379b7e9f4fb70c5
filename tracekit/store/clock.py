"""One clock for the parts of a multi-node run: per-part offsets from the collectives.

Each part of a run (one node's `tracekit launch`, or one host's ingested traces) has its own
clock. The end of a collective (an allreduce) is the same instant on every rank that took part,
to within the link latency: no rank leaves before the last one has contributed. So for every
collective k seen on part p and on the reference part (the one holding the lowest rank):

    in_p,k / out_p,k: the latest entry into / the earliest exit from collective k on part p
    low  = max_k (in_p,k - out_ref,k)   (no rank leaves before the last one entered, so the
    high = min_k (out_p,k - in_ref,k)    offset lies in [low, high] whatever the latencies)
    offset_p = (low + high) / 2         (minimum delay, as NTP's clock filter: each bound is set
                                         by the collective with the shortest wake-up on that
                                         side, and the shortest wake-ups are alike on both sides)
    error_p  = hypot(g_low, g_high) / 2 (g: how far the third-best bound on a side lies from the
                                         best: how sharply that side's floor is resolved)

used when each side entered last at least MIN_SIDE times (else one bound is set by a waiting
rank and is loose). Otherwise, or when the bounds contradict each other, the end differences:

    d_k = end_p,k - end_ref,k          (end_p,k: the median end over the part's ranks)
    offset_p = median_k d_k            (balanced over who entered last, clipped into the bounds)
    error_p  = 1.2533 * spread_p / sqrt(n)   (standard error of the median: the estimate's own)

and either way spread_p = 1.4826 * MAD_k(d_k) (how far one collective's d_k strays: jitter).
Under load the ends estimate leans by the difference of the two sides' typical wake-ups (a
rank sharing its core with a busy process wakes late): 30-90 us with gloo on a loaded 2-core
machine, where the minimum-delay estimate stays within 20 us.

Times of part p are then shifted by -offset_p. Collectives are matched by (cycle, k): the k-th
collective phase call in the rank's cycle (cycle -1 for calls outside cycles), which lines up
across ranks because all TP ranks run the same cycles and collectives in the same order. Anchor
times: the collective phase call's GPU end (CUDA events) when recorded, else its CPU end
(a blocking gloo/NCCL call returns when the collective completed); for ingested Kineto traces,
the communication kernels' (or gloo's `c10d::` CPU ops') ends in the events table. A part
without anchors in common with the reference keeps its wall clock (`method = "wall clock"`,
error unknown: NTP keeps hosts within about a millisecond, PTP within microseconds).

What this cannot see: a systematic asymmetry (part p's ranks always leave the collective later
than the reference's by the same amount) is folded into the offset; it is at most the
collective's one-way latency (microseconds over NVLink/InfiniBand, tens of microseconds over
TCP). docs/multinode.md says more. Imports pyarrow and numpy only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tracekit.store.reader import table_files
from tracekit.store.schema import TIME_COLUMNS

ClockMethod = Literal["reference", "collectives", "wall clock"]
# Where a part's anchors came from: collector phases, Kineto events, or nowhere.
AnchorSource = Literal["phases", "events", ""]
# How the offset was taken from the anchors (module docstring): the midpoint of the causality
# bounds, or the balanced median of the end differences.
Estimator = Literal["minimum delay", "end median", ""]

# Phase names (collector phases table) whose calls are collectives.
COLLECTIVE_PHASES = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all", re.I)
# Event names (ingested Kineto traces) of communication activities.
COMM_KERNELS = re.compile(
    r"nccl|rccl|cross_device_reduce|all_reduce|allreduce|all_gather|allgather|reduce_scatter",
    re.I,
)
COMM_CPU_OPS = re.compile(r"^(c10d::|gloo:)(allreduce|all_reduce|allgather|all_gather)", re.I)
# A part with fewer matched collectives than this keeps its wall clock.
MIN_ANCHORS = 3


@dataclass(frozen=True)
class PartClock:
    """The clock correction of one part (a node, a host's traces)."""

    part: str
    host: str
    offset_ns: int  # subtracted from every time of the part
    method: ClockMethod
    anchors: int  # matched collectives used
    error_ns: float | None  # standard error of the offset (None: unknown, wall clock)
    spread_ns: float | None  # robust spread of one collective's difference
    source: AnchorSource
    # hard bounds from causality, relative to offset_ns: the true offset is in
    # [offset + bound_low_ns, offset + bound_high_ns] (None: unknown)
    bound_low_ns: int | None = None
    bound_high_ns: int | None = None
    estimator: Estimator = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# Anchors of one part: key (cycle, k) -> [(start, end)] of that collective, one per rank.
Anchors = dict[tuple[int, int], list[tuple[int, int]]]


def _named(column: Any, pattern: re.Pattern[str]) -> Any:
    """Where a name column matches `pattern` (each distinct name tested once; null: no)."""
    names = column.cast(pa.string())
    hits = [n for n in pc.unique(names).to_pylist() if n and pattern.search(n)]
    return pc.is_in(names, value_set=pa.array(hits, pa.string()))


def anchors_from_phases(table: pa.Table) -> Anchors:
    """Anchors from one rank's collector `phases` rows (one rank: keys must not repeat)."""
    if table.num_rows == 0 or "phase" not in table.column_names:
        return {}
    t = table.filter(_named(table.column("phase"), COLLECTIVE_PHASES))
    if t.num_rows == 0:
        return {}
    start, end = t.column("start_ns"), t.column("end_ns")
    if "gpu_end_ns" in t.column_names and pc.all(pc.is_valid(t.column("gpu_end_ns"))).as_py():
        start, end = t.column("gpu_start_ns"), t.column("gpu_end_ns")
    order = np.lexsort((t.column("start_ns").to_numpy(), t.column("cycle").to_numpy()))
    cycles = t.column("cycle").to_numpy()[order]
    starts, ends = start.to_numpy()[order], end.to_numpy()[order]
    out: Anchors = {}
    k, last = 0, None
    for c, s0, e in zip(cycles.tolist(), starts.tolist(), ends.tolist(), strict=True):
        k = k + 1 if c == last else 0
        last = c
        out[(int(c), k)] = [(int(s0), int(e))]
    return out


def anchors_from_events(table: pa.Table) -> Anchors:
    """Anchors from one rank's Kineto `events` rows: communication kernels in time order (key
    (-1, k)), else gloo's collective CPU ops."""
    if table.num_rows == 0:
        return {}
    cats = table.column("cat").cast(pa.string())
    starts = table.column("start_ns").to_numpy(zero_copy_only=False)
    durs = table.column("dur_ns").fill_null(0).to_numpy(zero_copy_only=False)
    for kind in ("kernel", "cpu_op"):
        pat = COMM_KERNELS if kind == "kernel" else COMM_CPU_OPS
        mask = pc.fill_null(pc.and_(pc.equal(cats, kind), _named(table.column("name"), pat)), False)
        sel = np.flatnonzero(mask.to_numpy(zero_copy_only=False))
        if sel.size:
            order = np.argsort(starts[sel], kind="stable")
            s0 = starts[sel][order].tolist()
            e = (starts[sel] + durs[sel])[order].tolist()
            return {(-1, k): [(int(a), int(b))] for k, (a, b) in enumerate(zip(s0, e, strict=True))}
    return {}


def part_anchors(part_dir: Path) -> tuple[Anchors, AnchorSource]:
    """Anchors of every rank of a part's store, merged per key; and their source."""
    sources: tuple[tuple[AnchorSource, Callable[[pa.Table], Anchors], list[str]], ...] = (
        ("phases", anchors_from_phases, ["cycle", "phase", "start_ns", "end_ns", "gpu_end_ns"]),
        ("events", anchors_from_events, ["cat", "name", "start_ns", "dur_ns"]),
    )
    for table, fn, cols in sources:
        merged: Anchors = {}
        per_rank: dict[int, list[pa.Table]] = {}
        for rank, f in table_files(part_dir, table):
            names = pq.read_schema(f).names
            per_rank.setdefault(rank, []).append(
                pq.read_table(f, columns=[c for c in cols if c in names])
            )
        for tables in per_rank.values():
            for key, ends in fn(pa.concat_tables(tables, promote_options="default")).items():
                merged.setdefault(key, []).extend(ends)
        if merged:
            return merged, table
    return {}, ""


@dataclass(frozen=True)
class Estimate:
    offset_ns: int
    anchors: int
    error_ns: float
    spread_ns: float
    # causality: no rank leaves a collective before the last one entered it, so the offset lies
    # in [low_ns, high_ns] whatever the latencies (None when the anchors contradict it)
    low_ns: int | None
    high_ns: int | None
    estimator: Estimator = "end median"


def _ends_estimate(d: np.ndarray, last: np.ndarray) -> float:
    """The median end difference, balanced over who entered last: the rank that enters a
    collective last leaves it at once, the others after a wake-up, so with one side mostly
    last the plain median leans by a wake-up. With both sides last often enough, the mean of
    the two sides' medians cancels that (if wake-ups are alike on both)."""
    if _both_sides(last):
        return (float(np.median(d[last])) + float(np.median(d[~last]))) / 2
    return float(np.median(d))


def _both_sides(last: np.ndarray) -> bool:
    """Each side entered last (`last`: the other part did) at least MIN_SIDE times."""
    return bool(last.sum() >= MIN_SIDE and (~last).sum() >= MIN_SIDE)


# Each side must have entered last this many times for its bound to be set by a last entry.
MIN_SIDE = 5
# The floor's sharpness is read between the best bound and this one (0-based, in order).
FLOOR_RANK = 2


def _floor_gap(v: np.ndarray) -> float:
    """How far the FLOOR_RANK-th best of `v` (smallest first) lies from the best."""
    if len(v) <= FLOOR_RANK:
        return float(v[-1] - v[0]) if len(v) else 0.0
    part = np.partition(v, FLOOR_RANK)
    return float(part[FLOOR_RANK] - part.min())


def estimate(ref: Anchors, other: Anchors, *, min_anchors: int = MIN_ANCHORS) -> Estimate | None:
    """The offset of `other`'s clock against `ref`'s, or None when they have fewer than
    `min_anchors` collectives in common."""
    keys = sorted(set(ref) & set(other))
    if len(keys) < min_anchors:
        return None
    # epoch nanoseconds need 61 bits, float64 holds 53: work relative to one base time
    base = min(e for k in keys for _, e in ref[k])

    def col(anchors: Anchors, pick: Callable[[list[tuple[int, int]]], float]) -> np.ndarray:
        return np.array(
            [pick([(s - base, e - base) for s, e in anchors[k]]) for k in keys], dtype=np.float64
        )

    def median_end(v: list[tuple[int, int]]) -> float:
        return float(np.median([e for _, e in v]))

    def last_in(v: list[tuple[int, int]]) -> float:
        return float(max(s for s, _ in v))

    def first_out(v: list[tuple[int, int]]) -> float:
        return float(min(e for _, e in v))

    r_end, o_end = col(ref, median_end), col(other, median_end)
    r_in, o_in = col(ref, last_in), col(other, last_in)
    r_out, o_out = col(ref, first_out), col(other, first_out)
    d = o_end - r_end
    med = float(np.median(d))
    spread = 1.4826 * float(np.median(np.abs(d - med)))
    lows, highs = o_in - r_out, o_out - r_in  # each: a bound on the offset from collective k
    low, high = float(lows.max()), float(highs.min())
    if low > high:  # contradicting anchors (mismatched collectives): the ends, unclipped
        theta = _balanced(d, o_in, r_in)
        return Estimate(round(theta), len(d), _se_median(spread, len(d)), spread, None, None)
    mid = (low + high) / 2
    if _both_sides((o_in - mid) > r_in):
        error = math.hypot(_floor_gap(-lows), _floor_gap(highs)) / 2
        return Estimate(round(mid), len(d), error, spread, round(low), round(high), "minimum delay")
    theta = min(max(_balanced(d, o_in, r_in), low), high)
    return Estimate(
        round(theta), len(d), _se_median(spread, len(d)), spread, round(low), round(high)
    )


def _balanced(d: np.ndarray, o_in: np.ndarray, r_in: np.ndarray) -> float:
    theta = float(np.median(d))
    for _ in range(2):  # who entered last depends on the offset: refine twice
        theta = _ends_estimate(d, (o_in - theta) > r_in)
    return theta


def _se_median(spread: float, n: int) -> float:
    """The standard error of a median of n values of robust spread `spread`."""
    return 1.2533 * spread / math.sqrt(n)


def align(parts: list[tuple[str, str, Path]], *, min_anchors: int = MIN_ANCHORS) -> list[PartClock]:
    """Clock corrections of `parts` ((name, host, store directory) each; the first is the
    reference)."""
    if not parts:
        return []
    found = [part_anchors(p) for _, _, p in parts]
    ref, ref_source = found[0]
    out = [
        PartClock(parts[0][0], parts[0][1], 0, "reference", len(ref), 0.0, 0.0, ref_source, 0, 0)
    ]
    for (name, host, _), (anchors, source) in zip(parts[1:], found[1:], strict=True):
        est = estimate(ref, anchors, min_anchors=min_anchors) if ref_source == source else None
        if est is None:
            out.append(PartClock(name, host, 0, "wall clock", 0, None, None, ""))
            continue
        out.append(
            PartClock(
                name,
                host,
                est.offset_ns,
                "collectives",
                est.anchors,
                est.error_ns,
                est.spread_ns,
                source,
                None if est.low_ns is None else est.low_ns - est.offset_ns,
                None if est.high_ns is None else est.high_ns - est.offset_ns,
                est.estimator,
            )
        )
    return out


def shift(table: pa.Table, name: str, offset_ns: int) -> pa.Table:
    """`table` (of store table `name`) with its time columns moved by -offset_ns."""
    if not offset_ns:
        return table
    for col in TIME_COLUMNS.get(name, ()):
        if col in table.column_names:
            i = table.column_names.index(col)
            moved = pc.subtract(table.column(col), pa.scalar(offset_ns, pa.int64()))
            table = table.set_column(i, table.field(i), moved)
    return table
