"""Real-server tests: vLLM's CPU build, in its own environment (`make test-servers`).

Skipped where vLLM is not installed (the main suite's .venv). Each test appends what it
measured to `tests/servers/.results/results.jsonl`; the run ends with a table of them.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

RESULTS = Path(__file__).resolve().parent / ".results"
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAVE_VLLM:
        return
    skip = pytest.mark.skip(reason="vLLM is not installed here; `make test-servers` makes its venv")
    for item in items:
        if "tests/servers/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    path = RESULTS / "results.jsonl"
    if not path.is_file():
        return
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return
    terminalreporter.section("tracekit on vLLM: measured per configuration")
    for r in rows:
        terminalreporter.write_line(json.dumps(r, sort_keys=True))
