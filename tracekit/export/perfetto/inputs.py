"""What writing one rank is given: the run's tables and process names, the rank's analysis,
and the counts the writers add to (`ExportStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.store import reader

if TYPE_CHECKING:
    from tracekit.analyzers.model import RankAnalysis


@dataclass
class ExportStats:
    """What `write_perfetto` wrote (for the CLI and the tests)."""

    path: Path
    ranks: list[int] = field(default_factory=list)
    slices: int = 0
    kernel_lanes: int = 0
    flows: int = 0
    counters: int = 0
    notes: list[str] = field(default_factory=list)

    def merge(self, other: ExportStats) -> None:
        self.slices += other.slices
        self.kernel_lanes += other.kernel_lanes
        self.flows += other.flows
        self.counters += other.counters
        self.notes += other.notes


@dataclass(frozen=True)
class RankWork:
    """One rank to write: its analysis (None: `note` says why there is none)."""

    run_dir: Path
    rank: int
    analysis: RankAnalysis | None
    note: str
    flows: bool
    tables: dict[str, bool]


@dataclass
class RunContext:
    """Run-wide inputs: which store tables exist, each rank's process manifest (host, pid)."""

    tables: dict[str, bool]
    processes: dict[int, dict[str, str]]

    @classmethod
    def load(cls, run_dir: Path, tables: dict[str, bool]) -> RunContext:
        import polars as pl

        processes: dict[int, dict[str, str]] = {}
        if tables["manifests"]:
            man = reader.read_table(run_dir, "manifests").filter(pl.col("section") == "process")
            for row in man.iter_rows(named=True):
                processes.setdefault(int(row["rank"]), {})[str(row["key"])] = str(row["value"])
        return cls(tables=tables, processes=processes)
