"""File names of the raw format, the record segments of a process, JSON read and write."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

PID_PREFIX = "pid-"  # RUN_DIR/raw/pid-<pid>/: one directory a recorded process
RECORDS_FILE = "records.arrow"  # segment 0 of a process's record stream
SITES_FILE = "sites.json"  # site codes of the records: {"sites": [{code, kind, phase, target}]}
PROCESS_FILE = "process.json"  # the recorder's state: rank info, record count, finished ...
MANIFEST_FILE = "manifest.json"  # the process's environment (collectors/manifest.py)
KINETO_FILE = "kineto.json.gz"  # full mode's torch.profiler window
PHASEMAP_FILE = "phasemap.toml"  # the phase map the run used (copied by the launcher)

# A process's records are segments: records.arrow, records.1.arrow, records.2.arrow, ...
SEGMENT_RE = re.compile(r"^records(?:\.(\d+))?\.arrow$")


def segment_name(index: int) -> str:
    return RECORDS_FILE if index == 0 else f"records.{index}.arrow"


def list_segments(pid_dir: Path) -> list[tuple[int, Path]]:
    """(index, path) of the record segments in a process directory, oldest first."""
    out: list[tuple[int, Path]] = []
    try:
        names = os.listdir(pid_dir)
    except OSError:
        return out
    for name in names:
        m = SEGMENT_RE.match(name)
        if m:
            out.append((int(m.group(1) or 0), pid_dir / name))
    out.sort()
    return out


def process_dirs(raw: Path) -> list[tuple[int, Path]]:
    """(pid, directory) of every recorded process under `raw`, in the order of their names."""
    out: list[tuple[int, Path]] = []
    for d in sorted(raw.glob(f"{PID_PREFIX}*"), key=lambda p: p.name):
        text = d.name[len(PID_PREFIX) :]
        if text.isdecimal():
            out.append((int(text), d))
    return out


def read_json(path: Path) -> tuple[dict[str, Any], str | None]:
    """A JSON object from `path`, or ({}, why not) (None when the file does not exist)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}, None
    except (OSError, ValueError) as exc:
        return {}, f"not readable JSON ({str(exc).splitlines()[0][:80]})"
    if not isinstance(data, dict):
        return {}, f"a JSON {type(data).__name__}, not an object"
    return data, None


_encoder: list[Any] = []  # [msgspec's (encode, format) or None], made at the first write


def json_bytes(data: dict[str, Any]) -> bytes:
    """`data` as indented JSON text: msgspec's encoder (anything it cannot encode as its
    `str`), about 10x less CPU than `json.dumps` (the flush thread writes process.json at
    every flush, holding the GIL for it), imported at the first write, not when a server
    imports the collectors; the standard library where msgspec is missing. `json.loads`
    reads both back the same (NaN aside: msgspec writes null)."""
    if not _encoder:
        try:
            import msgspec

            _encoder.append((msgspec.json.Encoder(enc_hook=str).encode, msgspec.json.format))
        except ImportError:
            _encoder.append(None)
    enc = _encoder[0]
    if enc is not None:
        encode, fmt = enc
        return fmt(encode(data), indent=1)  # type: ignore[no-any-return]
    return json.dumps(data, default=str, indent=1).encode()


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` to `path` atomically (a temporary file, one a writing thread, renamed)."""
    replace_bytes(path, json_bytes(data))


def temp_name(path: Path) -> str:
    """The temporary file beside `path` that this thread writes before renaming it over `path`."""
    return os.path.join(os.fspath(path.parent), f".{path.name}.{threading.get_ident()}.tmp")


def replace_bytes(path: Path | str, data: bytes, tmp: str | None = None) -> None:
    """Write `path` atomically: `tmp` (default `temp_name`) written whole, renamed over it; a
    directory removed under the run is made again."""
    tmp = temp_name(Path(path)) if tmp is None else tmp
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            write_all(fd, data)
        finally:
            os.close(fd)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.replace(tmp, path)


def write_all(fd: int, data: bytes) -> None:
    """`data` written to descriptor `fd` whole (os.write may write part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
