"""The self-contained HTML report of a run (`tracekit report`).

`build(run_dir, baseline=None)` gathers the numbers (all of them from `tracekit.analyzers`; a
section whose analyzer is missing or fails says so instead of showing anything), and `render`
writes one HTML file: tables and cards rendered here with every string escaped, plots drawn by
plotly.js from one embedded JSON payload. plotly.js is embedded once, gzip-compressed and
base64-encoded (1.9 MB instead of 4.8 MB) and unpacked by the browser's DecompressionStream, so
the file works offline; `cdn=True` links it from cdn.plot.ly instead.

Same inputs, same bytes, apart from the one line that says when the report was generated.
"""

from __future__ import annotations

import base64
import gzip
import html
import json
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit._version import __version__
from tracekit.errors import InputError, NoCyclesError, StoreError, TracekitError
from tracekit.store import reader
from tracekit.store.schema import SCHEMA_VERSION

if TYPE_CHECKING:
    import polars as pl

    from tracekit.analyzers.steady import CycleChoice

NS_PER_MS = 1_000_000
MAX_POINTS = 1500  # per NVML series; longer series are thinned evenly (said in the plot)
COMPONENTS = (
    ("forward", "forward_ns", "#4C78A8"),
    ("allreduce", "allreduce_ns", "#F58518"),
    ("overhead", "overhead_ns", "#B8B8B8"),
)


@dataclass
class Section:
    """One part of the report: escaped HTML, plots, or the reason it is unavailable."""

    id: str
    title: str
    body: str = ""
    figures: list[dict[str, Any]] = field(default_factory=list)
    unavailable: str | None = None
    intro: str = ""


@dataclass
class Report:
    """Everything `render` needs; no HTML escaping has happened to `title` yet."""

    title: str
    run_dir: str
    baseline_dir: str | None
    sections: list[Section]


def write_report(
    run_dir: Path,
    out_path: Path,
    *,
    baseline: Path | None = None,
    cdn: bool = False,
    sweep: Path | None = None,
    choice: CycleChoice | None = None,
) -> Path:
    """Build and write the report of `run_dir` (compared with `baseline` when given), its
    aggregates over the steady-state cycles (or `choice`); with the acceptance sweep of
    `tracekit sweep` when `sweep` names its directory or sweep.json."""
    report = build(
        Path(run_dir), baseline=Path(baseline) if baseline is not None else None, choice=choice
    )
    if sweep is not None:
        _add_sweep(report, Path(sweep))
    return render(report, Path(out_path), cdn=cdn)


def _add_sweep(report: Report, sweep: Path) -> None:
    """The sweep's section, after the break-even curve (tracekit/report/sweep.py)."""
    from tracekit.analyzers.sweep import load_sweep
    from tracekit.report.sweep import sweep_section

    section = sweep_section(load_sweep(sweep))
    at = next((i + 1 for i, s in enumerate(report.sections) if s.id == "breakeven"), None)
    report.sections.insert(len(report.sections) if at is None else at, section)


# --------------------------------------------------------------------------------------------
# helpers


def esc(value: object) -> str:
    """HTML-escape any value (quotes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def plot_text(value: object) -> str:
    """A string for plotly labels: plotly reads a few HTML tags in labels, so escape `<`, `>`, `&`."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fmt(value: object, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def rnd(values: list[Any], digits: int = 4) -> list[float | None]:
    return [None if v is None else round(float(v), digits) for v in values]


def cycle_axis(cycles: list[int]) -> dict[str, Any]:
    """An x axis of whole cycle numbers (no 3.5), at most ~20 ticks."""
    if not cycles:
        return {"title": {"text": "cycle"}}
    step = max(1, math.ceil((max(cycles) - min(cycles) + 1) / 20))
    return {"title": {"text": "cycle"}, "tick0": min(cycles), "dtick": step}


