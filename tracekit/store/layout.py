"""Where things are inside a run directory.

```
RUN_DIR/
  run.json                     run manifest: tracekit version, schema version, command, adapter,
                               mode, start/end, exit code, processes instrumented and not
  raw/<rank-or-pid>/...        per-rank collector output (records.arrow, manifest.json,
                               kineto trace *.json.gz)
  store/<table>/rank=<r>/part-*.parquet
  tracekit-report.html         `tracekit report` default output
  tracekit.pftrace             `tracekit perfetto` default output
```
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

RUN_MANIFEST = "run.json"
RAW_DIR = "raw"
STORE_DIR = "store"
REPORT_FILE = "tracekit-report.html"
PERFETTO_FILE = "tracekit.pftrace"


@dataclass(frozen=True)
class RunLayout:
    """Paths of one run directory."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / RUN_MANIFEST

    @property
    def raw(self) -> Path:
        return self.root / RAW_DIR

    @property
    def store(self) -> Path:
        return self.root / STORE_DIR

    def table_dir(self, table: str) -> Path:
        return self.store / table

    def partition_dir(self, table: str, rank: int) -> Path:
        return self.store / table / f"rank={rank}"

    @property
    def report(self) -> Path:
        return self.root / REPORT_FILE

    @property
    def perfetto(self) -> Path:
        return self.root / PERFETTO_FILE
