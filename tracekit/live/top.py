"""`tracekit top`'s loop pieces: poll the feed, update the state, give a frame."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Group

from tracekit.live.feed import LiveFeed
from tracekit.live.render import render
from tracekit.live.snapshot import Snapshot, TopState


class TopView:
    def __init__(self, run_dir: Path, *, window_s: float = 30.0, baseline_s: float = 120.0) -> None:
        self.run_dir = run_dir
        self.feed = LiveFeed(run_dir / "raw")
        self.state = TopState(window_s=window_s, baseline_s=baseline_s)

    def snapshot(self) -> Snapshot:
        polled = self.feed.poll()
        self.state.add(polled.instances, polled.cycles)
        procs = self.feed.tail.procs.values()
        running = any(p.records and not p.info.get("finished") for p in procs)
        lost = sum(self.feed.lost().values()) + self.feed.unranked_lost
        return self.state.snapshot(run=self.run_dir.name, records_lost=lost, running=running)

    def frame(self, *, wait: float = 0.0) -> Group:
        if wait:
            time.sleep(wait)
        return render(self.snapshot())
