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
import threading
from pathlib import Path
from typing import Any

from tracekit.collectors.recording.native import NATIVE

Op = tuple[Any, ...]


def to_fd(fd: int, data: bytes) -> Op:
    return ("fd", fd, data)


def append(path: Path, data: bytes) -> Op:
    return ("append", os.fsencode(path), data)


def replace(path: Path, data: bytes) -> Op:
    """Write `path` atomically: a temporary file of this thread beside it, renamed."""
    tmp = os.path.join(os.fspath(path.parent), f".{path.name}.{threading.get_ident()}.tmp")
    return ("replace", os.fsencode(path), data, os.fsencode(tmp))


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
            _make_dir(op)
            continue
        name = os.fsdecode(where) if where else f"descriptor {op[1]}"
        raise OSError(err, os.strerror(err), name)


def _make_dir(op: Op) -> None:
    os.makedirs(os.path.dirname(os.fsdecode(op[1])), exist_ok=True)


def _run_one(op: Op) -> None:
    kind, data = op[0], op[2]
    if kind == "fd":
        _write_all(op[1], data)
        return
    target = os.fsdecode(op[1])  # errors name the file as a str, as the native path's do
    if kind == "append":
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        return
    tmp = os.fsdecode(op[3])
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        _make_dir(op)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    os.replace(tmp, target)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
