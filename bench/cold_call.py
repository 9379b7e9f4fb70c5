"""A recorded call made cold, for a cache simulator: what one call touches (issue 25).

    N=300 valgrind --tool=callgrind --cache-sim=yes --LL=2097152,16,64 \\
        --toggle-collect=pc_call --callgrind-out-file=cg.on.300 python bench/cold_call.py on
    (the same with N=100, and with `off`; per call: (N=300 minus N=100) / 200, on minus off)

The demo's baseline call shape (a method mapped as a phase that is also the cycle target, on
the native hot path, torch imported), called N times with a 4 MB buffer written between calls
so that each call starts with the caches holding none of its lines, as a call right after a long
device wait does on the H200 (docs/BENCHMARKS.md, "seventh session"). `--toggle-collect`
counts only what runs inside the native call: its instructions and the cache lines it misses
are the call's footprint. `on` records, `off` pauses recording (the wrapper's pass-through).
Figures: docs/BENCHMARKS.md, "eighth session".
"""

from __future__ import annotations

import os
import sys
import tempfile
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]


def main(argv: list[str]) -> int:
    import numpy as np
    import torch  # noqa: F401  (the compile check runs as in a program that imported torch)

    from tracekit.collectors.phasemap import Site, Target
    from tracekit.collectors.recorder import Recorder, RecorderConfig
    from tracekit.collectors.wrappers import install

    on = (argv[:1] or ["on"])[0] == "on"
    calls = int(os.environ.get("N", "200"))
    buf = np.ones(4 << 20 >> 3)  # 4 MB: twice the simulated last-level cache
    rec = Recorder(
        RecorderConfig(
            raw_dir=Path(tempfile.mkdtemp()), flush_records=10**8, flush_seconds=1e6,
            gpu_sample=10**6,
        )
    )  # fmt: skip
    mod = types.ModuleType("tk_cold_call")

    class Decoder:
        def step(self) -> int:
            return 0

    mod.Decoder = Decoder  # type: ignore[attr-defined]
    target = Target.parse(f"{mod.__name__}:Decoder.step")
    install(mod, Site(target=target, phase="decode", cycle=True), rec)
    dec = Decoder()
    for _ in range(3):  # the site's first calls (generic path)
        dec.step()
    rec.set_recording(on)
    for _ in range(calls):
        buf[::8] += 1.0  # every cache line of the buffer written
        dec.step()
    print(f"{calls} calls, recording {'on' if on else 'off'}: {rec.records} rows", file=sys.stderr)
    rec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
