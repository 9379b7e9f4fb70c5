"""Top kernels (or, on CPU-only ranks, top-level ops) of each phase, all ranks together."""

from __future__ import annotations

import polars as pl

from tracekit.analyzers.run_analysis import RunAnalysis


def kernels_of(analysis: RunAnalysis, n: int = 10) -> pl.DataFrame:
    """Per phase the `n` names with the most summed duration: phase, name, count, total_ns,
    allreduce_impl (the implementation label of communication kernels, else null).

    Durations are each activity's own (start to end, overlaps counted twice), unlike the
    breakdown's device-timeline shares. Light-mode ranks (no trace) have no kernels here."""
    frames = []
    for ra in analysis.ranks:
        if ra.phases.approximate or ra.intervals is None:
            continue
        ivals = ra.intervals
        phases = ra.phases.instances.select("inst", "phase")
        frames.append(
            ivals.filter(pl.col("inst").is_not_null())
            .join(phases, on="inst", how="inner")
            .select(
                "phase",
                pl.col("name").cast(pl.String),
                (pl.col("end_ns") - pl.col("start_ns")).alias("dur"),
                "label",
            )
        )
    schema = {
        "phase": pl.String,
        "name": pl.String,
        "count": pl.Int64,
        "total_ns": pl.Int64,
        "allreduce_impl": pl.String,
    }
    if not frames:
        return pl.DataFrame(schema=schema)
    out: pl.DataFrame = (
        pl.concat(frames)
        .group_by("phase", "name")
        .agg(
            pl.len().cast(pl.Int64).alias("count"),
            pl.col("dur").sum().alias("total_ns"),
            pl.col("label").first().alias("allreduce_impl"),
        )
        .sort(["phase", "total_ns", "name"], descending=[False, True, False])
        .group_by("phase", maintain_order=True)
        .head(n)
        .select(list(schema))
    )
    return out
