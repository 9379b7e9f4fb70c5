"""Load: ingest memory is bounded by one file, not by the number of ranks.

A small-scale check that runs in CI (the full-size figures, 8 ranks of ~93 MB for ingest and
8 ranks x 1,000 cycles for analysis, come from `bench/ingest_vs_hta.py` and
`bench/analysis_scale.py`, in docs/BENCHMARKS.md): ~21 MB ranks ingested 2 and then 5 at a time,
in one process (`--jobs 1`), peak at about the same RSS, and every rank is complete.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq

from tracekit.store.reader import table_files

SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "trace_filter_2rank"
REPEAT = 12  # ~21 MB of JSON a rank
MEASURE = (
    "import resource, subprocess, sys; "
    "rc = subprocess.run(sys.argv[1:]).returncode; "
    "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def _write_rank(path: Path, rank: int) -> int:
    doc = json.loads(gzip.decompress((SAMPLE / "sampled_rank-0.json.gz").read_bytes()))
    doc["traceEvents"] = doc["traceEvents"] * REPEAT
    doc["distributedInfo"] = {**(doc.get("distributedInfo") or {}), "rank": rank}
    path.write_text(json.dumps(doc))
    return len(doc["traceEvents"])


def _ingest_peak_kib(files: list[Path], out: Path) -> int:
    cmd = [sys.executable, "-m", "tracekit", "ingest", *map(str, files), "-o", str(out), "-j", "1"]
    res = subprocess.run(
        [sys.executable, "-c", MEASURE, *cmd], capture_output=True, text=True, check=False
    )
    rc, peak = res.stdout.split()
    assert rc == "0", res.stderr
    return int(peak)


def test_ingest_peak_memory_does_not_grow_with_ranks(tmp_path: Path) -> None:
    # GIVEN 5 ranks of ~21 MB of JSON each
    files = [tmp_path / f"rank{r}.json" for r in range(5)]
    n = [_write_rank(f, r) for r, f in enumerate(files)]
    size_kib = files[0].stat().st_size // 1024
    assert size_kib > 15_000
    # WHEN 2 ranks, then all 5, are ingested in one process each
    two = _ingest_peak_kib(files[:2], tmp_path / "two")
    five = _ingest_peak_kib(files, tmp_path / "five")
    print(f"peak RSS: 2 ranks {two} KiB, 5 ranks {five} KiB")
    # THEN 5 ranks peak within 10% (+ 20 MB) of 2: one rank at a time is held (the first
    # rank's peak is lower, the allocator keeps what the second one grew, then it is flat)
    margin = two * 0.10 + 20_000
    assert five < two + margin, (two, five)
    # and keeping even the raw bytes of the 3 extra ranks would exceed that margin
    assert 3 * size_kib > margin
    # and every rank is complete (the trace's kept events, all of them)
    rows = {r: pq.read_metadata(f).num_rows for r, f in table_files(tmp_path / "five", "events")}
    assert sorted(rows) == [0, 1, 2, 3, 4]
    assert len(set(rows.values())) == 1
    assert rows[0] > 0.9 * n[0]
