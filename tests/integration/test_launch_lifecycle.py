"""The recorder's lifecycle inside real processes under `tracekit launch`: the timer flush, a
worker SIGKILLed by its parent, SIGTERM / SIGINT with and without the program's own handlers,
tracekit's threads, the one exit deadline (a stuck device, a backend whose teardown blocks, a
program thread that never ends), and `TRACEKIT_DISABLE`.

Pure Python programs (no torch: a fake `torch` package where a device or a process group is
needed), so each launch costs about a second.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from tracekit.store.merge import merge
from tracekit.store.reader import read_table

STEP_MOD = """
import time

D = 0.002


class Worker:
    def draft(self):
        time.sleep(D)

    def verify(self):
        time.sleep(D)
        return 2

    def step(self, i):
        self.draft()
        return self.verify()
"""
MAP = """
[[phase]]
name = "draft"
targets = ["tkstep:Worker.draft"]
[[phase]]
name = "verify"
targets = ["tkstep:Worker.verify"]
[cycle]
targets = ["tkstep:Worker.step"]
"""
ROWS_PER_CYCLE = 3  # draft, verify, the cycle row


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env.update(extra)
    return env


@pytest.fixture
def prog(tmp_path: Path) -> Path:
    (tmp_path / "tkstep.py").write_text(STEP_MOD)
    (tmp_path / "map.toml").write_text(MAP)
    return tmp_path


def _launch_cmd(*args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tracekit",
        "launch",
        "--phases",
        "map.toml",
        "--out",
        "runs",
        *args,
    ]


def _run_dir(root: Path) -> Path:
    (run,) = list((root / "runs").iterdir())
    return run


def _wait_line(proc: subprocess.Popen[str], text: str, timeout: float = 60) -> str:
    assert proc.stdout is not None
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        line = proc.stdout.readline()
        if text in line:
            return line
        if not line and proc.poll() is not None:
            break
    pytest.fail(f"the program never printed {text!r}")


def _process_json(run: Path) -> list[dict[str, object]]:
    return [json.loads(f.read_text()) for f in sorted(run.glob("raw/pid-*/process.json"))]


# -- the timer flush: a worker SIGKILLed by its parent ------------------------------------------

KILLED_BY_PARENT = """
import multiprocessing as mp
import os
import signal
import sys
import time

import tkstep


def worker(rank, idle_after):
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = "2"
    w = tkstep.Worker()
    with open(f"cycles-{rank}.log", "w") as log:
        for i in range(10**6):
            w.step(i)
            log.write(f"{i} {time.time_ns()}\\n")
            log.flush()
            if i + 1 == idle_after:
                time.sleep(3600)  # idle, as a server waiting for requests: no phase call at all
            time.sleep(0.01)


if __name__ == "__main__":
    print("flush", os.environ.get("TRACEKIT_FLUSH_SECONDS"), flush=True)
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=worker, args=(0, -1)), ctx.Process(target=worker, args=(1, 50))]
    for p in procs:
        p.start()
    time.sleep(2.0)
    kill_ns = time.time_ns()
    for p in procs:
        os.kill(p.pid, signal.SIGKILL)  # as vLLM's engine does to its workers at shutdown
    for p in procs:
        p.join()
    print("killed", kill_ns, [p.exitcode for p in procs], flush=True)
