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
from typing import Literal

from tracekit.errors import InputError

RUN_MANIFEST = "run.json"
RAW_DIR = "raw"
STORE_DIR = "store"
REPORT_FILE = "tracekit-report.html"
PERFETTO_FILE = "tracekit.pftrace"

# run.json's `mode`: light (phase timers, CUDA events) or full (also a torch.profiler window).
Mode = Literal["light", "full"]
# What a caller needs of a run directory: only that it is one, or its collector output (`raw/`).
Needs = Literal["dir", "raw"]
RUN_DIR_HINT = "give the directory `tracekit demo`, `launch` or `ingest -o` wrote"


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


def run_dir_holding(path: Path) -> Path | None:
    """The nearest directory above `path` that is a run directory (run.json, raw/ or store/)."""
    for parent in path.resolve().parents:
        if any((parent / name).exists() for name in (RUN_MANIFEST, RAW_DIR, STORE_DIR)):
            return parent
    return None


def check_run_dir(
    path: Path, *, option: str | None = None, needs: Needs = "dir", hint: str = RUN_DIR_HINT
) -> Path:
    """`path` when it is a run directory with what the caller needs, else InputError (one line
    naming the path and what to pass instead). The one check of a run directory given by a
    user: the CLI's RUN_DIR arguments and run options, and the library's entry points.

    `option` names the option the path came from (`--baseline`); its message then says so."""
    if not path.is_dir():
        where = f"{option} {path}" if option else str(path)
        if path.exists():
            holder = run_dir_holding(path)
            give = f": {holder}" if holder is not None else f" ({hint})"
            msg = f"{where} is a file; give the run directory that holds it{give}"
        else:
            msg = f"{where}: no such run directory; {hint}"
        raise InputError(msg)
    if needs == "raw" and not RunLayout(path).raw.is_dir():
        msg = f"{path}: no `{RAW_DIR}/` directory; pass the run directory `tracekit launch` printed"
        raise InputError(msg)
    return path
