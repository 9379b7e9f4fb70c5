"""The figures of bench/compiled_gpu.py's runs: calls recorded against calls made, replays flagged
against replays made, and wall time with and without tracekit (docs/BENCHMARKS.md).

    python bench/compiled_report.py OUT          # OUT: compiled_gpu.py's --out (runs/ or runs.tar.gz)

Each run under OUT/runs is merged here (`tracekit merge`) if it was not. Per HF run: decode
records (the merged `phases` table) against the program's forward calls, replays inside decode
instances against the program's `CUDAGraph.replay` count, instances flagged graph_replayed.
Wall time per generate (the first, compiling one left out): median alone, and in the traced
process with recording on and off (`--ab`); per traced run (`ab`), recording on against off in
ABBA groups of generates (bench/overhead_ab.py `interval`: mean with its t-interval, median
with its order-statistics interval; the first group left out).
"""

from __future__ import annotations

import json
import statistics
import sys
import tarfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import overhead_ab


def _merged(run: Path) -> bool:
    from tracekit.store.merge import merge

    if not (run / "store" / "phases").exists():
        try:
            merge(run)
        except Exception as exc:
            print(f"{run.name}: merge failed: {exc}", file=sys.stderr)
            return False
    return True


def _phases(run: Path) -> Any:
    from tracekit.store.reader import read_table

    return read_table(run, "phases")


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def hf_ab(res: dict[str, Any]) -> dict[str, Any] | None:
    """Recording on against off in one traced process: groups of four generates after the
    first (on, off, off, on, as bench/hf_static_compile.py switches), the first group left
    out; each group's (on mean, off mean) into `overhead_ab.interval`."""
    walls, rec = res["wall_s"][1:], res.get("recording", [])[1:]
    groups = []
    for g in range(len(walls) // 4):
        w, r = walls[4 * g : 4 * g + 4], rec[4 * g : 4 * g + 4]
        if r != [True, False, False, True]:
            return None  # not an --ab run
        groups.append(((w[0] + w[3]) / 2, (w[1] + w[2]) / 2))
    if len(groups) < 3:
        return None
    return dict(overhead_ab.interval(groups[1:]).__dict__)


def hf_step_ab(res: dict[str, Any], key: str = "call_ms") -> dict[str, Any] | None:
    """A `--step-ab` run's µs a decode call, recording on minus off, in one process: each block's
    median call (a slow call moves no block), each ABBA group's mean of its on blocks minus its
    off blocks, then the median of the groups with its order-statistics 95% interval, and the
    mean with its t-interval (`overhead_ab.step_difference`); the first group and the first
    generate's calls left out. `key`: `call_ms` (the compiled call) or `step_ms` (its start to
    the next call's)."""
    if not res.get(key) or not res.get("ab_on"):
        return None
    bl = overhead_ab.blocks(
        res[key], res["ab_on"], res["ab_blocks"], "median", res["after_prefill"]
    )
    diffs = [1e3 * (a - b) for a, b in overhead_ab.group_ratios(bl, 1)]
    if len(diffs) < 6:
        return None
    lo, hi = overhead_ab.median_interval(diffs) or (None, None)
    mean = overhead_ab.step_difference(res, key) or {}
    return {
        "median_us": statistics.median(diffs),
        "median_lo_us": lo,
        "median_hi_us": hi,
        "groups": len(diffs),
        "mean_us": mean.get("diff_us"),
        "mean_lo_us": mean.get("lo_us"),
        "mean_hi_us": mean.get("hi_us"),
        "off_median_us": 1e3
        * statistics.median(
            c
            for c, on, out in zip(res[key], res["ab_on"], res["after_prefill"], strict=True)
            if not on and not out
        ),
    }


def hf_crossings(res: dict[str, Any]) -> dict[str, Any] | None:
    """A `--crossings` run (HF assisted generation): µs a cycle, recording on minus off, of the
    host time crossing into and out of the cycle's wrapped calls (bench/crossings.py), summed
    (`cycle`) and by phase, each as `hf_step_ab` gives it, with the cycle's wall time beside
    (`cycle_wall`: the same estimate on the cycles' durations, device and all)."""
    by_phase = res.get("step_boundary_ms")
    if not by_phase or not res.get("ab_on"):
        return None
    total = [sum(cycle) for cycle in zip(*by_phase.values(), strict=True)]
    out: dict[str, Any] = {
        "cycle": hf_step_ab({**res, "crossings": total}, "crossings"),
        "cycle_wall": hf_step_ab(res, "step_ms"),
        "cycle_ms_p50": statistics.median(res["step_ms"]),
        "calls": res.get("boundary_calls"),
        "cycles": len(res["ab_on"]),
    }
    for phase, series in by_phase.items():
        out[phase] = hf_step_ab({**res, "crossings": series}, "crossings")
    return out


def hf_figures(out: Path, steps: list[dict[str, Any]]) -> dict[str, Any]:
    alone: list[float] = []
    disabled: list[float] = []
    on: list[float] = []
    off: list[float] = []
    runs = []
    ab = {}
    for s in steps:
        res = s.get("result")
        if not s["name"].startswith("hf-") or res is None:
            continue
        ab[s["name"]] = (
            hf_crossings(res)
            if "step_boundary_ms" in res
            else hf_ab(res)
            or (
                {key: hf_step_ab(res, key) for key in ("call_ms", "step_ms")}
                if "ab_on" in res
                else None
            )
        )
        walls = res["wall_s"][1:]
        if s["name"].startswith(("hf-alone", "hf-disabled")):
            (alone if s["name"].startswith("hf-alone") else disabled).extend(walls)
            continue
        rec = res.get("recording", [True] * len(res["wall_s"]))[1:]
        on += [w for w, r in zip(walls, rec, strict=True) if r]
        off += [w for w, r in zip(walls, rec, strict=True) if not r]
        run = out / "runs" / s["name"]
        if not _merged(run):
            continue
        ph = _phases(run)
        dec = ph.filter(ph["phase"] == "decode")
        runs.append(
            {
                "run": s["name"],
                "forward_calls_made": res["forward_calls"],
                # --step-ab: recording switched between compiled calls, not generates (the
                # eager prefill of a generate is recorded when it begins while recording is on)
                "recording_on_generates": None if "ab_on" in res else sum(res["recording"]),
                "forward_calls_while_recording": sum(res["ab_on"])
                if "ab_on" in res
                else res["new_tokens"] * sum(res.get("recording", [])),
                "decode_records": dec.height,
                "replays_made": res["replays"],
                "replays_in_decode_records": int(dec["graph_replays"].fill_null(0).sum()),
                "decode_records_flagged_replayed": int((dec["graph_replays"] > 0).sum()),
                "compiled_decode_calls_made": res["decode_calls"],
                "dynamo": res["dynamo"],
            }
        )
    meds = {"alone": _median(alone), "disabled": _median(disabled), "on": _median(on),
            "off": _median(off)}  # fmt: skip
    ms = {k: (None if v is None else 1e3 * v) for k, v in meds.items()}
    pct = {}
    if ms["alone"] and ms["on"]:
        pct["on_vs_alone_pct"] = 100 * (ms["on"] / ms["alone"] - 1)
    if ms["off"] and ms["on"]:
        pct["on_vs_off_pct"] = 100 * (ms["on"] / ms["off"] - 1)
    return {
        "runs": runs,
        "ab": {k: v for k, v in ab.items() if v is not None},
        "generate_ms_median": ms,
        "generates": {
            "alone": len(alone),
            "disabled": len(disabled),
            "on": len(on),
            "off": len(off),
        },
        **pct,
    }


def demo_figures(out: Path, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for s in steps:
        res = s.get("result")
        if not s["name"].startswith("demo-") or res is None:
            continue
        run = out / "runs" / s["name"]
        if not _merged(run):
            continue
        ph = _phases(run)
        top = ph.filter(ph["depth"] == 0)
        ver = top.filter(top["phase"] == "verify")
        rows.append(
            {
                "run": s["name"],
                "cycles": res["cycles"],
                "target_calls_made": res["target_calls"],
                "verify_records": ver.height,
                "verify_flagged_replayed": int((ver["graph_replays"] > 0).sum()),
                "replays_in_verify": int(ver["graph_replays"].fill_null(0).sum()),
                "tokens_per_s": res["tokens_per_s"],
            }
        )
    return rows


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    if not (out / "runs").exists() and (out / "runs.tar.gz").exists():
        with tarfile.open(out / "runs.tar.gz") as tar:
            tar.extractall(out, filter="data")
    steps = json.loads((out / "steps.json").read_text())
    report = {"hf": hf_figures(out, steps), "demo": demo_figures(out, steps)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
