"""DESIGN.md's Hugging Face example on CPU under `tracekit launch`: tracekit's figures against the
program's own.

Runs the program of tests/integration/test_hf_assisted.py (a tiny random Llama target, a draft
that is the target slightly perturbed, `generate(..., assistant_model=draft)`) once with assisted
generation under the user map with an accept rule, and once plain (one forward a step), and
prints: tracekit's acceptance length next to the program's own tokens per cycle, and tracekit's
break-even and predicted speedup next to the ratio of the two runs' measured tokens/s.

Usage: python bench/hf_assisted.py [--rounds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.test_hf_assisted import PLAIN_MAP, PROGRAM, SPEC_MAP  # noqa: E402


def _tk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "tracekit", *args],
        cwd=cwd, env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, allow_abbrev=False)
    ap.add_argument("--rounds", type=int, default=3, help="generate() calls a run")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    d = args.out or Path(tempfile.mkdtemp(prefix="tk-hf-"))
    d.mkdir(parents=True, exist_ok=True)
    (d / "prog.py").write_text(PROGRAM)
    (d / "spec.toml").write_text(SPEC_MAP)
    (d / "plain.toml").write_text(PLAIN_MAP)
    own = {}
    for name, mapfile in (("spec", "spec.toml"), ("plain", "plain.toml")):
        res = _tk(
            "launch", "--out", str(d / "runs"), "--name", name, "--phases", mapfile, "--",
            sys.executable, "prog.py", name, str(args.rounds), cwd=d,
        )  # fmt: skip
        own[name] = json.loads(res.stdout.strip().splitlines()[-1])
    spec, plain = d / "runs" / "spec", d / "runs" / "plain"
    s = json.loads(_tk("summary", str(spec), "--json", cwd=d).stdout)
    b = json.loads(
        _tk("breakeven", "--baseline", str(plain), "--spec", str(spec), "--json", cwd=d).stdout
    )
    # like for like with the program's own figure, which times every cycle, warm-up included
    ball = json.loads(
        _tk(
            "breakeven", "--baseline", str(plain), "--spec", str(spec), "--all-cycles", "--json",
            cwd=d,
        ).stdout
    )  # fmt: skip
    per = own["spec"]["per_cycle"]
    sall = json.loads(_tk("summary", str(spec), "--all-cycles", "--json", cwd=d).stdout)
    ratio = own["spec"]["tokens_per_s"] / own["plain"]["tokens_per_s"]
    print(f"runs in {d / 'runs'}")
    print(
        f"acceptance: tracekit {sall['accept_len_mean']:.3f} tokens/cycle over all "
        f"{len(per)} cycles (the last of each generate() included), program's own "
        f"{sum(per) / len(per):.3f}; steady state {s['accept_len_mean']:.3f} "
        f"({s.get('steady_note') or 'no warm-up excluded'})"
    )
    print(
        f"throughput: measured {own['spec']['tokens_per_s']:.1f} (assisted) vs "
        f"{own['plain']['tokens_per_s']:.1f} (plain) tokens/s, ratio {ratio:.3f}"
    )
    for label, r in (("every cycle", ball), ("steady state", b)):
        print(
            f"tracekit, {label}: baseline step {r['baseline_ms']:.2f} ms, cycle "
            f"{r['cycle_ms']:.2f} ms, break-even {r['breakeven_accept_len']:.2f}, predicted "
            f"speedup {r['speedup']:.3f} ({100 * (r['speedup'] / ratio - 1):+.1f}% against the "
            "measured ratio)"
        )


if __name__ == "__main__":
    main()
