"""Launcher-side NVML sampler: every local GPU at 10 Hz into `raw/nvml/counters.arrow`.

Metrics (the `counters` table): sm_clock_mhz, mem_clock_mhz, power_w, temperature_c, pcie_gen,
pcie_width, throttle_reasons (NVML's bit mask), gpu_util_pct, mem_util_pct. `raw/nvml/gpus.json`
maps each NVML index to its UUID and name, so merge can file samples under the rank that used
the GPU. Without NVML (no driver, no `nvidia-ml-py`) the sampler says so once and does nothing.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracekit.store.raw.files import write_json
from tracekit.store.raw.ipc import StreamWriter
from tracekit.store.raw.nvml import COUNTERS_FILE, GPUS_FILE, Sample, nvml_schema, samples_batch


class NvmlSampler:
    def __init__(
        self, out_dir: Path, *, hz: float = 10.0, flush_seconds: float = 1.0, nvml: Any = None
    ) -> None:
        self.out_dir = out_dir
        self.period = 1.0 / hz
        self.flush_seconds = flush_seconds
        self.available = False
        self.reason = ""
        self.samples = 0
        self._nvml = nvml
        self._handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rows: list[Sample] = []
        self._stream: StreamWriter | None = None
        self._dead = False  # stopped, or a write failed: nothing more is written
        self._host = socket.gethostname()
        self._warn: Callable[[str], None] = lambda msg: None
        self._broken = False

    def start(self, warn: Callable[[str], None]) -> bool:
        self._warn = warn
        try:
            if self._nvml is None:
                import pynvml

                self._nvml = pynvml
            nv = self._nvml
            nv.nvmlInit()
            count = nv.nvmlDeviceGetCount()
            self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            self.reason = f"{type(exc).__name__}: {exc}"
            warn(f"NVML is not available ({self.reason}); no GPU counters for this run")
            return False
        if not self._handles:
            self.reason = "no GPU"
            warn("NVML found no GPU; no GPU counters for this run")
            return False
        self.available = True
        self.out_dir.mkdir(parents=True, exist_ok=True)
        gpus = []
        for i, h in enumerate(self._handles):
            gpus.append(
                {
                    "index": i,
                    "uuid": _s(self._try(self._nvml.nvmlDeviceGetUUID, h)),
                    "name": _s(self._try(self._nvml.nvmlDeviceGetName, h)),
                }
            )
        write_json(self.out_dir / GPUS_FILE, {"host": self._host, "gpus": gpus})
        self._thread = threading.Thread(target=self._run, name="tracekit-nvml", daemon=True)
        self._thread.start()
        return True

    @staticmethod
    def _try(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception:
            return None

    def sample_once(self) -> None:
        nv = self._nvml
        ts = time.time_ns()
        for i, h in enumerate(self._handles):
            util = self._try(nv.nvmlDeviceGetUtilizationRates, h)
            throttle = self._try(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
            if throttle is None:
                throttle = self._try(nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
            power = self._try(nv.nvmlDeviceGetPowerUsage, h)
            values = {
                "sm_clock_mhz": self._try(
                    lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)
                ),
                "mem_clock_mhz": self._try(
                    lambda h=h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)
                ),
                "power_w": power / 1000.0 if power is not None else None,
                "temperature_c": self._try(
                    lambda h=h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU)
                ),
                "pcie_gen": self._try(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_width": self._try(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
                "throttle_reasons": throttle,
                "gpu_util_pct": getattr(util, "gpu", None),
                "mem_util_pct": getattr(util, "memory", None),
            }
            got = [(m, v) for m, v in values.items() if v is not None]
            for metric, value in got:
                self._rows.append((i, self._host, metric, ts, float(value)))
            if not got and self.samples and not self._broken:
                self._broken = True  # a GPU lost, the driver gone: say so once, keep going
                self._warn(f"NVML stopped answering for GPU {i}; its counters end here")
        self.samples += 1

    def _run(self) -> None:
        last_flush = time.monotonic()
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.sample_once()
            now = time.monotonic()
            if now - last_flush >= self.flush_seconds:
                if not self._safe_flush():
                    return
                last_flush = now
            next_t += self.period
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def flush(self, *, final: bool = False) -> None:
        rows, self._rows = self._rows, []
        if self._stream is None:
            self.out_dir.mkdir(parents=True, exist_ok=True)
            self._stream = StreamWriter(self.out_dir / COUNTERS_FILE, nvml_schema())
        if rows:
            self._stream.write_batch(samples_batch(rows))
        if final:
            self._stream.close()

    def _safe_flush(self, *, final: bool = False) -> bool:
        """Flush; on a write error (disk full) say so once and stop sampling."""
        if self._dead:
            return False
        try:
            self.flush(final=final)
        except OSError as exc:
            self._warn(
                f"could not write GPU counters to {self.out_dir} ({exc.strerror or exc}); "
                "sampling stopped, the samples written before are kept"
            )
            if self._stream is not None:
                with contextlib.suppress(OSError):
                    self._stream.close(clean=False)
            self._dead = True
            self._stop.set()
            return False
        return True

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling; the sampler thread is waited for at most `timeout` seconds."""
        if not self.available:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(0.0, timeout))
        self._safe_flush(final=True)
        self._dead = True
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass


def _s(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return "" if value is None else str(value)
