"""The raw record stream between the collector and merge: an Arrow IPC stream written as the
recorder writes it (schema message, one message a flush, the end-of-stream marker at a clean
exit) and read back by merge's `read_stream`, whole, cut, or damaged.
(When the raw format moves to its own module, these imports follow it.)"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from tracekit.collectors.recorder import RAW_COLUMNS, raw_schema
from tracekit.store.merge import read_stream

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
    table, complete, err = read_stream(junk)
    assert table is not None
    assert table.num_rows == 0
    assert table.schema.names == list(RAW_COLUMNS)  # the raw schema stands in
    assert not complete
    assert err is not None
