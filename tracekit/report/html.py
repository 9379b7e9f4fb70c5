"""`write_report`, the entry point of the HTML report (`tracekit report`): build its sections,
then write its page.

tracekit/report/build.py computes the report as plain data (tracekit/report/section_data.py)
from one analysis of each run; tracekit/report/render.py renders the page from that data only,
out of the escaping, number-format and table helpers of tracekit/report/html_blocks.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.report.build import build_model
from tracekit.report.render import render

if TYPE_CHECKING:
    from tracekit.analyzers.steady import CycleChoice


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
    model = build_model(
        Path(run_dir),
        baseline=Path(baseline) if baseline is not None else None,
        choice=choice,
        sweep=Path(sweep) if sweep is not None else None,
    )
    return render(model, Path(out_path), cdn=cdn)
