"""The flush's batch encoding (`tracekit.store.raw.records.encode_rows`) with GPU times, against
the per-row Python join it replaced, in one process.

The flush thread runs the encoding with the GIL held, so its CPU time is time a program
thread may wait for. Rows of the packed layout, one call in 8 with resolved GPU times (launch's
default `--gpu-sample 8`); the two joins alternate, `--repeat` times each, and each figure is
the median of this thread's CPU time (`thread_time_ns`). Figures: docs/BENCHMARKS.md,
"Issue 25: the native hot path".

    python bench/encode_rows.py --rows 1000,10000 --repeat 41
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import numpy as np
import pyarrow as pa

from tracekit.store.raw.records import GpuTimes, encode_rows
from tracekit.store.raw.schema import N_ROW, RAW_COLUMNS, raw_schema, row_dtype


def encode_rows_per_row(rows: Any, gpu_done: GpuTimes) -> bytes:
    """The peer: encode_rows as it was before 0d86d79 (a Python loop over the rows)."""
    schema = raw_schema()
    arrays = []
    for i, name in enumerate(RAW_COLUMNS[:N_ROW]):
        col = rows[name]
        mask = np.isnan(col) if name == "accept_len" else None
        arrays.append(pa.array(col, type=schema.field(i).type, mask=mask))
    seqs = [abs(seq) for seq in rows["seq"].tolist()]
    g0 = [gpu_done.get(seq, (None, None))[0] for seq in seqs]
    g1 = [gpu_done.get(seq, (None, None))[1] for seq in seqs]
    for seq in seqs:
        gpu_done.pop(seq, None)
    arrays += [pa.array(g0, pa.int64()), pa.array(g1, pa.int64())]
    return pa.RecordBatch.from_arrays(arrays, schema=schema).serialize().to_pybytes()  # type: ignore[no-any-return]


def _batch(n: int) -> tuple[Any, GpuTimes]:
    rows = np.zeros(n, dtype=row_dtype())
    rows["seq"] = np.arange(1, n + 1)
    rows["accept_len"] = np.nan
    gpu = {seq: (seq * 1000, seq * 1000 + 500) for seq in range(1, n + 1, 8)}
    return rows, gpu


def _read(data: bytes) -> Any:
    return pa.ipc.read_record_batch(pa.py_buffer(data), raw_schema())


def measure(n: int, repeat: int) -> dict[str, Any]:
    rows, gpu = _batch(n)
    new, old = (_read(fn(rows, dict(gpu))) for fn in (encode_rows, encode_rows_per_row))
    assert new.equals(old), "the two joins disagree"
    times: dict[str, list[int]] = {"numpy": [], "per_row": []}
    for i in range(repeat):
        order = ("numpy", "per_row") if i % 2 == 0 else ("per_row", "numpy")
        for kind in order:
            fn = encode_rows if kind == "numpy" else encode_rows_per_row
            done = dict(gpu)
            t0 = time.thread_time_ns()
            fn(rows, done)
            times[kind].append(time.thread_time_ns() - t0)
    new, old = (statistics.median(times[k]) / 1e3 for k in ("numpy", "per_row"))
    return {"rows": n, "numpy_us": new, "per_row_us": old, "ratio": old / new}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("--rows", default="1000,10000", help="batch sizes, comma-separated")
    p.add_argument("--repeat", type=int, default=41)
    args = p.parse_args(argv)
    for n in (int(x) for x in args.rows.split(",")):
        print(json.dumps(measure(n, args.repeat)))


if __name__ == "__main__":
    main()
