"""tracekit: where each speculative-decoding cycle's time goes, on every rank."""

from __future__ import annotations

from tracekit._checkout import map_checkout_subpackages
from tracekit._version import __version__
from tracekit.errors import TracekitError

# A source checkout keeps `collectors/` and `analyzers/` beside `tracekit/`; an install maps them
# into the package (pyproject's package-dir). Map them here too, so the checkout imports as it is.
map_checkout_subpackages(__path__)

__all__ = ["TracekitError", "__version__"]
