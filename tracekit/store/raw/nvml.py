"""The launcher's NVML samples: `raw/nvml/counters.arrow` (a stream of long-format samples, one
row a GPU, metric and time) and `raw/nvml/gpus.json` (NVML index -> UUID and name)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracekit.store.raw.ipc import read_stream

NVML_DIR = "nvml"
COUNTERS_FILE = "counters.arrow"
GPUS_FILE = "gpus.json"
NVML_COLUMNS = ("gpu", "host", "metric", "ts_ns", "value")
Sample = tuple[int, str, str, int, float]  # a row: (gpu index, host, metric, ns, value)


def nvml_schema() -> Any:
    import pyarrow as pa

    types = (pa.int32(), pa.string(), pa.string(), pa.int64(), pa.float64())
    return pa.schema(list(zip(NVML_COLUMNS, types, strict=True)))


def samples_batch(rows: list[Sample]) -> Any:
    """One record batch of samples."""
    import pyarrow as pa

    schema = nvml_schema()
    cols = list(zip(*rows)) if rows else [() for _ in NVML_COLUMNS]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, type=f.type) for c, f in zip(cols, schema, strict=True)], schema=schema
    )


def read_samples(path: Path) -> tuple[Any, list[str]]:
    """The samples of a counters stream, with the rows that name no GPU left out: (table or
    None, warnings naming the file)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    warnings: list[str] = []
    table, _complete, err = read_stream(path, nvml_schema())
    if table is None or table.num_rows == 0:
        if err:
            warnings.append(f"{path}: damaged ({err}); no GPU counters merged")
        return None, warnings
    if err:
        warnings.append(
            f"{path}: damaged after its last complete batch ({err}); kept what was readable "
            f"({table.num_rows:,} samples)"
        )
    schema = nvml_schema()
    try:
        table = table.select(schema.names).cast(schema)
    except (KeyError, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        warnings.append(f"{path}: not tracekit NVML samples; no GPU counters merged")
        return None, warnings
    return table.filter(pc.is_valid(table.column("gpu"))), warnings
