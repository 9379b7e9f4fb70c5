"""The record row: one a wrapped call, as the recorder buffers it and as the stream holds it.

Strings are coded: `code` indexes the site table in `sites.json` (kind "phase" or "cycle",
phase name, target), `parent` is the code of the enclosing phase (-1 at depth 0). `seq` is the
call's number in its process (negative on the cycle row of a site that is both a phase and a
cycle target, so the two rows differ). Merge decodes the codes into the `phases` / `cycles`
tables.
"""

from __future__ import annotations

import functools
import struct
from typing import Any, Literal

RAW_COLUMNS: tuple[str, ...] = (
    "code",
    "cycle",
    "depth",
    "parent",
    "tid",
    "seq",
    "start_ns",
    "end_ns",
    "graph_replays",
    "accept_len",
    "ok",
    "gpu_start_ns",
    "gpu_end_ns",
)
N_ROW = 11  # columns held by a buffered row (the GPU times are kept aside until resolved)
# A buffered row: the first N_ROW columns packed into bytes (little-endian, no padding), so the
# recorder's buffer is one bytearray that the garbage collector never walks and a flush converts
# it without a per-value Python loop. `accept_len` is NaN when there is none (written as null).
ROW = struct.Struct("<iqiiqqqqid?")
ROW_TYPES = ("<i4", "<i8", "<i4", "<i4", "<i8", "<i8", "<i8", "<i8", "<i4", "<f8", "?")
# Arrow types of the columns, in order (int32 / int64 / float64 / bool).
_ARROW_TYPES: tuple[str, ...] = ("i32", "i64", "i32", "i32", "i64", "i64", "i64", "i64", "i32")
_ARROW_TYPES += ("f64", "bool", "i64", "i64")

SiteKind = Literal["phase", "cycle"]
SITE_KINDS: tuple[SiteKind, ...] = ("phase", "cycle")

# Arrow IPC end-of-stream: the continuation marker and a zero length. A stream that ends with it
# was closed cleanly; one without it was cut (a killed process) after its last complete batch.
EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"


@functools.cache
def row_dtype() -> Any:
    """The numpy dtype of a packed row (numpy is imported at the first flush, not before)."""
    import numpy as np

    dtype = np.dtype(list(zip(RAW_COLUMNS[:N_ROW], ROW_TYPES, strict=True)))
    assert dtype.itemsize == ROW.size
    return dtype


def _arrow_type(name: str) -> Any:
    import pyarrow as pa

    return {"i32": pa.int32(), "i64": pa.int64(), "f64": pa.float64(), "bool": pa.bool_()}[name]


@functools.cache
def raw_schema() -> Any:
    """The Arrow schema of a record stream (pyarrow imported here, not at import)."""
    import pyarrow as pa

    return pa.schema([(n, _arrow_type(t)) for n, t in zip(RAW_COLUMNS, _ARROW_TYPES, strict=True)])
