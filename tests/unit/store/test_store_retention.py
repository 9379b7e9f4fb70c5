"""Merge reads a process's rotated record segments and says what retention dropped (issue 17)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tracekit.collectors import phasemap as pm
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.segments import RetentionPolicy
from tracekit.collectors.wrappers import make_wrapper
from tracekit.launch.runjson import cycle_rule
from tracekit.store.merge import merge
from tracekit.store.raw.cycle_rule import CYCLE_RULE_KEY
from tracekit.store.raw.files import list_segments
from tracekit.store.reader import read_table

MAP = """
[adapter]
name = "t"

[[phase]]
name = "draft"
targets = ["m:draft"]

[[phase]]
name = "verify"
targets = ["m:verify"]

[cycle]
starts_with = "draft"
"""


def _rank(raw: Path, rank: int, pid: int, policy: RetentionPolicy, cycles: int) -> Recorder:
    rec = Recorder(RecorderConfig(raw, flush_records=100, flush_seconds=3600, retention=policy))
    rec.pid = pid
    rec._rank_info = {"env_rank": rank, "env_world_size": 2}
    dr = make_wrapper(
        lambda: None, Site(Target("m", "draft"), phase="draft", starts_cycle=True), rec
    )
    ve = make_wrapper(lambda: None, Site(Target("m", "verify"), phase="verify"), rec)
    for _ in range(cycles):
        dr()
        ve()
    rec.close()
    return rec


def test_merge_reads_segments_and_names_what_was_dropped_17(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN: two ranks of 3000 cycles; rank 0 keeps 30 KB of 8 KB segments, rank 1 keeps all
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    raw = tmp_path / "run" / "raw"
    raw.mkdir(parents=True)
    (raw / "phasemap.toml").write_text(MAP)
    rule = {CYCLE_RULE_KEY: cycle_rule(pm.parse(MAP))}  # as `tracekit launch` writes it
    (raw.parent / "run.json").write_text(json.dumps(rule))
    r0 = _rank(raw, 0, 1000, RetentionPolicy.from_keep(30_000, segment_bytes=8_000), 3000)
    r1 = _rank(raw, 1, 1001, RetentionPolicy(segment_bytes=8_000), 3000)
    kept0 = list_segments(r0.dir)
    assert kept0[0][0] > 0
    assert len(list_segments(r1.dir)) > len(kept0)
    dropped = r0._segments.dropped
    # WHEN
    result = merge(tmp_path / "run")
    # THEN: one line names the dropped segments of rank 0 and where the merged cycles start
    lines = [w for w in result.warnings if "retention" in w]
    assert len(lines) == 1, result.warnings
    line = lines[0]
    first_kept_raw = dropped.last_cycle + 1  # the first cycle in the kept segments, maybe cut
    assert f"rank 0 (pid 1000) segments 0-{dropped.last_index}" in line
    assert f"{dropped.records:,} records" in line
    assert f"from raw cycle {first_kept_raw + 1} on" in line
    assert "rank 1" not in line
    # both ranks merged from the same raw cycle, so their cycle numbers still line up
    cycles = read_table(tmp_path / "run", "cycles")
    per_rank = cycles.group_by("rank").len().sort("rank")["len"].to_list()
    assert per_rank == [3000 - first_kept_raw - 1] * 2
    assert result.ranks == [0, 1]
