"""The optional C extensions; everything else is in pyproject.toml.

- `tracekit.collectors.recording._native`: the collectors' hot path; without it the recorder
  uses its Python path, which writes the same records (collectors/recording/native.py says
  which one runs).
- `tracekit.store.kineto._kscan`: the columnar Kineto scanner of `tracekit ingest`; without it
  ingest reads every file with the msgspec reader (same tables, about 3x the CPU time).

`optional=True`: where one cannot be built (no C compiler, no Python headers) the install goes
on without it. `make test` checks that both loaded (CI tests the native paths) and runs the
collectors' tests again on the Python path.
"""

import sys

from setuptools import Extension, setup

SRC = "collectors/recording"
KSCAN = "tracekit/store/kineto"

setup(
    ext_modules=[
        Extension(
            "tracekit.collectors.recording._native",
            sources=[
                f"{SRC}/_native_module.c",
                f"{SRC}/_native_hot.c",
                f"{SRC}/_native_hotpath.c",
                f"{SRC}/_native_cuda.c",
                f"{SRC}/_native_gpu.c",
                f"{SRC}/_native_io.c",
                f"{SRC}/_native_replay.c",
            ],
            depends=[f"{SRC}/_native.h"],
            extra_compile_args=["-O2"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        ),
        Extension(
            "tracekit.store.kineto._kscan",
            sources=[f"{KSCAN}/_kscan.c"],
            depends=[
                f"{KSCAN}/_kscan_json.h",
                f"{KSCAN}/_kscan_intern.h",
                f"{KSCAN}/_kscan_batch.h",
                f"{KSCAN}/_kscan_event.h",
            ],
            optional=True,
        ),
    ]
)