def table(
    headers: list[str],
    rows: list[list[object]],
    *,
    classes: list[str] | None = None,
    numeric: set[int] | None = None,
) -> str:
    numeric = numeric or set()
    head = "".join(
        f"<th{' class=num' if i in numeric else ''}>{esc(h)}</th>" for i, h in enumerate(headers)
    )
    body = []
    for r, row in enumerate(rows):
        cls = f' class="{esc(classes[r])}"' if classes and classes[r] else ""
        cells = "".join(
            f"<td{' class=num' if i in numeric else ''}>{esc(c)}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _unavailable(exc: BaseException, what: str) -> str:
    if isinstance(exc, ImportError):
        return f"{what} is not available in this tracekit (`{exc.name or exc}` is not installed)"
    return f"{what} failed: {exc}"


# --------------------------------------------------------------------------------------------
# inputs


@dataclass
class _Run:
    run_dir: Path
    analysis: Any = None  # tracekit.analyzers.model.RunAnalysis
    summary: dict[str, Any] | None = None
    error: str | None = None
    steady: Any = None  # tracekit.analyzers.steady.Steady
    no_cycles: dict[str, int] | None = None  # phase instances of a run without cycles

    @classmethod
    def load(cls, run_dir: Path, choice: CycleChoice | None = None) -> _Run:
        if not run_dir.is_dir():
            msg = f"{run_dir}: no such run directory; give the directory `tracekit demo`, `launch` or `ingest -o` wrote"
            raise InputError(msg)
        if not any(reader.has_table(run_dir, t) for t in ("events", "phases", "cycles")):
            msg = (
                f"{run_dir}: no `events`, `phases` or `cycles` table in the store; "
                "create it with `tracekit ingest TRACES -o RUN_DIR` or `tracekit merge RUN_DIR`"
            )
            raise StoreError(msg)
        run = cls(run_dir)
        try:
            from tracekit.analyzers.model import analyze
            from tracekit.analyzers.steady import decide
            from tracekit.analyzers.summary import summary_from

            run.analysis = analyze(run_dir)
            run.steady = decide(run.analysis.recorded, choice)
            run.summary = summary_from(run.analysis, choice)
        except NoCyclesError as exc:
            run.error = str(exc)
            run.no_cycles = exc.instances
        except (ImportError, TracekitError) as exc:
            run.error = _unavailable(exc, "the phase breakdown")
        return run

    @property
    def bd(self) -> pl.DataFrame | None:
        """The breakdown of the steady-state cycles (all of them when those are outside the
        profiled window of a full-mode run)."""
        if self.analysis is None:
            return None
        kept: pl.DataFrame = self.steady.keep(self.analysis.breakdown)
        return kept if kept.height else self.analysis.breakdown

    @property
    def bd_all(self) -> pl.DataFrame | None:
        """The breakdown of every cycle, warm-up included (the cycle-by-cycle charts)."""
        return None if self.analysis is None else self.analysis.breakdown

    @property
    def phases(self) -> set[str]:
        return set() if self.bd is None else set(self.bd["phase"].unique().to_list())


# --------------------------------------------------------------------------------------------
# build


def build(
    run_dir: Path, *, baseline: Path | None = None, choice: CycleChoice | None = None
) -> Report:
    run = _Run.load(run_dir, choice)
    base = _Run.load(baseline, choice) if baseline is not None else None
    sections: list[Section] = []
    if base is not None:
        sections.append(_comparison(run, base, choice))
    be = _breakeven_numbers(run, base, choice)
    sections.append(_headline(run, be))
    sections.append(_over_time(run))
    sections.append(_distributions(run))
    sections.append(_skew(run))
    sections.append(_graphs_allreduce(run))
    sections.append(_top_kernels(run))
    sections.append(_nvml(run))
    sections.append(_breakeven_curve(run, be))
    sections.append(_manifest(run))
    title = f"tracekit report: {run_dir.resolve().name}"
    if base is not None:
        title += f" vs {base.run_dir.resolve().name}"
    return Report(
        title=title,
        run_dir=str(run_dir),
        baseline_dir=str(baseline) if baseline else None,
        sections=sections,
    )


def _comparison(run: _Run, base: _Run, choice: CycleChoice | None = None) -> Section:
    s = Section("diff", f"What changed: {base.run_dir.name} (A) -> {run.run_dir.name} (B)")
    try:
        from tracekit.analyzers.diff import diff_runs

        d = diff_runs(base.run_dir, run.run_dir, choice=choice)
    except (ImportError, TracekitError) as exc:
        s.unavailable = _unavailable(exc, "the run comparison (`tracekit.analyzers.diff`)")
        return s
    parts = []
    headline = d.get("headline") or []
    if headline:
        parts.append(
            "<ul class=headline>" + "".join(f"<li>{esc(h)}</li>" for h in headline) + "</ul>"
        )
    rows, classes = [], []
    for phase, p in sorted((d.get("phases") or {}).items()):
        rows.append(
            [
                phase,
                fmt(p.get("a_ms_p50"), 3),
                fmt(p.get("b_ms_p50"), 3),
                fmt(p.get("delta_ms"), 3),
                fmt(p.get("ci95_ms"), 3),
                fmt(p.get("significant")),
                fmt(p.get("forward_delta_ms"), 3),
                fmt(p.get("allreduce_delta_ms"), 3),
                fmt(p.get("overhead_delta_ms"), 3),
            ]
        )
        classes.append("differs" if p.get("significant") else "")
    if rows:
        parts.append(
            table(
                [
                    "phase",
                    "A p50 ms",
                    "B p50 ms",
                    "delta ms",
                    "95% CI ms",
                    "significant",
                    "forward delta",
                    "allreduce delta",
                    "overhead delta",
                ],
                rows,
                classes=classes,
                numeric={1, 2, 3, 4, 6, 7, 8},
            )
        )
    man = d.get("manifest") or {}
    mrows = [[sec, e.get("name"), e.get("a"), e.get("b")] for sec in sorted(man) for e in man[sec]]
    if mrows:
        parts.append("<h3>Manifest differences</h3>" + table(["section", "name", "A", "B"], mrows))
    s.body = "".join(parts)
    return s


def _breakeven_numbers(
    run: _Run, base: _Run | None, choice: CycleChoice | None = None
) -> dict[str, Any]:
    """Break-even from `tracekit.analyzers.breakeven` when a plain-decoding baseline is given."""
    out: dict[str, Any] = {}
    if base is None:
        out["unavailable"] = (
            "needs the decode step time of plain decoding: pass `--baseline RUN` with a "
            "baseline run (`tracekit demo --baseline`, or the server without speculation)"
        )
        return out
    if base.summary is None or base.phases != {"decode"}:
        out["unavailable"] = (
            f"the baseline {base.run_dir} is not a plain-decoding run (its phases are "
            f"{sorted(base.phases) or 'unknown'}, expected only `decode`); break-even needs one"
        )
        return out
    if run.summary is None:
        out["unavailable"] = run.error
        return out
    try:
        from tracekit.analyzers.breakeven import breakeven_runs

        out.update(breakeven_runs(base.run_dir, run.run_dir, choice=choice))
    except (ImportError, TracekitError) as exc:
        out["unavailable"] = _unavailable(
            exc, "the break-even computation (`tracekit.analyzers.breakeven`)"
        )
    return out


def _graph_cycle_share(bd: pl.DataFrame) -> float | None:
    import polars as pl

    per = (
        bd.filter(pl.col("cycle") >= 0)
        .group_by("rank", "cycle")
        .agg(pl.col("graph_replayed").any())
    )
    return None if per.height == 0 else float(per["graph_replayed"].cast(pl.Float64).mean())  # type: ignore[arg-type]


def _card(label: str, value: str, sub: str = "") -> str:
    return f"<div class=card><div class=value>{esc(value)}</div><div class=label>{esc(label)}</div><div class=sub>{esc(sub)}</div></div>"


def _headline(run: _Run, be: dict[str, Any]) -> Section:
    s = Section("headline", "Headline")
    if run.no_cycles is not None:
        s.body = f"<p class=note>{esc(run.error)}</p>" + table(
            ["phase", "instances"],
            [[p, fmt(n)] for p, n in sorted(run.no_cycles.items())],
            numeric={1},
        )
        return s
    if run.summary is None or run.bd is None:
        s.unavailable = run.error
        return s
    sm, bd = run.summary, run.bd
    share = _graph_cycle_share(bd)
    cards = [
        _card("ranks", fmt(sm["ranks"])),
        _card(
            "cycles",
            fmt(sm["cycles"]),
            f"p50 {fmt(sm['cycle_ms_p50'], 3)} ms, mean {fmt(sm['cycle_ms_mean'], 3)} ms",
        ),
        _card("tokens / s", fmt(sm["tokens_per_s"], 1), "total tokens / total cycle time"),
        _card("acceptance length", fmt(sm["accept_len_mean"], 2), "tokens emitted per cycle, mean"),
    ]
    if "breakeven_accept_len" in be:
        cards.append(
            _card(
                "break-even acceptance length",
                fmt(be["breakeven_accept_len"], 2),
                f"cycle {fmt(be.get('cycle_ms'), 3)} ms / baseline step {fmt(be.get('baseline_ms'), 3)} ms",
            )
        )
        cards.append(
            _card(
                "speedup vs plain decoding",
                fmt(be.get("speedup"), 2, "x"),
                "acceptance length x baseline step / cycle",
            )
        )
    else:
        cards.append(
            _card(
                "break-even acceptance length", "n/a", "no plain-decoding baseline (--baseline RUN)"
            )
        )
    per_phase = [
        f"{name} {100 * v['graph_replayed_frac']:.0f}%"
        for name, v in sm.get("phases", {}).items()
        if v.get("graph_replayed_frac") is not None
    ]
    cards.append(
        _card(
            "cycles with graph replay",
            fmt(None if share is None else 100 * share, 1, " %"),
            "share of (rank, cycle) with a CUDA graph launch"
            + (f"; instances replayed: {', '.join(per_phase)}" if per_phase else ""),
        )
    )
    notes = []
    if sm.get("steady_note"):
        notes.append(f"Steady state: {sm['steady_note']}; every figure below uses it.")
    if sm.get("profiled_cycles"):
        a, b = sm["profiled_cycles"]
        notes.append(
            f"Full mode: cycle counts, times and acceptance from all {sm['cycles']} recorded "
            f"cycles; device-timeline shares from the profiled cycles {a}-{b}."
        )
    lead = _lead(sm, bd)
    if sm.get("approximate"):
        notes.append(
            "Light-mode run: the breakdown comes from CUDA-event spans per phase, not from kernels (approximate)."
        )
    if sm.get("allreduce_note"):
        notes.append(sm["allreduce_note"])
    if sm.get("unknown_comm_kernels"):
        notes.append(
            "Communication-looking kernels no allreduce implementation matched: "
            + ", ".join(sm["unknown_comm_kernels"][:5])
        )
    phases_rows = [
        [
            p,
            fmt(v["count"]),
            fmt(v["wall_ms_p50"], 3),
            fmt(v["wall_ms_p90"], 3),
            fmt(v["forward_pct"], 1),
            fmt(v["allreduce_pct"], 1) if sm.get("allreduce_measured", True) else "not measured",
            fmt(v["overhead_pct"], 1),
        ]
        for p, v in sorted(sm["phases"].items())
    ]
    s.body = (
        f"<p class=lead>{esc(lead)}</p>"
        + "<div class=cards>"
        + "".join(cards)
        + "</div>"
        + "".join(f"<p class=note>{esc(n)}</p>" for n in notes)
        + table(
            [
                "phase",
                "instances",
                "wall p50 ms",
                "wall p90 ms",
                "forward %",
                "allreduce %",
                "overhead %",
            ],
            phases_rows,
            numeric={1, 2, 3, 4, 5, 6},
        )
    )
    return s


def _lead(sm: dict[str, Any], bd: pl.DataFrame) -> str:
    """One sentence: the cycle, its phases by size, and where the device time went."""
    import polars as pl

    phases = sorted(sm["phases"].items(), key=lambda kv: -(kv[1]["wall_ms_p50"] or 0))
    parts = ", ".join(f"{p} {fmt(v['wall_ms_p50'], 1)} ms" for p, v in phases)
    top = bd.filter(pl.col("cycle") >= 0)
    total = int(top["wall_ns"].sum() or 0)
    text = f"Cycle p50 {fmt(sm['cycle_ms_p50'], 1)} ms; phase p50s: {parts}."
    if total:
        shares = {label: 100.0 * int(top[col].sum()) / total for label, col, _ in COMPONENTS}
        text += (
            f" Of the device time, {shares['forward']:.0f} % is forward compute, "
            f"{shares['allreduce']:.0f} % allreduce and {shares['overhead']:.0f} % overhead (idle)."
        )
    return text


def _over_time(run: _Run) -> Section:
    import polars as pl

    s = Section(
        "over-time",
        "Where each cycle's time goes, per phase",
        intro="Forward compute, allreduce and overhead (device idle charged to the phase whose work runs next) of each phase instance, mean over ranks, cycle by cycle (every cycle, warm-up included).",
    )
    if run.bd_all is None:
        s.unavailable = run.error
        return s
    bd = run.bd_all.filter(pl.col("cycle") >= 0)
    per = (
        bd.group_by("phase", "cycle")
        .agg([pl.col(c).mean() for _, c, _ in COMPONENTS])
        .sort("phase", "cycle")
    )
    for phase in sorted(per["phase"].unique().to_list()):
        rows = per.filter(pl.col("phase") == phase)
        data = [
            {
                "type": "bar",
                "name": label,
                "x": rows["cycle"].to_list(),
                "y": rnd((rows[col] / NS_PER_MS).to_list()),
                "marker": {"color": color},
                "hovertemplate": f"cycle %{{x}}<br>{label} %{{y:.3f}} ms<extra></extra>",
            }
            for label, col, color in COMPONENTS
        ]
        s.figures.append(
            {
                "id": f"fig-over-time-{len(s.figures)}",
                "title": f"{phase}: ms per cycle",
                "data": data,
                "layout": {
                    "barmode": "stack",
                    "bargap": 0.05,
                    "xaxis": cycle_axis(rows["cycle"].to_list()),
                    "yaxis": {"title": {"text": "ms"}},
                    "height": 280,
                },
            }
        )
    return s


def _distributions(run: _Run) -> Section:
    import polars as pl

    s = Section(
        "distributions",
        "Distributions per phase and rank",
        intro="Wall time of each phase instance (its share of the device timeline), by rank.",
    )
    if run.bd is None:
        s.unavailable = run.error
        return s
    bd = run.bd.filter(pl.col("cycle") >= 0).sort("rank", "cycle")
    data = []
    for phase in sorted(bd["phase"].unique().to_list()):
        rows = bd.filter(pl.col("phase") == phase)
        data.append(
            {
                "type": "box",
                "name": plot_text(phase),
                "x": [f"rank {r}" for r in rows["rank"].to_list()],
                "y": rnd((rows["wall_ns"] / NS_PER_MS).to_list()),
                "boxpoints": False,
            }
        )
    s.figures.append(
        {
            "id": "fig-distributions",
            "title": "phase wall time (ms) by rank",
            "data": data,
            "layout": {"boxmode": "group", "yaxis": {"title": {"text": "ms"}}, "height": 320},
        }
    )
    return s


def _skew(run: _Run) -> Section:
    import polars as pl

    s = Section(
        "skew",
        "Rank skew",
        intro=(
            "Each cell: how much more work (wall time minus allreduce wait, as `tracekit.analyzers.skew` "
            "defines it) the rank did in the cycle than the rank with the least, in µs. A rank that is "
            "always bright is the straggler the others wait for in allreduce."
        ),
    )
    try:
        from tracekit.analyzers.skew import collectives, rank_waits, skew_from

        if run.analysis is not None and hasattr(run.analysis, "collectives"):
            bd, comm = run.analysis.breakdown, run.analysis.collectives  # computed once
        else:
            bd, comm = collectives(run.run_dir)
        per_phase = skew_from(bd, comm)
        waits = rank_waits(bd, comm)
    except (ImportError, TracekitError) as exc:
        s.unavailable = _unavailable(exc, "the skew analysis (`tracekit.analyzers.skew`)")
        return s
    work = (
        bd.filter(pl.col("cycle") >= 0)
        .select("rank", "cycle", "phase", "wall_ns")
        .join(
            waits.select("rank", "cycle", "phase", "allreduce_wait_ns"),
            on=["rank", "cycle", "phase"],
            how="left",
        )
        .with_columns(
            (pl.col("wall_ns") - pl.col("allreduce_wait_ns").fill_null(0)).alias("work_ns")
        )
        .group_by("rank", "cycle")
        .agg(pl.col("work_ns").sum())
        .with_columns((pl.col("work_ns") - pl.col("work_ns").min().over("cycle")).alias("lag_ns"))
        .sort("rank", "cycle")
    )
    ranks = sorted(work["rank"].unique().to_list())
    cycles = sorted(work["cycle"].unique().to_list())
    col_of = {c: i for i, c in enumerate(cycles)}
    z: list[list[float | None]] = [[None] * len(cycles) for _ in ranks]
    for i, r in enumerate(ranks):
        rows = work.filter(pl.col("rank") == r)
        for c, v in zip(rows["cycle"].to_list(), rows["lag_ns"].to_list()):
            z[i][col_of[c]] = None if v is None else round(v / 1000, 1)
    s.figures.append(
        {
            "id": "fig-skew",
            "title": "work beyond the least-loaded rank (µs), by rank and cycle",
            "data": [
                {
                    "type": "heatmap",
                    "x": cycles,
                    "y": [f"rank {r}" for r in ranks],
                    "z": z,
                    "colorscale": "Viridis",
                    "colorbar": {"title": {"text": "µs"}},
                    "hovertemplate": "%{y}, cycle %{x}: %{z} µs<extra></extra>",
                }
            ],
            "layout": {"xaxis": cycle_axis(cycles), "height": 140 + 26 * len(ranks)},
        }
    )
    rows_out = []
    for phase in sorted(per_phase["phase"].unique().to_list()):
        ph = per_phase.filter(pl.col("phase") == phase)
        slowest = ph["slowest_rank"].drop_nulls()
        mode = slowest.mode().sort()
        top_rank = int(mode[0]) if mode.len() else None
        share = (
            None
            if top_rank is None or slowest.len() == 0
            else 100.0 * int((slowest == top_rank).sum()) / slowest.len()
        )
        rows_out.append(
            [
                phase,
                fmt(ph.height),
                fmt(_q(ph["spread_ns"], 0.5), 1),
                fmt(_q(ph["spread_ns"], 0.9), 1),
                fmt(_q(ph["allreduce_wait_ns_max"], 0.5), 1),
                "n/a" if top_rank is None else f"rank {top_rank} ({share:.0f} % of cycles)",
            ]
        )
    s.body = table(
        [
            "phase",
            "cycles",
            "spread p50 µs",
            "spread p90 µs",
            "max allreduce wait p50 µs",
            "slowest rank most often",
        ],
        rows_out,
        numeric={1, 2, 3, 4},
    )
    return s


def _q(col: pl.Series, q: float) -> float | None:
    v = col.drop_nulls().cast(float).quantile(q, interpolation="linear")
    return None if v is None else float(v) / 1000


def _graphs_allreduce(run: _Run) -> Section:
    import polars as pl

    s = Section("graphs-allreduce", "CUDA graphs and allreduce implementations")
    if run.bd is None or run.summary is None:
        s.unavailable = run.error
        return s
    bd = run.bd.filter(pl.col("cycle") >= 0)
    g = (
        bd.group_by("phase")
        .agg(
            pl.len().alias("n"),
            pl.col("graph_replayed").sum().alias("replayed"),
            pl.col("graph_kernel_frac").mean().alias("frac"),
        )
        .sort("phase")
    )
    grows = [
        [
            r["phase"],
            fmt(r["n"]),
            fmt(r["replayed"]),
            fmt(100 * r["replayed"] / r["n"] if r["n"] else None, 1),
            fmt(None if r["frac"] is None else 100 * r["frac"], 1),
        ]
        for r in g.iter_rows(named=True)
    ]
    arows = []
    for phase, v in sorted(run.summary["phases"].items()):
        impls = v.get("allreduce_impl") or {}
        if not impls:
            arows.append([phase, "none", ""])
        for impl, n in sorted(impls.items()):
            arows.append([phase, impl, fmt(n)])
    s.body = (
        "<div class=two><div><h3>Graph replay</h3>"
        + table(
            [
                "phase",
                "instances",
                "replayed a graph",
                "% replayed",
                "graph share of GPU busy %",
            ],
            grows,
            numeric={1, 2, 3, 4},
        )
        + "</div><div><h3>Allreduce implementation</h3>"
        + table(["phase", "implementation", "instances"], arows, numeric={2})
        + "</div></div>"
    )
    return s


def _top_kernels(run: _Run) -> Section:
    import polars as pl

    s = Section(
        "kernels",
        "Top kernels per phase",
        intro="Summed duration of each kernel name inside each phase, all ranks together (overlapping kernels count twice).",
    )
    try:
        from tracekit.analyzers.kernels import top_kernels

        tk = top_kernels(run.run_dir, 10)
    except (ImportError, TracekitError) as exc:
        s.unavailable = _unavailable(exc, "the kernel table (`tracekit.analyzers.kernels`)")
        return s
    if tk.height == 0:
        s.unavailable = "no kernels attributed to phases (a light-mode run records no kernels; use `--mode full`)"
        return s
    parts = []
    for phase in sorted(tk["phase"].unique().to_list()):
        rows = tk.filter(pl.col("phase") == phase)
        parts.append(
            f"<h3>{esc(phase)}</h3>"
            + table(
                ["kernel", "count", "total ms", "mean µs", "allreduce impl"],
                [
                    [
                        r["name"],
                        fmt(r["count"]),
                        fmt(r["total_ns"] / NS_PER_MS, 3),
                        fmt(r["total_ns"] / 1000 / r["count"] if r["count"] else None, 1),
                        r["allreduce_impl"] or "",
                    ]
                    for r in rows.iter_rows(named=True)
                ],
                numeric={1, 2, 3},
            )
        )
    s.body = "".join(parts)
    return s


NVML_GROUPS = (
    ("clocks", "MHz", ("sm_clock_mhz", "mem_clock_mhz")),
    ("power", "W", ("power_w",)),
    ("temperature", "°C", ("temperature_c",)),
)


def _nvml(run: _Run) -> Section:
    import polars as pl

    s = Section("nvml", "GPU clocks, power and temperature (NVML)")
    if not reader.has_table(run.run_dir, "counters"):
        s.unavailable = "no NVML samples in this run (CPU run, or NVML unavailable where it ran)"
        return s
    cnt = (
        reader.read_table(run.run_dir, "counters")
        .with_columns(pl.col("metric").cast(pl.String))
        .sort("rank", "gpu", "metric", "ts_ns")
    )
    t0 = int(cnt["ts_ns"].min())  # type: ignore[arg-type]
    thinned = False
    for group, unit, metrics in NVML_GROUPS:
        data = []
        sel = cnt.filter(pl.col("metric").is_in(list(metrics)))
        for (rank, gpu, metric), rows in sorted(
            sel.partition_by("rank", "gpu", "metric", as_dict=True, maintain_order=True).items()
        ):
            if rows.height > MAX_POINTS:
                step = math.ceil(rows.height / MAX_POINTS)
                rows = rows.gather_every(step)
                thinned = True
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": plot_text(f"rank {rank} GPU {gpu} {metric}"),
                    "x": rnd(((rows["ts_ns"] - t0) / 1e9).to_list(), 4),
                    "y": rnd(rows["value"].to_list(), 2),
                }
            )
        if data:
            s.figures.append(
                {
                    "id": f"fig-nvml-{group}",
                    "title": f"{group} ({unit})",
                    "data": data,
                    "layout": {
                        "xaxis": {"title": {"text": "seconds since first sample"}},
                        "yaxis": {"title": {"text": unit}},
                        "height": 260,
                    },
                }
            )
    if thinned:
        s.intro = f"Series longer than {MAX_POINTS} samples are thinned evenly for the plot."
    return s


