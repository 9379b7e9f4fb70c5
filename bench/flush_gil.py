"""What a flush takes from the program's thread: the flush's parts timed, and how long a thread
busy in Python is held up while another thread flushes (the GIL the flush keeps).

The crossings (docs/BENCHMARKS.md, "eleventh session") time everything the recorder does at
the program's calls; the flush runs on its own thread, and takes from the program only the time
it holds the GIL while the program wants it. This measures that bound: a recorder with the
demo's shape of rows (a cycle, a phase, 35 nested calls) fills `--rows` rows, then

- `parts`: one flush at a time on this thread, each part's wall time (µs, median of
  `--flushes`): the rows taken, encoded (`encode_rows`), the process.json rewrite, the file
  writes (`fileops.run`, which releases the GIL), the rest;
- `stall_python`, `stall_torch`: the flush on a second thread while this one runs a loop
  (nothing but Python; a small torch operation an iteration, torch's bindings releasing the GIL
  around it, as a torch program's thread does at every operation); the loop's lost time (gaps
  over `--gap-us`) during the flush, against the flush's own wall and CPU time; `control_*`:
  the same loop as long, no flush.

    python bench/flush_gil.py [--rows 2000] [--flushes 15] [--json]
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAP = """
[[phase]]
name = "draft"
targets = ["tk_flush_gil:step"]

[[phase]]
name = "allreduce"
targets = ["tk_flush_gil:all_reduce"]

[cycle]
starts_with = "draft"
"""
NESTED = 35  # nested calls a cycle: 36 rows and a cycle row


def _recorder(work: Path) -> tuple[Any, Callable[[], None]]:
    from tracekit.collectors.phasemap import parse
    from tracekit.collectors.recorder import Recorder, RecorderConfig
    from tracekit.collectors.wrappers import install

    mod = types.ModuleType("tk_flush_gil")

    def all_reduce() -> int:
        return 1

    def step() -> None:
        for _ in range(NESTED):
            mod.all_reduce()

    mod.all_reduce, mod.step = all_reduce, step  # type: ignore[attr-defined]
    rec = Recorder(RecorderConfig(raw_dir=work / "raw", flush_records=10**7, flush_seconds=1e6))
    for site in parse(MAP).sites()["tk_flush_gil"]:
        install(mod, site, rec)
    for _ in range(3):
        mod.step()  # the sites' first calls (registration) and the stream's opening
    rec.flush()
    return rec, mod.step  # type: ignore[attr-defined]


def _fill(rec: Any, step: Callable[[], None], rows: int) -> int:
    while len(rec._rows) < rows * 65:  # the packed row's size (store/raw/schema.py ROW)
        step()
    return len(rec._rows) // 65


def parts(rows: int, flushes: int) -> dict[str, Any]:
    import tracekit.collectors.recording.output as output

    rec, step = _recorder(Path(tempfile.mkdtemp(prefix="tk-flush-gil-")))
    times: dict[str, list[float]] = collections.defaultdict(list)

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*a: Any, **k: Any) -> Any:
            t = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                times[name].append((time.perf_counter_ns() - t) / 1e3)

        return call

    for name in ("_take_rows", "_process_op", "_after_flush", "_resolve_gpu"):
        setattr(rec, name, timed(name, getattr(rec, name)))
    saved = output.encode_rows, output.fileops.run
    output.encode_rows = timed("encode_rows", output.encode_rows)
    output.fileops.run = timed("file_writes", output.fileops.run)  # type: ignore[assignment]
    total, cpu = [], []
    try:
        for _ in range(flushes):
            n = _fill(rec, step, rows)
            t, c = time.perf_counter_ns(), time.thread_time_ns()
            rec.flush()
            total.append((time.perf_counter_ns() - t) / 1e3)
            cpu.append((time.thread_time_ns() - c) / 1e3)
    finally:
        output.encode_rows, output.fileops.run = saved
        rec.close()
    out = {"rows": n, "flush_us": statistics.median(total), "flush_cpu_us": statistics.median(cpu)}
    out.update({f"{k}_us": statistics.median(v) for k, v in times.items()})
    return out


def _flush_later(rec: Any, done: threading.Event, spent: list[float]) -> None:
    """On its own thread: a flush 2 ms from now (the loop is running by then), its wall and
    CPU time (µs) into `spent`."""
    time.sleep(0.002)
    t, c = time.perf_counter_ns(), time.thread_time_ns()
    rec.flush()
    spent.extend([(time.perf_counter_ns() - t) / 1e3, (time.thread_time_ns() - c) / 1e3])
    done.set()


def _loop_work(kind: str) -> Callable[[], object]:
    """One iteration of the busy thread: nothing (it never lets the GIL go but at the switch
    interval) or a small torch operation (torch's bindings release the GIL around each)."""
    if kind == "python":
        return lambda: None
    import torch

    a, b = torch.ones(4), torch.ones(4)
    return lambda: torch.add(a, b)


def _loop_lost_us(
    work: Callable[[], object],
    gap_us: float,
    stop: Callable[[], bool] | None = None,
    span_us: float = 0.0,
) -> float:
    """Run `work` until `stop()` (without one, for `span_us`): the time lost in gaps between
    iterations longer than `gap_us`, µs."""
    gaps, last = 0, time.perf_counter_ns()
    end = last + span_us * 1e3
    while not stop() if stop is not None else last < end:
        work()
        now = time.perf_counter_ns()
        if now - last > gap_us * 1e3:
            gaps += now - last
        last = now
    return gaps / 1e3


def stall(rows: int, flushes: int, gap_us: float, loop: str) -> dict[str, Any]:
    work = _loop_work(loop)
    rec, step = _recorder(Path(tempfile.mkdtemp(prefix="tk-flush-gil-")))
    lost, walls, cpus = [], [], []
    for _ in range(flushes):
        _fill(rec, step, rows)
        done = threading.Event()
        spent: list[float] = []
        thread = threading.Thread(target=_flush_later, args=(rec, done, spent))
        thread.start()
        lost.append(_loop_lost_us(work, gap_us, stop=done.is_set))
        thread.join()
        walls.append(spent[0])
        cpus.append(spent[1])
    rec.close()
    return {
        "loop_lost_us": statistics.median(lost),
        "flush_us": statistics.median(walls),
        "flush_cpu_us": statistics.median(cpus),
        "loop_lost_each_us": [round(x, 1) for x in lost],
    }


def control(gap_us: float, loop: str, span_us: float, runs: int = 10) -> dict[str, Any]:
    """The same loop with no flush, for as long as a flush lasted: what it loses anyway."""
    work = _loop_work(loop)
    lost = [_loop_lost_us(work, gap_us, span_us=span_us) for _ in range(runs)]
    return {"loop_lost_us": statistics.median(lost), "span_us": span_us}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--rows", type=int, default=2000, help="rows a flush writes")
    ap.add_argument("--flushes", type=int, default=15)
    ap.add_argument("--gap-us", type=float, default=20.0, help="a loop gap longer is lost time")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    result = {"parts": parts(a.rows, a.flushes)}
    for loop in ("python", "torch"):
        result[f"stall_{loop}"] = stall(a.rows, a.flushes, a.gap_us, loop)
        result[f"control_{loop}"] = control(a.gap_us, loop, result[f"stall_{loop}"]["flush_us"])
    if a.json:
        print(json.dumps(result, indent=1))
        return 0
    for name, figures in result.items():
        shown = {k: round(v, 1) for k, v in figures.items() if isinstance(v, float)}
        print(f"{name}: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
