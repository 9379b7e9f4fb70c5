"""Full mode: a torch.profiler window over chosen cycles, on every rank.

`--profile-cycles START:COUNT` profiles cycles START .. START+COUNT-1 (the rank's own cycle
numbers, which line up across ranks). Inside the window every phase gets a
`record_function("tracekit/<phase>")` range and every cycle-target call a `tracekit/cycle` range,
so they appear in the Kineto trace as `user_annotation` (CPU) and `gpu_user_annotation` (GPU).
The trace is written gzipped as `raw/pid-<pid>/kineto.json.gz` when the window closes (or at
process exit if the run ends inside the window).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import CollectorError

KINETO_FILE = "kineto.json.gz"


@dataclass(frozen=True)
class CycleWindow:
    start: int
    count: int

    @classmethod
    def parse(cls, text: str) -> CycleWindow:
        try:
            a, b = text.split(":")
            start, count = int(a), int(b)
        except ValueError:
            start, count = -1, -1
        if start < 0 or count < 1:
            msg = f"--profile-cycles {text!r}: expected START:COUNT with START >= 0 and COUNT >= 1, e.g. 5:3"
            raise CollectorError(msg)
        return cls(start, count)

    def __str__(self) -> str:
        return f"{self.start}:{self.count}"


class ProfileWindow:
    """Starts and stops torch.profiler at cycle boundaries; writes one trace per process."""

    def __init__(self, window: CycleWindow, out_dir: Path) -> None:
        self.window = window
        self.out_dir = out_dir
        self.active = False
        self.done = False
        self.path: Path | None = None
        self._prof: Any = None
        self._rf: Any = None

    def _start(self) -> None:
        import torch
        from torch.autograd.profiler import record_function
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
            activities.append(ProfilerActivity.CUDA)
        self._rf = record_function
        self._prof = profile(activities=activities, record_shapes=False, with_stack=False)
        self._prof.__enter__()
        self.active = True

    def _stop(self) -> None:
        self.active = False
        self.done = True
        prof, self._prof = self._prof, None
        if prof is None:
            return
        prof.__exit__(None, None, None)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / KINETO_FILE
        prof.export_chrome_trace(str(path))
        self.path = path

    def cycle_start(self, cycle: int, range_name: str | None) -> Any:
        w = self.window
        if self.active and cycle >= w.start + w.count:
            self._stop()  # starts_with cycles have no end call: stop at the next cycle's start
        if not self.done and not self.active and cycle == w.start and "torch" in sys.modules:
            self._start()
        if self.active and range_name is not None:
            return self.range(range_name)
        return None

    def cycle_end(self, cycle: int, rf: Any = None) -> None:
        if rf is not None:
            self.range_exit(rf)
        w = self.window
        if self.active and cycle >= w.start + w.count - 1:
            self._stop()

    def range(self, name: str) -> Any:
        rf = self._rf(name)
        rf.__enter__()
        return rf

    @staticmethod
    def range_exit(rf: Any) -> None:
        rf.__exit__(None, None, None)

    def close(self) -> None:
        if self.active:
            self._stop()
