"""The report as plain data: one dataclass a section, no HTML and no plotly.

tracekit/report/build.py fills these from the runs' `RunAnalysis` (each run analysed once) and
the store's manifests and NVML counters; tracekit/report/render.py turns them into the page.
Times are in the unit their name says (`_ms`, `_us`, `_pct` in percent, `_frac` in 0..1);
nothing is rounded or formatted here. A section whose input is missing has `data` None and
says why in `unavailable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from tracekit.analyzers.summary_fields import Summary
from tracekit.analyzers.sweep import Sweep

SectionId = Literal[
    "diff",
    "headline",
    "over-time",
    "distributions",
    "skew",
    "graphs-allreduce",
    "kernels",
    "nvml",
    "breakeven",
    "sweep",
    "manifest",
]
Component = Literal["forward", "allreduce", "overhead"]
COMPONENTS: tuple[Component, ...] = ("forward", "allreduce", "overhead")


# ---- comparison (--baseline) ------------------------------------------------------------------


@dataclass(frozen=True)
class DiffPhase:
    """One phase of `tracekit diff` (A = the baseline, B = this run)."""

    phase: str
    a_ms_p50: float | None
    b_ms_p50: float | None
    delta_ms: float | None
    ci95_ms: tuple[float, float] | None
    significant: bool
    forward_delta_ms: float | None
    allreduce_delta_ms: float | None
    overhead_delta_ms: float | None


@dataclass(frozen=True)
class ManifestChange:
    section: str
    name: str
    a: str | None
    b: str | None


@dataclass(frozen=True)
class Diff:
    headline: list[str]
    phases: list[DiffPhase]  # by phase name
    manifest: list[ManifestChange]


# ---- headline ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Breakeven:
    """`tracekit breakeven --baseline BASE --spec RUN` (steady-state totals)."""

    breakeven_accept_len: float
    cycle_ms: float
    baseline_ms: float
    accept_len: float | None
    speedup: float | None


@dataclass(frozen=True)
class Headline:
    """The run's summary (`tracekit summary`'s, the same typed model: its cards and phase table
    are rendered from its declared fields) and what only the report adds to it."""

    summary: Summary
    breakeven: Breakeven | None  # None without a plain-decoding baseline
    graph_cycle_frac: float | None  # share of (rank, cycle) with a graph launch
    device_pct: dict[Component, float] | None  # of the device time; None when there is none


@dataclass(frozen=True)
class NoCycles:
    """A run with phases but no cycle: what it has instead of a headline."""

    message: str
    instances: dict[str, int]


# ---- per cycle, per rank ----------------------------------------------------------------------


@dataclass(frozen=True)
class PhaseCycles:
    """One phase's forward / allreduce / overhead per cycle, mean over ranks (every cycle)."""

    phase: str
    cycles: list[int]
    ms: dict[Component, list[float | None]]


@dataclass(frozen=True)
class OverTime:
    phases: list[PhaseCycles]  # by phase name


@dataclass(frozen=True)
class PhaseSamples:
    """Each instance's wall time, with its rank (steady-state cycles, by rank then cycle)."""

    phase: str
    ranks: list[int]
    wall_ms: list[float | None]


@dataclass(frozen=True)
class Distributions:
    phases: list[PhaseSamples]  # by phase name


@dataclass(frozen=True)
class SkewPhase:
    """One phase of the skew analyzer over its cycles (every cycle)."""

    phase: str
    cycles: int
    spread_us_p50: float | None
    spread_us_p90: float | None
    wait_us_p50: float | None  # of the most-waiting rank
    slowest_rank: int | None  # most often slowest (ties: lowest)
    slowest_frac: float | None  # share of the phase's cycles it was


@dataclass(frozen=True)
class Skew:
    """`lag_us[i][j]`: rank `ranks[i]`'s work in cycle `cycles[j]` (wall minus allreduce wait,
    summed over the cycle's phases) minus the least of any rank's in that cycle."""

    phases: list[SkewPhase]
    ranks: list[int]
    cycles: list[int]
    lag_us: list[list[float | None]]


@dataclass(frozen=True)
class GraphPhase:
    """One phase of `analyzers.graphs.graph_summary` (steady-state cycles)."""

    phase: str
    instances: int
    replayed: int  # instances that launched a CUDA graph
    replayed_frac: float | None  # replayed / instances
    graph_kernel_frac: float | None  # of the phase's busy time; None when not measured


@dataclass(frozen=True)
class ImplCount:
    phase: str
    impl: str | None  # None: the phase ran no allreduce implementation
    instances: int | None


@dataclass(frozen=True)
class GraphsAllreduce:
    graphs: list[GraphPhase]
    impls: list[ImplCount]


@dataclass(frozen=True)
class Kernel:
    name: str
    count: int
    total_ms: float
    mean_us: float | None
    allreduce_impl: str | None


@dataclass(frozen=True)
class Kernels:
    phases: dict[str, list[Kernel]]  # phase -> kernels, most time first


# ---- store: NVML, manifest --------------------------------------------------------------------


@dataclass(frozen=True)
class NvmlSeries:
    rank: int
    gpu: int
    metric: str
    seconds: list[float]  # since the run's first sample
    values: list[float | None]


@dataclass(frozen=True)
class NvmlGroup:
    group: str
    unit: str
    series: list[NvmlSeries]


@dataclass(frozen=True)
class Nvml:
    groups: list[NvmlGroup]  # groups with at least one series
    thinned: bool  # some series had more than max_points samples
    max_points: int


@dataclass(frozen=True)
class BreakevenCurve:
    """speedup = L x baseline / cycle over a grid of acceptance lengths L."""

    point: Breakeven
    accept_len: list[float]
    speedup: list[float]
    top: float  # the grid's last L


@dataclass(frozen=True)
class ManifestRow:
    section: str
    key: str
    values: list[str | None]  # one a rank (Manifest.ranks); None: the rank has no such key


@dataclass(frozen=True)
class Manifest:
    ranks: list[int]
    differ: list[ManifestRow]  # differ between ranks
    per_rank: list[ManifestRow]  # differ by nature (rank, pid, trace file, ...)
    same: list[ManifestRow]


SectionData: TypeAlias = (
    Diff
    | Headline
    | NoCycles
    | OverTime
    | Distributions
    | Skew
    | GraphsAllreduce
    | Kernels
    | Nvml
    | BreakevenCurve
    | Sweep
    | Manifest
)


@dataclass(frozen=True)
class Section:
    """One part of the report: its data, or why it is unavailable."""

    id: SectionId
    title: str
    data: SectionData | None = None
    unavailable: str | None = None


@dataclass(frozen=True)
class ReportModel:
    title: str
    run_dir: str
    baseline_dir: str | None
    sections: list[Section]

    def section(self, id: SectionId) -> Section | None:
        return next((s for s in self.sections if s.id == id), None)
