"""The rank's NVML counters: one counter track a (GPU, metric)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tracekit.export.perfetto.packets import counter_packets
from tracekit.store import reader

if TYPE_CHECKING:
    from tracekit.export.perfetto.rank import RankExport

COUNTER_UNITS = {
    "sm_clock_mhz": "MHz",
    "mem_clock_mhz": "MHz",
    "power_w": "W",
    "temperature_c": "°C",
    "gpu_util_pct": "%",
    "mem_util_pct": "%",
}


def write_counters(rx: RankExport, proc: int) -> None:
    import polars as pl

    if not rx.ctx.tables["counters"] or rx.rank not in reader.ranks(rx.run_dir, "counters"):
        return
    cnt = reader.read_table(rx.run_dir, "counters", rank=rx.rank).with_columns(
        pl.col("metric").cast(pl.String)
    )
    for gpu, metric in cnt.select("gpu", "metric").unique().sort("gpu", "metric").iter_rows():
        sel = cnt.filter((pl.col("gpu") == gpu) & (pl.col("metric") == metric)).sort("ts_ns")
        track = rx.descriptor(
            f"GPU {gpu} {metric}",
            parent=proc,
            rank_order=100,
            counter_unit=COUNTER_UNITS.get(str(metric), ""),
        )
        rx.w.raw(
            counter_packets(
                ts=sel["ts_ns"].to_numpy().astype(np.int64),
                track_uuid=track,
                sequence_id=rx.seq,
                values=sel["value"].fill_null(float("nan")).to_numpy().astype(np.float64),
            )
        )
        rx.stats.counters += sel.height
