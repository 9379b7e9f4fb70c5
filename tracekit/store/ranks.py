"""Which rank a Kineto trace belongs to.

Order: an explicit override (`--rank`, or `merge` for the collector's own traces) ->
`distributedInfo.rank` (parsed JSON, never a regex on the text: HTA's regex misses compact JSON) ->
the file name (`rank3`, `rank-3`, `rank_3`; SGLang `...-TP-3...`; vLLM `...tp3...`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from tracekit.errors import RankError

# First match wins. `rank` first: vLLM names carry both `tp{r}` (rank inside the TP group) and
# `rank{g}` (global rank); the global one is unique across DP/PP replicas.
NAME_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(?<![A-Za-z])rank[-_]?(\d+)", re.IGNORECASE),
    re.compile(r"(?<![A-Za-z])TP-(\d+)"),
    re.compile(r"(?<![A-Za-z])tp[-_]?(\d+)", re.IGNORECASE),
)

# How a trace's rank was found (the `trace`/`rank_source` manifest entry).
RankSource = Literal["override", "distributedInfo", "file name"]

MAX_RANK = 2**31  # ranks are int32 in the store; a larger number is not a rank


def rank_from_distributed_info(info: Any) -> int | None:
    """`distributedInfo.rank` as an int, or None when absent or not a number."""
    if not isinstance(info, dict):
        return None
    value = info.get("rank")
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < MAX_RANK else None  # -1: "not distributed" in some producers
    if isinstance(value, str) and value.strip().isdecimal():
        rank = int(value)
        return rank if rank < MAX_RANK else None
    return None


def rank_from_name(path: Path) -> int | None:
    """A rank read from the file name (not the directories), or None."""
    name = path.name
    for pattern in NAME_PATTERNS:
        m = pattern.search(name)
        if m and len(m.group(1)) < 10 and int(m.group(1)) < MAX_RANK:
            return int(m.group(1))
    return None


def detect_rank(
    path: Path, distributed_info: Any, override: int | None = None
) -> tuple[int, RankSource]:
    """(rank, how it was found). Raises RankError when nothing says which rank this is."""
    if override is not None:
        return override, "override"
    rank = rank_from_distributed_info(distributed_info)
    if rank is not None:
        return rank, "distributedInfo"
    rank = rank_from_name(path)
    if rank is not None:
        return rank, "file name"
    msg = (
        f"{path}: cannot tell which rank this trace is (no `distributedInfo.rank`, no rank in "
        "the file name); pass `--rank N` (one file) or rename it with `rank<N>`"
    )
    raise RankError(msg)