def _breakeven_curve(run: _Run, be: dict[str, Any]) -> Section:
    s = Section("breakeven", "Break-even: speedup against acceptance length")
    if "breakeven_accept_len" not in be:
        s.unavailable = be.get("unavailable") or "unavailable"
        return s
    base_ms, cyc_ms = float(be["baseline_ms"]), float(be["cycle_ms"])
    top = max(
        8.0, math.ceil((be.get("accept_len") or 1) + 2), math.ceil(be["breakeven_accept_len"] + 1)
    )
    xs = [round(1 + i * (top - 1) / 100, 3) for i in range(101)]
    ys = [round(x * base_ms / cyc_ms, 4) for x in xs]
    data: list[dict[str, Any]] = [
        {
            "type": "scatter",
            "mode": "lines",
            "name": "speedup = L x baseline / cycle",
            "x": xs,
            "y": ys,
        },
        {
            "type": "scatter",
            "mode": "lines",
            "name": "no speedup",
            "x": [1, top],
            "y": [1, 1],
            "line": {"dash": "dot", "color": "#888"},
        },
    ]
    if be.get("accept_len") is not None and be.get("speedup") is not None:
        data.append(
            {
                "type": "scatter",
                "mode": "markers",
                "name": "measured",
                "x": [round(be["accept_len"], 3)],
                "y": [round(be["speedup"], 3)],
                "marker": {"size": 12, "color": "#E45756"},
            }
        )
    s.intro = (
        f"Cycle {cyc_ms:.3f} ms, plain decode step {base_ms:.3f} ms: speculation pays off above an acceptance length of "
        f"{be['breakeven_accept_len']:.2f}."
    )
    s.figures.append(
        {
            "id": "fig-breakeven",
            "title": "speedup vs acceptance length",
            "data": data,
            "layout": {
                "xaxis": {"title": {"text": "acceptance length (tokens per cycle)"}},
                "yaxis": {"title": {"text": "speedup"}},
                "height": 320,
            },
        }
    )
    return s


