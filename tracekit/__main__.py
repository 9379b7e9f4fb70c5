from __future__ import annotations

from tracekit.cli import main

if __name__ == "__main__":
    main()
