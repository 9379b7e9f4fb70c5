"""Rendering of the report's table sections from the model: the comparison, the headline
(lead sentence, cards, per-phase table), CUDA graphs and allreduce implementations, top kernels
and the manifest."""

from __future__ import annotations

from tracekit.analyzers.summary_fields import NOT_MEASURED_CELL, Stat
from tracekit.report.html_blocks import Rendered, card, esc, fmt, table
from tracekit.report.section_data import (
    Breakeven,
    Diff,
    GraphsAllreduce,
    Headline,
    Kernels,
    Manifest,
    ManifestRow,
    NoCycles,
)

DIFF_HEADERS = [
    "phase",
    "A p50 ms",
    "B p50 ms",
    "delta ms",
    "95% CI ms",
    "significant",
    "forward delta",
    "allreduce delta",
    "overhead delta",
]


def diff(d: Diff) -> Rendered:
    parts = []
    if d.headline:
        parts.append(
            "<ul class=headline>" + "".join(f"<li>{esc(h)}</li>" for h in d.headline) + "</ul>"
        )
    rows: list[list[object]] = [
        [
            p.phase,
            fmt(p.a_ms_p50, 3),
            fmt(p.b_ms_p50, 3),
            fmt(p.delta_ms, 3),
            "n/a" if p.ci95_ms is None else f"{fmt(p.ci95_ms[0], 3)} to {fmt(p.ci95_ms[1], 3)}",
            fmt(p.significant),
            fmt(p.forward_delta_ms, 3),
            fmt(p.allreduce_delta_ms, 3),
            fmt(p.overhead_delta_ms, 3),
        ]
        for p in d.phases
    ]
    if rows:
        classes = ["differs" if p.significant else "" for p in d.phases]
        parts.append(table(DIFF_HEADERS, rows, classes=classes, numeric={1, 2, 3, 4, 6, 7, 8}))
    mrows: list[list[object]] = [[m.section, m.name, m.a, m.b] for m in d.manifest]
    if mrows:
        parts.append("<h3>Manifest differences</h3>" + table(["section", "name", "A", "B"], mrows))
    return Rendered(body="".join(parts))


def no_cycles(n: NoCycles) -> Rendered:
    body = f"<p class=note>{esc(n.message)}</p>" + table(
        ["phase", "instances"], [[p, fmt(c)] for p, c in n.instances.items()], numeric={1}
    )
    return Rendered(body=body)


def lead(h: Headline) -> str:
    """One sentence: the cycle, its phases by size, and where the device time went."""
    phases = sorted(h.summary.phases.items(), key=lambda kv: -(kv[1].wall_ms_p50 or 0))
    parts = ", ".join(f"{name} {fmt(p.wall_ms_p50, 1)} ms" for name, p in phases)
    text = f"Cycle p50 {fmt(h.summary.cycle_ms_p50, 1)} ms; phase p50s: {parts}."
    if h.device_pct:
        pct = h.device_pct
        text += (
            f" Of the device time, {pct['forward']:.0f} % is forward compute, "
            f"{pct['allreduce']:.0f} % allreduce and {pct['overhead']:.0f} % overhead (idle)."
        )
    return text


def cell(st: Stat, value: object) -> str:
    """A summary field's value as the page shows it, by its declared format."""
    if st.counts:
        counts = value if isinstance(value, dict) else {}
        return ", ".join(f"{k} x{v}" for k, v in counts.items()) or "none"
    if value == NOT_MEASURED_CELL:
        return NOT_MEASURED_CELL
    return fmt(st.scaled(value), st.digits)


def _breakeven_cards(be: Breakeven | None) -> list[str]:
    if be is None:
        return [
            card(
                "break-even acceptance length", "n/a", "no plain-decoding baseline (--baseline RUN)"
            )
        ]
    return [
        card(
            "break-even acceptance length",
            fmt(be.breakeven_accept_len, 2),
            f"cycle {fmt(be.cycle_ms, 3)} ms / baseline step {fmt(be.baseline_ms, 3)} ms",
        ),
        card(
            "speedup vs plain decoding",
            fmt(be.speedup, 2, "x"),
            "acceptance length x baseline step / cycle",
        ),
    ]


def _cards(h: Headline) -> list[str]:
    """The summary's lead fields by name, its other shown run fields one card each
    (`Summary.run_stats`), then what the report adds: break-even and graph replay."""
    sm = h.summary
    cards = [
        card("ranks", fmt(sm.ranks)),
        card(
            "cycles",
            fmt(sm.cycles),
            f"p50 {fmt(sm.cycle_ms_p50, 3)} ms, mean {fmt(sm.cycle_ms_mean, 3)} ms",
        ),
        card(
            "tokens / s",
            fmt(sm.tokens_per_s, 1),
            "steady-state cycles: total tokens / total time (DEFINITIONS.md)",
        ),
        card("acceptance length", fmt(sm.accept_len_mean, 2), "tokens emitted per cycle, mean"),
    ]
    cards += [
        card(st.label, f"{cell(st, v)} {st.unit}".strip(), st.help) for st, v in sm.run_stats()
    ]
    cards += _breakeven_cards(h.breakeven)
    replayed = [
        f"{name} {100 * p.graph_replayed_frac:.0f}%"
        for name, p in sm.phases.items()
        if p.graph_replayed_frac is not None
    ]
    share = h.graph_cycle_frac
    cards.append(
        card(
            "cycles with graph replay",
            fmt(None if share is None else 100 * share, 1, " %"),
            "share of (rank, cycle) with a CUDA graph launch"
            + (f"; instances replayed: {', '.join(replayed)}" if replayed else ""),
        )
    )
    return cards


