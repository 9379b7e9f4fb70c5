"""`accepts.jsonl`: the per-request numbers of accept rules, beside a process's records.

A record row holds one float of acceptance (`accept_len`). A step of a batching server has
several requests, and acceptance as the server counts it (vLLM's `1 + accepted / drafts`,
pooled over the requests that drafted) needs each request's numbers, so the recorder writes
them here, one JSON line a reading, appended at each flush after the rows they belong to:

    {"k": 17, "t": [3, 1, 1]}     # a "count" rule's tokens of each request (1 + accepted)
    {"k": 16, "d": [2, 2, 0]}     # a "drafted" rule's draft tokens of each request

`k` is the row's `seq` (phase rows) or -seq (a cycle rule's reading). One file a record
segment (`accepts.jsonl` beside `records.arrow`, `accepts.N.jsonl` beside `records.N.arrow`),
written after that segment's rows and deleted with it by retention (`--keep`). A side file rather than
more row columns: the row stays a fixed-size struct (the hot path packs it without a loop), the
lists have any length, and runs recorded before the file existed read as before (no file: the
row's float alone). A cut last line (a killed process) is skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ACCEPTS_FILE = "accepts.jsonl"  # segment 0's; accepts.N.jsonl for segment N
Detail = tuple[int, str, list[float]]  # (row key, "t" | "d", numbers)


def accepts_name(index: int) -> str:
    """The readings file of record segment `index`."""
    return ACCEPTS_FILE if index == 0 else f"accepts.{index}.jsonl"


def _num(x: float) -> int | float:
    return int(x) if x == int(x) else x


def accepts_lines(detail: list[Detail]) -> bytes:
    """The JSON lines of `detail`, as one append writes them."""
    return "".join(
        json.dumps({"k": key, tag: [_num(v) for v in nums]}, separators=(",", ":")) + "\n"
        for key, tag, nums in detail
    ).encode()


def read_accepts(pid_dir: Path) -> dict[tuple[str, int], dict[str, list[float]]]:
    """(row kind "phase" | "cycle", seq) -> {"t": tokens, "d": drafted} of a process (every
    segment's file); empty when it has none. Lines that are not such readings are skipped."""
    out: dict[tuple[str, int], dict[str, list[float]]] = {}
    lines: list[str] = []
    for path in sorted(pid_dir.glob("accepts*.jsonl")):
        try:
            lines += path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or type(entry.get("k")) is not int:
            continue
        key = int(entry["k"])
        slot = out.setdefault(("cycle" if key < 0 else "phase", abs(key)), {})
        for tag in ("t", "d"):
            nums = entry.get(tag)
            if isinstance(nums, list) and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in nums
            ):
                slot[tag] = [float(v) for v in nums]
    return out


def attach_accepts(records: Any, pid_dir: Path) -> Any:
    """The decoded records (a polars frame) with their readings: `acc_tokens`, `acc_drafted`
    (lists; null where the row has none), joined on (kind, seq)."""
    import polars as pl

    found = read_accepts(pid_dir)
    lists = pl.List(pl.Float64)
    readings = pl.DataFrame(
        {
            "kind": [k for k, _ in found],
            "seq": [s for _, s in found],
            "acc_tokens": [v.get("t") for v in found.values()],
            "acc_drafted": [v.get("d") for v in found.values()],
        },
        schema={"kind": pl.String, "seq": pl.Int64, "acc_tokens": lists, "acc_drafted": lists},
    )
    return records.join(readings, on=["kind", "seq"], how="left", maintain_order="left")
