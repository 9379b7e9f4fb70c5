from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pytest

from tracekit.collectors import phasemap as pm
from tracekit.errors import InputError
from tracekit.launch.runjson import cycle_rule
from tracekit.store.merge import merge
from tracekit.store.raw.cycle_rule import CYCLE_RULE_KEY
from tracekit.store.raw.schema import RAW_COLUMNS, raw_schema
from tracekit.store.reader import read_table

EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"
MAP_TARGET = """
[[phase]]
name = "draft"
targets = ["m:W.draft"]
[[phase]]
name = "verify"
targets = ["m:W.verify"]
[[phase]]
name = "allreduce"
targets = ["m:G.all_reduce"]
[cycle]
targets = ["m:W.step"]
require = "draft"
"""


def write_map(raw: Path, text: str) -> None:
    """The phase map as `tracekit launch` leaves it: copied into raw/, its cycle rule in
    run.json (merge reads only the latter)."""
    (raw / "phasemap.toml").write_text(text)
    run = {"adapter": "test", CYCLE_RULE_KEY: cycle_rule(pm.parse(text))}
    (raw.parent / "run.json").write_text(json.dumps(run))


def rec(
    kind: str, cycle: int, phase: str | None, start: int, end: int, **kw: Any
) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(RAW_COLUMNS)
    row.update(
        kind=kind,
        phase=phase,
        cycle=cycle,
        depth=0,
        parent=None,
        tid=1,
        start_ns=start,
        end_ns=end,
        graph_replays=0,
        ok=True,
    )
    row.update(kw)
    return row


def write_proc(
    raw: Path,
    pid: int,
    rows: list[dict[str, Any]],
    *,
    rank: int | None,
    world: int | None = None,
    finished: bool = True,
    manifest: dict[str, Any] | None = None,
) -> None:
    """A process directory as the recorder writes it: coded rows + sites.json."""
    d = raw / f"pid-{pid}"
    d.mkdir(parents=True)
    info: dict[str, Any] = {}
    if rank is not None:
        info["dist_rank"] = rank
    if world is not None:
        info["dist_world_size"] = world
    sites: dict[tuple[str, str | None], int] = {}
    coded = []
    for i, r in enumerate(rows):
        key = (r["kind"], r["phase"] if r["kind"] == "phase" else "cycle")
        code = sites.setdefault(key, len(sites))
        parent = -1 if r["parent"] is None else sites.setdefault(("phase", r["parent"]), len(sites))
        row = {k: r.get(k) for k in RAW_COLUMNS}
        row.update(code=code, parent=parent, seq=i)
        coded.append(row)
    (d / "sites.json").write_text(
        json.dumps(
            {
                "sites": [
                    {"code": c, "kind": k, "phase": p, "target": f"m:{p}"}
                    for (k, p), c in sites.items()
                ]
            }
        )
    )
    (d / "process.json").write_text(
        json.dumps(
            {
                "pid": pid,
                "rank_info": info,
                "finished": finished,
                "via": "sitecustomize",
                "patched": ["m:W.draft"],
            }
        )
    )
    (d / "manifest.json").write_text(
        json.dumps(
            manifest or {"process": {"host": "h", "pid": str(pid)}, "env": {"RANK": str(rank)}}
        )
    )
    schema = raw_schema()
    data = schema.serialize().to_pybytes()
    if coded:
        data += pa.RecordBatch.from_pylist(coded, schema=schema).serialize().to_pybytes()
    if finished:
        data += EOS
    (d / "records.arrow").write_bytes(data)


def cycle_rows(n: int, *, prefill: bool = True) -> list[dict[str, Any]]:
    rows = []
    t = 0
    raw = 0
    if prefill:  # a cycle-target call without a draft: a prefill batch, not a cycle
        rows += [rec("cycle", 0, None, 0, 10), rec("phase", 0, "verify", 1, 9, accept_len=None)]
        raw, t = 1, 100
    for i in range(n):
        c = raw + i
        b = t + i * 100
        rows += [
            rec("phase", c, "draft", b + 1, b + 20),
            rec("phase", c, "verify", b + 21, b + 60, accept_len=float(i + 1)),
            rec("phase", c, "allreduce", b + 30, b + 40, depth=1, parent="verify"),
            rec("cycle", c, None, b, b + 70, accept_len=None),
        ]
    rows.append(rec("phase", -1, "allreduce", 10_000, 10_010))
    return rows