def _manifest(run: _Run) -> Section:
    import polars as pl

    s = Section(
        "manifest",
        "Manifest",
        intro="What each rank ran with. Rows whose value differs between ranks are highlighted and listed first.",
    )
    if not reader.has_table(run.run_dir, "manifests"):
        s.unavailable = "no manifests table in this run"
        return s
    man = reader.read_table(run.run_dir, "manifests")
    ranks = sorted(man["rank"].unique().to_list())
    values: dict[tuple[str, str], dict[int, str]] = {}
    for rank, section, key, value in (
        man.select("rank", "section", "key", "value").sort("section", "key", "rank").iter_rows()
    ):
        values.setdefault((str(section), str(key)), {})[int(rank)] = (
            "" if value is None else str(value)
        )
    differ, expected, same = [], [], []
    for (section, key), per in sorted(values.items()):
        vals = [per.get(r) for r in ranks]
        row: list[object] = [section, key, *(_clip(v) for v in vals)]
        if len(set(vals)) <= 1:
            same.append(row)
        elif (section, key) in PER_RANK_KEYS or section == "trace":
            expected.append(row)
        else:
            differ.append(row)
    headers = ["section", "key"] + [f"rank {r}" for r in ranks]
    if differ:
        body = f"<p><b>{len(differ)}</b> value(s) differ between ranks.</p>" + table(
            headers, differ, classes=["differs"] * len(differ)
        )
    else:
        body = "<p>All ranks report the same values (apart from what is per-rank by nature: rank, pid, trace file).</p>"
    rows = differ + expected + same
    classes = ["differs"] * len(differ) + ["per-rank"] * len(expected) + [""] * len(same)
    body += (
        f"<details><summary>All {len(rows)} entries</summary>"
        + table(headers, rows, classes=classes)
        + "</details>"
    )
    s.body = body
    _ = pl  # polars imported for the type of `man`
    return s


