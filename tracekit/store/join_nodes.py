"""`tracekit merge PART... -o RUN`: join the parts of a multi-node run onto one clock.

A part is one node's run directory (`tracekit launch --node-rank K` writes
`OUT/NAME/parts/node-K/`, a complete single-node run), or one host's ingested traces. Each
part is merged first if it has only raw output; then its store partitions are copied into
`RUN/store/`, every time column shifted by the part's clock offset (`tracekit.store.clock`),
and a `node` section is added to each rank's manifests (`part-node.parquet`: node, nnodes,
host, part, clock offset, method, error). Ranks are the server's global ranks, so parts never
share one (two parts claiming a rank is an error naming both). A node of `nnodes` with no part
is reported missing, and ranks of the world size without data are reported; the rest is
joined. `RUN/run.json` is the first part's, with `parts`, `nodes`, `missing_nodes` and `clock`.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tracekit.errors import InputError, RankError
from tracekit.store import clock as clk
from tracekit.store.layout import RunLayout, check_run_dir
from tracekit.store.reader import table_files
from tracekit.store.schema import TABLES
from tracekit.store.writer import with_metadata

PARTS_DIR = "parts"
NODE_PREFIX = "node-"
NODE_MANIFEST_PART = "part-node.parquet"
JOIN_SOURCE = "join"


@dataclass
class Part:
    path: Path
    name: str
    node: int | None
    nnodes: int | None
    host: str
    run: dict[str, Any]
    ranks: list[int] = field(default_factory=list)


@dataclass
class JoinResult:
    run_dir: Path
    parts: list[Part] = field(default_factory=list)
    ranks: list[int] = field(default_factory=list)
    nnodes: int | None = None
    missing_nodes: list[int] = field(default_factory=list)
    missing_ranks: list[int] = field(default_factory=list)
    clock: list[clk.PartClock] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)  # table -> rows written
    warnings: list[str] = field(default_factory=list)


def part_dirs(run_dir: Path) -> list[Path]:
    """The node parts inside a shared run directory (`RUN/parts/node-K/`), by node."""
    base = Path(run_dir) / PARTS_DIR
    found = [d for d in base.glob(f"{NODE_PREFIX}*") if d.is_dir()]

    def node(d: Path) -> tuple[int, str]:
        tail = d.name[len(NODE_PREFIX) :]
        return (int(tail) if tail.isdecimal() else 1 << 30, d.name)

    return sorted(found, key=node)


def expand(paths: Sequence[Path]) -> list[Path]:
    """Each path as a part, except a directory holding `parts/node-*`, which stands for them."""
    out: list[Path] = []
    for p in paths:
        inner = part_dirs(p)
        out.extend(inner if inner else [Path(p)])
    return out


def _refuse_other_run(out: Path, parts_in: list[Path]) -> None:
    """InputError when `out` holds a run other than the join of these parts (its run.json,
    raw/ or store/ would be replaced); the parts' own run directory, or an earlier join of the
    same parts, is rewritten."""
    held = [n for n in ("run.json", "raw", "store") if (out / n).exists()]
    if not held:
        return
    root = out.resolve()
    if all(root in p.resolve().parents for p in parts_in):
        return  # RUN itself, its parts under RUN/parts/
    before = _read_run(out).get("parts")
    paths = {str(p.resolve()) for p in parts_in}
    if (
        isinstance(before, list)
        and {str(b.get("path")) for b in before if isinstance(b, dict)} == paths
    ):
        return
    msg = (
        f"{out} already holds another run ({', '.join(held)}); joining into it would replace "
        "its tables: give a new `-o` directory, or add --force to replace that run"
    )
    raise InputError(msg)


def _read_run(path: Path) -> dict[str, Any]:
    try:
        data = json.loads((path / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _manifest_entries(path: Path) -> Iterator[tuple[Any, Any, Any]]:
    """(section, key, value) of every row of a part's `manifests` table, rank by rank."""
    for _rank, f in table_files(path, "manifests"):
        t = pq.read_table(f)
        yield from zip(
            t.column("section").to_pylist(),
            t.column("key").to_pylist(),
            t.column("value").to_pylist(),
            strict=True,
        )


def _host_of(path: Path, run: dict[str, Any]) -> str:
    if isinstance(run.get("host"), str):
        return str(run["host"])
    for s, k, v in _manifest_entries(path):
        if k == "host" and s in ("process", "distributed", "trace"):
            return str(v)
    return ""


def needs_merge(path: Path) -> bool:
    """A part with raw collector output and no store yet (launched with --no-merge, or its
    node's merge failed)."""
    return RunLayout(path).raw.is_dir() and not table_files(path, "manifests")


def merge_part(path: str) -> list[str]:
    """Merge one part (a task); its warnings, each naming the part."""
    from tracekit.store.merge import merge

    res = merge(Path(path))
    return [f"{path}: {w}" for w in res.warnings]


