"""`python -m tracekit.demo`: the demo server (see tracekit/demo/server.py)."""

from __future__ import annotations

import sys

from tracekit.demo.server import main

if __name__ == "__main__":
    sys.exit(main())
