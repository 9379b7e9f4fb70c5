"""Hand-written Kineto traces for the store tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

BASE = 1_790_857_026_000_000_000


def kernel(
    name: str, ts: str | float, dur: str | float, corr: int, *, stream: int = 7, device: int = 0
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "pid": device,
        "tid": stream,
        "ts": ts,
        "dur": dur,
        "args": {
            "device": device,
            "stream": stream,
            "correlation": corr,
            "External id": corr + 1000,
        },
    }


def runtime(
    name: str, ts: str | float, dur: str | float, corr: int, *, pid: int = 100, tid: int = 101
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"cbid": 211, "correlation": corr},
    }


def cpu(
    name: str,
    ts: str | float,
    dur: str | float,
    *,
    cat: str = "cpu_op",
    pid: int = 100,
    tid: int = 101,
) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"External id": 1},
    }


def trace(
    events: list[dict[str, Any]],
    *,
    rank: int | None = 0,
    base: int | None = BASE,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": 0, "name": "NVIDIA H200", "numSms": 132, "computeMajor": 9, "computeMinor": 0}
        ],
    }
    if rank is not None:
        doc["distributedInfo"] = {
            "backend": "nccl",
            "rank": rank,
            "world_size": 8,
            "nccl_version": "2.28.9",
        }
    if base is not None:
        doc["baseTimeNanoseconds"] = base
    doc.update(extra or {})
    doc["traceEvents"] = [
        *events,
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 0},
    ]
    doc["traceName"] = "/tmp/x.json"
    return doc


def write(path: Path, doc: dict[str, Any], *, raw_numbers: bool = True) -> Path:
    """Write `doc`; string ts/dur values are written as bare JSON numbers (exact decimals)."""
    text = json.dumps(doc, indent=1)
    if raw_numbers:
        import re

        text = re.sub(r'"(ts|dur)": "(-?[0-9.eE+-]+)"', r'"\1": \2', text)
    data = text.encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