"""


def test_workers_sigkilled_by_their_parent_lose_at_most_the_last_interval(prog: Path) -> None:
    # GIVEN two forked workers of a parent that SIGKILLs both 2 s after the start, flush
    # interval 0.2 s: rank 0 runs cycles until the kill, rank 1 runs 50 cycles (about 0.8 s)
    # and then idles, as a server between requests (no phase call, so no flush from the
    # program's threads)
    (prog / "killer.py").write_text(KILLED_BY_PARENT)
    res = subprocess.run(
        _launch_cmd("--flush-interval", "0.2", "--", sys.executable, "killer.py"),
        cwd=prog, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "flush 0.2" in res.stdout  # --flush-interval reached the ranks
    assert res.stdout.strip().endswith("[-9, -9]")
    kill_ns = int(res.stdout.split("killed ")[1].split()[0])
    run = _run_dir(prog)
    cycles = read_table(run, "cycles")
    per_rank = dict(cycles.group_by("rank").len().iter_rows())
    # THEN the idle worker's 50 cycles are all in the merged run (the timer flushed them),
    assert per_rank[1] == 50
    # and the busy one has every cycle that ended more than one interval (+ 0.15 s of
    # scheduling slack on a busy machine) before the kill
    log = (prog / "cycles-0.log").read_text().splitlines()
    done = [int(t) for _i, t in (line.split() for line in log)]
    must = sum(1 for t in done if t <= kill_ns - int(0.35e9))
    assert must >= 50
    assert must <= per_rank[0] <= len(done) + 1  # + a cycle being recorded at the kill
    for rank in (0, 1):
        numbers = cycles.filter(pl.col("rank") == rank)["cycle"].sort().to_list()
        assert numbers == list(range(per_rank[rank]))
    # and the record counts of process.json / run.json are the records on disk
    phases = read_table(run, "phases")
    manifest = json.loads((run / "run.json").read_text())
    listed = {p["pid"]: p["records"] for p in manifest["processes"]["instrumented"]}
    for proc in _process_json(run):
        if not proc["records"]:
            continue  # the parent records nothing
        pid = proc["pid"]
        on_disk = phases.filter(pl.col("pid") == pid).height
        rank = proc["rank_info"]["env_rank"]  # type: ignore[index]
        on_disk += per_rank[rank]
        assert proc["records"] == on_disk
        assert listed[pid] == on_disk


KILLED_AT_THE_SIGNAL = """
import multiprocessing as mp
import os
import signal
import sys
import time

import tkstep


def worker(rank, ready):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the parent's kill ends it
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = "2"
    w = tkstep.Worker()
    for i in range(55):
        w.step(i)
    ready.release()
    time.sleep(3600)


if __name__ == "__main__":
    ctx = mp.get_context("fork")
    ready = ctx.Semaphore(0)
    procs = [ctx.Process(target=worker, args=(r, ready)) for r in (0, 1)]
    for p in procs:
        p.start()

    def stop(signum, frame):
        for p in procs:
            os.kill(p.pid, signal.SIGKILL)  # at once, as vLLM's API server at SIGINT
        for p in procs:
            p.join()
        print("killed", [p.exitcode for p in procs], flush=True)
        sys.exit(0)

    signal.signal(signal.SIGINT, stop)
    for _ in procs:
        ready.acquire()
    print("ready", flush=True)
    time.sleep(3600)
"""


def test_workers_killed_as_the_signal_arrives_keep_every_record(prog: Path) -> None:
    # GIVEN a parent that SIGKILLs its two forked workers the moment it gets SIGINT (vLLM's API
    # server with its shutdown timeout of 0 s), workers that ignore SIGINT, and a flush interval
    # of 60 s: their 55 cycles each are all still in their buffers when the signal comes
    (prog / "killer.py").write_text(KILLED_AT_THE_SIGNAL)
    launcher = subprocess.Popen(
        _launch_cmd("--flush-interval", "60", "--", sys.executable, "killer.py"),
        cwd=prog, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_line(launcher, "ready")
        # WHEN the launcher is sent SIGINT
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, err
    assert "killed [-9, -9]" in out
    # THEN the launcher asked every recording process to flush before it forwarded the signal,
    # each answered, and the merged run holds every cycle of both workers
    run = _run_dir(prog)
    per_rank = dict(read_table(run, "cycles").group_by("rank").len().iter_rows())
    assert per_rank == {0: 55, 1: 55}
    manifest = json.loads((run / "run.json").read_text())
    asked = manifest["flush_before_signal"]
    assert asked["asked"] == 3  # the parent and the two workers
    assert asked["answered"] == 3, asked
    assert asked["wait_ms"] < 2000
    # and the control directory with the FIFOs is gone
    assert not list(run.rglob("*.fifo"))


OUTLIVES_ITS_PARENT = """
import multiprocessing as mp
import os
import signal
import time

import tkstep


def worker():
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only a SIGKILL ends it
    os.environ["RANK"] = "0"
    w = tkstep.Worker()
    for i in range(40):
        w.step(i)
    print("worker ready", flush=True)
    time.sleep(3600)


if __name__ == "__main__":
    p = mp.get_context("fork").Process(target=worker, daemon=False)
    p.start()
    time.sleep(0.5)
    os._exit(0)  # the command ends; its worker does not