PER_RANK_KEYS = {
    ("distributed", "rank"),
    ("env", "RANK"),
    ("env", "LOCAL_RANK"),
    ("env", "GROUP_RANK"),
    ("env", "ROLE_RANK"),
    ("env", "CUDA_VISIBLE_DEVICES"),
    ("process", "pid"),
    ("process", "local_rank"),
    ("process", "rank"),
    ("device", "index"),
    ("device", "uuid"),
}


def _clip(v: str | None, n: int = 300) -> str:
    if v is None:
        return "(missing)"
    return v if len(v) <= n else v[: n - 1] + "…"


# --------------------------------------------------------------------------------------------
# render


def _template(name: str) -> str:
    return (
        resources.files("tracekit.report").joinpath("templates", name).read_text(encoding="utf-8")
    )


def _plotly_js() -> tuple[str, str]:
    """(version, base64 of gzip of plotly.min.js): deterministic bytes (gzip mtime 0)."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    js = get_plotlyjs().encode("utf-8")
    packed = gzip.compress(js, compresslevel=9, mtime=0)
    return get_plotlyjs_version(), base64.b64encode(packed).decode("ascii")


def json_for_script(payload: object) -> str:
    """JSON safe inside <script>: sorted keys, and `<`, `>`, `&`, U+2028/9 as \\u escapes."""
    text = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    for ch, rep in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, rep)
    return text


def render(
    report: Report, out_path: Path, *, cdn: bool = False, generated: datetime | None = None
) -> Path:
    figures: list[dict[str, Any]] = []
    nav, parts, missing = [], [], []
    for s in report.sections:
        nav.append(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>')
        inner = f"<h2>{esc(s.title)}</h2>"
        if s.intro:
            inner += f"<p class=intro>{esc(s.intro)}</p>"
        if s.unavailable:
            inner += f"<p class=unavailable>Unavailable: {esc(s.unavailable)}</p>"
            missing.append(
                f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a>: {esc(s.unavailable)}</li>'
            )
        inner += s.body
        for fig in s.figures:
            inner += f'<div class=figure><div class=figtitle>{esc(fig["title"])}</div><div class=plot id="{esc(fig["id"])}"></div></div>'
            figures.append({"id": fig["id"], "data": fig["data"], "layout": fig["layout"]})
        parts.append(f'<section id="{esc(s.id)}">{inner}</section>')
    if cdn:
        version = _plotly_version()
        plotly = f'<script src="https://cdn.plot.ly/plotly-{esc(version)}.min.js" charset="utf-8"></script>'
    else:
        version, packed = _plotly_js()
        plotly = f'<script type="application/octet-stream" id="tk-plotly" data-version="{esc(version)}">{packed}</script>'
    when = (generated or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M:%S UTC")
    subs = {
        "title": esc(report.title),
        "css": _template("report.css"),
        "js": _template("report.js"),
        "plotly": plotly,
        "payload": json_for_script({"figures": figures}),
        "nav": "".join(nav),
        "sections": "".join(parts),
        "missing": (
            "<div class=missing><b>Not in this report:</b><ul>" + "".join(missing) + "</ul></div>"
        )
        if missing
        else "",
        "meta": esc(
            f"run {report.run_dir}"
            + (f" · baseline {report.baseline_dir}" if report.baseline_dir else "")
            + f" · tracekit {__version__} · store schema {SCHEMA_VERSION}"
        ),
        "generated": esc(when),
    }
    # one pass over the template: text from a trace can never be read as a placeholder
    page = re.sub(r"\{\{(\w+)\}\}", lambda m: subs[m.group(1)], _template("report.html"))
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out_path)
    return out_path


def _plotly_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return str(get_plotlyjs_version())
