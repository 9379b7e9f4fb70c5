"""One typed summary (analyzers/summary_fields.py): a statistic declared once, as a field with
its label, unit and digits, appears in `tracekit summary`'s table, its `--json` and the HTML
report, with no change to any renderer.

The fixture adds two statistics the code has never heard of, the way a contributor would: a
subclass of `PhaseSummary` with a per-phase field (`wall_ms_min`, "min ms") and of `Summary`
with a run field (`phase_instances`), filled by a `summary_from` that computes them from the
run's analysis. Known answers (tests/outputs_synth.py's 2-rank, 6-cycle run, as in
test_report_model.py): draft's instances take 300 µs in cycle 0 (from the cycle's start) and
1,300 µs after, so its shortest is 0.3 ms; verify always takes 700 µs: 0.7 ms; 2 ranks x 6
cycles x 2 phases = 24 phase instances.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl
import pytest
from click.testing import CliRunner

import tracekit.analyzers.summary as summary_mod
from tests.outputs_synth import make_run
from tracekit.analyzers.steady import CycleChoice, decide
from tracekit.analyzers.summary_fields import PhaseSummary, Summary, stat
from tracekit.cli import cli

if TYPE_CHECKING:
    from tracekit.analyzers.run_analysis import RunAnalysis


@dataclasses.dataclass(frozen=True)
class PhaseWithMin(PhaseSummary):
    wall_ms_min: float | None = stat("min", "ms", 4)


@dataclasses.dataclass(frozen=True)
class SummaryWithInstances(Summary):
    phase_instances: int = stat("phase instances", digits=0, help="every rank's, every phase's")


def _phase_rows(text: str) -> dict[str, str]:
    """The terminal's phase table rows by phase (the skew table under it has rows too)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("┃ phase"))
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("└"))
    return {line.split()[1]: line for line in lines[start:end] if line.startswith("│")}


def _fields(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@pytest.fixture
def extended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A run whose summary carries the two new statistics, computed from its analysis."""
    real = summary_mod.summary_from

    def summary_from(analysis: RunAnalysis, choice: CycleChoice | None = None) -> Summary:
        base = real(analysis, choice)
        bd = decide(analysis.recorded, choice).keep_shares(analysis.breakdown)[0]
        low = bd.group_by("phase").agg(pl.col("wall_ns").min() / 1e6)
        mins = dict(low.iter_rows())
        phases = {
            n: PhaseWithMin(**_fields(p), wall_ms_min=mins[n]) for n, p in base.phases.items()
        }
        return SummaryWithInstances(
            **{**_fields(base), "phases": phases},
            phase_instances=sum(p.count for p in base.phases.values()),
        )

    monkeypatch.setattr(summary_mod, "summary_from", summary_from)
    run = tmp_path / "spec"
    make_run(run, ranks=2, cycles=6, graph=True)
    return run


def test_a_new_statistic_appears_in_the_table_the_json_and_the_report(
    extended: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    # WHEN the summary is printed as a table
    table = runner.invoke(cli, ["summary", str(extended)])
    assert table.exit_code == 0, table.output
    # THEN the phase table has the new column, header from its label and unit, each phase's
    # value with its declared 4 digits; the run's figure is on its own line
    header = next(line for line in table.output.splitlines() if "phase" in line and "count" in line)
    assert "min ms" in header
    rows = _phase_rows(table.output)
    assert "0.3000" in rows["draft"]
    assert "0.7000" in rows["verify"]
    assert "phase instances 24" in table.output

    # WHEN as --json: both fields, after the declared ones, with their values as computed
    out = runner.invoke(cli, ["summary", str(extended), "--json"])
    assert out.exit_code == 0, out.output
    js = json.loads(out.stdout)
    assert list(js)[-1] == "phase_instances"
    assert js["phase_instances"] == 24
    assert list(js["phases"]["draft"])[-1] == "wall_ms_min"
    assert js["phases"]["draft"]["wall_ms_min"] == pytest.approx(0.3)
    assert js["phases"]["verify"]["wall_ms_min"] == pytest.approx(0.7)

    # WHEN the HTML report is written
    page = tmp_path / "report.html"
    rep = runner.invoke(cli, ["report", str(extended), "-o", str(page), "--cdn"])
    assert rep.exit_code == 0, rep.output
    html = page.read_text(encoding="utf-8")
    headline = html[html.index('<section id="headline">') :]
    headline = headline[: headline.index("</section>")]
    # THEN the phase table has the column and values, and the run's figure has a card
    assert "<th class=num>min ms</th>" in headline
    cells = dict(re.findall(r"<tr><td>(\w+)</td>(.*?)</tr>", headline))
    assert "<td class=num>0.3000</td>" in cells["draft"]
    assert "<td class=num>0.7000</td>" in cells["verify"]
    assert (
        "<div class=value>24</div><div class=label>phase instances</div>"
        "<div class=sub>every rank&#x27;s, every phase&#x27;s</div>"
    ) in headline


def test_the_table_and_the_report_show_the_same_declared_columns(tmp_path: Path) -> None:
    # GIVEN a run, unpatched
    run = tmp_path / "spec"
    make_run(run, ranks=2, cycles=6, graph=True)
    runner = CliRunner()
    table = runner.invoke(cli, ["summary", str(run)]).output
    page = tmp_path / "r.html"
    assert runner.invoke(cli, ["report", str(run), "-o", str(page), "--cdn"]).exit_code == 0
    html = page.read_text(encoding="utf-8")
    # THEN both phase tables' headers are the declared shown fields, in their order
    want = ["phase", "count", "mean ms", "p50 ms", "p90 ms", "forward %", "allreduce %"]
    want += ["overhead %", "graph replayed %", "allreduce impl"]
    section = html[html.index('<section id="headline">') :]
    section = section[: section.index("</table>")]  # the phase table
    got_html = re.findall(r"<th[^>]*>([^<]*)</th>", section)
    assert got_html == want
    head = next(line for line in table.splitlines() if "phase" in line and "count" in line)
    assert [h.strip() for h in head.strip("┃ ").split("┃")] == want
    # AND verify's graph replay, a 0..1 fraction declared in % with 0 digits, reads 100 in both
    assert _phase_rows(table)["verify"].split("│")[9].strip() == "100"
    cells = dict(re.findall(r"<tr><td>(\w+)</td>(.*?)</tr>", section))
    assert re.findall(r"<td[^>]*>([^<]*)</td>", cells["verify"])[7] == "100"


def test_to_json_keeps_the_declared_order_and_leaves_out_an_absent_accept() -> None:
    phase = PhaseSummary(1, 0, 1.0, 1.0, 1.0, 50.0, 0.0, 50.0, 0.25, {"nccl": 1}, None)
    values: dict[str, Any] = {f.name: None for f in dataclasses.fields(Summary)}
    values.update(phases={"verify": phase}, steady_cycles=(2, 7), skew={}, accept=None)
    js = Summary(**values).to_json()
    assert "accept" not in js
    assert js["steady_cycles"] == [2, 7]
    keys = [f.name for f in dataclasses.fields(Summary) if f.name != "accept"]
    assert list(js) == keys
    assert js["phases"]["verify"]["allreduce_impl"] == {"nccl": 1}
