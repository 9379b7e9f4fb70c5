"""The columnar reader (`tracekit.store.kineto.native`, the C scanner `_kscan`) against the
msgspec reader (`fallback`): identical tables, stats, metadata and warnings on hand-built
traces, on the cases the scanner must decline (escapes, other JSON types, duplicate keys,
damage), and on the sample traces; which path read each file is checked, so both are exercised.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

from tests.reliability.test_reliability_fuzz import mutated, tops
from tests.unit.store._traces import cpu, kernel, runtime, trace
from tracekit.errors import TracekitError
from tracekit.store import kineto
from tracekit.store.kineto import BatchStats, ReadBuffer, native
from tracekit.store.writer import conform

pytestmark = pytest.mark.skipif(native._kscan is None, reason="the _kscan extension is not built")

EVENTS = [
    cpu("aten::mm", "10.000", "5.000"),
    runtime("cudaLaunchKernel", "11.000", "2.000", 42),
    kernel("gemm", "20.500", "3.250", 42),
    runtime("cudaGraphLaunch", "30.000", "1.000", 43),
    kernel("graph_kernel", "31.000", "0.500", 43),
    {"ph": "C", "cat": "cpu", "name": "mem", "pid": 1, "tid": 2, "ts": 12, "args": {"b": 5}},
    {"ph": "i", "name": "mark", "pid": "Spans", "tid": "12", "ts": "40.000"},
    {"ph": "X", "cat": None, "name": "no cat", "pid": 1, "tid": 1, "ts": 41, "dur": -3},
    {"ph": "X", "name": "no ts", "pid": 1, "tid": 1, "dur": 1},
    {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "x"}},
    {
        "ph": "X",
        "cat": "user_annotation",
        "name": "ünïcode ☃",
        "pid": 1,
        "tid": 1,
        "ts": 1.5,
        "dur": 2,
        "args": {
            "Collective name": "allreduce",
            "dtype": "Float",
            "In msg nelems": 1024,
            "Group size": 8,
            "Process Group Name": "0",
            "cbid": 2**40,
            "bytes": None,
            "nested": {"a": [1, 2.5e3, 's"q', True, None]},
        },
    },
]


def _write(path: Path, doc: dict[str, Any], *, escapes: bool = False) -> Path:
    """As `_traces.write`, with UTF-8 text unescaped (as kineto writes it); `escapes`: the
    `\\uXXXX` written in the doc's strings become JSON escapes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    if escapes:
        text = text.replace("\\\\u", "\\u")
    path.write_bytes(re.sub(r'"(ts|dur)": "(-?[0-9.eE+-]+)"', r'"\1": \2', text).encode())
    return path


def _plain(tables: list[pa.Table]) -> pa.Table | None:
    """The batches as one table, dictionary columns decoded (chunking differs by design)."""
    if not tables:
        return None
    t = pa.concat_tables([conform("events", x) for x in tables])
    cols = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in t.columns]
    return pa.Table.from_arrays([c.combine_chunks() for c in cols], names=t.column_names)


def _read(path: Path, *, use_native: bool, batch: int | None = None) -> dict[str, Any]:
    if use_native:
        trace_ = kineto.load(path)
    else:
        data, warning = kineto.read_bytes(path)
        trace_ = kineto.split_trace(path, data, warning)
    split_native = trace_.native is not None
    stats = BatchStats()
    table = _plain(list(kineto.iter_batches(trace_, stats=stats, batch_events=batch)))
    return {
        "table": table,
        "stats": stats,
        "meta": {k: bytes(v) for k, v in trace_.meta.items()},
        "warnings": trace_.warnings,
        "salvaged": trace_.salvaged,
        "split_native": split_native,
        "read_native": trace_.native is not None,  # reset when the scanner declined
    }


def _same(path: Path, *, batch: int | None = None) -> dict[str, Any]:
    """Both readers on `path`: everything equal. Returns the columnar run."""
    a = _read(path, use_native=True, batch=batch)
    b = _read(path, use_native=False, batch=batch)
    for key in ("stats", "meta", "warnings", "salvaged"):
        assert a[key] == b[key], key
    if a["table"] is None or b["table"] is None:
        assert a["table"] is b["table"]
    else:
        assert a["table"].equals(b["table"]), a["table"].to_pylist()[:3]
    return a


