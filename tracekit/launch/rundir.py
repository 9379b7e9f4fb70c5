"""A fresh run directory for each launch (never shared)."""

from __future__ import annotations

import re
import time
from pathlib import Path

from tracekit.errors import CollectorError


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:40] or "run"


def default_name(command: list[str]) -> str:
    """`YYYYmmdd-HHMMSS-<program>`: the script, the `-m` module, or the executable's name."""
    prog = Path(command[0]).name if command else "run"
    if prog.startswith("python") and len(command) > 2 and command[1] == "-m":
        prog = command[2]
    elif prog.startswith("python") and len(command) > 1:
        prog = Path(command[1]).stem
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{_slug(prog)}"


def create_run_dir(out: Path, name: str) -> Path:
    """A new directory `out/name` (or `name-1`, `name-2`, ...): two launches never share one."""
    out.mkdir(parents=True, exist_ok=True)
    for i in range(10000):
        cand = out / (name if i == 0 else f"{name}-{i}")
        try:
            cand.mkdir()
        except FileExistsError:
            continue
        return cand
    msg = f"{out}: could not create a new run directory named {name}; pass another `--name` or `--out`"
    raise CollectorError(msg)
