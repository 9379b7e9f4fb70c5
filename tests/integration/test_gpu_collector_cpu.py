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
    # cycles 0..15, cycle c's verify spans 10 + c ms (unsampled median 17.5)
    full = {"verify": [10.0 + c for c in range(16)], "verify@cycles": [float(c) for c in range(16)]}
    sampled = {"verify": [15.5, 19.5], "verify@cycles": [5.0, 13.0]}
    r = gc.compare_sampling(full, sampled, 8)["verify"]
    assert r["unsampled_p50_ms"] == 17.5
    assert r["sampled_vs_unsampled_pct"] == pytest.approx(0.0)  # (15.5 + 19.5) / 2 = 17.5
    # the cycles --gpu-sample 8 times: {c / phi} < 1/8 for c = 0, 5, 13 (0.618 c = 0, 3.090,
    # 8.034): spans 10, 15, 23, median 15
    assert r["subsample_vs_all_pct"] == pytest.approx(100 * (15 / 17.5 - 1))
    assert r["shifted_subsamples_pct"][0] == r["subsample_vs_all_pct"]
    # shifted by 1 cycle: c + 1 in {0, 5, 13}: c = 4, 12 (spans 14, 22, median 18)
    assert r["shifted_subsamples_pct"][1] == pytest.approx(100 * (18 / 17.5 - 1))
    assert len(r["shifted_subsamples_pct"]) == 8
    assert r["calls"] == [16, 2]
    # the unsampled run alone (--sampling-error-only): no sampled figure, the error still
    alone = gc.compare_sampling(full, None, 8)["verify"]
    assert alone["sampled_p50_ms"] is None
    assert alone["subsample_vs_all_pct"] == r["subsample_vs_all_pct"]
    assert gc.compare_sampling(None, sampled, 8) == {"error": "the unsampled run failed"}


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
