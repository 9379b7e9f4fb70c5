"""Write store partitions: one Parquet file per (table, rank, part), atomically.

Imports only pyarrow, so collectors and ingest workers can use it without polars.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit._version import __version__
from tracekit.errors import SchemaError
from tracekit.store.layout import RunLayout
from tracekit.store.schema import (
    META_SCHEMA_VERSION,
    META_TRACEKIT_VERSION,
    SCHEMA_VERSION,
    TABLES,
)


def conform(table: str, data: pa.Table) -> pa.Table:
    """Cast `data` to the table's schema (missing columns become nulls, extra ones are an error)."""
    schema = TABLES[table]
    extra = set(data.column_names) - set(schema.names)
    if extra:
        msg = f"columns {sorted(extra)} are not in the `{table}` schema: {schema.names}"
        raise SchemaError(msg)
    columns = []
    for field in schema:
        if field.name in data.column_names:
            columns.append(data.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(data.num_rows, type=field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def with_metadata(schema: pa.Schema) -> pa.Schema:
    meta = dict(schema.metadata or {})
    meta[META_SCHEMA_VERSION.encode()] = str(SCHEMA_VERSION).encode()
    meta[META_TRACEKIT_VERSION.encode()] = __version__.encode()
    return schema.with_metadata(meta)


def write_partition(run_dir: Path, table: str, rank: int, data: pa.Table, *, part: int = 0) -> Path:
    """Write `data` as `store/<table>/rank=<rank>/part-<part>.parquet` (temp file + rename)."""
    data = conform(table, data)
    data = data.replace_schema_metadata(with_metadata(data.schema).metadata)
    out_dir = RunLayout(Path(run_dir)).partition_dir(table, rank)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"part-{part}.parquet"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    pq.write_table(data, tmp, compression="zstd")
    tmp.replace(path)
    return path
