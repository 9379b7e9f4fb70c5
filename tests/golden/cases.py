"""What the golden-output test compares: the JSON of `summary`, `breakdown`, `diff` and
`breakeven` and the Perfetto trace bytes, on the sample traces (sample_traces/).

`produce(root)` copies the sample runs under `root/runs`, merges (collector runs) or ingests
(foreign Kineto traces) them, runs each command through the CLI from inside `root/runs` with
the run directories given by name (outputs that name their run then do not depend on where it
was made: the Perfetto trace records its RUN_DIR as given), and returns {relative file name:
bytes} for tests/golden/. Any absolute path left is replaced by `$RUN/<name>`. Perfetto
traces are kept as their SHA-256 and size (`.pftrace.sha256`): the bytes are compared, the
megabytes are not stored (`regen.py --keep DIR` writes the traces themselves for a diff).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from tests.conftest import SAMPLE_TRACES

GOLDEN = Path(__file__).resolve().parent

# run name -> how to build it from sample_traces/: ("merge", run directory) or
# ("ingest", trace file or directory)
RUNS: dict[str, tuple[str, str]] = {
    "demo_cpu_full_8rank": ("merge", "demo_cpu_full_8rank"),
    "full_baseline": ("merge", "gpu_h200_full/baseline"),
    "full_extend": ("merge", "gpu_h200_full/extend"),
    "full_graph": ("merge", "gpu_h200_full/graph"),
    "full_gloo2_extend": ("merge", "gpu_h200_full/gloo2_extend"),
    "light_baseline": ("merge", "gpu_h200_light/baseline"),
    "light_graph": ("merge", "gpu_h200_light/graph"),
    "kineto_sglang_decode": (
        "ingest",
        "tracelens_sglang_qwen3_8b_decode/sglang_Qwen3-8B_decode.json.gz",
    ),
}
# Outputs of one run: file name -> CLI arguments after the run directory.
PER_RUN: dict[str, list[str]] = {
    "summary.json": ["summary", "{run}", "--json"],
    "breakdown.json": ["breakdown", "{run}", "--json"],
}
PERFETTO_RUNS = ("demo_cpu_full_8rank", "full_graph", "full_gloo2_extend", "light_graph")
# Outputs of two runs: file name -> CLI arguments ({a}, {b}: run directories by name)
PAIRS: dict[str, list[str]] = {
    "diff/full_extend__full_graph.json": ["diff", "{full_extend}", "{full_graph}", "--json"],
    "diff/light_baseline__light_graph.json": [
        "diff",
        "{light_baseline}",
        "{light_graph}",
        "--json",
    ],
    "breakeven/full_baseline__full_graph.json": [
        "breakeven",
        "--baseline",
        "{full_baseline}",
        "--spec",
        "{full_graph}",
        "--json",
    ],
    "breakeven/light_baseline__light_graph.json": [
        "breakeven",
        "--baseline",
        "{light_baseline}",
        "--spec",
        "{light_graph}",
        "--json",
    ],
    "breakeven/numbers.json": [
        "breakeven",
        "--baseline-ms",
        "12.2",
        "--cycle-ms",
        "30",
        "--accept-len",
        "3.05",
        "--verify-faster-ms",
        "6",
        "--json",
    ],
}


@dataclass(frozen=True)
class Built:
    root: Path
    runs: dict[str, Path]


def build_runs(root: Path, names: list[str] | None = None) -> Built:
    """Merged or ingested copies of the sample runs under `root/<name>`, made through the CLI
    (`tracekit merge`, `tracekit ingest`): its names outlive refactors of the modules."""
    runs: dict[str, Path] = {}
    for name in names or list(RUNS):
        how, src = RUNS[name]
        dst = root / name
        if how == "merge":
            shutil.copytree(SAMPLE_TRACES / src, dst)
            _cli(["merge", str(dst)])
        else:
            _cli(["ingest", str(SAMPLE_TRACES / src), "-o", str(dst), "-j", "1"])
        runs[name] = dst
    return Built(root, runs)


@contextmanager
def _cwd(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def _cli(args: list[str]) -> bytes:
    from tracekit.cli import cli

    res = CliRunner().invoke(cli, args, prog_name="tracekit", catch_exceptions=False)
    if res.exit_code != 0:
        msg = f"`tracekit {' '.join(args)}` exited {res.exit_code}: {res.stderr or res.output}"
        raise RuntimeError(msg)
    return res.stdout_bytes


def _normalise(data: bytes, built: Built) -> bytes:
    text = data.decode()
    for name, path in sorted(built.runs.items(), key=lambda kv: -len(str(kv[1]))):
        text = text.replace(str(path.resolve()), f"$RUN/{name}").replace(str(path), f"$RUN/{name}")
    return text.replace(str(built.root), "$ROOT").encode()


def perfetto_digest(data: bytes) -> bytes:
    return f"sha256 {hashlib.sha256(data).hexdigest()}\nbytes {len(data)}\n".encode()


def produce(
    root: Path, *, keep: Path | None = None, log: Callable[[str], None] = lambda _line: None
) -> dict[str, bytes]:
    """Every golden output, by its file name under tests/golden/."""
    built = build_runs(root / "runs")
    with _cwd(built.root):
        return _outputs(built, root, keep, log)


def _outputs(
    built: Built, root: Path, keep: Path | None, log: Callable[[str], None]
) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    fill = {name: name for name in built.runs}
    for name in built.runs:
        for file, args in PER_RUN.items():
            log(f"{name}/{file}")
            out[f"{name}/{file}"] = _normalise(_cli([a.format(run=name) for a in args]), built)
    for name in PERFETTO_RUNS:
        log(f"{name}/perfetto.pftrace")
        trace = root / f"{name}.pftrace"
        _cli(["perfetto", name, "-o", str(trace)])
        data = trace.read_bytes()
        out[f"{name}/perfetto.pftrace.sha256"] = perfetto_digest(data)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{name}.pftrace").write_bytes(data)
    for file, args in PAIRS.items():
        log(file)
        out[file] = _normalise(_cli([a.format(**fill) for a in args]), built)
    return out


def saved() -> dict[str, Path]:
    """The golden files now under tests/golden/ (relative name -> path)."""
    return {
        p.relative_to(GOLDEN).as_posix(): p
        for p in sorted(GOLDEN.rglob("*"))
        if p.is_file() and p.suffix in (".json", ".sha256")
    }
