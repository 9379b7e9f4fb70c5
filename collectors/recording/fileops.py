"""A flush's file writes, made together: the record batch, the acceptance readings, sites.json and
process.json, in order, in one release of the GIL on the native path (`_native.file_ops`).

Why together: each system call a Python thread makes releases the GIL and takes it back, and
while the program's thread runs Python, taking it back waits a switch interval and then makes the
program's thread give the GIL up (two context switches of it). The flush thread's writes one by
one cost the program about 28 switches a flush (docs/BENCHMARKS.md, "ninth session"). The Python
path (the extension not loaded) makes the same calls one by one: the same files.

An op is a tuple: ("fd", fd, data) appends to an open descriptor (a record stream), ("append",
path, data) to a file it opens, ("replace", path, data, tmp) writes `tmp` and renames it over
`path` (a reader never sees half a file). Paths and data are bytes.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

from tracekit.collectors.recording.native import NATIVE
from tracekit.store.raw.files import replace_bytes, temp_name, write_all

Op = tuple[Any, ...]


def to_fd(fd: int, data: bytes) -> Op:
    return ("fd", fd, data)


def append(path: Path, data: bytes) -> Op:
    return ("append", os.fsencode(path), data)


def replace(path: Path, data: bytes) -> Op:
    """Write `path` atomically: a temporary file of this thread beside it, renamed."""
    return ("replace", os.fsencode(path), data, os.fsencode(temp_name(path)))


def run(ops: list[Op], *, native: Any = NATIVE) -> None:
    """Run `ops` in order; OSError for the first that fails (those after it are not run). A
    file to replace whose directory is gone (deleted under the run) gets it made again."""
    i, remade = 0, -1
    while i < len(ops):
        if native is None:
            _run_one(ops[i])
            i += 1
            continue
        failed = native.file_ops(ops[i:] if i else ops)
        if failed is None:
            return
        at, err, where = failed
        i += at
        op = ops[i]
        if err == errno.ENOENT and op[0] == "replace" and remade != i:
            remade = i
            os.makedirs(os.path.dirname(os.fsdecode(op[1])), exist_ok=True)
            continue
        name = os.fsdecode(where) if where else f"descriptor {op[1]}"
        raise OSError(err, os.strerror(err), name)


def _run_one(op: Op) -> None:
    kind, data = op[0], op[2]
    if kind == "fd":
        write_all(op[1], data)
        return
    target = os.fsdecode(op[1])  # errors name the file as a str, as the native path's do
    if kind == "append":
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
        return
    replace_bytes(target, data, os.fsdecode(op[3]))
