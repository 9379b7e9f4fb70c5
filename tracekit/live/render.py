"""Draw a `Snapshot` with rich (`tracekit top`); no figures are computed here."""

from __future__ import annotations

import datetime as dt

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tracekit.live.snapshot import Snapshot


def _f(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def render(s: Snapshot) -> Group:
    """The whole frame: the header line, the ranks table, the lagging rank, the phases table
    and the change table."""
    return Group(_header(s), _ranks_table(s), _lag_line(s), _phases_table(s), _change_table(s))


def _header(s: Snapshot) -> Text:
    when = (
        dt.datetime.fromtimestamp(s.latest_ns / 1e9, tz=dt.timezone.utc).strftime("%H:%M:%S UTC")
        if s.latest_ns
        else "no records yet"
    )
    state = "running" if s.running else "finished"
    head = Text.assemble(
        ("tracekit top ", "bold"),
        f"{s.run}  ",
        (state, "green" if s.running else "yellow"),
        f"  latest record {when}, {s.span_s:.1f} s of records; window {s.window_s:g} s",
    )
    if s.records_lost:
        head.append(f"; {s.records_lost:,} records lost", style="red")
    return head


def _ranks_table(s: Snapshot) -> Table:
    ranks = Table(title="Ranks (over the window)", title_justify="left")
    for col in ("rank", "cycles", "cycles/s", "accept", "work ms/cycle"):
        ranks.add_column(col, justify="right")
    for r in s.ranks:
        lag = r.rank == s.lagging_rank
        ranks.add_row(
            f"{r.rank}{' (lagging)' if lag else ''}",
            f"{r.cycles:,}",
            _f(r.cycles_per_s, "{:.1f}"),
            _f(r.accept_len),
            _f(r.work_ms_per_cycle, "{:.3f}"),
            style="bold red" if lag else None,
        )
    return ranks


def _phases_table(s: Snapshot) -> Table:
    phases = Table(title="Phases per rank (over the window)", title_justify="left")
    for col in (
        "rank",
        "phase",
        "n",
        "p50 ms",
        "p99 ms",
        "share %",
        "fwd %",
        "ar %",
        "ovh %",
        "graph %",
    ):
        phases.add_column(col, justify="left" if col == "phase" else "right")
    for r in s.ranks:
        for p in r.phases:
            phases.add_row(
                str(r.rank),
                p.phase,
                str(p.count),
                f"{p.p50_ms:.3f}",
                f"{p.p99_ms:.3f}",
                f"{p.share_pct:.1f}",
                f"{p.forward_pct:.1f}",
                f"{p.allreduce_pct:.1f}",
                f"{p.overhead_pct:.1f}",
                f"{p.graph_pct:.0f}",
            )
    return phases


def _change_table(s: Snapshot) -> Table:
    ref = s.reference_s if s.changes and s.change_note else s.baseline_s
    change = Table(
        title=f"Change against the first {ref:.0f} s, before the last {s.window_s:g} s "
        "(p50, all ranks)",
        caption=s.change_note,
        title_justify="left",
        caption_justify="left",
    )
    for col in ("phase", "first p50 ms", "now p50 ms", "change"):
        change.add_column(col, justify="left" if col == "phase" else "right")
    for c in s.changes:
        style = "red" if c.change_pct > 10 else ("green" if c.change_pct < -10 else None)
        change.add_row(
            c.phase, f"{c.baseline_p50_ms:.3f}", f"{c.now_p50_ms:.3f}", f"{c.change_pct:+.1f}%",
            style=style,
        )  # fmt: skip
    return change


def _lag_line(s: Snapshot) -> Text:
    if s.lagging_rank is not None and s.lagging_excess_ms is not None:
        return Text(
            f"lagging rank: {s.lagging_rank} (+{s.lagging_excess_ms:.3f} ms of work a cycle "
            "over the median rank)"
        )
    if s.lag_note:
        return Text(f"lagging rank: none ({s.lag_note})")
    return Text("lagging rank: - (one rank, or no cycles yet)")
