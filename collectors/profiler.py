"""Full mode: a torch.profiler window over chosen cycles, on every rank.

`--profile-cycles START:COUNT` profiles cycles START .. START+COUNT-1, numbered as merge and the
reports number them: the engine steps that qualify by the map's cycle rule (`[cycle] require`:
a step without that phase, a prefill batch, is no cycle), from 0 in each process, which line up
across ranks. The window counts the steps by the rule merge applies to the records (a raw cycle
qualifies when a `require` phase is entered while it is the current one; `CycleCounter`); a step
that turns out not to qualify inside the window is profiled too, but is no numbered cycle.
Inside the window every phase gets a `record_function("tracekit/<phase>")` range and every
cycle-target call a `tracekit/cycle` range; with `require`, whether a step is a cycle is known
only once its `require` phase starts, so the `tracekit/cycle` range of a qualifying step starts
there (a step that is no cycle gets none). They appear in the Kineto trace as
`user_annotation` (CPU) and `gpu_user_annotation` (GPU).
The trace is written gzipped as `raw/pid-<pid>/kineto.json.gz` when the window closes (or at
process exit if the run ends inside the window).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracekit.errors import CollectorError
from tracekit.store.raw.files import KINETO_FILE


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


class CycleCounter:
    """Numbers the raw cycles of a process as merge numbers them (`store/cycle_numbers.py`):
    a raw cycle (a cycle-target call, or a `starts_with` phase and what follows it) is a cycle
    when `require` is None or a `require` phase ran with that raw cycle's number; cycles are
    numbered from 0 in raw order. Fed incrementally by the recorder."""

    def __init__(self, require: str | None) -> None:
        self.require = require
        self.count = 0  # cycles numbered so far: the next qualifying raw cycle gets this number
        self.last_raw = -1  # the last raw cycle that qualified

    def start(self, raw: int) -> int:
        """A raw cycle starts; returns the number it gets if it qualifies."""
        number = self.count
        if self.require is None:
            self._qualify(raw)
        return number

    def phase(self, name: str | None, raw: int) -> None:
        if name is not None and name == self.require and raw >= 0:
            self._qualify(raw)

    def _qualify(self, raw: int) -> None:
        if raw != self.last_raw:
            self.last_raw = raw
            self.count += 1


class ProfileWindow:
    """Starts and stops torch.profiler at cycle boundaries; writes one trace per process."""

    def __init__(self, window: CycleWindow, out_dir: Path, *, require: str | None = None) -> None:
        self.window = window
        self.out_dir = out_dir
        self.active = False
        self.done = False
        self.path: Path | None = None
        self.counter = CycleCounter(require)
        self._prof: Any = None
        self._rf: Any = None
        self._target: tuple[int, str] | None = None  # (raw cycle, range name) of a cycle target
        self._cycle_rf: Any = None  # its range, opened at the `require` phase

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

    @property
    def marks_cycle_at_start(self) -> bool:
        """Whether a cycle-target call's `tracekit/cycle` range opens with the call (no
        `require` rule); otherwise it opens when its `require` phase starts."""
        return self.counter.require is None

    def cycle_start(self, raw: int, *, target: bool = False) -> None:
        """Raw cycle `raw` starts (a cycle-target call, or the `starts_with` phase): counts it,
        starts or stops the window. Opens no range: the recorder opens them after it stamps the
        record's start, so a range lies inside its record."""
        w = self.window
        number = self.counter.start(raw)
        if self.active and number >= w.start + w.count:
            self._stop()  # starts_with cycles have no end call: stop at the next cycle's start
        if not self.done and not self.active and number == w.start and "torch" in sys.modules:
            self._start()
        if target and not self.marks_cycle_at_start:
            self._target = (raw, "tracekit/cycle")  # its range opens if the step qualifies

    def phase_start(self, phase: str | None, raw: int) -> bool:
        """A phase call starts in raw cycle `raw`: counts it for the cycle rule. True when it
        made the pending cycle target's step a cycle: its `tracekit/cycle` range opens now
        (`open_cycle_range`, once the record's start is stamped)."""
        c = self.counter
        qualified = c.last_raw
        c.phase(phase, raw)
        target = self._target
        return c.last_raw != qualified and target is not None and target[0] == raw

    def open_cycle_range(self) -> None:
        if self.active and self._target is not None:
            self._cycle_rf = self.range(self._target[1])

    def take_cycle_range(self, raw: int) -> Any:
        """The pending cycle target's range of raw cycle `raw` (None if it never opened); the
        recorder closes it before it stamps the record's end."""
        rf = None
        if self._target is not None and self._target[0] == raw:
            rf, self._cycle_rf = self._cycle_rf, None
        self._target = None
        return rf

    def cycle_end(self, raw: int) -> None:
        """A cycle-target call of raw cycle `raw` returned: stops the window after its last
        cycle."""
        w = self.window
        c = self.counter
        if self.active and c.last_raw == raw and c.count >= w.start + w.count:
            self._stop()  # the window's last cycle ended

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
