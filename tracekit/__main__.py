from __future__ import annotations

from tracekit.cli import main

if __name__ == "__main__":
    # main() returns the exit code of a handled error (standalone_mode=False): pass it on.
    raise SystemExit(main())
