"""A rank's `phases` and `cycles` tables from its decoded records, in columns.

The records (a polars frame, store/raw/records.py, with `pid`) are put in time order; the phase
rows are nested by placement.py (`nest`: inst, depth, parent, top, computed once and written);
the map's delta accept rules turn lengths into tokens (accept_deltas.py); the raw cycles that
are cycles (the `require` rule) become the `cycles` rows, numbered run-wide (cycle_numbers.py);
each phase row then gets its cycle from placement.py (`place`), like a trace's annotation
ranges. Raw cycle numbers count per process: when several processes of one rank recorded
cycles (a restarted rank), a raw cycle is (pid, number), ordered by its start, numbered from 0.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import polars as pl
import pyarrow as pa

from tracekit.store.accept_deltas import apply_deltas
from tracekit.store.acceptance import STEP_COLUMNS, pooled_steps
from tracekit.store.cycle_numbers import CycleIds
from tracekit.store.placement import nest, place
from tracekit.store.schema import PHASES
from tracekit.store.writer import write_partition

# `cycles.source`: how the cycle was found (analyzers/cycles.py adds the trace's kinds)
CycleSource = Literal["cycle_target", "starts_with", "cycle_annotation", "phases", "cycles"]
KEY = ["_kp", "cycle"]  # a raw cycle: (pid, raw number); pid 0 unless cycles are per process
READINGS = ("acc_tokens", "acc_drafted")


def cycle_source(kind: CycleSource, phase: str | None = None) -> str:
    """The `source` value of a cycle found by `kind` (`starts_with:<phase>` for starts_with)."""
    return f"{kind}:{phase}" if kind == "starts_with" else kind


def _with_readings(frame: pl.DataFrame) -> pl.DataFrame:
    missing = [pl.lit(None, pl.List(pl.Float64)).alias(c) for c in READINGS if c not in frame]
    return frame.with_columns(missing) if missing else frame


class _RawCycles:
    """A rank's phase rows (time order, nested, with `_kp`) grouped by raw cycle."""

    def __init__(self, phases: pl.DataFrame, cfg: dict[str, Any], per_pid: bool) -> None:
        self.phases = phases
        self.per_pid = per_pid
        require = cfg.get("require")
        self.qualifying = (
            None
            if require is None
            else phases.filter(pl.col("phase") == require).select(KEY).unique()
        )
        tops = phases.filter(pl.col("depth") == 0)
        self.tops = tops
        self.accept = (
            tops.filter(pl.col("accept_len").is_not_null())
            .group_by(KEY)
            .agg(pl.col("accept_len").last().alias("_phase_accept"))
        )

    def keep(self, cycles: pl.DataFrame) -> pl.DataFrame:
        """The raw cycles of `cycles` that are cycles, with their phases' accept."""
        kept = cycles
        if self.qualifying is not None:  # the `require` phase ran in it
            kept = kept.join(self.qualifying, on=KEY, how="semi", maintain_order="left")
        return kept.join(self.accept, on=KEY, how="left", maintain_order="left")

    def steps(self, cycle_rows: pl.DataFrame | None = None) -> pl.DataFrame:
        """Each raw cycle's per-request readings (its outermost phases', its cycle row's)
        pooled as the server counts them (store/acceptance.py), for the cycles that have any;
        `_step` is True on those, `_step_len` their acceptance length."""
        parts = [self.tops.select(*KEY, *READINGS)]
        if cycle_rows is not None:
            parts.append(cycle_rows.select(*KEY, *READINGS))
        steps = pooled_steps(pl.concat(parts), KEY)
        return steps.rename({"accept_len": "_step_len"}).with_columns(pl.lit(True).alias("_step"))


def _finish(
    cycles: pl.DataFrame, raw: _RawCycles, steps: pl.DataFrame, ids: CycleIds | None, src: str
) -> pl.DataFrame:
    """`cycles` (kept raw cycles in order: KEY, start_ns, end_ns, `_acc`) as `cycles` rows,
    with `_kp`: numbered (run-wide by `ids`, else from 0), acceptance from the step's readings
    when it has any."""
    if ids is not None and not raw.per_pid:
        cycles = cycles.join(ids.frame(), on="cycle", how="left", maintain_order="left")
    else:
        cycles = cycles.with_row_index("_number").with_columns(pl.col("_number").cast(pl.Int64))
    cycles = cycles.join(steps, on=KEY, how="left", maintain_order="left")
    accept = pl.when(pl.col("_step")).then(pl.col("_step_len")).otherwise(pl.col("_acc"))
    return cycles.select(
        pl.col("_number").alias("cycle"),
        "start_ns",
        "end_ns",
        accept.cast(pl.Float64).alias("accept_len"),
        pl.lit(src).alias("source"),
        *STEP_COLUMNS,
        "_kp",
    )


