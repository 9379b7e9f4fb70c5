"""The recorder's hot attributes: what the hot path reads every call (recording on, the compile
and capture checks, the cycle, call numbers, the row buffer and the flush rule, the GPU
sampling), kept in one small object, the recorder's `_hot`: the native `_native.Hot` (a C struct,
_native_hot.c) where the native hot path runs, `HotState` (the same fields) on the Python path.

The recorder's attributes of the same names (`active`, `cycle`, `_rows`, ...; `FIELDS`) are
properties over it, so every layer reads and writes them as plain attributes; the native hot
path reads the struct's fields, with no look-up in the recorder's dict of about 70 attributes.
Right after a device wait each look-up (its dict's lines, its key string, its int) was a cache
miss, and those misses were most of what a recorded call cost there (docs/BENCHMARKS.md, "eighth
session")."""

from __future__ import annotations

import operator
from typing import Any

# the recorder's attribute -> its field in `_hot`
FIELDS = {
    "active": "active",
    "cycle": "cycle",
    "_captures": "captures",  # torch captures open (collectors/graphs.py); -1: not counted
    "_gpu_every": "gpu_every",
    "_flush_bytes": "flush_bytes",
    "_flush_ns": "flush_ns",
    "_last_flush": "last_flush",
    "_nvtx": "nvtx",
    "profile": "profile",
    "_is_compiling": "is_compiling",
    "_compiler": "compiler",
    "_cuda": "cuda",
    "_capturing": "capturing",
    "_gpu_ref": "gpu_ref",
    "_next_seq": "next_seq",
    "_rows": "rows",
    "_loc": "loc",
}


class HotState:
    """`_native.Hot` on the Python path: the same fields, the same starting values."""

    __slots__ = tuple(FIELDS.values())

    def __init__(self) -> None:
        self.active, self.cycle, self.captures, self.gpu_every = True, -1, -1, 1
        self.flush_bytes = self.flush_ns = self.last_flush = 0
        for name in FIELDS.values():
            if not hasattr(self, name):
                setattr(self, name, None)


def new_hot(native: Any) -> Any:
    """A recorder's `_hot`: the C struct where the native hot path runs, else `HotState`."""
    return native.Hot() if native is not None else HotState()


def _field(name: str) -> property:
    def set_field(rec: Any, value: Any) -> None:
        setattr(rec._hot, name, value)

    return property(operator.attrgetter(f"_hot.{name}"), set_field, doc=f"`_hot.{name}`")


def install(cls: type) -> None:
    """The recorder class's `FIELDS` attributes made properties over its instances' `_hot`."""
    for attr, name in FIELDS.items():
        setattr(cls, attr, _field(name))