"""


def test_a_process_that_outlives_the_command_and_ignores_sigterm_keeps_its_records(
    prog: Path,
) -> None:
    # GIVEN a command that exits while its forked worker, which ignores SIGTERM, still sleeps
    # with its 40 cycles buffered (flush interval 60 s)
    (prog / "orphan.py").write_text(OUTLIVES_ITS_PARENT)
    proc = subprocess.run(
        _launch_cmd("--flush-interval", "60", "--grace", "1", "--", sys.executable, "orphan.py"),
        cwd=prog, env=_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    # WHEN the launcher stops it after the grace period (SIGTERM, ignored, then SIGKILL)
    assert proc.returncode == 0, proc.stderr
    assert "outlived it; sending SIGTERM then SIGKILL" in proc.stderr
    # THEN it was asked to flush first, answered, and every cycle is merged
    run = _run_dir(prog)
    assert read_table(run, "cycles").height == 40
    asked = json.loads((run / "run.json").read_text())["flush_before_signal"]
    assert (asked["asked"], asked["answered"]) == (1, 1), asked


IDLE_THEN_SIGNAL = """
import json
import os
import signal
import sys
import threading
import time

import tkstep

mode = sys.argv[1]
if mode == "own-term":
    def on_term(signum, frame):
        print("handled", signum, flush=True)
        os._exit(7)  # no atexit: only what was flushed at the signal survives
    old = signal.signal(signal.SIGTERM, on_term)
    assert old is signal.SIG_DFL, old
    assert signal.getsignal(signal.SIGTERM) is on_term  # the program sees its own handler
elif mode == "own-int":
    def on_int(signum, frame):
        print("handled", signum, flush=True)
        os._exit(9)
    signal.signal(signal.SIGINT, on_int)
    assert signal.getsignal(signal.SIGINT) is on_int
elif mode == "restore":
    old = signal.signal(signal.SIGTERM, lambda s, f: None)
    signal.signal(signal.SIGTERM, old)  # back to the default: dies of SIGTERM
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
elif mode == "stuck-thread":
    threading.Thread(target=threading.Event().wait, name="program-stuck").start()  # non-daemon
w = tkstep.Worker()
for i in range(20):
    w.step(i)
