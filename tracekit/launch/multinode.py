"""Multi-node launches: which node this launcher is, and where its part of the run goes.

`tracekit launch --name NAME --node-rank K [--nnodes M] -- CMD` on every node writes node K's
part to `OUT/NAME/parts/node-K/` (a complete single-node run directory: raw/, run.json, its own
store once merged). With OUT on shared storage all parts land in one run directory; without,
copy them to one host. `tracekit merge OUT/NAME` (or `tracekit merge PART... -o RUN`) then
joins them onto one clock (tracekit/store/join_nodes.py).

The node rank and node count come from the options, else from the command line the server is
given (SGLang's and torchrun's `--node-rank`/`--node_rank`, `--nnodes`), else from the
`NODE_RANK`/`NNODES` variables (torchrun, Lightning, SLURM's `SLURM_NODEID`/`SLURM_NNODES`).
Found in the command line or the environment, they make a part only when the node count is
above 1 (a `NODE_RANK=0` left in a one-node environment changes nothing). Runs in the launcher's own process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from tracekit.errors import CollectorError
from tracekit.store.join_nodes import NODE_PREFIX, PARTS_DIR

_RANK_FLAGS = ("--node-rank", "--node_rank")
_NNODES_FLAGS = ("--nnodes",)
_RANK_ENV = ("NODE_RANK", "GROUP_RANK", "SLURM_NODEID")
_NNODES_ENV = ("NNODES", "SLURM_NNODES")


def _flag(command: Sequence[str], flags: tuple[str, ...]) -> str | None:
    for i, arg in enumerate(command):
        for f in flags:
            if arg == f and i + 1 < len(command):
                return command[i + 1]
            if arg.startswith(f + "="):
                return arg.split("=", 1)[1]
    return None


def _count(text: str | None, what: str, source: str) -> int | None:
    if text is None or text == "":
        return None
    # torchrun's elastic form `MIN:MAX`: the most nodes there can be
    tail = text.rsplit(":", 1)[-1].strip()
    if not tail.isdecimal():
        msg = f"{what} {text!r} from {source} is not a whole number; pass `--{what} N` to tracekit launch"
        raise CollectorError(msg)
    return int(tail)


def detect(
    command: Sequence[str],
    env: Mapping[str, str] | None = None,
    *,
    node_rank: int | None = None,
    nnodes: int | None = None,
) -> tuple[int | None, int | None, str]:
    """(node rank, node count, where they came from); (None, None, "") for a one-node run."""
    env = os.environ if env is None else env
    source = "options" if node_rank is not None else ""
    if node_rank is None:
        found = _flag(command, _RANK_FLAGS)
        if found is not None:
            node_rank, source = _count(found, "node-rank", "the command line"), "command line"
    if node_rank is None:
        for key in _RANK_ENV:
            if env.get(key, "") != "":
                node_rank, source = _count(env[key], "node-rank", key), key
                break
    if nnodes is None:
        nnodes = _count(_flag(command, _NNODES_FLAGS), "nnodes", "the command line")
    if nnodes is None:
        for key in _NNODES_ENV:
            if env.get(key, "") != "":
                nnodes = _count(env[key], "nnodes", key)
                break
    if node_rank is None and nnodes is not None and nnodes > 1:
        msg = (
            f"the command spans {nnodes} nodes but this node's rank is unknown; pass "
            "`--node-rank K` to tracekit launch (or set NODE_RANK)"
        )
        raise CollectorError(msg)
    if node_rank is not None and nnodes is not None and node_rank >= nnodes:
        msg = f"node rank {node_rank} is not below the node count {nnodes}; check --node-rank / --nnodes"
        raise CollectorError(msg)
    # found in the command or the environment only: a part only when more than one node
    if node_rank is None or (source != "options" and (nnodes is None or nnodes < 2)):
        return None, None, ""
    return node_rank, nnodes, source


def create_part_dir(out: Path, name: str | None, node_rank: int) -> Path:
    """`out/name/parts/node-K/`, new (a second launch of node K under one name is an error)."""
    if not name:
        msg = (
            "a multi-node launch needs `--name NAME`, the same on every node, so that the nodes' "
            "parts land in one run"
        )
        raise CollectorError(msg)
    parts = Path(out) / name / PARTS_DIR
    parts.mkdir(parents=True, exist_ok=True)
    part = parts / f"{NODE_PREFIX}{node_rank}"
    try:
        part.mkdir()
    except FileExistsError:
        msg = (
            f"{part} exists: node {node_rank} of run {name!r} was launched already; pass another "
            "`--name` (or remove that directory)"
        )
        raise CollectorError(msg) from None
    return part
