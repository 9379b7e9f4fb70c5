from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tracekit.launch.nvml import NvmlSampler
from tracekit.store.raw.ipc import read_stream
from tracekit.store.raw.nvml import COUNTERS_FILE, GPUS_FILE


class FakeNvml:
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h}"

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"Fake H200"

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        return SimpleNamespace(gpu=50 + h, memory=10)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return 4

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return 350_000

    def nvmlDeviceGetClockInfo(self, h: int, which: int) -> int:
        return 1980 if which == self.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, h: int, which: int) -> int:
        return 40

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        raise RuntimeError("not supported")  # a metric that fails is skipped

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return 16


def test_sampler_writes_counters(tmp_path: Path) -> None:
    s = NvmlSampler(tmp_path / "nvml", nvml=FakeNvml())
    assert s.start(lambda m: None)
    s.sample_once()
    s.stop()
    table, complete, err = read_stream(tmp_path / "nvml" / COUNTERS_FILE)
    assert complete
    assert err is None
    assert table is not None
    rows = table.to_pylist()
    by = {(r["gpu"], r["metric"]): r["value"] for r in rows}
    assert by[(0, "sm_clock_mhz")] == 1980.0
    assert by[(1, "gpu_util_pct")] == 51.0
    assert by[(0, "power_w")] == 350.0
    assert by[(0, "throttle_reasons")] == 4.0
    assert (0, "pcie_gen") not in by
    gpus = json.loads((tmp_path / "nvml" / GPUS_FILE).read_text())["gpus"]
    assert gpus == [
        {"index": 0, "uuid": "GPU-0", "name": "Fake H200"},
        {"index": 1, "uuid": "GPU-1", "name": "Fake H200"},
    ]


def test_without_nvml_says_so_once(tmp_path: Path) -> None:
    class NoNvml(FakeNvml):
        def nvmlInit(self) -> None:
            raise OSError("NVML Shared Library Not Found")

    said: list[str] = []
    s = NvmlSampler(tmp_path / "nvml", nvml=NoNvml())
    assert not s.start(said.append)
    s.stop()
    assert len(said) == 1
    assert "NVML is not available" in said[0]
    assert not (tmp_path / "nvml").exists()
