"""NVML absent, failing mid-run, or unable to write: said once, the run goes on, what was
sampled before is kept."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tracekit.launch.nvml import NvmlSampler
from tracekit.store.raw import ipc as raw_ipc
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.nvml import COUNTERS_FILE


class Nvml:
    """A one-GPU NVML that works for `healthy` samples, then raises on every query."""

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, healthy: int = 10**9, init_error: Exception | None = None) -> None:
        self.healthy = healthy
        self.init_error = init_error
        self.calls = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        raise RuntimeError("NVML_ERROR_UNINITIALIZED")  # must not escape either

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return "GPU-0"

    def nvmlDeviceGetName(self, h: int) -> str:
        return "Fake"

    def _value(self, v: Any) -> Any:
        if self.healthy < 0:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return v

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self.healthy -= 1  # one utilisation query a sample: count samples here
        return self._value(SimpleNamespace(gpu=90, memory=40))

    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int:
        return int(self._value(1980))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("nvmlDevice"):
            return lambda *a: self._value(1)
        raise AttributeError(name)


def test_nvml_absent_is_said_once_and_nothing_is_written(tmp_path: Path) -> None:
    said: list[str] = []
    s = NvmlSampler(tmp_path / "nvml", nvml=Nvml(init_error=OSError("libnvidia-ml.so.1")))
    assert not s.start(said.append)
    s.stop()
    assert len(said) == 1
    assert "NVML is not available" in said[0]
    assert "libnvidia-ml.so.1" in said[0]


def test_nvml_failing_mid_run_keeps_earlier_samples_and_says_so_once(tmp_path: Path) -> None:
    # GIVEN a GPU that answers 3 samples, then is lost
    said: list[str] = []
    s = NvmlSampler(tmp_path / "nvml", nvml=Nvml(healthy=3))
    s.available = True
    # started by hand: no thread, samples taken one by one
    s._handles = [0]
    s._warn = said.append
    # WHEN it is sampled 8 times and stopped
    for _ in range(8):
        s.sample_once()
    s.stop()  # NVML's shutdown raising too must not escape
    # THEN one plain line, and the 3 good samples are on disk
    assert len(said) == 1
    assert "NVML stopped answering for GPU 0" in said[0]
    table, complete, err = read_stream(tmp_path / "nvml" / COUNTERS_FILE)
    assert err is None
    assert complete
    assert table is not None
    assert len(set(table.column("ts_ns").to_pylist())) == 3
    util = [r["value"] for r in table.to_pylist() if r["metric"] == "gpu_util_pct"]
    assert util == [90.0, 90.0, 90.0]


class _FullDisk:
    def __init__(self, ok: int) -> None:
        self.ok = ok

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: bytes) -> int:
        self.ok -= 1
        if self.ok < 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return os.write(fd, data)


def test_nvml_disk_full_stops_sampling_once_without_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the sampler's third write (schema, batch, batch) failing with ENOSPC
    monkeypatch.setattr(raw_ipc, "os", _FullDisk(ok=2))
    said: list[str] = []
    s = NvmlSampler(tmp_path / "nvml", hz=200, flush_seconds=0.01, nvml=Nvml())
    # WHEN it samples in its thread for a while, then the launcher stops it
    assert s.start(said.append)
    s._thread.join(timeout=10)  # type: ignore[union-attr]  # it stops by itself on the error
    s.stop()
    # THEN it said so once, its thread ended cleanly, and the first batch is readable
    assert s._thread is not None
    assert not s._thread.is_alive()
    assert len(said) == 1
    assert "No space left on device" in said[0]
    table, _complete, _err = read_stream(tmp_path / "nvml" / COUNTERS_FILE)
    assert table is not None
    assert table.num_rows > 0
