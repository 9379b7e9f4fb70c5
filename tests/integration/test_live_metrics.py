"""`tracekit launch --metrics-port` and `tracekit top` on the demo server while it runs
(2 CPU ranks, gloo; real subprocesses), issue 17."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tracekit.live.feed import LiveFeed


def _scrape(url: str) -> dict[str, Any]:
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(fams: dict[str, Any], sample: str, **labels: str) -> float:
    for fam in fams.values():
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


@pytest.mark.slow  # the demo's start-up (torch, gloo) under launch: about 20-30 s
def test_metrics_scraped_while_the_demo_runs_and_top_shows_it_17(tmp_path: Path) -> None:
    # GIVEN: the demo under launch, metrics on any free port of 127.0.0.1
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRACEKIT_")}
    cmd = [
        sys.executable, "-m", "tracekit", "launch", "--adapter", "demo", "--out", str(tmp_path),
        "--name", "run", "--flush-interval", "0.2", "--metrics-port", "0", "--",
        sys.executable, "-m", "tracekit.demo", "--ranks", "2", "--cycles", "400",
        "--model-size", "tiny", "-q",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    assert proc.stderr is not None
    lines: list[str] = []
    url = None
    for line in proc.stderr:
        lines.append(line)
        m = re.search(r"serving live metrics on (http://127\.0\.0\.1:\d+/metrics)", line)
        if m:
            url = m.group(1)
            break
    assert url, "".join(lines)
    drain = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)  # type: ignore[arg-type]
    drain.start()
    run = tmp_path / "run"
    try:
        # WHEN: scraped until both ranks have completed cycles, the demo still running
        fams: dict[str, Any] = {}
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            fams = _scrape(url)
            if all(_value(fams, "tracekit_cycles_total", rank=r) >= 5 for r in ("0", "1")):
                break
            time.sleep(0.3)
        assert proc.poll() is None, "the demo ended before the metrics showed its cycles"
        top = subprocess.run(
            [sys.executable, "-m", "tracekit", "top", str(run), "--once", "--width", "130"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        fams_later = _scrape(url)
    finally:
        rc = proc.wait(timeout=300)
        drain.join(timeout=5)
    # THEN: prometheus_client's own parser reads every family; per rank and phase
    assert rc == 0, "".join(lines)
    for rank in ("0", "1"):
        assert _value(fams, "tracekit_cycles_total", rank=rank) >= 5
        for phase in ("draft", "verify", "draft_extend"):
            n = _value(fams, "tracekit_phase_wall_seconds_count", rank=rank, phase=phase)
            assert n >= 5
            assert (
                _value(
                    fams, "tracekit_phase_wall_seconds_bucket", rank=rank, phase=phase, le="+Inf"
                )
                == n
            )
            for part in ("forward", "allreduce", "overhead"):
                assert (
                    _value(fams, f"tracekit_phase_{part}_seconds_count", rank=rank, phase=phase)
                    == n
                )
            wall = _value(fams, "tracekit_phase_wall_seconds_sum", rank=rank, phase=phase)
            parts = sum(
                _value(fams, f"tracekit_phase_{p}_seconds_sum", rank=rank, phase=phase)
                for p in ("forward", "allreduce", "overhead")
            )
            assert parts == pytest.approx(wall, rel=1e-6)  # wall = forward + allreduce + overhead
            assert (
                _value(fams, "tracekit_graph_replay_fraction", rank=rank, phase=phase) == 0.0
            )  # CPU
        assert _value(fams, "tracekit_accept_length_count", rank=rank) >= 5
        assert (
            1.0
            <= _value(fams, "tracekit_accept_length_sum", rank=rank)
            / _value(fams, "tracekit_accept_length_count", rank=rank)
            <= 5.0
        )  # K=4 draft tokens + the bonus token at most
        assert _value(fams, "tracekit_records_lost_total", rank=rank, reason="retention") == 0
        assert _value(fams, "tracekit_records_total", rank=rank) > 0
    assert _value(fams, "tracekit_ranks") == 2
    assert _value(fams_later, "tracekit_cycles_total", rank="0") >= _value(
        fams, "tracekit_cycles_total", rank="0"
    )
    # top, on the run in progress
    assert top.returncode == 0, top.stderr
    assert "running" in top.stdout
    assert "lagging rank" in top.stdout
    assert re.search(r"│\s+0\b.*│\s+verify", top.stdout)
    assert re.search(r"│\s+1\b.*│\s+verify", top.stdout)
    # the live figures are the breakdown's on the finished run (light mode), instance by instance
    # (every cycle: the live view shows warm-up too, the breakdown's default leaves it out)
    bd = subprocess.run(
        [sys.executable, "-m", "tracekit", "breakdown", str(run), "--json", "--all-cycles"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    rows = sorted(
        (r["rank"], r["phase"], r["wall_ns"], r["forward_ns"], r["allreduce_ns"], r["overhead_ns"])
        for r in json.loads(bd.stdout)
    )
    polled = LiveFeed(run / "raw").poll()
    live = sorted(
        (i.rank, i.phase, i.wall_ns, i.forward_ns, i.allreduce_ns, i.overhead_ns)
        for i in polled.instances
    )
    assert live == rows
    assert len(polled.cycles) == 800
