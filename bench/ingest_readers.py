"""Benchmark: JSON readers for one Kineto rank, all in ONE process, alternated round by round.

Measures, on one rank of the ingest set (bench/_work/control_x3_8rank/rank0.json, 93 MB, built by
bench/ingest_vs_hta.py), CPU time (user+sys of this process, all its threads) and wall time of:

- floor parts: reading the file (and gunzip when .gz), msgspec's validating scan of the whole
  document (`dict[str, Raw]`: the cheapest complete parse available), pyarrow's bare NDJSON parse
  of the events (schema inferred, every field), and the byte-level reshaping to NDJSON;
- candidates producing the typed columns tracekit needs (ph, cat, name, ts, dur, pid, tid and the
  11 typed args fields): pyarrow.json.read_json, polars.read_ndjson, DuckDB's read_json (args as
  JSON text), and the current msgspec-struct reader (`iter_batches` of the fallback path);
- the msgspec reader with its Parquet write (what an ingest worker does).

The end-to-end native reader these figures led to (DuckDB fields + args text sliced from the
bytes, commit 9d75959) measured 2.52 CPU s against the msgspec reader's 1.34-1.39 and was
removed; docs/BENCHMARKS.md keeps its figures. Needs `pip install duckdb` (not a dependency).

Usage: python bench/ingest_readers.py [--rounds 3] [--file PATH]
Prints one Markdown table (median of the rounds) for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT = REPO / "bench" / "_work" / "control_x3_8rank" / "rank0.json"

ARG_KEYS = [
    "stream",
    "correlation",
    "External id",
    "device",
    "cbid",
    "Collective name",
    "dtype",
    "In msg nelems",
    "Group size",
    "Process Group Name",
    "bytes",
]
ARG_STR = {"Collective name", "dtype", "Process Group Name"}


def _events_ndjson(path: Path) -> bytes:
    from tracekit.store.kineto import load

    trace = load(path)
    return _reshape(memoryview(trace.events))  # type: ignore[arg-type]


def _lines(u: Any) -> tuple[Any, Any]:
    """Start and end (index of the closing brace) of each event line of the array's bytes."""
    import numpy as np

    nl = np.flatnonzero(u == 10)
    bounds = np.concatenate(([0], nl, [u.size - 1]))
    s = bounds[:-1] + 1
    e = bounds[1:] - 1  # last byte of the segment
    keep = e >= s
    s, e = s[keep], e[keep]
    e = e - (u[e] == ord(","))
    if not ((u[s] == ord("{")).all() and (u[e] == ord("}")).all()):
        sys.exit("the benchmark rank is not written one event per line")
    return s, e


