"""torch's CUDA graphs as the recorder sees them: `torch.cuda.graphs.CUDAGraph` hooked so that
each phase knows whether it replayed graphs (`replay` counted per thread) and the hot path knows
whether a capture can be running (`capture_begin` / `capture_end` counted per process; a call
that takes no CUDA event asks torch whether its stream captures only while one is open:
docs/DEFINITIONS.md, "Hot path")."""

from __future__ import annotations

import functools
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tracekit.collectors.recording.native import NATIVE

if TYPE_CHECKING:
    from tracekit.collectors.recorder import Recorder

REPLAY_MARK = "__tracekit_replay__"


def install(module: ModuleType, rec: Recorder) -> None:
    """Hook `module.CUDAGraph` (torch.cuda.graphs) once: its replays and captures counted."""
    cls = getattr(module, "CUDAGraph", None)
    if cls is None or getattr(cls.replay, REPLAY_MARK, False):
        return
    replay = functools.wraps(cls.replay)(_counted_replay(cls.replay, rec))
    setattr(replay, REPLAY_MARK, True)
    cls.replay = replay
    count_captures(cls, rec)


def _counted_replay(orig: Any, rec: Recorder) -> Any:
    """`orig` with the thread's replay count in front: the native `ReplayCount` where the
    recorder runs the native hot path (its count a C field: no Python frame a replay), else a
    Python function that counts the same."""
    hot = rec._hot  # read directly: a replay's count is on the program's hot path too
    native = NATIVE if NATIVE is not None and isinstance(hot, NATIVE.Hot) else None
    if native is not None:
        return native.ReplayCount(orig, rec, hot)

    def replay(self: Any, *args: Any, **kwargs: Any) -> Any:
        if hot.active:
            try:
                (getattr(hot.loc, "ts", None) or rec._thread()).replays += 1
            except Exception as exc:
                rec.fail("graph replay count", exc)
        return orig(self, *args, **kwargs)

    return replay


def count_captures(cls: Any, rec: Recorder) -> None:
    """`cls.capture_begin` / `capture_end` wrapped to keep `rec._captures`, the captures begun
    and not ended in the process (a begin that raises opened none; an end always closes one,
    as CUDA ends the capture even when it reports an error). Set to 0 only once both are
    wrapped: until then (-1) every top-level call asks torch."""
    begin, end = getattr(cls, "capture_begin", None), getattr(cls, "capture_end", None)
    if begin is None or end is None:
        return
    lock = threading.Lock()

    def add(n: int) -> None:
        with lock:
            rec._captures = max(rec._captures, 0) + n

    @functools.wraps(begin)
    def capture_begin(self: Any, *args: Any, **kwargs: Any) -> Any:
        add(1)  # before the capture starts: no top-level call skips the query inside it
        try:
            return begin(self, *args, **kwargs)
        except BaseException:
            add(-1)
            raise

    @functools.wraps(end)
    def capture_end(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return end(self, *args, **kwargs)
        finally:
            add(-1)  # after it ended

    cls.capture_begin, cls.capture_end = capture_begin, capture_end
    with lock:
        rec._captures = 0
