"""Which hot path the recorder runs: the C extension (`_native`, built by setup.py) or the
Python one, which writes the same records (tests/unit/collectors/test_native_hotpath.py).

`TRACEKIT_NATIVE=0` forces the Python path (CI runs the recorder's tests both ways); an
extension that is missing (no C compiler at install) or fails to load leaves the Python path,
and `note()` says so once a process (the launcher prints it; process.json has `hot_path`).
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

ENV_NATIVE = "TRACEKIT_NATIVE"


def _load() -> tuple[Any, str]:
    """(the extension module or None, why it is not used: "" when it is)."""
    if os.environ.get(ENV_NATIVE, "").strip().lower() in ("0", "false", "no", "off"):
        return None, f"{ENV_NATIVE}=0"
    try:  # by name: a compiled module mypy cannot see
        _native = importlib.import_module("tracekit.collectors.recording._native")
    except ImportError as exc:
        return None, f"the C extension did not load ({exc}); reinstall with a C compiler"
    return _native, ""


NATIVE, WHY_NOT = _load()
_said = False


def hot_path_name(native: Any) -> str:
    return "native" if native is not None else "python"


def note() -> str | None:
    """Once a process: the line saying the Python path is used because the extension did not
    load (None when it loaded, when it was turned off on purpose, or when said before)."""
    global _said
    if NATIVE is not None or _said or WHY_NOT.startswith(ENV_NATIVE):
        return None
    _said = True
    return f"tracekit: the collectors' native hot path is not used: {WHY_NOT}; the Python path records the same, at a higher cost a call"


def say_once() -> None:
    line = note()
    if line is not None:
        try:
            sys.stderr.write(line + "\n")
        except Exception:
            pass
