"""Shared fixtures: where the sample traces and the (optional) shared corpus are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE_TRACES = REPO / "sample_traces"
# The shared corpus lives beside the checkout on the development machines only;
# TRACEKIT_CORPUS points elsewhere (a worktree whose parent has no shared/).
CORPUS = Path(os.environ.get("TRACEKIT_CORPUS", REPO.parent / "shared" / "corpus"))


@pytest.fixture
def corpus() -> Path:
    """The shared corpus directory; tests using it skip cleanly on a user's clone."""
    if not CORPUS.is_dir():
        pytest.skip("../shared/corpus is not present (only on the development machines)")
    return CORPUS


@pytest.fixture
def sample_traces() -> Path:
    return SAMPLE_TRACES
