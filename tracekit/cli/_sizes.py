"""Sizes on the command line: `2GB`, `500MB`, `64KiB`, `1048576`."""

from __future__ import annotations

import re

from tracekit.errors import InputError

_UNITS = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "m": 10**6,
    "mb": 10**6,
    "g": 10**9,
    "gb": 10**9,
    "t": 10**12,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, *, option: str = "size") -> int:
    """Bytes in `text` (decimal units: 1GB = 10^9 bytes; binary ones with `i`: 1GiB = 2^30)."""
    m = _SIZE.match(text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _UNITS:
        msg = f"{option} {text!r}: expected a size such as 2GB, 500MB or 64KiB"
        raise InputError(msg)
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        msg = f"{option} {text!r}: the size must be more than 0"
        raise InputError(msg)
    return value
