"""bench/gpu_collector.py's CPU code paths (`--device cpu --tiny`), before device time is spent."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _mod() -> Any:
    spec = importlib.util.spec_from_file_location(
        "gpu_collector", ROOT / "bench" / "gpu_collector.py"
    )
    assert spec is not None
    assert spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["gpu_collector"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_compare_sampling_on_hand_built_spans() -> None:
    gc = _mod()
    full = {"verify": [10.0, 11.0, 12.0, 13.0], "verify@cycles": [8.0, 9.0, 16.0, 17.0]}
    sampled = {"verify": [10.5, 12.5], "verify@cycles": [8.0, 16.0]}
    r = gc.compare_sampling(full, sampled, 8)["verify"]
    # unsampled median 11.5, sampled 11.5: 0%; every 8th cycle of the unsampled run: 10, 12
    assert r["unsampled_p50_ms"] == 11.5
    assert r["sampled_vs_unsampled_pct"] == 0.0
    assert r["subsample_p50_ms"] == 11.0
    assert r["subsample_vs_all_pct"] == pytest.approx(100 * (11.0 / 11.5 - 1))
    assert gc.compare_sampling(None, sampled, 8) == {"error": "a run of the pair failed"}


@pytest.mark.slow
def test_cpu_tiny_run_writes_its_figures(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_collector.py"), "--out", str(out),
         "--device", "cpu", "--tiny", "--budget-s", "200", "--skip", "sampling,ab8"],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((out / "gpu_collector.json").read_text())
    assert res["errors"] == {}
    m = res["micro"]
    assert m["cycle_events_per_cycle"] == 0.0  # a CPU: no CUDA events
    assert m["outermost_cost_cpu_ns"] > 0
    for path in ("baseline", "extend"):
        assert res["ab"][path]["groups"] == 2
    assert (out / "gpu_collector.log").read_text().count("ab extend: light") == 1
