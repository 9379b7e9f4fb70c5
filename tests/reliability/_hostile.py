"""A Kineto trace whose every string a user might see is hostile HTML / JS.

Payloads set `document.title` when they run, so a headless browser can tell whether any did.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

XSS_IMG = "<img src=x onerror=\"document.title='XSS-IMG'\">"
XSS_SCRIPT = "</script><script>document.title='XSS-SCRIPT'</script>"
XSS_SVG = "<svg onload=\"document.title='XSS-SVG'\">"
XSS_ATTR = '" onmouseover="document.title=\'XSS-ATTR\'" x="'
PAYLOADS = (XSS_IMG, XSS_SCRIPT, XSS_SVG, XSS_ATTR)
MARKERS = ("XSS-IMG", "XSS-SCRIPT", "XSS-SVG", "XSS-ATTR")
BASE_NS = 1_790_000_000_000_000_000


def _x(cat: str, name: str, ts: float, dur: float, **kw: Any) -> dict[str, Any]:
    ev = {"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": 101, "ts": ts, "dur": dur}
    ev.update(kw)
    return ev


def hostile_trace(rank: int = 0, world: int = 1, cycles: int = 4) -> dict[str, Any]:
    """`cycles` cycles of draft + verify; kernels, the NCCL kernel and metadata named with
    payloads."""
    events: list[dict[str, Any]] = []
    corr = 1
    for c in range(cycles):
        t = c * 1000.0
        events.append(_x("user_annotation", "tracekit/cycle", t, 900.0))
        for phase, p0, names in (
            ("draft", t + 10, [XSS_IMG, XSS_SVG]),
            ("verify", t + 400, [XSS_SCRIPT, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"]),
        ):
            events.append(_x("user_annotation", f"tracekit/{phase}", p0, 350.0))
            for i, kname in enumerate(names):
                k0 = p0 + 10 + i * 150
                events.append(_x("cpu_op", XSS_ATTR, k0, 20.0))
                events.append(
                    _x("cuda_runtime", "cudaLaunchKernel", k0 + 2, 5.0, args={"correlation": corr})
                )
                events.append(
                    _x(
                        "kernel",
                        kname,
                        k0 + 10,
                        100.0,
                        pid=0,
                        tid=7,
                        args={"device": 0, "stream": 7, "correlation": corr},
                    )
                )
                corr += 1
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": XSS_SVG, "totalGlobalMem": 1}],
        "distributedInfo": {"backend": XSS_IMG, "rank": rank, "world_size": world},
        "baseTimeNanoseconds": BASE_NS,
        "traceEvents": events,
    }


def write_hostile(path: Path, **kw: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(json.dumps(hostile_trace(**kw)).encode()))
    return path
