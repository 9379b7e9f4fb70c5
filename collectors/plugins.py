"""Server plugin entry points: instrument a rank through the server's own plugin loader.

Declared in pyproject.toml under `[project.entry-points."sglang.srt.plugins"]` (SGLang >= 0.5.13
calls `load_plugins()` first thing in every scheduler process) and
`[project.entry-points."vllm.general_plugins"]` (vLLM calls `load_general_plugins()` in every
worker before the model loads). They cover interpreters started with `-E`/`-I`, which ignore
PYTHONPATH and so never load the bootstrap. Outside a tracekit run (no `TRACEKIT_RUN_DIR`) they
do nothing; inside one they are a no-op when the bootstrap already activated the process.
"""

from __future__ import annotations

import os
import sys


def _activate(via: str) -> None:
    if not os.environ.get("TRACEKIT_RUN_DIR"):
        return
    try:
        from tracekit.collectors.runtime import activate

        activate(via=via)
    except Exception as exc:  # a plugin must never stop the server
        sys.stderr.write(
            f"tracekit: could not instrument pid {os.getpid()} from the {via} entry point "
            f"({type(exc).__name__}: {exc}); this process runs without tracekit\n"
        )


def sglang_plugin() -> None:
    """Entry point of the `sglang.srt.plugins` group."""
    _activate("plugin:sglang")


def vllm_plugin() -> None:
    """Entry point of the `vllm.general_plugins` group."""
    _activate("plugin:vllm")
