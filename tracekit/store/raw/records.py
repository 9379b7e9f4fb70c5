"""Record batches: packed rows -> a batch (the recorder's flush), a batch -> rows (merge)."""

from __future__ import annotations

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
        seqs = [abs(seq) for seq in rows["seq"].tolist()]
        g0 = [gpu_done.get(seq, (None, None))[0] for seq in seqs]
        g1 = [gpu_done.get(seq, (None, None))[1] for seq in seqs]
        for seq in seqs:
            gpu_done.pop(seq, None)
        arrays += [pa.array(g0, pa.int64()), pa.array(g1, pa.int64())]
    else:
        arrays += [pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64())]
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return batch.serialize().to_pybytes()  # type: ignore[no-any-return]


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


def decode(table: Any, sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Raw rows with their site codes resolved: kind, phase, parent (name), target; `seq` made
    positive again (the cycle row of a site that is also a phase carries -seq)."""
    rows: list[dict[str, Any]] = table.to_pylist()
    by_code = {int(s["code"]): s for s in sites}
    for r in rows:
        site = by_code.get(r["code"], {"kind": "phase", "phase": f"code{r['code']}", "target": ""})
        r["kind"] = site["kind"]
        r["phase"] = site["phase"] if site["kind"] == "phase" else None
        r["target"] = site["target"]
        parent = by_code.get(r["parent"]) if r["parent"] is not None and r["parent"] >= 0 else None
        r["parent"] = parent["phase"] if parent else None
        r["seq"] = abs(r["seq"])
    return rows


def read_records(pid_dir: Path, table: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The decoded records of one process (its segments' `table`, its `sites.json`), or
    ([], why they cannot be used, naming the file). Rows missing a key value are left out."""
    import pyarrow as pa

    schema = raw_schema()
    try:
        table = table.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        names = ", ".join(table.column_names)[:120]
        return [], f"{pid_dir / RECORDS_FILE}: not a tracekit record stream (columns {names})"
    data, why = read_json(pid_dir / SITES_FILE)
    sites = valid_sites(data)
    if sites is None:
        why = why or ("missing" if not data else "not a tracekit site table")
        return [], f"{pid_dir / SITES_FILE}: {why}, so its records cannot be named"
    return decode(complete(table), sites), None


def complete(table: Any) -> Any:
    """The rows of a record table or batch that have every key value (cycle, depth, start_ns,
    end_ns, seq); the others cannot be placed and are left out."""
    import pyarrow.compute as pc

    keep = None
    for key in ("cycle", "depth", "start_ns", "end_ns", "seq"):
        valid = pc.is_valid(table.column(key))
        keep = valid if keep is None else pc.and_(keep, valid)
    return table.filter(keep)
