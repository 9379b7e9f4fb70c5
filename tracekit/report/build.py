"""The report's model of a run (and its baseline): each run analysed once, every section built
from that analysis (tracekit/report/section_data.py says what each holds).

`build_model(run_dir, baseline=None)` analyses each run once (`analyze`) and hands the
`RunAnalysis` to the analyzers' `*_of` functions: summary, skew, kernels, diff and break-even.
A section whose input is missing or whose analyzer fails says so instead of holding data.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.errors import NoCyclesError, StoreError, TracekitError
from tracekit.report import build_run, build_store
from tracekit.report.build_run import unavailable
from tracekit.report.section_data import (
    Breakeven,
    Diff,
    DiffPhase,
    ManifestChange,
    ReportModel,
    Section,
)
from tracekit.store import reader
from tracekit.store.layout import check_run_dir

if TYPE_CHECKING:
    import polars as pl

    from tracekit.analyzers.run_analysis import RunAnalysis
    from tracekit.analyzers.steady import CycleChoice, Steady
    from tracekit.analyzers.summary_fields import Summary


@dataclass
class Run:
    """One run's analysis (None when it failed: `error` says why, `exc` is what was raised)."""

    run_dir: Path
    analysis: RunAnalysis | None = None
    summary: Summary | None = None
    steady: Steady | None = None
    error: str | None = None
    exc: BaseException | None = None
    no_cycles: dict[str, int] | None = None  # phase instances of a run without cycles

    @classmethod
    def load(
        cls, run_dir: Path, choice: CycleChoice | None = None, *, option: str | None = None
    ) -> Run:
        _check_store(run_dir, option)
        run = cls(run_dir)
        try:
            from tracekit.analyzers.run_analysis import analyze
            from tracekit.analyzers.steady import decide
            from tracekit.analyzers.summary import summary_from

            run.analysis = analyze(run_dir)
            run.steady = decide(run.analysis.recorded, choice)
            run.summary = summary_from(run.analysis, choice)
        except NoCyclesError as exc:
            run.analysis = None
            run.error, run.exc = str(exc), exc
            run.no_cycles = exc.instances
        except (ImportError, TracekitError) as exc:
            run.analysis = None
            run.error, run.exc = unavailable(exc, "the phase breakdown"), exc
        return run

    @cached_property
    def bd(self) -> pl.DataFrame | None:
        """The breakdown of the steady-state cycles (all of them when those are outside the
        profiled window of a full-mode run)."""
        if self.analysis is None or self.steady is None:
            return None
        kept: pl.DataFrame = self.steady.keep_shares(self.analysis.breakdown)[0]
        return kept

    @property
    def phases(self) -> set[str]:
        bd = self.bd
        return set() if bd is None else set(bd["phase"].unique().to_list())


def _check_store(run_dir: Path, option: str | None = None) -> None:
    """`run_dir` is a run directory (`check_run_dir`; `option`: the option it came from) with a
    store to analyse, else InputError / StoreError."""
    check_run_dir(run_dir, option=option)
    if not any(reader.has_table(run_dir, t) for t in ("events", "phases", "cycles")):
        msg = (
            f"{run_dir}: no `events`, `phases` or `cycles` table in the store; "
            "create it with `tracekit ingest TRACES -o RUN_DIR` or `tracekit merge RUN_DIR`"
        )
        raise StoreError(msg)


def build_model(
    run_dir: Path,
    *,
    baseline: Path | None = None,
    choice: CycleChoice | None = None,
    sweep: Path | None = None,
) -> ReportModel:
    """The report of `run_dir` (compared with `baseline` when given) over the steady-state
    cycles (or `choice`), with the acceptance sweep of `tracekit sweep` when `sweep` names its
    directory or sweep.json."""
    swept = build_store.sweep(sweep) if sweep is not None else None  # a bad file fails first
    run = Run.load(run_dir, choice)
    base = Run.load(baseline, choice, option="--baseline") if baseline is not None else None
    sections: list[Section] = []
    if base is not None:
        sections.append(comparison(run, base, choice))
    be = breakeven_numbers(run, base, choice)
    sections += build_run.sections(run, be)
    sections.append(build_store.nvml(run.run_dir))
    sections.append(build_store.breakeven_curve(be))
    if swept is not None:
        sections.append(swept)
    sections.append(build_store.manifest(run.run_dir))
    title = f"tracekit report: {run_dir.resolve().name}"
    if base is not None:
        title += f" vs {base.run_dir.resolve().name}"
    return ReportModel(
        title=title,
        run_dir=str(run_dir),
        baseline_dir=str(baseline) if baseline else None,
        sections=sections,
    )


def comparison(run: Run, base: Run, choice: CycleChoice | None = None) -> Section:
    """`tracekit diff BASE RUN` of the two analyses."""
    title = f"What changed: {base.run_dir.name} (A) -> {run.run_dir.name} (B)"
    what = "the run comparison (`tracekit.analyzers.diff`)"
    try:
        from tracekit.analyzers.diff import diff_of

        if base.analysis is None or run.analysis is None:  # the analysis failed: say why
            raise next(r.exc for r in (base, run) if r.exc is not None)
        d = diff_of(base.analysis, run.analysis, choice=choice)
    except (ImportError, TracekitError) as exc:
        return Section("diff", title, unavailable=unavailable(exc, what))
    phases = [
        DiffPhase(
            phase=phase,
            a_ms_p50=p.get("a_ms_p50"),
            b_ms_p50=p.get("b_ms_p50"),
            delta_ms=p.get("delta_ms"),
            ci95_ms=None if p.get("ci95_ms") is None else (p["ci95_ms"][0], p["ci95_ms"][1]),
            significant=bool(p.get("significant")),
            forward_delta_ms=p.get("forward_delta_ms"),
            allreduce_delta_ms=p.get("allreduce_delta_ms"),
            overhead_delta_ms=p.get("overhead_delta_ms"),
        )
        for phase, p in sorted((d.get("phases") or {}).items())
    ]
    man = d.get("manifest") or {}
    changes = [
        ManifestChange(sec, e.get("name"), e.get("a"), e.get("b"))
        for sec in sorted(man)
        for e in man[sec]
    ]
    return Section("diff", title, Diff(list(d.get("headline") or []), phases, changes))


NO_BASELINE = (
    "needs the decode step time of plain decoding: pass `--baseline RUN` with a "
    "baseline run (`tracekit demo --baseline`, or the server without speculation)"
)


def breakeven_numbers(
    run: Run, base: Run | None, choice: CycleChoice | None = None
) -> Breakeven | str:
    """`tracekit breakeven --baseline BASE --spec RUN` when BASE is plain decoding, else why
    not."""
    if base is None:
        return NO_BASELINE
    if base.summary is None or base.phases != {"decode"}:
        return (
            f"the baseline {base.run_dir} is not a plain-decoding run (its phases are "
            f"{sorted(base.phases) or 'unknown'}, expected only `decode`); break-even needs one"
        )
    if run.summary is None or run.analysis is None or base.analysis is None:
        return run.error or "unavailable"
    try:
        from tracekit.analyzers.breakeven import breakeven_of

        be = breakeven_of(base.analysis, run.analysis, choice=choice)
    except (ImportError, TracekitError) as exc:
        return unavailable(exc, "the break-even computation (`tracekit.analyzers.breakeven`)")
    return Breakeven(
        breakeven_accept_len=float(be["breakeven_accept_len"]),
        cycle_ms=float(be["cycle_ms"]),
        baseline_ms=float(be["baseline_ms"]),
        accept_len=be.get("accept_len"),
        speedup=be.get("speedup"),
    )
