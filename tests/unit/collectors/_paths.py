"""The two hot paths as a test parameter: `None` (the Python path) and the extension module
(skipped where it did not load), for code that takes `native=` (fileops, the doorbell)."""

from __future__ import annotations

import pytest

from tracekit.collectors.recording.native import NATIVE

NATIVE_OR_PYTHON = [
    pytest.param(None, id="python"),
    pytest.param(
        NATIVE,
        id="native",
        marks=pytest.mark.skipif(NATIVE is None, reason="native extension not loaded"),
    ),
]