def _reshape(ev: memoryview) -> bytes:
    """The events array as NDJSON (brackets and line-ending commas blanked), as native.py does."""
    import numpy as np

    u = np.frombuffer(ev, dtype=np.uint8)
    _, ends = _lines(u)
    buf = bytearray(ev)
    view = np.frombuffer(buf, dtype=np.uint8)
    view[0] = view[-1] = ord(" ")
    after = ends + 1
    view[after[u[after] == ord(",")]] = ord(" ")
    # pid/tid written as strings renamed, so an int64 column holds the numeric ones (Arrow)
    return bytes(buf).replace(b'"pid": "', b'"pix": "').replace(b'"tid": "', b'"tix": "')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--file", type=Path, default=DEFAULT)
    ap.add_argument("--skip", default="", help="comma-separated candidate names to leave out")
    args = ap.parse_args()
    path: Path = args.file
    size_mb = path.stat().st_size / 1e6

    import duckdb
    import msgspec
    import polars as pl
    import pyarrow as pa
    import pyarrow.json as pj
    import pyarrow.parquet as pq

    from tracekit.store import kineto

    nd = _events_ndjson(path)
    tmpdir = Path(tempfile.mkdtemp(prefix="tk-readers-"))
    nd_file = tmpdir / "events.ndjson"
    nd_file.write_bytes(nd)  # DuckDB reads files; the write is not timed

    arg_struct_pa = pa.struct([(k, pa.string() if k in ARG_STR else pa.int64()) for k in ARG_KEYS])
    schema_pa = pa.schema(
        [
            ("ph", pa.string()),
            ("cat", pa.string()),
            ("name", pa.string()),
            ("ts", pa.float64()),
            ("dur", pa.float64()),
            ("pid", pa.int64()),
            ("tid", pa.int64()),
            ("pix", pa.string()),
            ("tix", pa.string()),
            ("args", arg_struct_pa),
        ]
    )
    arg_struct_pl = pl.Struct({k: pl.String if k in ARG_STR else pl.Int64 for k in ARG_KEYS})
    schema_pl = {
        "ph": pl.String,
        "cat": pl.String,
        "name": pl.String,
        "ts": pl.Float64,
        "dur": pl.Float64,
        "pid": pl.String,
        "tid": pl.String,
        "args": arg_struct_pl,
    }
    top = msgspec.json.Decoder(dict[str, msgspec.Raw])

    def read() -> Any:
        return kineto.read_bytes(path)

    def msgspec_scan() -> Any:
        return top.decode(path.read_bytes())

    def reshape() -> Any:
        trace = kineto.load(path)
        return _reshape(memoryview(trace.events))  # type: ignore[arg-type]

    def arrow_bare() -> Any:
        return pj.read_json(io.BytesIO(nd))

    def arrow_typed() -> Any:
        # pid/tid written as strings are renamed by the reshaping (see _reshape), so int64 holds
        opts = pj.ParseOptions(explicit_schema=schema_pa, unexpected_field_behavior="ignore")
        return pj.read_json(io.BytesIO(nd), parse_options=opts)

    def polars_typed() -> Any:
        return pl.read_ndjson(io.BytesIO(nd), schema=schema_pl)

    def duckdb_typed() -> Any:
        cols = {
            "ph": "VARCHAR",
            "cat": "VARCHAR",
            "name": "VARCHAR",
            "ts": "DOUBLE",
            "dur": "DOUBLE",
            "pid": "JSON",
            "tid": "JSON",
            "args": "JSON",
        }
        con = duckdb.connect()
        sel = ", ".join(
            f'json_extract{"_string" if k in ARG_STR else ""}(args, \'$."{k}"\') AS "{k}"'
            for k in ARG_KEYS
        )
        q = (
            f"SELECT ph, cat, name, ts, dur, pid, tid, args, {sel} FROM read_json('{nd_file}', "
            f"format='newline_delimited', columns={cols}, maximum_object_size=1073741824)"
        )
        out = con.sql(q).arrow().read_all()
        con.close()
        return out

    def msgspec_current() -> Any:
        trace = kineto.load(path)
        stats = kineto.BatchStats()
        return [t.num_rows for t in kineto.fallback.iter_batches(trace, stats=stats)]

    def current_parquet() -> Any:
        from tracekit.store.schema import EVENTS_DICT_COLUMNS, TABLES
        from tracekit.store.writer import conform, with_metadata

        trace = kineto.load(path)
        stats = kineto.BatchStats()
        schema = with_metadata(TABLES["events"])
        with pq.ParquetWriter(
            tmpdir / "f.parquet",
            schema,
            compression="zstd",
            use_dictionary=list(EVENTS_DICT_COLUMNS),
        ) as w:
            for t in kineto.fallback.iter_batches(trace, stats=stats):
                w.write_table(conform("events", t).replace_schema_metadata(schema.metadata))

    cands: dict[str, Callable[[], Any]] = {
        "read file (+gunzip)": read,
        "msgspec validating scan (dict[str, Raw])": msgspec_scan,
        "load + reshape to NDJSON": reshape,
        "pyarrow read_json, bare (inferred schema)": arrow_bare,
        "pyarrow read_json, typed schema": arrow_typed,
        "polars read_ndjson, typed schema": polars_typed,
        "duckdb read_json, args as JSON + json_extract": duckdb_typed,
        "msgspec structs (current reader, to Arrow)": msgspec_current,
        "msgspec reader + Parquet write (today's worker)": current_parquet,
    }
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    cands = {k: v for k, v in cands.items() if not any(s in k for s in skip)}
    cpu: dict[str, list[float]] = {k: [] for k in cands}
    wall: dict[str, list[float]] = {k: [] for k in cands}
    print(f"{path.name}: {size_mb:.1f} MB, load average {os.getloadavg()[0]:.1f}", flush=True)
    for r in range(args.rounds):
        for name, fn in cands.items():
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            cpu[name].append(time.process_time() - c0)
            wall[name].append(time.perf_counter() - w0)
        print(f"round {r}: load average {os.getloadavg()[0]:.1f}", flush=True)
    print()
    print("| step | CPU s (median) | wall s (median) | MB/s per CPU s | CPU s, each round |")
    print("|---|---|---|---|---|")
    for name in cands:
        c = statistics.median(cpu[name])
        w = statistics.median(wall[name])
        rounds = ", ".join(f"{x:.2f}" for x in cpu[name])
        print(f"| {name} | {c:.3f} | {w:.3f} | {size_mb / c:.0f} | {rounds} |")
    print(f"\nload average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