def read_part(path: Path, index: int, warnings: list[str]) -> Part:
    path = Path(path)
    check_run_dir(path, hint="pass the parts `tracekit launch --node-rank K` wrote")
    run = _read_run(path)
    if run.get("source") == JOIN_SOURCE:
        msg = f"{path}: a joined run, not a part; pass the parts it lists in run.json (`parts`)"
        raise InputError(msg)
    # counters of a GPU no rank claimed are filed under its index, which is not a rank
    ranks = sorted(
        {r for table in TABLES if table != "counters" for r, _ in table_files(path, table)}
    )
    if not ranks:
        msg = (
            f"{path}: no store tables (nothing recorded, or not a run directory); pass the "
            "directory `tracekit launch` printed for that node"
        )
        raise InputError(msg)
    node = _int(run.get("node_rank"))
    return Part(
        path=path,
        name=f"node-{node}" if node is not None else path.name or f"part-{index}",
        node=node,
        nnodes=_int(run.get("nnodes")),
        host=_host_of(path, run),
        run=run,
        ranks=ranks,
    )


def _check_ranks(parts: list[Part]) -> None:
    owner: dict[int, Part] = {}
    for p in parts:
        for r in p.ranks:
            if r in owner:
                msg = (
                    f"{owner[r].path} and {p.path} both hold rank {r}; parts must record the "
                    "server's global ranks (RANK / torch.distributed), not local ones: pass "
                    "each node's part once"
                )
                raise RankError(msg)
            owner[r] = p


def _world_size(parts: list[Part]) -> int | None:
    sizes: list[int] = []
    for p in parts:
        for s, k, v in _manifest_entries(p.path):
            if s == "distributed" and k == "world_size" and str(v).isdecimal():
                sizes.append(int(v))
    return max(sizes) if sizes else None


MapFn = Callable[[Callable[..., Any], list[Any]], list[Any]]


def _serial_map(fn: Callable[..., Any], items: list[Any]) -> list[Any]:
    return [fn(*it) for it in items]


def copy_partition(src: str, dst: str, table: str, offset_ns: int) -> int:
    """Copy one Parquet part file, its time columns shifted by -offset_ns; rows written."""
    data = pq.read_table(src)
    data = clk.shift(data, table, offset_ns)
    data = data.replace_schema_metadata(with_metadata(data.schema).metadata)
    out = Path(dst)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    pq.write_table(data, tmp, compression="zstd")
    tmp.replace(out)
    return int(data.num_rows)


def _parts_in(paths: Sequence[Path], out: Path, force: bool) -> list[Path]:
    """The part directories to join into `out`; InputError when there are none, `out` is
    one of them, or `out` holds another run (unless `force`)."""
    parts_in = expand(paths)
    if not parts_in:
        msg = "no parts to merge; pass the node directories (`RUN/parts/node-K`) or RUN itself"
        raise InputError(msg)
    if out.resolve() in {p.resolve() for p in parts_in}:
        msg = f"{out}: is one of the parts; pass another directory with `-o`"
        raise InputError(msg)
    if not force:
        _refuse_other_run(out, parts_in)
    return parts_in


def _read_parts(
    parts_in: list[Path], run_map: MapFn, nnodes: int | None, result: JoinResult
) -> list[Part]:
    """Each part, merged first when it has only raw output, read and checked (a node given
    twice, a rank in two parts), in rank order; the nodes (`nnodes` when given, else the
    parts' count) and those missing into `result`."""
    for warnings in run_map(merge_part, [(str(p),) for p in parts_in if needs_merge(p)]):
        result.warnings.extend(warnings)
    parts = [read_part(p, i, result.warnings) for i, p in enumerate(parts_in)]
    nodes = [p.node for p in parts if p.node is not None]
    if len(nodes) != len(set(nodes)):
        dup = sorted({n for n in nodes if nodes.count(n) > 1})
        msg = f"node(s) {dup} given twice among the parts; pass each node's part once"
        raise InputError(msg)
    _check_ranks(parts)
    parts.sort(key=lambda p: min(p.ranks))
    result.nnodes = nnodes or max([p.nnodes or 0 for p in parts] + [len(parts)])
    if nodes or nnodes:
        result.missing_nodes = [n for n in range(result.nnodes) if n not in nodes]
    if result.missing_nodes:
        result.warnings.append(
            f"node(s) {result.missing_nodes} of {result.nnodes} have no part (not launched, "
            "or their directory was not given); merged the others"
        )
    return parts


