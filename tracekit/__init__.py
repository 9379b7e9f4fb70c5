"""tracekit: where each speculative-decoding cycle's time goes, on every rank."""

from __future__ import annotations

from tracekit._version import __version__
from tracekit.errors import TracekitError

__all__ = ["TracekitError", "__version__"]
