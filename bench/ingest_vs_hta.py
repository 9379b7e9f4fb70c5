"""Benchmark: `tracekit ingest` against HTA 0.5.0's `TraceAnalysis(trace_dir=...)` load.

Builds (once) an 8-rank set of about 800 MB raw JSON under bench/_work: the HTA corpus rank
`trace_diff_control` (34.8 MB, 109k events) repeated 3 times back to back in time, as ranks 0-7
(ids shifted so they stay unique). Installs holistictraceanalysis==0.5.0 in its own venv there
(bench/_work/hta-venv), then times both tools on the same files in one run, each in a fresh
process: wall time and peak memory (largest single process RSS, and the whole process tree's
RSS and PSS, sampled every 20 ms). With --traceinsight, HTA's successor on PyPI (traceinsight 0.6,
which ships the same `hta` package) is a second peer in its own venv (bench/_work/ti-venv), run
in the same rounds: tracekit, HTA, traceinsight, round after round. Prints a Markdown table
for docs/BENCHMARKS.md and the load average before each measurement.

Usage:
    python bench/ingest_vs_hta.py [--runs 3] [--skip-hta] [--traceinsight] [--check-temporal]

Not a test: it takes minutes and needs the development corpus (../shared/corpus).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "bench" / "_work"
# The development corpus beside the checkout (../shared/corpus); TRACEKIT_CORPUS overrides it
# (a worktree whose parent has no shared/).
CORPUS = Path(os.environ.get("TRACEKIT_CORPUS", REPO.parent / "shared" / "corpus"))
SOURCE = CORPUS / "trace_diff_control" / "control.json.gz"
SET_DIR = WORK / "control_x3_8rank"
HTA_VENV = WORK / "hta-venv"
TI_VENV = WORK / "ti-venv"
RANKS = 8
COPIES = 3
ID_SHIFT = 10_000_000


def build_set() -> list[Path]:
    """rank{r}.json: the control rank x3 back to back, distributedInfo.rank = r."""
    files = [SET_DIR / f"rank{r}.json" for r in range(RANKS)]
    if all(f.exists() for f in files):
        return files
    SET_DIR.mkdir(parents=True, exist_ok=True)
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(e["ts"] for e in timed)
    t1 = max(e["ts"] + e.get("dur", 0) for e in timed)
    period = int(t1 - t0) + 1000  # µs between copies
    out_events = []
    for c in range(COPIES):
        for e in events:
            e2 = dict(e)
            if c and isinstance(e2.get("ts"), (int, float)):
                e2["ts"] = e2["ts"] + c * period
            if c and isinstance(e2.get("args"), dict):
                args = dict(e2["args"])
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int) and args[key] > 0:
                        args[key] += c * ID_SHIFT
                e2["args"] = args
            if c and e2.get("ph") in ("s", "f") and isinstance(e2.get("id"), int):
                e2["id"] += c * ID_SHIFT
            # ProfilerStep#N markers stay distinct across copies
            name = e2.get("name")
            if c and isinstance(name, str) and name.startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{int(name.split('#')[1]) + c * 1000}"
            out_events.append(e2)
    for r, f in enumerate(files):
        meta = {k: v for k, v in doc.items() if k != "traceEvents"}
        meta["distributedInfo"] = {
            **meta.get("distributedInfo", {}),
            "rank": r,
            "world_size": RANKS,
        }
        tmp = f.with_suffix(".tmp")
        with tmp.open("w") as fh:
            fh.write(json.dumps(meta)[:-1] + ', "traceEvents": [\n')
            fh.write(",\n".join(json.dumps(e) for e in out_events))
            fh.write("\n]}\n")
        tmp.replace(f)
    return files


def ensure_venv(venv: Path, dist: str, spec: str) -> Path:
    """A venv holding `spec` (its distribution `dist` provides the `hta` package)."""
    py = venv / "bin" / "python"
    probe = [str(py), "-c", f"import hta, importlib.metadata as m; print(m.version('{dist}'))"]
    if py.exists() and subprocess.run(probe, capture_output=True, check=False).returncode == 0:
        return py
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", spec], check=True)
    return py


def ensure_hta() -> Path:
    return ensure_venv(HTA_VENV, "holistictraceanalysis", "holistictraceanalysis==0.5.0")


def ensure_traceinsight() -> Path:
    return ensure_venv(TI_VENV, "traceinsight", "traceinsight==0.6.*")


@dataclass
class Sample:
    wall_s: float
    max_rss_mb: float  # largest single process
    tree_rss_mb: float  # sum over the process tree, at its peak
    tree_pss_mb: float
    cpu_s: float  # user + sys of the process and its waited-for children (load-independent-ish)


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out.extend(int(x) for x in fh.read().split())
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    todo, seen = [pid], []
    while todo:
        p = todo.pop()
        seen.append(p)
        todo.extend(_children(p))
    return seen


def _mem(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def measure(cmd: list[str], *, env: dict[str, str] | None = None) -> Sample:
    start = time.perf_counter()
    errlog = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, after the child exits
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=errlog, env=env)
    max_rss = tree_rss = tree_pss = 0
    status = None
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        rss_sum = pss_sum = 0
        for p in _tree(proc.pid):
            rss, pss = _mem(p)
            max_rss = max(max_rss, rss)
            rss_sum += rss
            pss_sum += pss
        tree_rss = max(tree_rss, rss_sum)
        tree_pss = max(tree_pss, pss_sum)
        time.sleep(0.02)
    wall = time.perf_counter() - start
    errlog.seek(0)
    err = errlog.read().decode(errors="replace")
    errlog.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"failed ({code}): {' '.join(cmd)}\n{err[-3000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    return Sample(wall, max_rss / 1024, tree_rss / 1024, tree_pss / 1024, cpu)


HTA_LOAD = """
import sys, time, logging
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
t = time.perf_counter()
a = TraceAnalysis(trace_dir=sys.argv[1])
print(f"load {time.perf_counter() - t:.2f}", file=sys.stderr)
if len(sys.argv) > 2:
    df = a.get_temporal_breakdown(visualize=False)
    df.to_json(sys.argv[2], orient="records")