def test_merge_cycle_target_with_require(tmp_path: Path) -> None:
    # GIVEN two ranks, each with a prefill call and three cycles
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    write_proc(raw, 100, cycle_rows(3), rank=0, world=2)
    write_proc(raw, 101, cycle_rows(3), rank=1, world=2)
    write_proc(raw, 99, [], rank=None)  # the launcher's main process: no records, no rank
    # WHEN
    res = merge(tmp_path)
    # THEN
    assert res.ranks == [0, 1]
    assert res.missing_ranks == []
    assert res.partial_ranks == []
    assert res.warnings == []
    cycles = read_table(tmp_path, "cycles").sort("rank", "cycle")
    assert cycles.filter(pl.col("rank") == 0)["cycle"].to_list() == [0, 1, 2]
    assert (
        cycles["accept_len"].to_list() == [1.0, 2.0, 3.0] * 2
    )  # from verify when the cycle has none
    assert set(cycles["source"].to_list()) == {"cycle_target"}
    phases = read_table(tmp_path, "phases")
    per = (
        phases.filter(pl.col("depth") == 0, pl.col("cycle") >= 0)
        .group_by("rank", "cycle", "phase")
        .len()
    )
    assert per["len"].to_list() == [1] * 12  # draft and verify once per cycle and rank
    # the prefill's verify and the loose allreduce are outside any cycle
    assert phases.filter(pl.col("cycle") == -1).height == 4
    assert phases["pid"].unique().sort().to_list() == [100, 101]
    man = read_table(tmp_path, "manifests")
    assert man.filter(pl.col("section") == "process", pl.col("key") == "finished")[
        "value"
    ].to_list() == ["true", "true"]