def test_the_scanner_reads_a_typed_trace_exactly(tmp_path: Path) -> None:
    # GIVEN a relative-time trace with CPU ops, launches, kernels, a graph launch, a counter,
    # string pids, a null cat, a negative duration, a row without ts, unicode, typed args
    run = _same(_write(tmp_path / "t.json", trace(EVENTS)))
    # THEN the columnar reader read it (no decline) and the known answers hold
    assert run["split_native"]
    assert run["read_native"]
    t = run["table"]
    rows = {r["name"]: r for r in t.to_pylist()}
    assert rows["gemm"]["start_ns"] == 1_790_857_026_000_000_000 + 20_500
    assert rows["gemm"]["dur_ns"] == 3_250
    assert rows["gemm"]["device"] == 0
    assert rows["graph_kernel"]["graph_launched"] is True
    assert rows["gemm"]["graph_launched"] is False
    assert rows["mem"]["value"] == 5.0
    assert rows["mark"]["pid"] is None
    assert rows["mark"]["tid"] == 12
    assert rows["no cat"]["cat"] is None
    assert rows["no cat"]["dur_ns"] == 0
    assert "no ts" not in rows
    assert "process_name" not in rows
    u = rows["ünïcode ☃"]
    assert (u["collective"], u["dtype"], u["msg_nelems"], u["group_size"]) == (
        "allreduce",
        "Float",
        1024,
        8,
    )
    assert u["cbid"] is None  # beyond int32
    assert json.loads(u["args"])["nested"]["a"][2] == 's"q'
    assert rows["cudaLaunchKernel"]["args"] is None  # covered by typed columns
    assert run["stats"].negative_dur == 1
    assert run["stats"].skipped == 1


@pytest.mark.parametrize("batch", [1, 2, 3, 1000])
def test_batches_of_any_size_give_the_same_rows(tmp_path: Path, batch: int) -> None:
    run = _same(_write(tmp_path / "t.json", trace(EVENTS)), batch=batch)
    assert run["read_native"]


# Inputs the scanner declines: the msgspec reader reads them (its own rules), same result.
DECLINED = {
    "escaped name": {"ph": "X", "name": "a\\u0062", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    "escaped key": {"p\\u0068": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    "float pid": {"ph": "X", "name": "f", "pid": 1.0, "tid": 1, "ts": 1, "dur": 1},
    "bool ts": {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": True, "dur": 1},
    "string ts": {"ph": "X", "name": "s", "pid": 1, "tid": 1, "ts": "5 ", "dur": 1},
    "null name": {"ph": "X", "name": None, "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    "string stream": {"ph": "X", "name": "k", "pid": 1, "tid": 1, "ts": 1, "args": {"stream": "7"}},
    "float correlation": {"ph": "X", "name": "k", "ts": 1, "args": {"correlation": 7.0}},
    "number dtype": {"ph": "X", "name": "k", "ts": 1, "args": {"dtype": 5}},
    "args a list": {"ph": "X", "name": "k", "ts": 1, "args": [1]},
    "huge int": {"ph": "X", "name": "k", "ts": 1, "args": {"bytes": 2**70}},
    "huge ts": {"ph": "X", "name": "k", "ts": 2**60, "dur": 1},
    "lone surrogate": {"ph": "X", "name": "k", "ts": 1, "args": {"x": "\\ud800"}},
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_declined_inputs_read_as_the_msgspec_reader_reads_them(tmp_path: Path, case: str) -> None:
    run = _same(_write(tmp_path / "t.json", trace([*EVENTS, DECLINED[case]]), escapes=True))
    assert not run["read_native"]


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},]}',  # trailing comma
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}',  # cut
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 01, "dur": 1}]}',  # bad number
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}], "x": [1]}',  # array after
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1}], "traceEvents": []}',  # duplicate
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "ts": 2}]}',  # duplicate event key
        '{"traceEvents": [1, {"ph": "X", "name": "a", "ts": 1}]}',  # not an object
        '{"traceEvents": [{"ph": "X", "name": "a", "ts": 1} {"ph": "X", "ts": 2}]}',  # no comma
        '{"traceEvents": [{"ph": "X" "name": "a", "ts": 1}]}',  # no comma in an event
        '{"traceEvents": [{"ph": "X", "args": {"a": 1 "b": 2}, "ts": 1}]}',  # nor in its args
        '{"traceEvents": [{"ph": "C", "name": "c", "ts": 1}]}',  # a counter without args
        '{"traceEvents": [{"ph": "X", "name": "a\\u00e9\\n", "ts": 1}]} x',  # trailing data
        '{"a": {"b": ]}, "traceEvents": []}',
        '{"traceEvents": [{"ph": "X", "name": "\xff", "ts": 1}]}',  # not UTF-8 (latin-1 below)
    ],
)
def test_odd_and_damaged_files_end_as_the_msgspec_reader_ends_them(
    tmp_path: Path, text: str
) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(text.encode("latin-1"))
    got, expected = _outcome(path, use_native=True), _outcome(path, use_native=False)
    if isinstance(expected, str):  # the same one-line error from both
        assert got == expected
        return
    assert isinstance(got, dict)
    for key in ("stats", "meta", "warnings", "salvaged"):
        assert got[key] == expected[key]
    assert (got["table"] is None) == (expected["table"] is None)
    if got["table"] is not None:
        assert got["table"].equals(expected["table"])


