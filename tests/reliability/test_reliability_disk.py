"""The disk filling up during a run: the program goes on unchanged, tracekit says so once, and
whatever reached the disk merges once there is room again.

Two ways in: a real full file system (a small tmpfs; needs root, skipped elsewhere) under
`tracekit launch`, and a write error injected at the recorder's and the NVML sampler's writes
(always runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.reliability._programs import (
    launch_cmd,
    program_lines,
    run,
    server_cmd,
    tracekit_lines,
    write_server,
)
from tracekit.collectors.phasemap import Site, Target
from tracekit.collectors.recorder import Recorder, RecorderConfig
from tracekit.collectors.recording import fileops, output
from tracekit.collectors.wrappers import make_wrapper
from tracekit.store.raw.files import RECORDS_FILE, SITES_FILE
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.records import decoded
from tracekit.store.reader import read_table


def decode(table: Any, sites: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decoded records, one dict a row."""
    rows: list[dict[str, Any]] = decoded(table, sites).to_dicts()
    return rows


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs (root only); grown to 16 MiB by `_grow` to play "the user freed space"."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the injected write error tests cover this")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mnt)],
        capture_output=True,
        check=False,
    )
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({res.stderr.decode().strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def read_sites(pid_dir: Path) -> list[dict[str, Any]]:
    """The site table a recorder wrote beside its records."""
    path = pid_dir / SITES_FILE
    return json.loads(path.read_text()).get("sites", []) if path.exists() else []  # type: ignore[no-any-return]


def _grow(mnt: Path) -> None:
    subprocess.run(["mount", "-o", "remount,size=16m", str(mnt)], check=True)


def test_disk_full_during_a_run(small_disk: Path, tmp_path: Path) -> None:
    # GIVEN a server writing far more records than the 256 KiB disk holds
    server = write_server(tmp_path / "srv")
    cmd = server_cmd(server, 1, 6000)
    plain = run(cmd, server, REL_SLEEP="0")
    # WHEN it runs under tracekit with its run directory on that disk
    traced = run(launch_cmd(server, small_disk, "full", cmd), server, REL_SLEEP="0")
    # THEN the program's output and exit code are unchanged, with no traceback anywhere
    assert traced.returncode == plain.returncode == 0, traced.stderr
    assert program_lines(traced.stdout) == program_lines(plain.stdout)
    assert "Traceback" not in traced.stderr, traced.stderr
    # and each problem is said once, in plain words, with what to do
    lines = tracekit_lines(traced.stderr)
    failed = [ln for ln in lines if "recorder failed" in ln]
    assert failed
    # once per process that hit it (the worker during a flush; its parent, which records
    # nothing, may hit it writing its process.json at exit)
    pids = [ln.split(" in pid ")[1].split()[0] for ln in failed]
    assert len(pids) == len(set(pids)), failed
    assert any("during flush" in ln for ln in failed)
    for ln in failed:
        assert "No space left on device" in ln
        assert "the program goes on" in ln
    merge_hint = [ln for ln in lines if "could not merge" in ln]
    assert len(merge_hint) == 1
    assert "tracekit merge" in merge_hint[0]
    # WHEN there is room again and the user merges
    _grow(small_disk)
    run_dir = small_disk / "full"
    merged = subprocess.run(
        [sys.executable, "-m", "tracekit", "merge", str(run_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    # THEN every cycle in the complete batches that reached the disk is in the store
    assert merged.returncode == 0, merged.stderr
    (records,) = run_dir.glob(f"raw/pid-*/{RECORDS_FILE}")
    table, complete, _err = read_stream(records)
    assert table is not None
    assert not complete
    on_disk = decode(table, read_sites(records.parent))
    cycles = read_table(run_dir, "cycles")
    assert 100 < cycles.height < 6000
    assert cycles.height == sum(r["kind"] == "cycle" for r in on_disk)
    partial = [ln for ln in tracekit_lines(merged.stderr) if "partial" in ln]
    assert len(partial) == 1


class _DiskFillsAt:
    """The recorder's batches of writes (collectors/recording/fileops.py, native or Python), its
    record stream's descriptor swapped for /dev/full (every write: ENOSPC) before the batch that
    holds its `n`-th record batch: the disk as the kernel reports it full, on either path."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.batches = 0
        self.run = fileops.run

    def __call__(self, ops: list[fileops.Op], **kw: Any) -> None:
        for op in ops:
            if op[0] == "fd":
                self.batches += 1
                if self.batches == self.n:
                    full = os.open("/dev/full", os.O_WRONLY)
                    os.dup2(full, op[1])
                    os.close(full)
        self.run(ops, **kw)


def test_injected_write_error_at_the_recorder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a recorder flushing every 10 records whose disk fills at its 3rd record batch
    # (schema + 2 batches written)
    monkeypatch.setattr(output.fileops, "run", _DiskFillsAt(3))
    rec = Recorder(RecorderConfig(raw_dir=tmp_path / "raw", flush_records=10, flush_seconds=60))

    def step(i: int) -> int:
        return draft(i) * 2

    def draft(i: int) -> int:
        return i + 1

    draft = make_wrapper(draft, Site(Target("m", "draft"), phase="draft"), rec)
    step = make_wrapper(step, Site(Target("m", "step"), cycle=True), rec)
    # WHEN the program runs 100 cycles (2 records each)
    results = [step(i) for i in range(100)]
    rec.close()
    # THEN it computed exactly what it computes without tracekit
    assert results == [(i + 1) * 2 for i in range(100)]
    # and the recorder said once that it stopped, then stayed out of the way
    err = capsys.readouterr().err
    assert err.count("tracekit: recorder failed") == 1
    assert "No space left on device" in err
    assert not rec.active
    # and the two batches written before the disk filled are readable
    table, complete, read_err = read_stream(rec.dir / RECORDS_FILE)
    assert table is not None
    assert read_err is None
    assert not complete
    assert table.num_rows == 20
    rows = decode(table, read_sites(rec.dir))
    assert [r["kind"] for r in rows].count("cycle") == 10
