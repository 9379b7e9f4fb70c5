"""Coverage-guided fuzzing of the trace reader with atheris (libFuzzer).

    python tests/reliability/atheris_reader.py [CORPUS_DIR] -max_total_time=10

Each input is written as one trace file (gzip when it starts with the gzip magic) and read by
`_ingest_one`, what a `tracekit ingest` worker runs on a file. A `TracekitError` is the reader
refusing the input (expected); any other exception is a crash, and libFuzzer exits non-zero with
the input saved as `crash-*`. `test_reliability_fuzz.py` runs this for a few seconds in CI.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["tracekit"]):
    # the modules `_ingest_one` imports when it runs, imported here to be instrumented
    import tracekit.store.kineto
    import tracekit.store.manifest_rows
    import tracekit.store.ranks  # noqa: F401
    from tracekit.errors import TracekitError
    from tracekit.store.ingest import _ingest_one, _Task

WORK = Path(tempfile.mkdtemp(prefix="tracekit-atheris-"))
STAGING = WORK / "staging"


def one_input(data: bytes) -> None:
    suffix = ".json.gz" if data[:2] == b"\x1f\x8b" else ".json"
    path = WORK / f"rank0{suffix}"
    path.write_bytes(data)
    shutil.rmtree(STAGING, ignore_errors=True)
    STAGING.mkdir()
    out = _ingest_one(_Task(0, path, STAGING, None))
    err = out.error
    if err is not None and (not isinstance(err, TracekitError) or "\n" in str(err)):
        raise AssertionError(f"bad error: {err!r}")


def main() -> None:
    try:
        atheris.Setup(sys.argv, one_input)
        atheris.Fuzz()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


if __name__ == "__main__":
    main()
