"""A tiny multi-rank "server" for the reliability tests, and helpers to run it under tracekit.

`server.py RANKS CYCLES FAULT` starts RANKS rank processes the way torchrun does (`RANK` and
`WORLD_SIZE` in the environment, one interpreter each); every rank runs CYCLES cycles of
`Worker.step` -> `draft` + `verify`. FAULT picks what goes wrong:

- `none`: nothing; every rank prints its result and the server exits 0.
- `kill1@K`: rank 1 waits out one flush period after cycle K's start, finishes cycle K and
  kills itself with SIGKILL; the server reports it and exits 1 (as a real server does when a
  rank dies).
- `exit3`: the server exits with code 3 after every rank finished.
- `raise@K`: `verify` raises ValueError at cycle K on every rank; the rank catches it, prints
  it, and goes on.
- `noimport`: the ranks never import `work` (the module every target lives in).
- `usage`: the server exits 2 on its arguments before starting a rank (as argparse does).
- `forever`: ranks run until they are signalled (for the launcher signal tests).

With `REL_LOCKSTEP=1` in the environment the ranks make one `draft` call outside any cycle (the
recorder's first flush happens before they start), then start each cycle together, as ranks
held by their collectives do: each writes a file `<cycle>-<rank>` in a directory the server
made and waits until every rank's is there. A cycle number that names the same step on every
rank then starts at the same time on each, within scheduling noise.

Pure Python, no torch: a launch costs about a second of CPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

WORK = '''
import os
import time

D = float(os.environ.get("REL_SLEEP", "0.0005"))


class Result:
    def __init__(self, n):
        self.accept_len = n


class Worker:
    def step(self, i, fault=""):
        self.draft(i)
        return self.verify(i, fault)

    def draft(self, i):
        time.sleep(D)
        return i

    def verify(self, i, fault=""):
        """Verify the drafted tokens."""
        time.sleep(D)
        if fault == f"raise@{i}":
            raise ValueError(f"verify failed at cycle {i}")
        return Result(1 + i % 3)
'''

SERVER = """
import os
import signal
import subprocess
import sys
import tempfile
import time


def say(line):
    os.write(1, (line + "\\n").encode())  # one write a line: ranks print concurrently


def meet(rank, i):
    # wait until every rank reached cycle i (a file each in the server's directory)
    where, world = os.environ["REL_MEET"], int(os.environ["WORLD_SIZE"])
    open(os.path.join(where, f"{i}-{rank}"), "w").close()
    names = [f"{i}-{r}" for r in range(world)]
    while not all(os.path.exists(os.path.join(where, n)) for n in names):
        time.sleep(0.0005)


def rank_main(rank, cycles, fault):
    if fault == "noimport":
        total = sum(i % 3 for i in range(cycles))
        say(f"rank {rank}: {cycles} cycles, {total} tokens")
        return 0
    from work import Worker

    w = Worker()
    total = 0
    i = 0
    lockstep = os.environ.get("REL_LOCKSTEP") == "1"
    if lockstep:  # one call outside any cycle first: the recorder's first flush (its imports)
        w.draft(-1)  # is done before the ranks start, not inside their first cycles
        time.sleep(0.3)
    while fault == "forever" or i < cycles:
        if lockstep:
            meet(rank, i)
        kill_here = fault == f"kill1@{i}" and rank == 1
        if kill_here:
            time.sleep(0.1)  # past the flush period: cycle i ends with a flush
        try:
            total += w.step(i, fault).accept_len
        except ValueError as exc:
            say(f"rank {rank}: caught {exc!r}")
        if kill_here:
            os.kill(os.getpid(), signal.SIGKILL)
        i += 1
    say(f"rank {rank}: {cycles} cycles, {total} tokens")
    return 0


if __name__ == "__main__":
    ranks, cycles, fault = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    if fault == "usage":
        print("server.py: error: unrecognized arguments", file=sys.stderr)
        sys.exit(2)
    if "RANK" in os.environ:
        sys.exit(rank_main(int(os.environ["RANK"]), cycles, fault))
    procs = []
    meet = tempfile.mkdtemp(prefix="rel-meet-")
    for r in range(ranks):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ranks), REL_MEET=meet)
        procs.append(subprocess.Popen([sys.executable, __file__, *sys.argv[1:]], env=env))
    codes = [p.wait() for p in procs]
    say(f"server: rank exit codes {codes}")
    if any(codes):
        sys.exit(1)
    sys.exit(3 if fault == "exit3" else 0)
"""

PHASES = """
[adapter]
name = "reliability"

[[phase]]
name = "draft"
targets = ["work:Worker.draft"]

[[phase]]
name = "verify"
targets = ["work:Worker.verify"]
accept_len = "accept_len"

[cycle]
targets = ["work:Worker.step"]
accept_len = "accept_len"
"""


def write_server(root: Path) -> Path:
    """Write server.py, work.py and phases.toml under `root`; return `root`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "work.py").write_text(WORK)
    (root / "server.py").write_text(SERVER)
    (root / "phases.toml").write_text(PHASES)
    return root


def clean_env() -> dict[str, str]:
    """This environment without any TRACEKIT_* variable (a test may run inside a launch)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def server_cmd(root: Path, ranks: int, cycles: int, fault: str = "none") -> list[str]:
    return [sys.executable, str(root / "server.py"), str(ranks), str(cycles), fault]


def launch_cmd(root: Path, out: Path, name: str, server: list[str], *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tracekit",
        "launch",
        "--phases",
        str(root / "phases.toml"),
        "--out",
        str(out),
        "--name",
        name,
        "--flush-seconds",
        "0.05",
        *extra,
        "--",
        *server,
    ]


def run(
    cmd: list[str], cwd: Path, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=cwd,
        env={**clean_env(), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def tracekit_lines(stderr: str) -> list[str]:
    """The lines tracekit itself printed (its messages all start with `tracekit:`)."""
    return [ln for ln in stderr.splitlines() if ln.startswith("tracekit:")]


def program_lines(stdout: str) -> list[str]:
    """The program's own output, in a stable order (ranks print concurrently)."""
    return sorted(ln for ln in stdout.splitlines() if ln.strip())


def wait_for(predicate: object, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False