"""


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument(
        "--traceinsight",
        action="store_true",
        help="also time traceinsight 0.6 (HTA's successor) in the same rounds",
    )
    ap.add_argument(
        "--check-temporal",
        action="store_true",
        help="also compare HTA's temporal breakdown with `tracekit temporal --hta-rounding`",
    )
    args = ap.parse_args()

    files = build_set()
    raw_mb = sum(f.stat().st_size for f in files) / 1e6
    cores = os.cpu_count() or 1
    load = os.getloadavg()[0]
    print(
        f"set: {len(files)} ranks, {raw_mb:.0f} MB raw JSON, {cores} cores, load average {load:.1f}",
        flush=True,
    )

    results: dict[str, list[Sample]] = {"tracekit": [], "hta": [], "traceinsight": []}
    hta_py = None if args.skip_hta else ensure_hta()
    ti_py = ensure_traceinsight() if args.traceinsight else None
    tmp = Path(tempfile.mkdtemp(prefix="tk-bench-"))
    try:
        for i in range(args.runs):
            out = tmp / f"run{i}"
            _load_line("tracekit", i)
            s = measure([sys.executable, "-m", "tracekit", "ingest", str(SET_DIR), "-o", str(out)])
            results["tracekit"].append(s)
            print(f"tracekit run {i}: {s}", flush=True)
            if hta_py is not None:
                extra = [str(tmp / "hta_temporal.json")] if args.check_temporal and i == 0 else []
                _load_line("hta", i)
                s = measure([str(hta_py), "-c", HTA_LOAD, str(SET_DIR), *extra])
                results["hta"].append(s)
                print(f"hta run {i}: {s}", flush=True)
            if ti_py is not None:
                _load_line("traceinsight", i)
                s = measure([str(ti_py), "-c", HTA_LOAD, str(SET_DIR)])
                results["traceinsight"].append(s)
                print(f"traceinsight run {i}: {s}", flush=True)
            if i < args.runs - 1:
                shutil.rmtree(out, ignore_errors=True)
        if args.check_temporal and hta_py is not None:
            check_temporal(tmp / f"run{args.runs - 1}", tmp / "hta_temporal.json")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    report(results, raw_mb, cores, len(files))


def _load_line(tool: str, i: int) -> None:
    one, five, _ = os.getloadavg()
    print(f"{tool} run {i}: load average {one:.1f} (5 min {five:.1f}) at the start", flush=True)


def check_temporal(run: Path, hta_json: Path) -> None:
    ours = json.loads(
        subprocess.run(
            [sys.executable, "-m", "tracekit", "temporal", str(run), "--json", "--hta-rounding"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    theirs = json.loads(hta_json.read_text())
    same = all(
        (o["rank"], o["idle_us"], o["compute_us"], o["non_compute_us"], o["span_us"])
        == (
            t["rank"],
            t["idle_time(us)"],
            t["compute_time(us)"],
            t["non_compute_time(us)"],
            t["kernel_time(us)"],
        )
        for o, t in zip(
            sorted(ours, key=lambda r: r["rank"]), sorted(theirs, key=lambda r: r["rank"])
        )
    ) and len(ours) == len(theirs)
    print(f"temporal breakdown identical to HTA on all {len(ours)} ranks: {same}")
    if not same:
        print("tracekit:", ours)
        print("hta:", theirs)


def report(results: dict[str, list[Sample]], raw_mb: float, cores: int, ranks: int) -> None:
    def med(xs: list[Sample], attr: str) -> float:
        return statistics.median(getattr(x, attr) for x in xs)

    print()
    print(
        "| tool | runs | wall s (median) | CPU s | max process RSS MB | tree RSS MB | tree PSS MB | MB/s | MB/s per core | MB per CPU s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tool, xs in results.items():
        if not xs:
            continue
        wall = med(xs, "wall_s")
        cpu = med(xs, "cpu_s")
        print(
            f"| {tool} | {len(xs)} | {wall:.2f} | {cpu:.1f} | {med(xs, 'max_rss_mb'):.0f} | {med(xs, 'tree_rss_mb'):.0f} | "
            f"{med(xs, 'tree_pss_mb'):.0f} | {raw_mb / wall:.0f} | {raw_mb / wall / cores:.0f} | {raw_mb / cpu:.0f} |"
        )
    tk = results["tracekit"]
    for peer in ("hta", "traceinsight"):
        other = results[peer]
        if not (tk and other):
            continue
        print()
        print(
            f"vs {peer}: speed-up {med(other, 'wall_s') / med(tk, 'wall_s'):.1f}x wall, "
            f"{med(other, 'cpu_s') / med(tk, 'cpu_s'):.1f}x CPU; peak RSS (largest process) "
            f"{med(tk, 'max_rss_mb') / med(other, 'max_rss_mb'):.2f} of {peer}'s; tree PSS "
            f"{med(tk, 'tree_pss_mb') / med(other, 'tree_pss_mb'):.2f}; {ranks} ranks, {raw_mb:.0f} MB"
        )


if __name__ == "__main__":
    main()
