"""Differential test: the native reader gives the general reader's tables, or declines.

Inputs: the sample traces and the corpus re-written one event per line (the layout the native
reader takes), as written (multi-line Kineto, one-line TraceLens: declined), and hand-made
hostile variants (odd JSON types, args not last, nested or escaped args keys, duplicate keys).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tracekit.store.kineto import BatchStats, fallback, load, native

pytestmark = pytest.mark.skipif(not native.available(), reason="duckdb not installed")

SAMPLES = Path(__file__).resolve().parents[3] / "sample_traces"


def _one_per_line(doc: dict[str, Any], events: list[Any] | None = None) -> bytes:
    meta = {k: v for k, v in doc.items() if k != "traceEvents"}
    evs = doc["traceEvents"] if events is None else events
    head = json.dumps(meta)[:-1] + (", " if meta else "")
    return (
        head + '"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in evs) + "\n]}\n"
    ).encode()


def _compare(path: Path, *, batch: int = 131_072) -> bool:
    """True when the native reader took the file (tables equal), False when it declined."""
    trace = load(path)
    s_fb, s_nat = BatchStats(), BatchStats()
    expected = list(fallback.iter_batches(trace, stats=s_fb, batch_events=batch))
    got = native.read(trace, stats=s_nat, batch_events=batch)
    if got is None:
        assert vars(s_nat) == vars(BatchStats())  # declining leaves the stats alone
        return False
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.schema == e.schema
        for name in e.column_names:
            assert g.column(name).equals(e.column(name)), name
    assert vars(s_nat) == vars(s_fb)
    return True


def _sample_docs() -> list[Path]:
    return sorted(SAMPLES.glob("*/*.json.gz")) + sorted(SAMPLES.glob("h200/*.json.gz"))


@pytest.mark.parametrize("src", _sample_docs(), ids=lambda p: p.parent.name + "/" + p.name)
def test_samples_one_per_line_identical(src: Path, tmp_path: Path) -> None:
    # GIVEN a sample trace re-written one event per line
    doc = json.loads(gzip.decompress(src.read_bytes()))
    path = tmp_path / "t.json"
    path.write_bytes(_one_per_line(doc))
    # THEN the native reader gives the general reader's tables (small batches too); it takes
    # the Kineto samples; the TraceLens ones hold numbers as strings in args ("256"): declined
    taken = "tracelens" not in src.parent.name
    assert _compare(path) is taken
    assert _compare(path, batch=1000) is taken


@pytest.mark.parametrize("src", _sample_docs(), ids=lambda p: p.parent.name + "/" + p.name)
def test_samples_as_written(src: Path) -> None:
    # Kineto's multi-line events and TraceLens' single line are not this layout: declined
    assert not _compare(src)


def test_corpus_one_per_line_identical(corpus: Path, tmp_path: Path) -> None:
    src = corpus / "nccl_parser_config" / "nccl_data.json.gz"  # relative ns, fractional µs
    doc = json.loads(gzip.decompress(src.read_bytes()))
    path = tmp_path / "t.json"
    path.write_bytes(_one_per_line(doc))
    assert _compare(path)


BASE_EVENTS: list[dict[str, Any]] = [
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 7,
        "tid": 8,
        "ts": 1.5,
        "dur": 2.25,
        "args": {"External id": 3, "Input Dims": [[1, 2]], "Ev Idx": 0},
    },
    {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaGraphLaunch",
        "pid": 7,
        "tid": 8,
        "ts": 2.001,
        "dur": 1,
        "args": {"correlation": 11, "cbid": 311},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 3.002,
        "dur": -1,
        "args": {"correlation": 11, "device": 0, "stream": 7, "bytes": 5},
    },
    {
        "ph": "X",
        "cat": "Trace",
        "name": "PyTorch Profiler",
        "pid": "Spans",
        "tid": "12",
        "ts": 0,
        "dur": 9,
    },
    {"ph": "C", "cat": "counter", "name": "mem", "pid": 7, "tid": 8, "ts": 4, "args": {"v": 3}},
    {"ph": "f", "cat": "ac2g", "name": "ac2g", "pid": 7, "tid": 8, "ts": 4, "id": 11},
    {"ph": "i", "name": "Record Window End", "pid": "", "tid": "", "ts": 5.5},
    {
        "ph": "X",
        "cat": "user_annotation",
        "name": "nccl:all_reduce",
        "pid": 7,
        "tid": 8,
        "ts": "bad",
        "dur": 1,
    },
]


def _variant(tmp_path: Path, events: list[Any], *, base: bool = True) -> Path:
    doc: dict[str, Any] = {"schemaVersion": 1}
    if base:
        doc["baseTimeNanoseconds"] = 1_790_857_026_000_000_000
    path = tmp_path / "v.json"
    path.write_bytes(_one_per_line(doc, events))
    return path


def test_hand_made_trace_taken(tmp_path: Path) -> None:
    # GIVEN kineto-typed events (string pids, a string ts -> declined: see below) without it
    events = [e for e in BASE_EVENTS if e["ts"] != "bad"]
    assert _compare(_variant(tmp_path, events))
    assert _compare(_variant(tmp_path, events, base=False))


def _with(i: int, **changes: Any) -> list[Any]:
    events = [dict(e) for e in BASE_EVENTS if e["ts"] != "bad"]
    events[i].update(changes)
    return events


HOSTILE = {
    "string ts": BASE_EVENTS,
    "numeric name": _with(0, name=5),
    "null name": _with(0, name=None),
    "float pid": _with(0, pid=7.0),
    "bool tid": _with(0, tid=True),
    "string correlation": _with(1, args={"correlation": "11"}),
    "float stream": _with(2, args={"stream": 7.5, "correlation": 11}),
    "huge cbid": _with(1, args={"cbid": 2**40}),
    "escaped collective": _with(0, args={"Collective name": 'a"b'}),
    "args null": _with(0, args=None),
    "args a list": _with(0, args=[1, 2]),
    "args then a key": _with(0, extra={"x": 1}),
    "nested args only": [{"ph": "X", "name": "n", "ts": 1, "dur": 1, "meta": {"args": {"a": 1}}}],
    "name args": _with(0, name="args"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_variants_same_or_declined(name: str, tmp_path: Path) -> None:
    events = HOSTILE[name]
    if name == "args then a key":  # a key after args: json.dumps keeps insertion order
        events = [dict(e) for e in events]
        first = events[0]
        events[0] = {k: v for k, v in first.items() if k != "extra"} | {"extra": first["extra"]}
    _compare(_variant(tmp_path, events))  # equal tables whenever it does not decline


def test_escaped_args_key_declined(tmp_path: Path) -> None:
    text = _one_per_line({"schemaVersion": 1}, [dict(BASE_EVENTS[0])]).replace(
        b'"args"', b'"\\u0061rgs"'
    )
    path = tmp_path / "e.json"
    path.write_bytes(text)
    assert not _compare(path)


def test_duplicate_key_declined(tmp_path: Path) -> None:
    text = _one_per_line({"schemaVersion": 1}, [dict(BASE_EVENTS[0])]).replace(
        b'"ph": "X"', b'"ph": "X", "ph": "i"'
    )
    path = tmp_path / "d.json"
    path.write_bytes(text)
    assert not _compare(path)


def test_two_events_on_one_line_declined(tmp_path: Path) -> None:
    text = _one_per_line({"schemaVersion": 1}, [dict(e) for e in BASE_EVENTS[:3]])
    text = text.replace(b"},\n{", b"}, {", 1)
    path = tmp_path / "two.json"
    path.write_bytes(text)
    assert not _compare(path)


def test_table_type(tmp_path: Path) -> None:
    events = [e for e in BASE_EVENTS if e["ts"] != "bad"]
    got = native.read(load(_variant(tmp_path, events)), stats=BatchStats(), batch_events=10)
    assert got is not None
    assert isinstance(got[0], pa.Table)
    # the `args` text is the object as written, newline-terminated
    assert got[0].column("args")[0].as_py() == json.dumps(events[0]["args"]) + "\n"
