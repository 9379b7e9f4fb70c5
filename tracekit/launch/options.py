"""What `tracekit launch` is asked to do, and what it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class LaunchOptions:
    command: list[str]
    phasemap_path: Path
    mode: str = "light"  # one of MODES, "light" or "full" (checked by preflight: the CLI's text)
    profile_cycles: str | None = None
    out: Path = Path("tracekit-runs")
    name: str | None = None
    merge: bool = True
    grace_s: float = 30.0
    # rows a flush is started by: collectors/recorder.py DEFAULT_FLUSH_RECORDS (a test keeps them one)
    flush_records: int = 4096
    flush_seconds: float = 1.0
    nvml: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    node_rank: int | None = None  # multi-node: this node's part goes to out/name/parts/node-K
    nnodes: int | None = None
    keep_bytes: int = 0  # retention of each process's records (collectors/segments.py); 0: all
    keep_seconds: float = 0.0
    metrics_port: int | None = None  # serve Prometheus metrics from here (tracekit/live)
    metrics_host: str = "127.0.0.1"


@dataclass
class LaunchResult:
    run_dir: Path
    exit_code: int
    run_manifest: dict[str, Any]
    merge_result: Any = None
