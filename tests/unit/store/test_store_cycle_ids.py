"""Cycle numbers that survive lost records (tracekit/store/cycle_numbers.py `cycle_ids`), and merge's
warning about a damaged middle segment, on hand-built records whose answers are worked out by
hand in each test."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from tests.unit.store.test_store_merge import EOS, MAP_TARGET, cycle_rows, write_map, write_proc
from tracekit.errors import InputError
from tracekit.store.cycle_numbers import cycle_ids
from tracekit.store.merge import merge
from tracekit.store.raw.schema import raw_schema
from tracekit.store.reader import read_table

# raw cycles 0..9; 0 and 5 are prefill steps (no `require` phase): no cycles
STATUS = {r: r not in (0, 5) for r in range(10)}


def test_a_rank_that_lost_raw_cycles_keeps_the_other_ranks_numbers() -> None:
    # rank 0 read raw 0-2 and 7-9 (it lost 3-6); rank 1 read all ten
    rank0 = {r: s for r, s in STATUS.items() if r not in range(3, 7)}
    ids = cycle_ids([(rank0, [(2, 7)]), (STATUS, [])])
    # by hand: the cycles are raw 1,2,3,4,6,7,8,9 -> 0..7
    assert ids.numbers == {1: 0, 2: 1, 3: 2, 4: 3, 6: 4, 7: 5, 8: 6, 9: 7}
    assert ids.disagree == []
    assert [ids.numbers[r] for r in rank0 if rank0[r]] == [0, 1, 5, 6, 7]


def test_raw_cycles_every_rank_lost_keep_their_numbers() -> None:
    # one rank; raw 3-6 lost, nobody has them: each counts as a cycle (its number kept free)
    only = {r: s for r, s in STATUS.items() if r not in range(3, 7)}
    ids = cycle_ids([(only, [(2, 7)])])
    assert ids.numbers == {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 6: 5, 7: 6, 8: 7, 9: 8}
    # without a known loss a gap is not numbered (a paused recorder counts raw cycles too)
    assert cycle_ids([(only, [])]).numbers == {1: 0, 2: 1, 7: 2, 8: 3, 9: 4}


def test_ranks_that_count_a_step_differently_are_named() -> None:
    other = {**STATUS, 4: False}
    ids = cycle_ids([(STATUS, []), (other, [])])
    assert cycle_ids([(STATUS, []), (other, [(3, 5)])]).disagree == []  # 4 partial on one
    assert ids.disagree == [4]
    assert ids.numbers[4] == 3  # numbered as on the rank where it is a cycle
    assert ids.numbers[9] == 7


def _split(pid_dir: Path, rows_per_segment: int) -> list[Path]:
    """Rewrite records.arrow as segments of `rows_per_segment` rows, each closed cleanly."""
    table = pa.ipc.open_stream((pid_dir / "records.arrow").read_bytes()).read_all()
    paths = []
    for i, start in enumerate(range(0, table.num_rows, rows_per_segment)):
        path = pid_dir / ("records.arrow" if i == 0 else f"records.{i}.arrow")
        part = table.slice(start, rows_per_segment)
        data = raw_schema().serialize().to_pybytes()
        for batch in part.to_batches():
            data += batch.serialize().to_pybytes()
        path.write_bytes(data + EOS)
        paths.append(path)
    info = json.loads((pid_dir / "process.json").read_text())
    info.update(records=table.num_rows, segments={"current": len(paths) - 1})
    (pid_dir / "process.json").write_text(json.dumps(info))
    return paths


def test_merge_of_a_missing_middle_segment(tmp_path: Path) -> None:
    # GIVEN two ranks of 6 cycles after a prefill (rows: 2 for the prefill, 4 a cycle, 1 after);
    # rank 0's records in segments of 8 rows (27 in all: raw 0 is rows 0-1, raw c rows 4c-2
    # to 4c+1, the row after the cycles is 26)
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    write_proc(raw, 100, cycle_rows(6), rank=0, world=2)
    write_proc(raw, 101, cycle_rows(6), rank=1, world=2)
    segments = _split(raw / "pid-100", 8)
    assert len(segments) == 4
    # WHEN segment 1 is lost: rows 8-15, the end of raw cycle 2, raw 3, the start of raw 4
    segments[1].unlink()
    res = merge(tmp_path)
    # THEN one warning: the file, its 8 records, rank 0's cycles 1-3 (raw 2-4) missing
    (line,) = res.warnings
    assert f"{segments[1]}: missing" in line
    assert "8 records lost (process.json counts 27)" in line
    assert "rank 0's cycles 1-3 (3 cycles) are missing" in line
    cycles = read_table(tmp_path, "cycles")
    by_rank = {r: sorted(cycles.filter(cycles["rank"] == r)["cycle"].to_list()) for r in (0, 1)}
    assert by_rank == {0: [0, 4, 5], 1: [0, 1, 2, 3, 4, 5]}
    # and the same cycle number starts at the same time on both ranks
    starts = {(r, c): s for r, c, s in cycles.select("rank", "cycle", "start_ns").iter_rows()}
    assert all(starts[0, c] == starts[1, c] for c in by_rank[0])


def test_nothing_readable_is_one_line(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    write_map(raw, MAP_TARGET)
    write_proc(raw, 100, cycle_rows(2), rank=0, world=1)
    (raw / "pid-100" / "records.arrow").write_bytes(b"0123456789")
    with pytest.raises(InputError, match=r"nothing readable in .*: 1 record file\(s\) damaged"):
        merge(tmp_path)
