"""Record batches: packed rows -> a batch (the recorder's flush), a batch -> a decoded frame
(merge; one dict a row for live/)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tracekit.store.raw.files import RECORDS_FILE, SITES_FILE, read_json
from tracekit.store.raw.schema import N_ROW, RAW_COLUMNS, SITE_KINDS, raw_schema

GpuTimes = dict[int, tuple[int, int]]  # call seq -> (GPU start ns, GPU end ns)


def encode_rows(rows: Any, gpu_done: GpuTimes) -> bytes:
    """One serialized Arrow IPC record batch of `rows` (a numpy array of the packed row layout,
    `schema.row_dtype()`), with the GPU times of the calls found in `gpu_done` (taken out of it;
    null for the others)."""
    import numpy as np
    import pyarrow as pa

    schema = raw_schema()
    n = len(rows)
    arrays = []
    for i, name in enumerate(RAW_COLUMNS[:N_ROW]):
        col = rows[name]
        mask = np.isnan(col) if name == "accept_len" else None
        arrays.append(pa.array(col, type=schema.field(i).type, mask=mask))
    if gpu_done:
        arrays += _gpu_columns(np.abs(rows["seq"].astype(np.int64)), gpu_done)
    else:
        arrays += [pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return batch.serialize().to_pybytes()  # type: ignore[no-any-return]


def _gpu_columns(seqs: Any, gpu_done: GpuTimes) -> list[Any]:
    """The GPU start and end columns of rows numbered `seqs` (|seq|: a cycle row and its phase
    row share the times), null where `gpu_done` has none; the found calls are taken out of it.
    Vectorised: the flush runs this with the GIL held, and the per-row Python loop it replaced
    took twice the time at 1,000 rows (bench/encode_rows.py)."""
    import numpy as np
    import pyarrow as pa

    k = len(gpu_done)
    keys = np.fromiter(gpu_done, dtype=np.int64, count=k)
    flat = itertools.chain.from_iterable(gpu_done.values())
    times = np.fromiter(flat, dtype=np.int64, count=2 * k).reshape(k, 2)
    order = np.argsort(keys)
    keys, times = keys[order], times[order]
    at = np.minimum(np.searchsorted(keys, seqs), k - 1)
    found = keys[at] == seqs
    taken = np.zeros(k, dtype=bool)
    taken[at[found]] = True
    for seq in keys[taken].tolist():
        del gpu_done[seq]
    missing = ~found
    return [pa.array(times[at, i], pa.int64(), mask=missing) for i in (0, 1)]


def valid_sites(data: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The site table of a `sites.json` object, or None when it is not one."""
    sites = data.get("sites")
    if not isinstance(sites, list):
        return None
    for site in sites:
        if not (
            isinstance(site, dict)
            and type(site.get("code")) is int
            and site.get("kind") in SITE_KINDS
            and isinstance(site.get("phase"), str)
            and isinstance(site.get("target", ""), str)
        ):
            return None
    return sites


def record_types() -> dict[str, Any]:
    """The polars types of a decoded record's columns, in order: the raw row's (`parent` a
    phase name), then kind, phase, target, the accept readings (`accepts.py`) and the process id."""
    import polars as pl

    raw = pl.from_arrow(raw_schema().empty_table())
    assert isinstance(raw, pl.DataFrame)
    out: dict[str, Any] = dict(raw.schema, parent=pl.String)
    out.update(kind=pl.String, phase=pl.String, target=pl.String)
    out.update(acc_tokens=pl.List(pl.Float64), acc_drafted=pl.List(pl.Float64), pid=pl.Int64)
    return out


def empty_records() -> Any:
    """A frame of no decoded records (`record_types`' columns)."""
    import polars as pl

    return pl.DataFrame(schema=record_types())


def _site_frame(sites: list[dict[str, Any]]) -> Any:
    import polars as pl

    return pl.DataFrame(
        {
            "_code": [int(s["code"]) for s in sites],
            "_kind": [str(s["kind"]) for s in sites],
            "_phase": [str(s["phase"]) for s in sites],
            "_target": [str(s.get("target", "")) for s in sites],
        },
        schema={"_code": pl.Int32, "_kind": pl.String, "_phase": pl.String, "_target": pl.String},
    ).unique("_code", keep="last", maintain_order=True)


def decoded(table: Any, sites: list[dict[str, Any]]) -> Any:
    """Raw rows (an Arrow table or batch) as a polars frame with their site codes resolved:
    kind, phase (null on cycle rows), parent (the enclosing phase's name), target; `seq`
    made positive again (the cycle row of a site that is also a phase carries -seq). A code
    missing from the site table reads as phase `code<N>`."""
    import polars as pl

    raw = pl.from_arrow(table)
    assert isinstance(raw, pl.DataFrame)
    by_code = _site_frame(sites)
    parents = by_code.select(pl.col("_code").alias("parent"), pl.col("_phase").alias("_pname"))
    kind = pl.col("_kind").fill_null("phase")
    df = (
        raw.join(by_code, left_on="code", right_on="_code", how="left", maintain_order="left")
        .join(parents, on="parent", how="left", maintain_order="left")
        .with_columns(
            pl.col("_pname").alias("parent"),
            pl.col("seq").abs(),
            kind.alias("kind"),
            pl.when(pl.col("_kind").is_null())
            .then(pl.format("code{}", pl.col("code")))
            .when(kind == "phase")
            .then(pl.col("_phase"))
            .alias("phase"),
            pl.col("_target").fill_null("").alias("target"),
        )
    )
    return df.select(*RAW_COLUMNS, "kind", "phase", "target")


def read_records(pid_dir: Path, table: Any) -> tuple[Any, str | None]:
    """The decoded records of one process (its segments' `table`, its `sites.json`) as a
    polars frame, or (None, why they cannot be used, naming the file). Rows missing a key
    value are left out."""
    import pyarrow as pa

    schema = raw_schema()
    try:
        table = table.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        names = ", ".join(table.column_names)[:120]
        return None, f"{pid_dir / RECORDS_FILE}: not a tracekit record stream (columns {names})"
    data, why = read_json(pid_dir / SITES_FILE)
    sites = valid_sites(data)
    if sites is None:
        why = why or ("missing" if not data else "not a tracekit site table")
        return None, f"{pid_dir / SITES_FILE}: {why}, so its records cannot be named"
    return decoded(complete(table), sites), None


def complete(table: Any) -> Any:
    """The rows of a record table or batch that have every key value (cycle, depth, start_ns,
    end_ns, seq); the others cannot be placed and are left out."""
    import pyarrow.compute as pc

    keep = None
    for key in ("cycle", "depth", "start_ns", "end_ns", "seq"):
        valid = pc.is_valid(table.column(key))
        keep = valid if keep is None else pc.and_(keep, valid)
    return table.filter(keep)
