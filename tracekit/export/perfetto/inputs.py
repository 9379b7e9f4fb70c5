"""What writing one rank is given: the run's tables and process names, the rank's analysis (or
how to build it from the events the export reads), and the counts the writers add to
(`ExportStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import TracekitError
from tracekit.store import reader

if TYPE_CHECKING:
    import polars as pl

    from tracekit.analyzers.allreduce import ImplTable
    from tracekit.analyzers.rules import RuleTable
    from tracekit.analyzers.run_analysis import RankAnalysis


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


NO_PHASES = (
    "no phases found (no `tracekit/<phase>` or known annotation ranges, "
    "no collector `phases` table)"
)


@dataclass(frozen=True)
class RankAnalyser:
    """How a rank is analysed from the events the export read for it (`export_run`): the
    run's rule and implementation tables, handed to the analysis's own `analyze_rank`."""

    rules: RuleTable
    table: ImplTable

    def analyse(
        self, run_dir: Path, rank: int, events: pl.DataFrame | None
    ) -> tuple[RankAnalysis | None, str]:
        """The rank's analysis from `events` (None: the rank has none), and the note for a
        rank without one: no phases, or the error reading or analysing them."""
        from tracekit.analyzers.run_analysis import analyze_rank

        try:
            ra = analyze_rank(run_dir, rank, self.rules, self.table, events=events, recorded=False)
        except TracekitError as exc:
            return None, f"phases and breakdown unavailable: {exc}"
        return ra, NO_PHASES


@dataclass(frozen=True)
class RankWork:
    """One rank to write: its analysis (None: `note` says why there is none), or with
    `analyser` the means to analyse it from the events the export reads (one read a rank)."""

    run_dir: Path
    rank: int
    analysis: RankAnalysis | None
    note: str
    flows: bool
    tables: dict[str, bool]
    analyser: RankAnalyser | None = None


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