def _target_cycles(raw: _RawCycles, cycle_rows: pl.DataFrame, ids: CycleIds | None) -> pl.DataFrame:
    """Cycles of a cycle target: its qualifying calls (the first of a raw cycle), spans and
    accept as recorded (else the cycle's last outermost phase's)."""
    order = ["start_ns", "cycle"] if raw.per_pid else ["cycle"]
    first = cycle_rows.sort(order, maintain_order=True).unique(
        KEY, keep="first", maintain_order=True
    )
    kept = raw.keep(first)
    kept = kept.with_columns(pl.coalesce("accept_len", "_phase_accept").alias("_acc"))
    steps = raw.steps(kept)
    return _finish(kept, raw, steps, ids, cycle_source("cycle_target"))


def _starts_with_cycles(raw: _RawCycles, starts_with: str, ids: CycleIds | None) -> pl.DataFrame:
    """Cycles of a `starts_with` rule: each qualifying raw cycle's extent of phases."""
    spans = (
        raw.phases.filter(pl.col("cycle") >= 0)
        .group_by(KEY)
        .agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort(["start_ns", *KEY] if raw.per_pid else KEY)
    )
    kept = raw.keep(spans).sort(["start_ns", *KEY] if raw.per_pid else KEY)
    kept = kept.with_columns(pl.col("_phase_accept").alias("_acc"))
    return _finish(kept, raw, raw.steps(), ids, cycle_source("starts_with", starts_with))


def _no_cycles() -> pl.DataFrame:
    ints = {"cycle": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}
    types = {**ints, "accept_len": pl.Float64, "source": pl.String}
    return pl.DataFrame(schema={**types, **STEP_COLUMNS, "_kp": pl.Int64})


def _owners(frame: pl.DataFrame) -> int:
    return int(frame["pid"].n_unique()) if frame.height else 0


def phases_and_cycles(
    records: pl.DataFrame, cfg: dict[str, Any], ids: CycleIds | None = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A rank's `phases` rows (PHASES' columns, then `inst` and `top`: placement's nesting,
    rows in time order) and `cycles` rows from its decoded records (with `pid`).

    `cfg`: the map's cycle rule (`require`, `starts_with`) and its accept rules of kind
    "delta" (`delta_phases`: phase -> "before" | "after", `cycle_delta`; raw/cycle_rule.py).
    `ids`: the run's cycle numbers (`cycle_ids`); without, the rank's cycles are numbered
    from 0."""
    rows = _with_readings(records).sort(["start_ns", "seq"], maintain_order=True)
    rows = rows.with_row_index("_row")
    phases = nest(rows.filter(pl.col("kind") == "phase"))  # nesting order
    cycle_rows = rows.filter(pl.col("kind") == "cycle")
    phases, cycle_rows = apply_deltas(phases, cycle_rows, cfg)
    owners = cycle_rows if cycle_rows.height else phases.filter(pl.col("cycle") >= 0)
    per_pid = _owners(owners) > 1
    kp = (pl.col("pid").fill_null(0) if per_pid else pl.lit(0, pl.Int64)).alias("_kp")
    phases, cycle_rows = phases.with_columns(kp), cycle_rows.with_columns(kp)
    raw = _RawCycles(phases.sort("_row"), cfg, per_pid)
    if cycle_rows.height:
        cycles = _target_cycles(raw, cycle_rows, ids)
    elif cfg.get("starts_with"):
        cycles = _starts_with_cycles(raw, cfg["starts_with"], ids)
    else:
        cycles = _no_cycles()
    spans = cycles.select("cycle", "start_ns", "end_ns", pl.col("_kp").alias("pid"))
    placed = place(phases, spans, by="pid" if per_pid else None).sort("_row")
    return placed.select(PHASES.names), cycles.drop("_kp")


def write_rank_tables(
    run_dir: Path, rank: int, records: pl.DataFrame, cfg: dict[str, Any], ids: CycleIds | None
) -> tuple[int, int]:
    """Write the rank's `phases` and `cycles` partitions (`phases_and_cycles`); their rows."""
    phases, cycles = phases_and_cycles(records, cfg, ids)
    write_partition(run_dir, "phases", rank, phases.to_arrow())
    empty = pa.table({"cycle": pa.array([], pa.int64())})
    write_partition(run_dir, "cycles", rank, cycles.to_arrow() if cycles.height else empty)
    return phases.height, cycles.height
