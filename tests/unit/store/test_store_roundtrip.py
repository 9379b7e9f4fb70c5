"""Property: generated traces survive ingest exactly (hypothesis)."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.store.ingest import ingest
from tracekit.store.reader import read_table

# Relative ts: kineto's 3-month window is < 2^43 µs; exact decimals with 3 digits.
ns_rel = st.integers(min_value=0, max_value=(2**43 - 1) * 1000)
ns_dur = st.integers(min_value=0, max_value=10**12)
us_abs = st.integers(min_value=1_600_000_000_000_000, max_value=1_800_000_000_000_000)
names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=30
)
cats = st.sampled_from(
    ["kernel", "cpu_op", "cuda_runtime", "user_annotation", "gpu_memcpy", "python_function"]
)


def _fmt(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


@st.composite
def events(draw: Any, *, relative: bool) -> list[dict[str, Any]]:
    out = []
    for i in range(draw(st.integers(min_value=1, max_value=25))):
        cat = draw(cats)
        ts = draw(ns_rel) if relative else draw(us_abs) * 1000
        ev: dict[str, Any] = {
            "ph": "X",
            "cat": cat,
            "name": draw(names),
            "pid": draw(st.integers(0, 2**31)),
            "tid": draw(st.integers(0, 2**31)),
            "ts": ts,
            "dur": draw(ns_dur) if relative else draw(st.integers(0, 10**6)) * 1000,
        }
        args: dict[str, Any] = {"correlation": i}
        if cat in ("kernel", "gpu_memcpy"):
            args["stream"] = draw(st.integers(0, 1000))
            args["device"] = draw(st.integers(0, 7))
        if draw(st.booleans()):
            args["External id"] = draw(st.integers(0, 2**40))
        ev["args"] = args
        out.append(ev)
    return out


def _write(path: Path, evs: list[dict[str, Any]], *, relative: bool, base: int) -> None:
    # Numbers are written as kineto does: "123.456" for relative ns, integer µs for old traces.
    parts = []
    for e in evs:
        ts = _fmt(e["ts"]) if relative else str(e["ts"] // 1000)
        dur = _fmt(e["dur"]) if relative else str(e["dur"] // 1000)
        body = {k: v for k, v in e.items() if k not in ("ts", "dur")}
        text = json.dumps(body, ensure_ascii=False)
        parts.append(text[:-1] + f', "ts": {ts}, "dur": {dur}}}')
    head = {"schemaVersion": 1, "distributedInfo": {"rank": 0}}
    if relative:
        head["baseTimeNanoseconds"] = base
    doc = json.dumps(head)[:-1] + ', "traceEvents": [' + ",\n".join(parts) + "]}"
    path.write_text(doc, encoding="utf-8")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), relative=st.booleans(), base=st.integers(0, 2**62))
def test_roundtrip(data: st.DataObject, relative: bool, base: int) -> None:
    evs = data.draw(events(relative=relative))
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "t.json"
        _write(f, evs, relative=relative, base=base)
        ingest([f], Path(tmp) / "run", jobs=1)
        df = read_table(Path(tmp) / "run", "events")
    offset = base if relative else 0
    expected = sorted(
        (
            e["name"],
            e["cat"],
            e["ts"] + offset,
            e["dur"],
            e["pid"],
            e["tid"],
            e["args"].get("stream"),
            e["args"]["correlation"],
            e["args"].get("External id"),
        )
        for e in evs
    )
    got = sorted(
        zip(
            df["name"].cast(pl.String).to_list(),
            df["cat"].cast(pl.String).to_list(),
            df["start_ns"].to_list(),
            df["dur_ns"].to_list(),
            df["pid"].to_list(),
            df["tid"].to_list(),
            df["stream"].to_list(),
            df["correlation"].to_list(),
            df["external_id"].to_list(),
        )
    )
    assert got == expected
