"""Bad input: salvage of truncated files; one-line errors, exit 2, other ranks still ingested."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.unit.store._traces import kernel, trace, write
from tracekit.cli import cli
from tracekit.errors import TraceFormatError
from tracekit.store.ingest import ingest
from tracekit.store.reader import ranks, read_table


def _events(n: int) -> list[dict]:
    return [kernel(f"k{i}", f"{i}.000", "0.500", i) for i in range(n)]


def test_truncated_json_is_salvaged(tmp_path: Path) -> None:
    # GIVEN a trace cut in the middle of event 60 of 100 (a rank killed mid-write)
    full = write(tmp_path / "full.json", trace(_events(100), rank=0)).read_bytes()
    cut_at = full.index(b'"k60"')
    bad = tmp_path / "cut.json"
    bad.write_bytes(full[:cut_at])
    # WHEN
    result = ingest([bad], tmp_path / "run", jobs=1)
    # THEN the 60 complete events are kept and the warning names the file and the count
    df = read_table(tmp_path / "run", "events")
    assert df["name"].cast(pl.String).to_list() == [f"k{i}" for i in range(60)]
    assert len(result.warnings) == 1
    assert str(bad) in result.warnings[0]
    assert "salvaged 60 events" in result.warnings[0]
    assert result.files[0].salvaged
    # distributedInfo, written before traceEvents, still gives the rank
    assert result.ranks == [0]


def test_truncated_gzip_is_salvaged(tmp_path: Path) -> None:
    full = gzip.compress(write(tmp_path / "full.json", trace(_events(2000), rank=1)).read_bytes())
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(full[: len(full) // 2])
    result = ingest([bad], tmp_path / "run", jobs=1)
    n = read_table(tmp_path / "run", "events").height
    assert 0 < n < 2000
    assert "truncated gzip" in result.warnings[0]
    assert f"salvaged {n} events" in result.warnings[0]


def test_cli_salvage_warning(tmp_path: Path) -> None:
    full = write(tmp_path / "full.json", trace(_events(10), rank=0)).read_bytes()
    bad = tmp_path / "cut.json"
    bad.write_bytes(full[: full.index(b'"k5"')])
    res = CliRunner().invoke(cli, ["ingest", str(bad), "-o", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert f"tracekit: warning: {bad}" in res.output
    assert "salvaged 5 events" in res.output


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "empty file"),
        (b"   \n", "empty file"),
        (b"hello world", "not JSON"),
        (b"\x00\x01\x02garbage", "not JSON"),
        (b'{"a": 1}', "not a Kineto trace"),
        (b"[1, 2, 3]", "not a Kineto trace"),
        (b'{"traceEvents": 5}', "not an array"),
        (b'{"schemaVersion": 1, "traceEvents": [{"ph": "X", "na', "no complete event"),
    ],
)
def test_bad_file_errors(tmp_path: Path, content: bytes, expected: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(TraceFormatError, match=expected) as info:
        ingest([bad], tmp_path / "run", jobs=1)
    assert str(bad) in str(info.value)
    assert "\n" not in str(info.value)


def test_cli_bad_inputs_others_still_ingested(tmp_path: Path) -> None:
    # GIVEN rank 0 and rank 1 good, plus an empty, a non-JSON and a non-trace file
    good = [write(tmp_path / f"in/r{r}.json", trace(_events(3), rank=r)) for r in (0, 1)]
    (tmp_path / "in/empty.json").write_bytes(b"")
    (tmp_path / "in/text.json").write_bytes(b"not json at all")
    (tmp_path / "in/other.json").write_bytes(b'{"hello": "world"}')
    # WHEN (a real subprocess: exit code and stderr as a user sees them)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit",
            "ingest",
            str(tmp_path / "in"),
            "-o",
            str(tmp_path / "run"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    # THEN exit 2, one error line naming each bad file, no traceback, good ranks written
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("tracekit: error:")]
    assert len(errors) == 1
    for name in ("empty.json", "text.json", "other.json"):
        assert name in errors[0]
    assert ranks(tmp_path / "run") == [0, 1]
    assert len(good) == 2
    assert proc.stdout == ""


def test_cli_missing_path(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli, ["ingest", str(tmp_path / "nope.json"), "-o", str(tmp_path / "run")]
    )
    assert res.exit_code == 2
    assert "nope.json" in res.output


def test_cli_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(cli, ["ingest", str(tmp_path / "empty"), "-o", str(tmp_path / "run")])
    assert res.exit_code == 2
    assert "no trace files" in res.output