print("threads", json.dumps([(t.name, t.daemon) for t in threading.enumerate()]), flush=True)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize(
    ("mode", "sig", "code"),
    [
        ("default", signal.SIGTERM, 128 + signal.SIGTERM),
        ("default", signal.SIGINT, None),  # KeyboardInterrupt: a traceback, then dies of SIGINT
        ("own-term", signal.SIGTERM, 7),
        ("own-int", signal.SIGINT, 9),
        ("restore", signal.SIGTERM, 128 + signal.SIGTERM),
        ("stuck-thread", signal.SIGTERM, 128 + signal.SIGTERM),
    ],
)
def test_signal_flushes_every_cycle_and_keeps_the_programs_handlers(
    prog: Path, mode: str, sig: int, code: int | None
) -> None:
    # GIVEN a program that records 20 cycles (60 records, far from a flush: interval 60 s) and
    # idles; with its own handler, or the default, or one installed and restored, or with a
    # non-daemon thread of its own that never ends
    (prog / "idle.py").write_text(IDLE_THEN_SIGNAL)
    launcher = subprocess.Popen(
        _launch_cmd("--flush-interval", "60", "--", sys.executable, "idle.py", mode),
        cwd=prog, env=_env(TRACEKIT_EXIT_DEADLINE_S="2"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        threads = _wait_line(launcher, "threads")
        _wait_line(launcher, "ready")
        # WHEN the launcher gets the signal (forwarded to the program's group)
        t0 = time.monotonic()
        launcher.send_signal(sig)
        out, err = launcher.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        if launcher.poll() is None:
            launcher.kill()
    # THEN the program's handler ran (or the default action), the exit code is the program's,
    if code is not None:
        assert launcher.returncode == code, err
    else:
        assert launcher.returncode in (1, 128 + signal.SIGINT), err
        assert "KeyboardInterrupt" in err
    if mode.startswith("own"):
        assert f"handled {int(sig)}" in out
    # every tracekit thread is a daemon thread,
    listed = [tuple(t) for t in json.loads(threads.split("threads ", 1)[1])]
    assert ("tracekit-flush", True) in listed
    assert all(daemon for name, daemon in listed if name.startswith("tracekit"))
    # the records of all 20 cycles were flushed at the signal, and the exit took well under the
    # grace period (the program's stuck thread was not waited for)
    run = _run_dir(prog)
    assert read_table(run, "cycles").height == 20
    assert took < 15
    assert "Traceback" not in err.replace("KeyboardInterrupt", "") or code is None


# -- exit by design: one deadline -----------------------------------------------------------

FAKE_TORCH = '''
"""A fake torch: a CUDA device that can get stuck, a process group whose teardown blocks."""
import threading
import time

__version__ = "0.0-fake"


class compiler:
    _is_compiling_flag = False

    @staticmethod
    def is_dynamo_compiling():
        return False

    @staticmethod
    def is_compiling():
        return False


class _Cuda:
    _initialized = True
    stuck = False  # set: later work never completes (a collective whose peers are gone)

    def __init__(self):
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None
                self.never = False

            def record(self):
                self.t = time.time_ns()
                self.never = cuda.stuck

            def query(self):
                return not self.never

            def synchronize(self):
                while self.never:
                    time.sleep(1)

            def elapsed_time(self, other):
                return (other.t - self.t) / 1e6

        self.Event = Event

    def is_current_stream_capturing(self):
        return False

    def synchronize(self):
        while self.stuck:
            time.sleep(1)  # cudaDeviceSynchronize on a stuck device: forever

    def current_device(self):
        return 3

    def is_available(self):
        return True

    def is_initialized(self):
        return True


cuda = _Cuda()
'''
FAKE_DIST = '''
"""torch.distributed whose destroy hangs in a watchdog thread holding the group's lock."""
import threading
import time

_lock = threading.Lock()
_state = {"init": False}


def _locked():
    with _lock:
        return dict(_state)


def is_available():
    return True


def init_process_group(rank, world_size):
    _state.update(init=True, rank=rank, world_size=world_size)


def is_initialized():
    return _locked()["init"]


def get_rank():
    return _locked()["rank"]


def get_world_size():
    return _locked()["world_size"]


def get_backend():
    return "fake"


def destroy_process_group():
    def watchdog():
        with _lock:
            time.sleep(3600)  # a teardown waiting for a peer that is gone
    threading.Thread(target=watchdog, name="fake-watchdog", daemon=True).start()
    time.sleep(0.1)
'''
EXIT_PROGRAM = """
import atexit
import sys
import time

import torch
import torch.distributed as dist

import tkstep

mode = sys.argv[1]
dist.init_process_group(rank=1, world_size=2)
w = tkstep.Worker()
for i in range(12):
    w.step(i)
    time.sleep(0.03)  # the run lasts past a flush interval: the rank is known from a flush
if mode == "stuck-device":
    torch.cuda.stuck = True
    for i in range(5):
        w.step(12 + i)
if mode == "blocked-teardown":
    atexit.register(dist.destroy_process_group)  # runs before tracekit's atexit (LIFO)
print("done", time.time_ns(), flush=True)
"""


@pytest.mark.parametrize("mode", ["stuck-device", "blocked-teardown"])
def test_exit_within_one_deadline_whatever_the_backend_does(prog: Path, mode: str) -> None:
    # GIVEN a program on a fake CUDA device and process group: either the device gets stuck
    # (its last 5 cycles' events never complete, synchronize() would block forever), or the
    # process group's teardown (an atexit handler, run before tracekit's) leaves a watchdog
    # thread holding the group's lock forever, so torch.distributed calls block
    (prog / "torch").mkdir()
    (prog / "torch" / "__init__.py").write_text(FAKE_TORCH)
    (prog / "torch" / "distributed.py").write_text(FAKE_DIST)
    (prog / "exiting.py").write_text(EXIT_PROGRAM)
    plain = subprocess.run(
        [sys.executable, "exiting.py", mode], cwd=prog, env=_env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert plain.returncode == 0, plain.stderr  # without tracekit it exits at once
    # WHEN it runs under launch with an exit deadline of 1.5 s
    res = subprocess.run(
        _launch_cmd(
            "--no-merge", "--flush-interval", "0.2", "--gpu-sample", "1", "--",
            sys.executable, "exiting.py", mode,
        ),  # every cycle GPU-timed (the default times one in 8)
        cwd=prog, env=_env(TRACEKIT_EXIT_DEADLINE_S="1.5"), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    end_ns = time.time_ns()
    # THEN the process exits within the deadline (+ the launcher's own exit), with code 0
    assert res.returncode == 0, res.stderr
    done_ns = int(res.stdout.split("done ")[1].split()[0])
    assert (end_ns - done_ns) / 1e9 < 1.5 + 1.5
    # and every record is on disk, the rank known (kept from before the teardown), not partial
    run = _run_dir(prog)
    result = merge(run)
    n = 17 if mode == "stuck-device" else 12
    cycles = read_table(run, "cycles")
    assert cycles.height == n
    assert set(cycles["rank"].to_list()) == {1}
    assert result.partial_ranks == []
    phases = read_table(run, "phases")
    outer = phases.filter(pl.col("depth") == 0)
    with_gpu = outer.filter(pl.col("gpu_start_ns").is_not_null()).height
    (proc,) = _process_json(run)
    assert proc["finished"] is True
    assert proc["rank_info"]["cuda_device"] == 3  # type: ignore[index]
    if mode == "stuck-device":
        assert with_gpu == 2 * 12  # the stuck cycles keep their CPU times only
        assert "end_ns" in proc
        assert "unfinished" not in res.stderr
    else:
        assert with_gpu == 2 * 12
        # the rank/manifest update (torch.distributed) is the step left at the deadline
        assert "left the rank and manifest update unfinished at the exit deadline" in res.stderr


# -- TRACEKIT_DISABLE ------------------------------------------------------------------------


def test_tracekit_disable_reaches_the_child(prog: Path) -> None:
    # GIVEN the documented way to measure the launcher's own cost
    (prog / "plain.py").write_text(
        "import os, tkstep\nw = tkstep.Worker()\n[w.step(i) for i in range(5)]\n"
        "print('disable', os.environ.get('TRACEKIT_DISABLE'), 'sys.modules has tracekit:',"
        " any(m.startswith('tracekit') for m in __import__('sys').modules))\n"
    )
    res = subprocess.run(
        _launch_cmd("--", sys.executable, "plain.py"),
        cwd=prog, env=_env(TRACEKIT_DISABLE="1"), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    # THEN the program ran without tracekit: nothing imported, nothing recorded
    assert res.returncode == 0, res.stderr
    assert "disable 1 sys.modules has tracekit: False" in res.stdout
    assert "TRACEKIT_DISABLE is set, so the command ran launched but not recorded" in res.stderr
    assert "nothing was recorded" not in res.stderr
    run = _run_dir(prog)
    assert list(run.glob("raw/pid-*")) == []
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["processes"]["instrumented"] == []
    assert len(manifest["processes"]["not_instrumented"]) >= 1


# -- profile windows number cycles as the reports do ------------------------------------------

PROF_MOD = """
import torch


class Worker:
    def draft(self):
        return torch.ones(8).sum()

    def verify(self):
        return torch.ones(8).mul(2).sum()

    def prefill(self):
        return torch.ones(16).sum()

    def step(self, i, is_prefill):
        if is_prefill:
            return self.prefill()
        self.draft()
        return self.verify()
"""
PROF_RUN = """
import tkprof

PREFILL = {0, 1, 4, 7, 8, 12, 15}  # steps without a draft: no cycle by the map's rule
w = tkprof.Worker()
for i in range(24):
    w.step(i, i in PREFILL)
"""
PROF_MAP = """
[[phase]]
name = "draft"
targets = ["tkprof:Worker.draft"]
[[phase]]
name = "verify"
targets = ["tkprof:Worker.verify"]
[[phase]]
name = "prefill"
targets = ["tkprof:Worker.prefill"]
[cycle]
targets = ["tkprof:Worker.step"]
require = "draft"
"""


@pytest.mark.slow
@pytest.mark.torch
def test_profile_cycles_window_is_the_reports_cycles(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from click.testing import CliRunner

    from tracekit.cli import cli

    # GIVEN 24 engine steps, 7 of them prefill steps without a draft (no cycle), interleaved
    (tmp_path / "tkprof.py").write_text(PROF_MOD)
    (tmp_path / "run.py").write_text(PROF_RUN)
    (tmp_path / "map.toml").write_text(PROF_MAP)
    # WHEN profiled in full mode over cycles 5:5
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "launch", "--phases", "map.toml", "--out", "runs",
         "--mode", "full", "--profile-cycles", "5:5", "--", sys.executable, "run.py"],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    run = _run_dir(tmp_path)
    assert read_table(run, "cycles").height == 24 - 7
    # THEN `tracekit breakdown --by cycle` shows exactly cycles 5..9, each with its draft and
    # verify (before: 4 cycles, the window counted the prefill steps)
    out = CliRunner().invoke(cli, ["breakdown", "--by", "cycle", "--json", str(run)])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [(r["cycle"], r["phases"]) for r in rows] == [(c, 2) for c in range(5, 10)]
    # and the trace's draft ranges are the 5 drafts of those cycles
    events = read_table(run, "events")
    names = events.filter(pl.col("cat") == "user_annotation")["name"].to_list()
    assert names.count("tracekit/draft") == 5
    assert names.count("tracekit/cycle") == 5
