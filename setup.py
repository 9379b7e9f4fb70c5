"""The optional C extension of the collectors' hot path; everything else is in pyproject.toml.

`optional=True`: where it cannot be built (no C compiler, no Python headers) the install goes
on without it and the recorder uses its Python path, which writes the same records
(collectors/recording/native.py says which one runs).
"""

import sys

from setuptools import Extension, setup

SRC = "collectors/recording"

setup(
    ext_modules=[
        Extension(
            "tracekit.collectors.recording._native",
            sources=[
                f"{SRC}/_native_module.c",
                f"{SRC}/_native_hotpath.c",
                f"{SRC}/_native_cuda.c",
            ],
            depends=[f"{SRC}/_native.h"],
            extra_compile_args=["-O2"],
            libraries=["dl"] if sys.platform.startswith("linux") else [],
            optional=True,
        )
    ]
)