def _copy_jobs(out: Path, result: JoinResult) -> list[tuple[str, str, str, int]]:
    """(source file, destination, table, clock offset) of every partition of every part;
    the counters of a GPU no rank of its part used are left out (one warning each)."""
    jobs: list[tuple[str, str, str, int]] = []
    for p, c in zip(result.parts, result.clock, strict=True):
        for table in TABLES:
            for rank, f in table_files(p.path, table):
                if f.name == NODE_MANIFEST_PART:
                    continue
                if rank not in p.ranks:  # counters of a GPU no rank of the part claimed
                    result.warnings.append(
                        f"{f}: samples of GPU {rank} of {p.name}, which no rank of it used; "
                        "left out (GPU indices repeat across nodes)"
                    )
                    continue
                dst = RunLayout(out).partition_dir(table, rank) / f.name
                jobs.append((str(f), str(dst), table, c.offset_ns))
    return jobs


def join(
    paths: Sequence[Path],
    out: Path,
    *,
    nnodes: int | None = None,
    map_fn: MapFn | None = None,
    force: bool = False,
) -> JoinResult:
    """Join the parts `paths` (see the module text) into the run directory `out`; an `out`
    holding another run is refused unless `force`."""
    out = Path(out)
    result = JoinResult(run_dir=out)
    parts_in = _parts_in(paths, out, force)
    run_map = map_fn or _serial_map
    result.parts = parts = _read_parts(parts_in, run_map, nnodes, result)
    result.clock = clk.align([(p.name, p.host, p.path) for p in parts])
    for c in result.clock:
        if c.method == "wall clock":
            result.warnings.append(
                f"{c.part}: no collectives in common with {result.clock[0].part}, so its wall "
                "clock is kept (error unknown: NTP-synchronised hosts differ by up to about "
                "a millisecond)"
            )
    for table in TABLES:
        shutil.rmtree(RunLayout(out).table_dir(table), ignore_errors=True)
    jobs = _copy_jobs(out, result)
    counts = run_map(copy_partition, jobs)
    for (_src, _dst, table, _off), n in zip(jobs, counts, strict=True):
        result.rows[table] = result.rows.get(table, 0) + int(n)
    for p, c in zip(parts, result.clock, strict=True):
        for rank in p.ranks:
            _write_node_rows(out, rank, p, c, result.nnodes)
    result.ranks = sorted(r for p in parts for r in p.ranks)
    world = _world_size(parts)
    if world is not None:
        result.missing_ranks = [r for r in range(world) if r not in result.ranks]
        if result.missing_ranks:
            result.warnings.append(
                f"ranks {result.missing_ranks} of {world} are in no part; merged the others"
            )
    _write_run(out, result)
    return result


def _write_node_rows(out: Path, rank: int, p: Part, c: clk.PartClock, nnodes: int | None) -> None:
    rows = {
        "node": "" if p.node is None else str(p.node),
        "nnodes": "" if nnodes is None else str(nnodes),
        "host": p.host,
        "part": str(p.path.resolve()),
        "clock_offset_ns": str(c.offset_ns),
        "clock_method": c.method,
        "clock_estimator": c.estimator,
        "clock_error_ns": "" if c.error_ns is None else f"{c.error_ns:.0f}",
        "clock_spread_ns": "" if c.spread_ns is None else f"{c.spread_ns:.0f}",
        "clock_anchors": str(c.anchors),
        "clock_bound_low_ns": "" if c.bound_low_ns is None else str(c.bound_low_ns),
        "clock_bound_high_ns": "" if c.bound_high_ns is None else str(c.bound_high_ns),
    }
    t = pa.table(
        {
            "section": ["node"] * len(rows),
            "key": list(rows),
            "value": list(rows.values()),
        },
        schema=TABLES["manifests"],
    )
    d = RunLayout(out).partition_dir("manifests", rank)
    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(
        t.replace_schema_metadata(with_metadata(t.schema).metadata), d / NODE_MANIFEST_PART
    )


def _write_run(out: Path, result: JoinResult) -> None:
    first = result.parts[0].run
    doc = {k: v for k, v in first.items() if k not in ("node_rank", "processes")}
    starts = [p.run["start_ns"] for p in result.parts if isinstance(p.run.get("start_ns"), int)]
    ends = [p.run["end_ns"] for p in result.parts if isinstance(p.run.get("end_ns"), int)]
    doc.update(
        source=JOIN_SOURCE,
        start_ns=min(starts) if starts else None,
        end_ns=max(ends) if ends else None,
        nnodes=result.nnodes,
        missing_nodes=result.missing_nodes,
        missing_ranks=result.missing_ranks,
        parts=[
            {
                "path": str(p.path.resolve()),
                "node": p.node,
                "host": p.host,
                "ranks": p.ranks,
                "exit_code": p.run.get("exit_code"),
            }
            for p in result.parts
        ],
        clock=[c.as_dict() for c in result.clock],
    )
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / ".run.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(out / "run.json")
