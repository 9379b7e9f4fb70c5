"""`export_run` on a run directory: each rank's events read once, serving the rank's analysis
and its tracks, with the same bytes as exporting the run's analysis (`export(analyze(...))`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from polars.testing import assert_frame_equal

from tests.outputs_synth import make_run
from tracekit.analyzers import _load
from tracekit.analyzers import run_analysis as model
from tracekit.analyzers.allreduce import load_impl_table
from tracekit.analyzers.rules import load_rules
from tracekit.export.perfetto import export, export_run


def _count_event_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """Calls of the events reader by rank, wherever the analysis or the export calls it."""
    calls: Counter[int] = Counter()
    real = _load.read_events

    def counted(run_dir: Path, rank: int, columns: tuple[str, ...] = _load.EVENT_COLUMNS) -> object:
        calls[rank] += 1
        return real(run_dir, rank, columns)

    monkeypatch.setattr(_load, "read_events", counted)
    monkeypatch.setattr(model, "read_events", counted)
    return calls


def test_export_run_reads_each_ranks_events_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a 3-rank run
    make_run(tmp_path, ranks=3, cycles=3)
    calls = _count_event_reads(monkeypatch)
    # WHEN exporting the run directory
    export_run(tmp_path, tmp_path / "s.pftrace", jobs=1)
    # THEN each rank's events were read once (the analysis used the export's read)
    assert calls == {0: 1, 1: 1, 2: 1}
    # while exporting an analysis reads them once for the analysis and once for the trace
    calls.clear()
    export(model.analyze(tmp_path), tmp_path / "a.pftrace", jobs=1)
    assert calls == {0: 2, 1: 2, 2: 2}
    # and both give the same bytes
    assert (tmp_path / "s.pftrace").read_bytes() == (tmp_path / "a.pftrace").read_bytes()


def test_an_analysis_of_given_events_is_the_one_of_its_own_read(tmp_path: Path) -> None:
    # GIVEN a 2-rank run
    make_run(tmp_path, ranks=2, cycles=3)
    # WHEN the analysis of each rank is built from events the caller read (as export_run does)
    rules, table = load_rules(None), load_impl_table(None)
    for rank in (0, 1):
        given = model.analyze_rank(
            tmp_path, rank, rules, table, events=model.rank_events(tmp_path, rank)
        )
        read = model.analyze_rank(tmp_path, rank, rules, table)
        assert given is not None
        assert read is not None
        # THEN it is the analysis that reads its own events
        assert given.breakdown is not None
        assert read.breakdown is not None
        assert_frame_equal(given.breakdown, read.breakdown)
        assert given.recorded is not None
        assert read.recorded is not None
        assert_frame_equal(given.recorded, read.recorded)


def test_recorded_false_leaves_out_only_the_recorded_cycles(tmp_path: Path) -> None:
    # GIVEN a 1-rank run of 4 cycles
    make_run(tmp_path, ranks=1, cycles=4)
    rules, table = load_rules(None), load_impl_table(None)
    full = model.analyze_rank(tmp_path, 0, rules, table)
    # WHEN analysing its rank without the recorded cycles
    lean = model.analyze_rank(tmp_path, 0, rules, table, recorded=False)
    assert full is not None
    assert lean is not None
    # THEN those are None and the rest is the same
    assert full.recorded is not None
    assert full.recorded.height == 4
    assert lean.recorded is None
    for name in ("intervals", "extras", "breakdown", "cycles", "collectives"):
        # (extras come from a group_by: its row order is not fixed)
        assert_frame_equal(getattr(lean, name), getattr(full, name), check_row_order=False)
    # and such a rank cannot make a run's analysis (its `recorded` would be missing)
    with pytest.raises(ValueError, match="recorded=False"):
        model.combine(tmp_path, [lean])
