"""Per call, on minus off, by function: four callgrind runs of bench/cold_call.py (issue 25).

    python bench/callgrind_diff.py PREFIX [--top 30]

reads PREFIX.on.100, PREFIX.on.300, PREFIX.off.100, PREFIX.off.300 (N calls, recording on or
off) and prints, per function, ((on.300 - on.100) - (off.300 - off.100)) / 200 of callgrind's
instructions (Ir) and last-level misses (ILmr code, DLmr data read, DLmw data write), with the
program's totals first: what one cold call adds. Needs `callgrind_annotate`.
"""

from __future__ import annotations

import argparse
import re
import subprocess

EVENTS = ("Ir", "ILmr", "DLmr", "DLmw")
_TOK = r"\s*([\d,]+|\.)(?:\s+\(\s*[\d.]+%\))?"
_LINE = re.compile("^" + _TOK * len(EVENTS) + r"\s+(\S.*)$")


def load(path: str) -> dict[str, list[int]]:
    """Exclusive counts by function of one callgrind file."""
    out = subprocess.run(
        ["callgrind_annotate", f"--show={','.join(EVENTS)}", "--threshold=100", "--auto=no", path],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    counts: dict[str, list[int]] = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        vals = [0 if x == "." else int(x.replace(",", "")) for x in m.groups()[: len(EVENTS)]]
        name = m.group(len(EVENTS) + 1).split(" [")[0].split("/")[-1]
        counts[name] = [
            a + b for a, b in zip(counts.get(name, [0] * len(EVENTS)), vals, strict=True)
        ]
    return counts


def per_call(prefix: str) -> list[tuple[list[float], str]]:
    runs = {k: load(f"{prefix}.{k}") for k in ("on.100", "on.300", "off.100", "off.300")}
    names = set().union(*runs.values())
    zero = [0] * len(EVENTS)
    rows = []
    for n in names:
        g = {k: runs[k].get(n, zero) for k in runs}
        v = [
            ((g["on.300"][i] - g["on.100"][i]) - (g["off.300"][i] - g["off.100"][i])) / 200
            for i in range(len(EVENTS))
        ]
        rows.append((v, n))
    rows.sort(key=lambda r: -sum(r[0][1:]))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    p.add_argument("prefix")
    p.add_argument("--top", type=int, default=30)
    a = p.parse_args()
    for v, n in per_call(a.prefix)[: a.top]:
        if abs(sum(v[1:])) >= 0.4:
            print(f"{v[0]:7.0f} Ir {v[1]:5.1f} IL {v[2]:5.1f} DLr {v[3]:5.1f} DLw  {n}")


if __name__ == "__main__":
    main()
