"""Bad inputs to every reader: one line naming the file and what to do, exit code 2, no
traceback, and whatever is good still processed.

Readers: `ingest` (Kineto JSON / gzip), the store reader behind every analysis command (Parquet
parts, their schema version), `diff` (two runs), `merge` (raw collector output).
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tests.outputs_synth import make_run
from tracekit.cli import cli
from tracekit.store.reader import ranks, table_files

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces" / "trace_filter_2rank"
GOOD_RANK1 = SAMPLES / "sampled_rank-1.json.gz"


def _ev(**kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": 1000.0,
        "dur": 5.0,
    }
    d.update(kw)
    return d


def _trace(events: list[Any]) -> bytes:
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}}
    return json.dumps({**doc, "traceEvents": events}).encode()


def _good_json() -> bytes:
    return gzip.decompress((SAMPLES / "sampled_rank-0.json.gz").read_bytes())


def _corrupt(data: bytes) -> bytes:
    return data[:200] + bytes(b ^ 0x5A for b in data[200:400]) + data[400:]


# name -> (file bytes, words the one error line must hold)
ERRORS: dict[str, tuple[bytes, str]] = {
    "empty.json": (b"", "empty file"),
    "empty.json.gz": (b"", "empty file"),
    "gzip-of-nothing.json.gz": (gzip.compress(b""), "empty file"),
    "blank.json": (b"  \n\t\n", "empty file"),
    "not-json.json": (b"<html>oops</html>", "not JSON"),
    "binary.json.gz": (gzip.compress(b"\x00\xff\x13garbage"), "not JSON"),
    "a-list.json": (b"[1, 2, 3]", "not a Kineto trace"),
    "other-object.json": (b'{"foo": {"bar": 1}}', "not a Kineto trace"),
    "a-string.json": (b'"just a string"', "not"),
    "events-not-array.json": (b'{"traceEvents": {"a": 1}}', "not an array"),
    "cut-in-header.json.gz": (gzip.compress(b"x" * 10_000)[:5], "truncated gzip"),
    "corrupt.json.gz": (_corrupt(gzip.compress(_good_json())), "damaged gzip"),
    "cut-before-an-event.json": (b'{"traceEvents": [{"ph": "X", "na', "no complete event"),
    "no-rank.json": (b'{"traceEvents": [{"ph": "X", "ts": 1, "dur": 1}]}', "which rank"),
    "negative-rank.json": (
        json.dumps({"distributedInfo": {"rank": -1}, "traceEvents": [_ev()]}).encode(),
        "which rank",
    ),
}

# name -> (file bytes, events kept at least, words of the warning or None)
SALVAGED: dict[str, tuple[bytes, int, str | None]] = {
    "truncated.json.gz": (gzip.compress(_good_json())[:60_000], 100, "truncated gzip stream"),
    "bad-crc.json.gz": (
        (lambda b: b[:-8] + b"\0\0\0\0" + b[-4:])(gzip.compress(_good_json())),
        4000,
        "damaged gzip stream",
    ),
    "truncated.json": (_good_json()[:300_000], 100, "salvaged"),
    "wrong-types.json": (
        _trace(
            [
                _ev(),
                _ev(ts="abc"),
                _ev(dur=None),
                _ev(args=5),
                _ev(name=123),
                _ev(cat=["x"]),
                _ev(ph=["X"]),
                _ev(pid=[1]),
                _ev(tid={"a": 1}),
                7,
                None,
                "str",
                [1, 2],
                _ev(ts=True),
                _ev(dur="-3"),
                _ev(args={"correlation": "x", "stream": [1]}),
                _ev(ts=1e308),
                _ev(dur=-1e300),
            ]
        ),
        6,
        None,
    ),
    "missing-fields.json": (
        _trace([_ev(), {"ph": "X"}, {"name": "a", "ts": 1}, {"ts": 5, "dur": 1, "ph": "X"}, {}]),
        2,
        None,
    ),
}


@pytest.fixture(scope="module")
def ingested(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, subprocess.CompletedProcess[str]]:
    """Every bad file beside a good rank-1 trace, ingested in one real `tracekit` process each
    (in parallel: this runs 20 small ingests)."""
    root = tmp_path_factory.mktemp("bad-inputs")
    procs: dict[str, subprocess.Popen[str]] = {}
    cases = {**{k: v[0] for k, v in ERRORS.items()}, **{k: v[0] for k, v in SALVAGED.items()}}
    for name, data in cases.items():
        d = root / name.replace(".", "_")
        (d / "in").mkdir(parents=True)
        (d / "in" / name).write_bytes(data)
        shutil.copy(GOOD_RANK1, d / "in" / GOOD_RANK1.name)
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "tracekit", "ingest", str(d / "in"), "-o", str(d / "run")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        if len([p for p in procs.values() if p.poll() is None]) >= 4:
            next(iter(p for p in procs.values() if p.poll() is None)).wait()
    out = {}
    for name, p in procs.items():
        stdout, stderr = p.communicate(timeout=120)
        out[name] = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
        out[name].run_dir = root / name.replace(".", "_") / "run"  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_bad_trace_is_one_line_exit_2_and_the_good_rank_is_kept(
    ingested: dict[str, subprocess.CompletedProcess[str]], name: str
) -> None:
    res = ingested[name]
    words = ERRORS[name][1]
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("tracekit: error:")]
    assert len(errors) == 1, res.stderr
    line = errors[0]
    assert name in line  # names the file
    assert words in line  # says what is wrong
    assert any(fix in line for fix in ("pass ", "re-export", "export the trace", "rename"))
    assert "ingested the other 1 file(s)" in line
    assert ranks(res.run_dir) == [1]  # type: ignore[attr-defined]
    assert res.stdout == ""


@pytest.mark.parametrize("name", sorted(SALVAGED))
def test_damaged_trace_keeps_what_is_good(
    ingested: dict[str, subprocess.CompletedProcess[str]], name: str
) -> None:
    res = ingested[name]
    _data, at_least, warning = SALVAGED[name]
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert "RuntimeWarning" not in res.stderr
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("tracekit: warning:")]
    if warning is not None:
        assert len(warnings) == 1, res.stderr
        assert name in warnings[0]
        assert warning in warnings[0]
    else:  # values of the wrong type are skipped quietly (counted in the manifest)
        assert warnings == [], res.stderr
    run_dir: Path = res.run_dir  # type: ignore[attr-defined]
    assert ranks(run_dir) == [0, 1]
    rank0 = sum(pq.read_metadata(f).num_rows for r, f in table_files(run_dir, "events") if r == 0)
    assert rank0 >= at_least


def test_wrong_types_keep_exactly_the_usable_events(
    ingested: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    # of the 18 elements: the first event, dur null (-> 0), args 5 (no args), name 123 ("123"),
    # cat ["x"] (a string), pid [1] / tid {...} (null), dur "-3" (-> 0), odd args, dur -1e300
    # (not a time -> 0) are kept; ts "abc", ts true, ts 1e308 (not times), ph ["X"] (no phase),
    # and the 4 non-objects are dropped
    from tracekit.store.reader import read_table

    events = read_table(ingested["wrong-types.json"].run_dir, "events")  # type: ignore[attr-defined]
    rank0 = events.filter(events["rank"] == 0)
    assert rank0.height == 10
    assert sorted(rank0["dur_ns"].to_list()) == [0, 0, 0, 5000, 5000, 5000, 5000, 5000, 5000, 5000]
    assert "123" in rank0["name"].cast(str).to_list()


def test_missing_fields_keep_exactly_the_complete_events(
    ingested: dict[str, subprocess.CompletedProcess[str]],
) -> None:
    # of the 5: the full event and {ts, dur, ph} are kept; no ts, no ph, and {} are dropped
    from tracekit.store.reader import read_table

    events = read_table(ingested["missing-fields.json"].run_dir, "events")  # type: ignore[attr-defined]
    rank0 = events.filter(events["rank"] == 0)
    assert sorted(rank0["start_ns"].to_list()) == [5000, 1_000_000]
    assert sorted(rank0["dur_ns"].to_list()) == [1000, 5000]


def test_duplicate_ranks_are_refused_and_the_rest_ingested(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for name in ("a_rank0.json.gz", "b_rank0.json.gz"):
        shutil.copy(SAMPLES / "sampled_rank-0.json.gz", tmp_path / "in" / name)
    shutil.copy(GOOD_RANK1, tmp_path / "in")
    res = CliRunner().invoke(cli, ["ingest", str(tmp_path / "in"), "-o", str(tmp_path / "run")])
    assert res.exit_code == 2
    assert isinstance(res.exception, SystemExit)
    line = res.output.strip().splitlines()[-1]
    assert "a_rank0.json.gz and" in line
    assert "both claim rank 0" in line
    assert "--rank N" in line
    assert ranks(tmp_path / "run") == [1]


# -- the store reader: every analysis command --------------------------------------------

COMMANDS = [
    ["summary", "{run}"],
    ["breakdown", "{run}", "--json"],
    ["temporal", "{run}"],
    ["perfetto", "{run}", "-o", "{tmp}/t.pftrace"],
    ["report", "{run}", "-o", "{tmp}/r.html"],
    ["diff", "{run}", "{good}"],
    ["breakeven", "--baseline", "{run}", "--spec", "{good}"],
]


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("good") / "run"
    make_run(run, ranks=2, cycles=3)
    return run


def _newer_schema(run: Path) -> Path:
    """Every Parquet part of rank 1, in every table, stamped with schema version 99."""
    parts = [f for r, f in _all_parts(run) if r == 1]
    for part in parts:
        table = pq.read_table(part)
        meta = dict(table.schema.metadata or {})
        meta[b"tracekit.schema_version"] = b"99"
        pq.write_table(table.replace_schema_metadata(meta), part)
    return parts[0].parents[2]  # the message names a part of it: RUN/store/<table>/rank=1/...


def _garbage_part(run: Path) -> Path:
    for _r, part in _all_parts(run):
        if part.parent.name == "rank=0":
            part.write_bytes(b"PAR1 this is not parquet at all")
    return run


def _empty_part(run: Path) -> Path:
    for _r, part in _all_parts(run):
        if part.parent.name == "rank=0":
            part.write_bytes(b"")
    return run


def _all_parts(run: Path) -> list[tuple[int, Path]]:
    return [
        rf
        for t in ("events", "phases", "cycles", "counters", "manifests")
        for rf in table_files(run, t)
    ]


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (_newer_schema, ("schema version 99", "upgrade tracekit")),
        (_garbage_part, ("not a readable Parquet file", "tracekit merge")),
        (_empty_part, ("not a readable Parquet file", "tracekit merge")),
    ],
    ids=["newer-schema", "garbage-parquet", "empty-parquet"],
)
@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_damaged_store_is_one_line_exit_2_for_every_command(
    good_run: Path, tmp_path: Path, damage: Any, words: tuple[str, ...], args: list[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    part = damage(run)
    argv = [a.format(run=run, tmp=tmp_path, good=good_run) for a in args]
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 2, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)  # not an unexpected exception
    lines = [ln for ln in res.output.splitlines() if ln.startswith("tracekit: error:")]
    assert len(lines) == 1, res.output
    assert str(part) in lines[0]  # names the damaged file
    assert ".parquet" in lines[0]
    for w in words:
        assert w in lines[0]


@pytest.mark.parametrize("args", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_directory_without_a_store_is_one_line_exit_2(
    good_run: Path, tmp_path: Path, args: list[str]
) -> None:
    run = tmp_path / "not-a-run"
    run.mkdir()
    (run / "notes.txt").write_text("hello")
    argv = [a.format(run=run, tmp=tmp_path, good=good_run) for a in args]
    res = CliRunner().invoke(cli, argv)
    assert res.exit_code == 2, (res.output, res.exception)
    assert isinstance(res.exception, SystemExit)
    lines = [ln for ln in res.output.splitlines() if ln.startswith("tracekit: error:")]
    assert len(lines) == 1, res.output
    assert str(run) in lines[0]
    assert "tracekit ingest" in lines[0] or "tracekit merge" in lines[0]


def test_diff_of_two_world_sizes_is_one_line_exit_2(good_run: Path, tmp_path: Path) -> None:
    one = tmp_path / "one-rank"
    make_run(one, ranks=1, cycles=3)
    proc = subprocess.run(
        [sys.executable, "-m", "tracekit", "diff", str(good_run), str(one)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("tracekit: error:")
    assert str(one) in line
    assert "1 rank(s)" in line
    assert "has 2" in line
    assert "same tensor-parallel size" in line
