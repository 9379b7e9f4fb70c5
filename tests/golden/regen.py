"""Regenerate the golden outputs under tests/golden/ from the sample traces.

    .venv/bin/python tests/golden/regen.py            # write them (replaces the old ones)
    .venv/bin/python tests/golden/regen.py --check    # only say which differ (exit 1 if any)
    .venv/bin/python tests/golden/regen.py --keep /tmp/pf   # also keep the .pftrace files

Run it only when an output changes on purpose, and say why in the commit message:
tests/golden/test_golden.py fails on any other change of these bytes.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.golden.cases import GOLDEN, produce, saved  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--check", action="store_true", help="compare only, write nothing")
    ap.add_argument("--keep", type=Path, help="also write the Perfetto traces into this folder")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tracekit-golden-") as tmp:
        new = produce(Path(tmp), keep=args.keep, log=lambda line: print(f"  {line}", flush=True))
    old = saved()
    changed = sorted(k for k in new if k not in old or old[k].read_bytes() != new[k])
    gone = sorted(set(old) - set(new))
    for k in changed:
        print(f"{'changed' if k in old else 'new'}: {k}")
    for k in gone:
        print(f"no longer produced: {k}")
    if args.check:
        return 1 if changed or gone else 0
    for k in gone:
        old[k].unlink()
    for k in changed:
        path = GOLDEN / k
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(new[k])
    print(f"{len(new)} golden files in {GOLDEN} ({len(changed)} written, {len(gone)} removed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