def _notes(h: Headline) -> list[str]:
    sm = h.summary
    notes = []
    if sm.steady_note:
        notes.append(f"Steady state: {sm.steady_note}; every figure below uses it.")
    if sm.profiled_cycles:
        a, b = sm.profiled_cycles
        notes.append(
            f"Full mode: cycle counts, times and acceptance from all {sm.cycles} recorded "
            f"cycles; device-timeline shares from the profiled cycles {a}-{b}."
        )
    if sm.approximate:
        notes.append(
            "Light-mode run: the breakdown comes from CUDA-event spans per phase, not from kernels (approximate)."
        )
    if sm.allreduce_note:
        notes.append(sm.allreduce_note)
    if sm.unknown_comm_kernels:
        notes.append(
            "Communication-looking kernels no allreduce implementation matched: "
            + ", ".join(sm.unknown_comm_kernels[:5])
        )
    return notes


def headline(h: Headline) -> Rendered:
    """Lead sentence, cards, notes and the phase table: one column a shown phase field of the
    summary (`Summary.phase_columns`, the terminal table's columns)."""
    sm = h.summary
    cols = sm.phase_columns()
    rows: list[list[object]] = [
        [name, *(cell(c, v) for c, v in zip(cols, cells))] for name, cells in sm.phase_rows()
    ]
    numeric = {i + 1 for i, c in enumerate(cols) if not c.counts}
    body = (
        f"<p class=lead>{esc(lead(h))}</p>"
        + "<div class=cards>"
        + "".join(_cards(h))
        + "</div>"
        + "".join(f"<p class=note>{esc(n)}</p>" for n in _notes(h))
        + table(["phase", *(c.header for c in cols)], rows, numeric=numeric)
    )
    return Rendered(body=body)


def graphs_allreduce(g: GraphsAllreduce) -> Rendered:
    grows: list[list[object]] = [
        [
            r.phase,
            fmt(r.instances),
            fmt(r.replayed),
            fmt(None if r.replayed_frac is None else 100 * r.replayed_frac, 1),
            fmt(None if r.graph_kernel_frac is None else 100 * r.graph_kernel_frac, 1),
        ]
        for r in g.graphs
    ]
    arows: list[list[object]] = [
        [i.phase, "none", ""] if i.impl is None else [i.phase, i.impl, fmt(i.instances)]
        for i in g.impls
    ]
    graph_headers = [
        "phase",
        "instances",
        "replayed a graph",
        "% replayed",
        "graph share of GPU busy %",
    ]
    body = (
        "<div class=two><div><h3>Graph replay</h3>"
        + table(graph_headers, grows, numeric={1, 2, 3, 4})
        + "</div><div><h3>Allreduce implementation</h3>"
        + table(["phase", "implementation", "instances"], arows, numeric={2})
        + "</div></div>"
    )
    return Rendered(body=body)


def kernels(k: Kernels) -> Rendered:
    parts = []
    for phase, rows in k.phases.items():
        parts.append(
            f"<h3>{esc(phase)}</h3>"
            + table(
                ["kernel", "count", "total ms", "mean µs", "allreduce impl"],
                [
                    [
                        r.name,
                        fmt(r.count),
                        fmt(r.total_ms, 3),
                        fmt(r.mean_us, 1),
                        r.allreduce_impl or "",
                    ]
                    for r in rows
                ],
                numeric={1, 2, 3},
            )
        )
    return Rendered(body="".join(parts))


def _clip(v: str | None, n: int = 300) -> str:
    if v is None:
        return "(missing)"
    return v if len(v) <= n else v[: n - 1] + "…"


def _row(r: ManifestRow) -> list[object]:
    return [r.section, r.key, *(_clip(v) for v in r.values)]


def manifest(m: Manifest) -> Rendered:
    headers = ["section", "key"] + [f"rank {r}" for r in m.ranks]
    differ = [_row(r) for r in m.differ]
    if differ:
        body = f"<p><b>{len(differ)}</b> value(s) differ between ranks.</p>" + table(
            headers, differ, classes=["differs"] * len(differ)
        )
    else:
        body = "<p>All ranks report the same values (apart from what is per-rank by nature: rank, pid, trace file).</p>"
    rows = differ + [_row(r) for r in m.per_rank] + [_row(r) for r in m.same]
    classes = ["differs"] * len(differ) + ["per-rank"] * len(m.per_rank) + [""] * len(m.same)
    body += (
        f"<details><summary>All {len(rows)} entries</summary>"
        + table(headers, rows, classes=classes)
        + "</details>"
    )
    return Rendered(body=body)