def _outcome(path: Path, *, use_native: bool) -> dict[str, Any] | str:
    try:
        return _read(path, use_native=use_native)
    except TracekitError as exc:
        return f"{type(exc).__name__}: {exc}"


def test_a_decline_after_batches_restarts_the_caller(tmp_path: Path) -> None:
    # GIVEN a file whose last event the scanner declines (an escaped name), read in 1-event
    # batches with a restart callback (no graph launch: its pre-pass would decline at once)
    plain = [e for e in EVENTS if "Graph" not in str(e["name"])]
    doc = trace([*plain, DECLINED["escaped name"]])
    path = _write(tmp_path / "t.json", doc, escapes=True)
    got: list[pa.Table] = []
    restarts: list[int] = []

    def restart() -> None:
        restarts.append(len(got))
        got.clear()

    stats = BatchStats()
    t = kineto.load(path)
    for table in kineto.iter_batches(t, stats=stats, batch_events=1, restart=restart):
        got.append(table)
    # THEN the caller was told once, after the scanner's batches, and kept the other reader's
    assert len(restarts) == 1
    assert restarts[0] > 0
    b = _read(path, use_native=False)
    assert _plain(got) is not None
    assert _plain(got).equals(b["table"])
    assert stats == b["stats"]


def test_a_read_buffer_serves_files_in_turn(tmp_path: Path) -> None:
    big = _write(tmp_path / "big.json", trace(EVENTS * 20))
    small = _write(tmp_path / "small.json", trace(EVENTS[:2]))
    buffer = ReadBuffer()
    for path in (big, small, big):
        t = kineto.load(path, buffer)
        assert t.native is not None
        table = _plain(list(kineto.iter_batches(t, stats=BatchStats())))
        assert table is not None
        assert table.equals(_read(path, use_native=False)["table"])


def test_sample_traces_read_alike(sample_traces: Path) -> None:
    files = [p for p in sorted(sample_traces.rglob("*.json.gz")) if "kineto" in p.name][:12]
    assert files
    for path in files:
        assert _same(path)["read_native"], path


def test_ingest_writes_the_same_store_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN two ranks, ingested by two worker processes (each with its read buffer)
    import polars as pl

    from tracekit.store.ingest import ingest

    for r in (0, 1):
        _write(tmp_path / "in" / f"rank{r}.json", trace(EVENTS * (r + 1), rank=r))
    stores = []
    for flag in ("1", "0"):
        monkeypatch.setenv("TRACEKIT_KINETO_NATIVE", flag)
        out = tmp_path / f"run{flag}"
        result = ingest([tmp_path / "in"], out, jobs=2)
        assert result.ranks == [0, 1]
        stores.append(
            {
                table: pl.read_parquet(out / "store" / table / "*" / "*.parquet")
                .sort(pl.all())
                .to_dicts()
                for table in ("events", "manifests")
            }
        )
    # THEN the columnar and the msgspec readers wrote the same rows
    assert stores[0]["events"] == stores[1]["events"]
    assert stores[0]["manifests"] == stores[1]["manifests"]


def _outcomes_agree(tmp: Path, data: bytes) -> None:
    path = tmp / "t.json"
    path.write_bytes(data)
    got, expected = _outcome(path, use_native=True), _outcome(path, use_native=False)
    if isinstance(got, str) or isinstance(expected, str):
        assert got == expected
        return
    for key in ("stats", "meta", "warnings", "salvaged", "table"):
        g, e = got[key], expected[key]
        assert g.equals(e) if isinstance(g, pa.Table) else g == e, key


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=tops)
def test_differential_fuzz_trace_shaped_json(tmp_path: Path, doc: dict[str, Any]) -> None:
    # hostile trace-shaped documents (the reliability fuzz's): both readers agree on each
    _outcomes_agree(tmp_path, json.dumps(doc, ensure_ascii=False).encode())


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=mutated())
def test_differential_fuzz_damaged_real_traces(tmp_path: Path, case: tuple[bytes, str]) -> None:
    data, suffix = case
    if suffix == ".json":  # gzip input goes to the msgspec reader alone
        _outcomes_agree(tmp_path, data)
