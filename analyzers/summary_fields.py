"""The summary's declared fields: one frozen dataclass a level (the run, a phase, a phase's rank
skew, the pooled acceptance), each field a statistic with its label, unit and format.

`analyzers/summary.py` fills them; `tracekit summary` (its table and `--json`) and the report's
headline render from these declarations only: `to_json` writes every field in its declared
order (the `--json` contract, docs/summary.md), `phase_columns` and `run_stats` list the
fields a table or a card shows. A new statistic is a field here (with `stat(...)`) and its
value in `summary.py`; it then appears in the three outputs without any renderer's change.
Nothing here formats text: the CLI (`tracekit/cli/summary.py`) and the report
(`tracekit/report/render_tables.py`) each print a number their way from `Stat`'s digits.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

Show = Literal["lead", "shown", "json"]


@dataclass(frozen=True)
class Stat:
    """How a statistic is shown. `show`: "shown" (a phase field: a column of the phase table;
    a run field: a card in the report and an item of the text output's figures line), "lead"
    (a run field the first sentence and the first cards name one by one), "json" (`--json`
    only). The shown value is value x `scale` with `digits` decimals and `unit` after it."""

    label: str = ""
    unit: str = ""
    digits: int = 3
    scale: float = 1.0
    show: Show = "json"
    help: str = ""  # the report card's sub-line
    counts: bool = False  # a {name: count} mapping, shown as "name xN, ..."
    allreduce: bool = False  # "not measured" where the phase's allreduce is not measured
    omit_none: bool = False  # `--json` leaves the key out when the value is None

    @property
    def header(self) -> str:
        return f"{self.label} {self.unit}".strip()

    def scaled(self, value: Any) -> Any:
        """The value as shown (x `scale`); None, text and mappings as they are."""
        if self.scale == 1.0 or not isinstance(value, (int, float)) or isinstance(value, bool):
            return value
        return value * self.scale


def stat(label: str, unit: str = "", digits: int = 3, **how: Any) -> Any:
    """A shown statistic's field (`show="shown"` unless `how` says otherwise)."""
    how.setdefault("show", "shown")
    return field(metadata={"stat": Stat(label, unit, digits, **how)})


def data(**how: Any) -> Any:
    """A field `--json` carries and no table shows (notes, lists, the steady-state details)."""
    return field(metadata={"stat": Stat(**how)})


def stat_of(f: dataclasses.Field[Any]) -> Stat:
    got = f.metadata.get("stat")
    return got if isinstance(got, Stat) else Stat()


def to_json(value: Any) -> Any:
    """A summary dataclass as `--json` writes it: its fields in declared order (a field whose
    `Stat.omit_none` is set is left out while None), nested dataclasses and mappings alike,
    tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            v = getattr(value, f.name)
            if v is None and stat_of(f).omit_none:
                continue
            out[f.name] = to_json(v)
        return out
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    return value


NOT_MEASURED_CELL = "not measured"


@dataclass(frozen=True)
class PhaseSummary:
    """One phase over the steady-state cycles (docs/DEFINITIONS.md "Summary"); times from the
    GPU-timed instances when `--gpu-sample N` left some untimed (`gpu_timed_count`)."""

    count: int = stat("count", digits=0)
    gpu_timed_count: int = data()
    wall_ms_mean: float | None = stat("mean", "ms")
    wall_ms_p50: float | None = stat("p50", "ms")
    wall_ms_p90: float | None = stat("p90", "ms")
    forward_pct: float | None = stat("forward", "%", 1)
    allreduce_pct: float | None = stat("allreduce", "%", 1, allreduce=True)
    overhead_pct: float | None = stat("overhead", "%", 1)
    graph_replayed_frac: float | None = stat("graph replayed", "%", 0, scale=100.0)
    allreduce_impl: dict[str, int] = stat("allreduce impl", counts=True)
    allreduce_note: str | None = data()  # why this phase's allreduce is not measured


@dataclass(frozen=True)
class SkewSummary:
    """One phase's rank skew (docs/DEFINITIONS.md "Rank skew"; analyzers/skew.py)."""

    ranks: int
    spread_ms_p50: float | None
    spread_ms_max: float | None
    slowest_rank: int | None
    slowest_rank_frac: float | None
    allreduce_wait_ms_mean: float | None


@dataclass(frozen=True)
class Acceptance:
    """The acceptance pooled over the drafting requests (DEFINITIONS.md "Acceptance length";
    analyzers/acceptance.py `pooled`)."""

    accept_len_mean: float
    drafts: int
    accepted_tokens: float
    drafted_tokens: int | None
    accept_rate: float | None
    accept_rate_per_pos: list[float] | None
    requests_per_step: float | None
    steps: int


@dataclass(frozen=True)
class Summary:
    """DESIGN's summary of a run over its steady-state cycles, in `--json`'s key order."""

    ranks: int = stat("ranks", digits=0, show="lead")
    cycles: int = stat("cycles", digits=0, show="lead")
    cycle_ms_p50: float | None = stat("cycle p50", "ms", show="lead")
    cycle_ms_mean: float | None = stat("cycle mean", "ms", show="lead")
    cycle_ms_p90: float | None = data()
    accept_len_mean: float | None = stat("acceptance length", digits=2, show="lead")
    accept: Acceptance | None = data(omit_none=True)
    tokens: float | None = data()
    tokens_per_s: float | None = stat("tokens / s", digits=1, show="lead")
    # the steady state (analyzers/steady.py `Steady.to_json`)
    cycle_selection: str = data()
    steady_cycles: tuple[int, int] | None = data()
    warmup_cycles: tuple[int, int] | None = data()
    excluded: int = data()
    warmup_ms_p50: float | None = data()
    steady_ms_p50: float | None = data()
    steady_note: str | None = data()
    profiled_cycles: tuple[int, int] | None = data()
    shares_note: str | None = data()
    approximate: bool = data()
    gpu_timed_cycles: int = data()
    phases: dict[str, PhaseSummary] = data()  # by phase name
    allreduce_measured: bool = data()
    allreduce_note: str | None = data()
    unknown_comm_kernels: list[str] = data()
    skew: dict[str, SkewSummary] = data()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = to_json(self)
        return out

    def allreduce_unmeasured(self, phase: PhaseSummary) -> bool:
        """The phase's allreduce share is unknown: the run's collectives were not seen, or
        this phase's ran inside CUDA graphs or compiled calls."""
        return not self.allreduce_measured or phase.allreduce_note is not None

    def phase_columns(self) -> list[Stat]:
        """The phase table's columns after the phase name: every shown phase field."""
        return [s for _, s in _shown(self._phase_type())]

    def phase_rows(self) -> list[tuple[str, list[Any]]]:
        """Each phase (by name) with its `phase_columns` values; `NOT_MEASURED_CELL` where the
        column is an allreduce share the run did not measure."""
        cols = _shown(self._phase_type())
        return [
            (
                phase,
                [
                    NOT_MEASURED_CELL
                    if s.allreduce and self.allreduce_unmeasured(p)
                    else getattr(p, n)
                    for n, s in cols
                ],
            )
            for phase, p in self.phases.items()
        ]

    def run_stats(self) -> list[tuple[Stat, Any]]:
        """The run's shown fields that the first sentence and cards do not name: each a card
        in the report and an item of the text output's figures line."""
        return [(s, getattr(self, n)) for n, s in _shown(type(self))]

    def _phase_type(self) -> type:
        first = next(iter(self.phases.values()), None)
        return PhaseSummary if first is None else type(first)


def _shown(cls: type) -> list[tuple[str, Stat]]:
    return [(f.name, stat_of(f)) for f in dataclasses.fields(cls) if stat_of(f).show == "shown"]
