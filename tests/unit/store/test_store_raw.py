"""The raw record stream between the collector and merge: an Arrow IPC stream written as the
recorder writes it (schema message, one message a flush, the end-of-stream marker at a clean
exit) and read back by `read_stream` (tracekit/store/raw/ipc.py), whole, cut, or damaged; the
recorder's packed rows through `encode_rows` and back through `decode`; the NVML samples; the
cycle rule in run.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tracekit.errors import InputError
from tracekit.store.raw.cycle_rule import CYCLE_RULE_KEY, read_cycle_rule
from tracekit.store.raw.files import (
    RECORDS_FILE,
    SITES_FILE,
    list_segments,
    segment_name,
    write_json,
)
from tracekit.store.raw.ipc import StreamWriter, read_stream
from tracekit.store.raw.nvml import NVML_COLUMNS, nvml_schema, read_samples, samples_batch
from tracekit.store.raw.records import encode_rows, read_records
from tracekit.store.raw.schema import RAW_COLUMNS, ROW, raw_schema, row_dtype

EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"  # Arrow IPC end-of-stream: continuation, length 0


def _batch(first_seq: int, n: int) -> pa.RecordBatch:
    schema = raw_schema()
    cols = {
        "code": [1] * n,
        "cycle": list(range(n)),
        "depth": [0] * n,
        "parent": [-1] * n,
        "tid": [7] * n,
        "seq": list(range(first_seq, first_seq + n)),
        "start_ns": [1000 * i for i in range(n)],
        "end_ns": [1000 * i + 500 for i in range(n)],
        "graph_replays": [0] * n,
        "accept_len": [2.0] * n,
        "ok": [True] * n,
        "gpu_start_ns": [None] * n,
        "gpu_end_ns": [None] * n,
    }
    return pa.RecordBatch.from_pydict(cols, schema=schema)


def _stream(*batches: pa.RecordBatch, eos: bool = True) -> bytes:
    """Bytes laid out as the recorder writes them (it appends each message with os.write)."""
    parts = [raw_schema().serialize().to_pybytes()]
    parts += [b.serialize().to_pybytes() for b in batches]
    if eos:
        parts.append(EOS)
    return b"".join(parts)


def test_the_schema_holds_every_raw_column() -> None:
    assert raw_schema().names == list(RAW_COLUMNS)


def test_a_cleanly_closed_stream_reads_whole(tmp_path: Path) -> None:
    f = tmp_path / "records.arrow"
    f.write_bytes(_stream(_batch(0, 3), _batch(3, 2)))
    table, complete, err = read_stream(f)
    assert err is None
    assert complete
    assert table is not None
    assert table.schema.names == list(RAW_COLUMNS)
    assert table["seq"].to_pylist() == [0, 1, 2, 3, 4]
    assert table["end_ns"].to_pylist() == [500, 1500, 2500, 500, 1500]


def test_pyarrows_own_stream_writer_reads_the_same(tmp_path: Path) -> None:
    # the layout is plain Arrow IPC: pyarrow's writer gives a stream read the same way
    f = tmp_path / "records.arrow"
    with pa.ipc.new_stream(f, raw_schema()) as w:
        w.write_batch(_batch(0, 4))
    table, complete, err = read_stream(f)
    assert (table.num_rows, complete, err) == (4, True, None)  # type: ignore[union-attr]


def test_a_killed_writer_leaves_a_stream_without_its_end(tmp_path: Path) -> None:
    # GIVEN a process killed between flushes: whole messages, no end-of-stream marker
    f = tmp_path / "records.arrow"
    f.write_bytes(_stream(_batch(0, 3), _batch(3, 3), eos=False))
    table, complete, err = read_stream(f)
    # THEN every record is read, and the stream says it did not end cleanly
    assert table is not None
    assert table.num_rows == 6
    assert not complete
    assert err is None


@pytest.mark.parametrize("cut", [1, 7, 100])
def test_a_torn_last_write_keeps_the_whole_batches_before_it(tmp_path: Path, cut: int) -> None:
    f = tmp_path / "records.arrow"
    data = _stream(_batch(0, 3), _batch(3, 3), eos=False)
    f.write_bytes(data[:-cut])
    table, complete, err = read_stream(f)
    assert table is not None
    assert table["seq"].to_pylist() == [0, 1, 2]
    assert not complete
    assert err is not None


def test_a_stream_with_only_its_schema_is_empty(tmp_path: Path) -> None:
    f = tmp_path / "records.arrow"
    f.write_bytes(_stream(eos=False))
    table, complete, err = read_stream(f)
    assert table is not None
    assert table.num_rows == 0
    assert table.schema.names == list(RAW_COLUMNS)
    assert (complete, err) == (False, None)


def test_empty_missing_and_garbage_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.arrow"
    empty.write_bytes(b"")
    assert read_stream(empty) == (None, False, "empty file")
    table, complete, err = read_stream(tmp_path / "absent.arrow")
    assert (table, complete) == (None, False)
    assert err is not None
    junk = tmp_path / "junk.arrow"
    junk.write_bytes(b"not arrow at all" * 10)
    table, complete, err = read_stream(junk, raw_schema())
    assert table is not None
    assert table.num_rows == 0
    assert table.schema.names == list(RAW_COLUMNS)  # the schema passed stands in
    assert not complete
    assert err is not None
    assert read_stream(junk)[0] is None  # without one: no table


# -- the writer side: packed rows -> StreamWriter -> read back ------------------------------


def _packed(*rows: tuple[Any, ...]) -> Any:
    """Rows packed as the recorder buffers them, viewed as its numpy layout."""
    import numpy as np

    return np.frombuffer(b"".join(ROW.pack(*r) for r in rows), dtype=row_dtype())


def test_packed_rows_written_and_read_back_are_the_same_records(tmp_path: Path) -> None:
    # GIVEN two calls of one cycle (a draft with a nested allreduce; the draft's GPU times
    # known, the allreduce's not; no accept length on the draft: NaN -> null)
    nan = float("nan")
    rows = _packed(
        # code cycle depth parent tid seq start end replays accept ok
        (0, 4, 0, -1, 77, 1, 1_000, 2_000, 0, nan, True),
        (1, 4, 1, 0, 77, 2, 1_200, 1_500, 3, 2.5, False),
    )
    gpu = {1: (10_000, 11_000)}
    f = tmp_path / "records.arrow"
    # WHEN the recorder's path writes them: schema, one batch, the end marker
    w = StreamWriter(f, raw_schema())
    head = w.head_bytes
    n = w.write(encode_rows(rows, gpu))
    w.close()
    # THEN the file is exactly those messages plus the marker, read back whole
    assert f.stat().st_size == head + n + len(EOS)
    assert f.read_bytes().endswith(EOS)
    assert gpu == {}  # the GPU times written were taken out
    table, complete, err = read_stream(f)
    assert (complete, err) == (True, None)
    got = table.to_pylist()
    assert got == [
        dict(zip(RAW_COLUMNS, (0, 4, 0, -1, 77, 1, 1_000, 2_000, 0, None, True, 10_000, 11_000))),
        dict(zip(RAW_COLUMNS, (1, 4, 1, 0, 77, 2, 1_200, 1_500, 3, 2.5, False, None, None))),
    ]


def test_gpu_times_join_their_rows_by_the_call_number() -> None:
    # GIVEN rows of calls 3, 5 (its phase row and its cycle row, -5) and 9, and resolved GPU
    # times for calls 5 and 9 and for call 12, whose row is not in this batch
    nan = float("nan")
    rows = _packed(
        (0, 0, 0, -1, 1, 3, 10, 20, 0, nan, True),
        (0, 0, 0, -1, 1, 5, 30, 40, 0, nan, True),
        (1, 0, 0, -1, 1, -5, 30, 40, 0, 2.0, True),
        (0, 1, 0, -1, 1, 9, 50, 60, 0, nan, True),
    )
    gpu = {12: (900, 990), 9: (500, 600), 5: (300, 400)}
    # WHEN encoded
    batch = pa.ipc.read_record_batch(pa.py_buffer(encode_rows(rows, gpu)), raw_schema())
    # THEN each row has its call's times (both rows of call 5), none for call 3, and only the
    # times of the call not in the batch stay behind for the next flush
    assert batch.column("gpu_start_ns").to_pylist() == [None, 300, 300, 500]
    assert batch.column("gpu_end_ns").to_pylist() == [None, 400, 400, 600]
    assert gpu == {12: (900, 990)}


def test_a_writer_that_died_leaves_the_batches_it_wrote(tmp_path: Path) -> None:
    # GIVEN a stream closed without its end marker (the process died between flushes), and a
    # second batch cut in its middle (it died inside the write)
    f = tmp_path / "records.arrow"
    w = StreamWriter(f, raw_schema())
    w.write(encode_rows(_packed((0, 0, 0, -1, 1, 1, 10, 20, 0, 1.0, True)), {}))
    second = encode_rows(_packed((0, 1, 0, -1, 1, 2, 30, 40, 0, 2.0, True)), {})
    w.write(second[: len(second) // 2])
    w.close(clean=False)
    # WHEN read
    table, complete, err = read_stream(f)
    # THEN the first batch is there, the stream says it was cut, and why
    assert table["seq"].to_pylist() == [1]
    assert not complete
    assert err is not None
    with pytest.raises(OSError, match="closed"):
        w.write(b"more")  # a closed writer never writes into a reused file descriptor


def test_decode_names_the_codes_from_the_site_table(tmp_path: Path) -> None:
    # GIVEN a phase site (code 0), a cycle site (code 1) and rows coded with them; the cycle row
    # of a site that is both carries -seq
    rows = _packed(
        (0, 0, 0, -1, 1, 5, 10, 20, 0, float("nan"), True),
        (2, 0, 1, 0, 1, 6, 12, 15, 0, float("nan"), True),
        (1, 0, 0, -1, 1, -5, 10, 20, 0, 3.0, True),
    )
    d = tmp_path / "pid-1"
    d.mkdir()
    w = StreamWriter(d / RECORDS_FILE, raw_schema())
    w.write(encode_rows(rows, {}))
    w.close()
    sites = [
        {"code": 0, "kind": "phase", "phase": "verify", "target": "m:W.verify"},
        {"code": 1, "kind": "cycle", "phase": "cycle", "target": "m:W.verify"},
        {"code": 2, "kind": "phase", "phase": "allreduce", "target": "m:G.all_reduce"},
    ]
    write_json(d / SITES_FILE, {"sites": sites})
    # WHEN merge's reader reads the process
    table, _complete, _err = read_stream(d / RECORDS_FILE)
    frame, why = read_records(d, table)
    # THEN every code is a name, the parent too, seq positive again
    assert why is None
    got = frame.to_dicts()
    assert [(r["kind"], r["phase"], r["parent"], r["seq"]) for r in got] == [
        ("phase", "verify", None, 5),
        ("phase", "allreduce", "verify", 6),
        ("cycle", None, None, 5),
    ]
    assert [r["target"] for r in got] == ["m:W.verify", "m:G.all_reduce", "m:W.verify"]


def test_records_without_a_site_table_or_with_other_columns_are_refused(tmp_path: Path) -> None:
    d = tmp_path / "pid-1"
    d.mkdir()
    table = pa.Table.from_batches([_batch(0, 2)])
    rows, why = read_records(d, table)
    assert rows is None
    assert why is not None
    assert why.startswith(str(d / SITES_FILE))
    # the first record format (names on every row, no `code`) is no longer read
    old = pa.table({"kind": ["phase"], "cycle": [0], "depth": [0], "seq": [1]})
    rows, why = read_records(d, old)
    assert rows is None
    assert why is not None
    assert "not a tracekit record stream" in why


def test_segment_names_and_listing(tmp_path: Path) -> None:
    assert [segment_name(i) for i in (0, 1, 12)] == [
        "records.arrow",
        "records.1.arrow",
        "records.12.arrow",
    ]
    for name in ("records.10.arrow", "records.arrow", "records.2.arrow", "sites.json", "x.arrow"):
        (tmp_path / name).write_bytes(b"")
    assert [i for i, _p in list_segments(tmp_path)] == [0, 2, 10]


# -- NVML samples ---------------------------------------------------------------------------


def test_nvml_schema_and_samples_round_trip(tmp_path: Path) -> None:
    schema = nvml_schema()
    assert schema.names == list(NVML_COLUMNS) == ["gpu", "host", "metric", "ts_ns", "value"]
    assert [str(t) for t in schema.types] == ["int32", "string", "string", "int64", "double"]
    f = tmp_path / "counters.arrow"
    w = StreamWriter(f, schema)
    w.write_batch(samples_batch([(0, "h", "power_w", 5, 300.5), (1, "h", "sm_clock_mhz", 5, 1980)]))
    w.write_batch(samples_batch([]))  # a flush with no sample writes an empty batch
    w.close()
    table, warnings = read_samples(f)
    assert warnings == []
    assert table.to_pylist() == [
        {"gpu": 0, "host": "h", "metric": "power_w", "ts_ns": 5, "value": 300.5},
        {"gpu": 1, "host": "h", "metric": "sm_clock_mhz", "ts_ns": 5, "value": 1980.0},
    ]


def test_nvml_samples_of_another_schema_are_refused_with_the_file_named(tmp_path: Path) -> None:
    f = tmp_path / "counters.arrow"
    f.write_bytes(_stream(_batch(0, 2)))  # a record stream where the samples should be
    table, warnings = read_samples(f)
    assert table is None
    assert warnings == [f"{f}: not tracekit NVML samples; no GPU counters merged"]


# -- the cycle rule in run.json -------------------------------------------------------------


def test_cycle_rule_read_back_as_written(tmp_path: Path) -> None:
    rule = {
        "targets": ["m:W.step"],
        "starts_with": None,
        "require": "draft",
        "delta_phases": {"verify": "arg"},
        "cycle_delta": None,
    }
    got, warning = read_cycle_rule({CYCLE_RULE_KEY: rule}, tmp_path / "run.json")
    assert (got, warning) == (rule, None)


def test_a_malformed_cycle_rule_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    with pytest.raises(InputError, match=r"run\.json: `cycle_rule\.require` is 3, ") as info:
        read_cycle_rule({CYCLE_RULE_KEY: {"require": 3}}, path)
    assert "\n" not in str(info.value)
    with pytest.raises(InputError, match=r"delta_phases\.verify"):
        read_cycle_rule({CYCLE_RULE_KEY: {"delta_phases": {"verify": "both"}}}, path)


def test_an_older_run_keeps_what_cycle_source_says_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    got, warning = read_cycle_rule({"cycle_source": "starts_with:draft"}, path)
    assert got is not None
    assert (got["starts_with"], got["require"], got["delta_phases"]) == ("draft", None, {})
    assert warning is not None
    assert warning.startswith(f"{path}: no `cycle_rule`")
    got, warning = read_cycle_rule({}, path)
    assert got is None
    assert warning is not None
    assert warning.startswith(f"{path}: missing")