def test_merge_starts_with(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(
        raw,
        MAP_TARGET.replace('targets = ["m:W.step"]\nrequire = "draft"', 'starts_with = "draft"'),
    )
    rows = [r for r in cycle_rows(2, prefill=False) if r["kind"] == "phase"]
    write_proc(raw, 5, rows, rank=None)
    res = merge(tmp_path)
    assert res.ranks == [0]  # a single process without a rank is rank 0
    cycles = read_table(tmp_path, "cycles").sort("cycle")
    assert cycles["start_ns"].to_list() == [1, 101]
    assert cycles["end_ns"].to_list() == [60, 160]
    assert cycles["source"].to_list() == ["starts_with:draft"] * 2


def test_merge_reports_missing_and_partial_ranks(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    write_proc(raw, 100, cycle_rows(3), rank=0, world=3)
    write_proc(raw, 101, cycle_rows(2), rank=1, world=3, finished=False)  # SIGKILLed
    res = merge(tmp_path)
    assert res.ranks == [0, 1]
    assert res.missing_ranks == [2]
    assert res.partial_ranks == [1]
    text = " ".join(res.warnings)
    assert "rank 1 (pid 101) is partial" in text
    assert "ranks [2] of 3 recorded nothing" in text
    assert read_table(tmp_path, "cycles").filter(pl.col("rank") == 1).height == 2


def test_merge_is_repeatable(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    write_proc(raw, 100, cycle_rows(2), rank=0)
    a = merge(tmp_path)
    b = merge(tmp_path)
    assert (a.phases, a.cycles) == (b.phases, b.cycles)
    assert read_table(tmp_path, "phases").height == a.phases


def test_merge_without_raw_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no `raw/` directory"):
        merge(tmp_path)


def test_counters_filed_under_the_rank_that_used_the_gpu(tmp_path: Path) -> None:
    from tests.unit.launch.test_launch_nvml import FakeNvml
    from tracekit.launch.nvml import NvmlSampler

    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    manifest = {"process": {"host": "h"}, "device": {"uuid": "GPU-1", "index": "0"}}
    write_proc(raw, 100, cycle_rows(1), rank=0, manifest=manifest)
    s = NvmlSampler(raw / "nvml", nvml=FakeNvml())
    s.start(lambda m: None)
    s.sample_once()
    s.stop()
    res = merge(tmp_path)
    counters = read_table(tmp_path, "counters")
    assert res.counters == counters.height > 0
    # GPU 1 was rank 0's device; GPU 0 was nobody's and is filed under its index, 0, too
    assert sorted(counters.filter(pl.col("rank") == 0)["gpu"].unique().to_list()) == [0, 1]
    assert set(counters["metric"].cast(str).to_list()) >= {
        "sm_clock_mhz",
        "power_w",
        "gpu_util_pct",
    }


def test_merge_calls_between_cycles_belong_to_none(tmp_path: Path) -> None:
    # GIVEN two cycles [0, 70] and [200, 270], and between them a new request's prefill whose
    # allreduces the recorder stamped with the last cycle's number (0), as it does
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    rows = [
        rec("phase", 0, "draft", 1, 20),
        rec("cycle", 0, None, 0, 70),
        rec("phase", 0, "allreduce", 100, 110),
        rec("phase", 0, "allreduce", 120, 130),
        rec("phase", 1, "draft", 201, 220),
        rec("cycle", 1, None, 200, 270),
    ]
    write_proc(raw, 7, rows, rank=0, world=1)
    # WHEN merged
    merge(tmp_path)
    # THEN the prefill's calls are outside every cycle (-1), the drafts in theirs
    phases = read_table(tmp_path, "phases").sort("start_ns")
    assert phases["cycle"].to_list() == [0, -1, -1, 1]


def test_merge_warns_once_when_the_cycle_rules_phase_never_ran(tmp_path: Path) -> None:
    # GIVEN two ranks whose steps ran verify and allreduce but never the required draft (a
    # drafter the map does not cover)
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    for pid, rank in ((100, 0), (101, 1)):
        rows = [r for r in cycle_rows(3) if r["phase"] != "draft"]
        write_proc(raw, pid, rows, rank=rank, world=2)
    # WHEN
    res = merge(tmp_path)
    # THEN one warning (not one per rank) names the rule, the missing phase and what ran
    assert res.cycles == 0
    assert res.phases > 0
    hits = [w for w in res.warnings if "never ran" in w]
    assert len(hits) == 1, res.warnings
    assert '`require = "draft"`' in hits[0]
    assert "phases that ran: allreduce, verify" in hits[0]


def test_merge_says_nothing_of_the_rule_when_its_phase_ran(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    write_proc(raw, 100, cycle_rows(2), rank=0, world=1)
    assert not [w for w in merge(tmp_path).warnings if "never ran" in w]


def test_merge_writes_each_phase_rows_nesting_once(tmp_path: Path) -> None:
    # GIVEN two cycles, each verify holding an allreduce, and an allreduce outside any cycle
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    write_proc(raw, 5, cycle_rows(2, prefill=False), rank=0)
    # WHEN merged
    merge(tmp_path)
    # THEN each row carries its place in nesting order (`inst`: by thread, start, longer
    # first) and the `inst` of its outermost range (`top`), by hand
    got = read_table(tmp_path, "phases").sort("start_ns")
    want = [  # phase, start, inst, top, depth, parent, cycle
        ("draft", 1, 0, 0, 0, None, 0),
        ("verify", 21, 1, 1, 0, None, 0),
        ("allreduce", 30, 2, 1, 1, "verify", 0),
        ("draft", 101, 3, 3, 0, None, 1),
        ("verify", 121, 4, 4, 0, None, 1),
        ("allreduce", 130, 5, 4, 1, "verify", 1),
        ("allreduce", 10_000, 6, 6, 0, None, -1),
    ]
    cols = ("phase", "start_ns", "inst", "top", "depth", "parent", "cycle")
    assert (
        list(got.select(*cols).cast({"phase": pl.String, "parent": pl.String}).iter_rows()) == want
    )


def test_merge_on_threads_writes_the_same_tables(tmp_path: Path) -> None:
    # GIVEN a run of three ranks
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    for rank in range(3):
        write_proc(raw, 100 + rank, cycle_rows(4 + rank), rank=rank, world=3)
    # WHEN merged one rank after the other, then on three threads
    one = merge(tmp_path, threads=1)
    tables = {t: read_table(tmp_path, t).sort("rank", "start_ns") for t in ("phases", "cycles")}
    three = merge(tmp_path, threads=3)
    # THEN the same tables and result
    assert (one.ranks, one.phases, one.cycles) == (three.ranks, three.phases, three.cycles)
    # a prefill verify, draft + verify + allreduce a cycle, a loose allreduce
    assert one.phases == sum(2 + 3 * n for n in (4, 5, 6))
    assert one.cycles == 4 + 5 + 6
    for t, before in tables.items():
        assert read_table(tmp_path, t).sort("rank", "start_ns").equals(before)
