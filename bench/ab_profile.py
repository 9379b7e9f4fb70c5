"""Where light mode's cost goes inside one process: the program's thread profiled by recording state.

Runs CMD so that every Python process of its tree that `tracekit launch` instruments (the
demo's spawned ranks too) has `Recorder.set_recording` wrapped: each switch moves the calling
thread's cProfile to the profile of the new state: an A/B program (the demo's
`--ab-blocks`, bench/hf_static_compile.py's `--ab`) then leaves one profile of its "on" blocks
and one of its "off" blocks, with the same number of blocks in each. At exit: both profiles as
pstats files under OUT/pid-N/, and on stderr (and OUT/pid-N/diff.json) the functions whose own time differs
most between the states, with their call counts in each.

    tracekit launch --phases P.toml -- python bench/ab_profile.py --out OUT [--skip 1] \\
        -- python bench/hf_static_compile.py --ab ...

cProfile costs each Python call a few hundred nanoseconds, so absolute times are inflated; what
this answers is which functions run only (or more often) while recording, and how often a
cycle. Only the switching thread is profiled: a flush thread's work shows as the time it takes
from this one, not as its own functions.
"""

from __future__ import annotations

import argparse
import atexit
import cProfile
import json
import marshal
import os
import sys
from pathlib import Path
from typing import Any

Key = tuple[str, int, str]
ENV_OUT, ENV_SKIP, ENV_TOP = "AB_PROFILE_OUT", "AB_PROFILE_SKIP", "AB_PROFILE_TOP"


class StateProfiles:
    """Per state ("on", "off"), the merged profiles of its complete blocks: `switch(on)` ends
    the running block (its profile is added to its state's) and starts one in the new state,
    once `skip` switches have passed (the first blocks compile and warm up). The block still
    running at the exit is left out (it holds the exit's work, not a block's)."""

    def __init__(self, skip: int) -> None:
        self.stats: dict[bool, dict[Key, list[Any]]] = {True: {}, False: {}}
        self.blocks = {True: 0, False: 0}
        self.skip = skip
        self.switches = 0
        self.running: tuple[bool, cProfile.Profile] | None = None

    def switch(self, on: bool) -> None:
        self.stop(keep=True)
        self.switches += 1
        if self.switches > self.skip:
            prof = cProfile.Profile()
            self.running = (on, prof)
            prof.enable()

    def stop(self, *, keep: bool) -> None:
        if self.running is None:
            return
        on, prof = self.running
        prof.disable()
        self.running = None
        if not keep:
            return
        prof.create_stats()
        self.blocks[on] += 1
        into = self.stats[on]
        for key, (cc, nc, tt, ct, callers) in prof.stats.items():
            have = into.setdefault(key, [0, 0, 0.0, 0.0, {}])
            have[0] += cc
            have[1] += nc
            have[2] += tt
            have[3] += ct
            for caller, c in callers.items():  # (cc, nc, tt, ct) per caller
                prev = have[4].get(caller)
                have[4][caller] = c if prev is None else tuple(x + y for x, y in zip(prev, c))


def install(profiles: StateProfiles) -> None:
    """Wrap the recorder class's `set_recording` (instances look it up at call time)."""
    from tracekit.collectors.recorder import Recorder

    orig = Recorder.set_recording

    def set_recording(self: Any, on: bool) -> Any:
        profiles.switch(bool(on))  # before: the switch itself is counted in the new state
        return orig(self, on)

    Recorder.set_recording = set_recording  # type: ignore[method-assign]


def _label(key: Key) -> str:
    file, line, func = key
    if file == "~":
        return func
    parts = Path(file).parts
    short = "/".join(parts[-3:]) if len(parts) > 3 else file
    return f"{short}:{line}({func})"


def diff(profiles: StateProfiles, top: int) -> dict[str, Any]:
    """Per function: own time and calls in each state, ordered by own time on minus off."""
    stats = profiles.stats
    empty = [0, 0, 0.0, 0.0, {}]
    rows = []
    for key in set(stats[True]) | set(stats[False]):
        a, b = stats[True].get(key, empty), stats[False].get(key, empty)
        rows.append(
            {
                "function": _label(key),
                "on_calls": a[1],
                "off_calls": b[1],
                "on_own_ms": a[2] * 1e3,
                "off_own_ms": b[2] * 1e3,
                "on_cum_ms": a[3] * 1e3,
                "off_cum_ms": b[3] * 1e3,
                "on_callers": sorted(_label(c) for c in a[4])[:6],
            }
        )
    rows.sort(key=lambda r: r["on_own_ms"] - r["off_own_ms"], reverse=True)
    total = {on: sum(v[2] for v in stats[on].values()) * 1e3 for on in (True, False)}
    return {
        "blocks": {"on": profiles.blocks[True], "off": profiles.blocks[False]},
        "own_ms_total": {"on": total[True], "off": total[False]},
        "top": rows[:top],
        "only_on": [r for r in rows if r["off_calls"] == 0 and r["on_calls"] > 0][:top],
    }


def report(profiles: StateProfiles, out: Path, top: int) -> None:
    profiles.stop(keep=False)
    out.mkdir(parents=True, exist_ok=True)
    result = diff(profiles, top)
    for on, stats in profiles.stats.items():  # pstats' file format: a marshalled stats dict
        data = {k: (v[0], v[1], v[2], v[3], v[4]) for k, v in stats.items()}
        (out / f"{'on' if on else 'off'}.pstats").write_bytes(marshal.dumps(data))
    (out / "diff.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(
        f"ab_profile: pid {os.getpid()}: blocks on {result['blocks']['on']} off "
        f"{result['blocks']['off']}; own time on {result['own_ms_total']['on']:.1f} ms, "
        f"off {result['own_ms_total']['off']:.1f} ms",
        file=sys.stderr,
    )
    print(f"{'on-off ms':>10} {'on calls':>9} {'off calls':>9}  function", file=sys.stderr)
    for r in result["top"]:
        d = r["on_own_ms"] - r["off_own_ms"]
        print(f"{d:10.2f} {r['on_calls']:9d} {r['off_calls']:9d}  {r['function']}", file=sys.stderr)


def start_from_env() -> None:
    """In a process started under `main` (bench/ab_profile_site/sitecustomize.py calls this):
    profile by recording state, and write OUT/pid-N/ at exit if the recorder was switched."""
    out = os.environ.get(ENV_OUT)
    if not out:
        return
    profiles = StateProfiles(int(os.environ.get(ENV_SKIP, "1")))
    install(profiles)
    top = int(os.environ.get(ENV_TOP, "40"))

    def at_exit() -> None:
        if profiles.switches:
            report(profiles, Path(out) / f"pid-{os.getpid()}", top)

    atexit.register(at_exit)


def main(argv: list[str]) -> None:
    """Run CMD with the environment that makes every Python process of its tree (spawned
    ranks too) profile itself: sitecustomize from bench/ab_profile_site, chained after
    tracekit's bootstrap (which imports the next sitecustomize on the path)."""
    if "--" not in argv:
        raise SystemExit("ab_profile.py: usage: --out OUT [--skip N] [--top K] -- CMD ARGS")
    cut = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--out", required=True)
    ap.add_argument("--skip", type=int, default=1, help="switches before profiling starts")
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args(argv[:cut])
    cmd = argv[cut + 1 :]
    site = str(Path(__file__).resolve().parent / "ab_profile_site")
    path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([*path, site])
    os.environ[ENV_OUT] = str(Path(args.out).resolve())
    os.environ[ENV_SKIP] = str(args.skip)
    os.environ[ENV_TOP] = str(args.top)
    sys.stdout.flush()
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
