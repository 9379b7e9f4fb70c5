"""A flush's file writes as one batch (collectors/recording/fileops.py, `_native.file_ops`): the
same files on the native and the Python path, the first failure named, and one batch a flush."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.unit.collectors._paths import NATIVE_OR_PYTHON
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import fileops, output
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.files import PROCESS_FILE, SITES_FILE

PATHS = NATIVE_OR_PYTHON  # the writes: os one by one, or _native.file_ops


@pytest.mark.parametrize("native", PATHS)
def test_the_ops_write_their_files_in_order(tmp_path: Path, native: Any) -> None:
    # GIVEN a stream file open for appending, a file to append to, one to replace
    stream = tmp_path / "records.arrow"
    fd = os.open(stream, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    (tmp_path / "accepts.jsonl").write_bytes(b"old\n")
    (tmp_path / "process.json").write_bytes(b'{"records": 1}')
    try:
        # WHEN one batch appends twice to the stream, once to the file, and replaces the other
        fileops.run(
            [
                fileops.to_fd(fd, b"batch 1;"),
                fileops.to_fd(fd, b"batch 2;"),
                fileops.append(tmp_path / "accepts.jsonl", b"new\n"),
                fileops.replace(tmp_path / "process.json", b'{"records": 3}'),
            ],
            native=native,
        )
    finally:
        os.close(fd)
    # THEN each file holds what the ops wrote, in order, and no temporary file is left
    assert stream.read_bytes() == b"batch 1;batch 2;"
    assert (tmp_path / "accepts.jsonl").read_bytes() == b"old\nnew\n"
    assert json.loads((tmp_path / "process.json").read_bytes()) == {"records": 3}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "accepts.jsonl",
        "process.json",
        "records.arrow",
    ]


@pytest.mark.parametrize("native", PATHS)
def test_the_first_failure_is_named_and_the_ops_after_it_do_not_run(
    tmp_path: Path, native: Any
) -> None:
    # GIVEN a batch whose second op appends to a file in a directory that does not exist
    missing = tmp_path / "gone" / "accepts.jsonl"
    ops = [
        fileops.replace(tmp_path / "sites.json", b"{}"),
        fileops.append(missing, b"x\n"),
        fileops.replace(tmp_path / "process.json", b"{}"),
    ]
    # WHEN it runs
    with pytest.raises(FileNotFoundError) as err:
        fileops.run(ops, native=native)
    # THEN the error names that file; the op before it ran, the one after it did not
    assert err.value.filename == str(missing)
    assert (tmp_path / "sites.json").exists()
    assert not (tmp_path / "process.json").exists()


@pytest.mark.parametrize("native", PATHS)
def test_a_file_to_replace_gets_its_directory_back(tmp_path: Path, native: Any) -> None:
    # GIVEN process.json to write into a process directory deleted under the run
    target = tmp_path / "raw" / "pid-7" / "process.json"
    # WHEN written
    fileops.run([fileops.replace(target, b'{"pid": 7}')], native=native)
    # THEN the directory is made again and the file written whole
    assert json.loads(target.read_bytes()) == {"pid": 7}


@pytest.mark.parametrize("native", PATHS)
def test_a_closed_stream_descriptor_is_an_error(tmp_path: Path, native: Any) -> None:
    fd = os.open(tmp_path / "s", os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    with pytest.raises(OSError, match="Bad file descriptor"):
        fileops.run([fileops.to_fd(fd, b"x")], native=native)


def test_a_flush_writes_its_files_in_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a recorder with 4 cycles buffered (no flush thread: the flushes are called here)
    batches: list[list[str]] = []
    run = fileops.run

    def spy(ops: list[fileops.Op], **kw: Any) -> None:
        batches.append([op[0] if op[0] == "fd" else Path(os.fsdecode(op[1])).name for op in ops])
        run(ops, **kw)

    monkeypatch.setattr(output.fileops, "run", spy)
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10**6))
    step = make_wrapper(lambda: None, Site(Target("m", "step"), phase="step", cycle=True), rec)
    for _ in range(4):
        step()
    # WHEN it flushes, records 2 cycles more, and closes
    assert rec.flush()
    for _ in range(2):
        step()
    rec.close()
    # THEN the first flush wrote sites.json, the batch and process.json in one batch of
    # writes; the final flush its batch, then (after the stream's end) process.json
    assert batches[0] == [SITES_FILE, "fd", PROCESS_FILE]
    assert batches[1:3] == [["fd"], [PROCESS_FILE]]
    info = json.loads((rec.dir / PROCESS_FILE).read_text())
    assert info["records"] == 12  # a phase row and a cycle row a call
