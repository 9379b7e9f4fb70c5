"""The fault matrix (docs/RELIABILITY.md, "Fault matrix"): every raw file kind x (missing, empty,
cut in half, random bytes), through `tracekit merge` and every analysis command. Each cell is
exit 0 with the loss stated (a warning naming the file), or exit 2 with one line; never a
traceback, never exit 0 with an unstated loss. And the cycle identity after a lost segment: a
cycle number names the same step on every rank.

The damaged inputs are built from one small real run made once for the module (2 ranks, 60
cycles started together as collectives would hold them, record segments rotated every 0.4 s), to which a Kineto
trace and NVML samples are added (a light-mode CPU run writes neither). Commands run through
click's CliRunner; a few real processes show that no traceback reaches the user.
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import SAMPLE_TRACES
from tests.reliability._programs import launch_cmd, run, server_cmd, write_server
from tracekit.cli import cli
from tracekit.store.raw.files import KINETO_FILE, PROCESS_FILE, segment_name
from tracekit.store.raw.ipc import StreamWriter
from tracekit.store.raw.nvml import COUNTERS_FILE, GPUS_FILE, NVML_DIR, nvml_schema, samples_batch
from tracekit.store.reader import check_store, read_table

CYCLES = 60
MIDDLE = 2  # the record segment cut in the middle-segment tests
KINETO = next((SAMPLE_TRACES / "demo_cpu_full_8rank" / "raw").glob("pid-*/kineto.json.gz"))


def _rank_dir(run_dir: Path, rank: int) -> Path:
    for d in sorted((run_dir / "raw").glob("pid-*")):
        info = json.loads((d / PROCESS_FILE).read_text())
        if str(info.get("rank_info", {}).get("env_rank")) == str(rank):
            return d
    raise AssertionError(f"no rank {rank} in {run_dir}")


def _add_nvml(run_dir: Path) -> None:
    """NVML samples of two GPUs and their table, as the launcher's sampler writes them."""
    nvml = run_dir / "raw" / NVML_DIR
    nvml.mkdir()
    w = StreamWriter(nvml / COUNTERS_FILE, nvml_schema())
    for t in range(20):
        rows = [(g, "h", m, 10**9 * t, 1.0 * t) for g in (0, 1) for m in ("power_w", "sm_mhz")]
        w.write_batch(samples_batch(rows))
    w.close()
    gpus = [{"index": g, "uuid": f"GPU-{g}", "name": "test"} for g in (0, 1)]
    (nvml / GPUS_FILE).write_text(json.dumps({"gpus": gpus}))
    doc = json.loads((run_dir / "run.json").read_text())
    doc.update(nvml="sampled at 10 Hz", mode="full")
    (run_dir / "run.json").write_text(json.dumps(doc))


def _apart(run_dir: Path) -> tuple[pl.Series, float, pl.DataFrame]:
    """How far apart each cycle both ranks have starts on them, one cycle's time (the median
    from one cycle's start to the next on rank 1), and the joined cycles."""
    cycles = read_table(run_dir, "cycles").select("rank", "cycle", "start_ns")
    one = cycles.filter(pl.col("rank") == 1).sort("cycle")["start_ns"].diff().median()
    both = cycles.filter(pl.col("rank") == 0).join(
        cycles.filter(pl.col("rank") == 1), on="cycle", suffix="_1"
    )
    return (both["start_ns"] - both["start_ns_1"]).abs(), float(one), both  # type: ignore[arg-type]


def _launch(root: Path, name: str) -> Path:
    server = write_server(root / "srv")
    cmd = launch_cmd(server, root / "runs", name, server_cmd(server, 2, CYCLES))
    env = {"REL_LOCKSTEP": "1", "REL_SLEEP": "0.04", "TRACEKIT_SEGMENT_SECONDS": "0.4"}
    res = run(cmd, server, **env)
    assert res.returncode == 0, res.stderr
    return root / "runs" / name


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run every cell damages a copy of: raw/ complete, merged without a warning, every
    cycle starting within one cycle's time on both ranks (a run the scheduler stalled a rank
    of, on a loaded machine, is made again: the tests compare with this baseline)."""
    root = tmp_path_factory.mktemp("faults")
    for attempt in range(3):
        run_dir = _launch(root, f"src{attempt}")
        apart, one, _ = _apart(run_dir)
        if apart.max() < one:  # type: ignore[operator]
            break
    else:
        pytest.fail(f"3 runs with a rank stalled for more than a cycle ({one / 1e6:.0f} ms)")
    for rank in (0, 1):
        shutil.copy(KINETO, _rank_dir(run_dir, rank) / KINETO_FILE)
    _add_nvml(run_dir)
    merged = CliRunner().invoke(cli, ["merge", str(run_dir)])
    assert merged.exit_code == 0, merged.output
    assert "warning" not in merged.output, merged.output
    assert len(list(_rank_dir(run_dir, 0).glob("records*.arrow"))) > MIDDLE + 1
    return run_dir


# -- the cells ---------------------------------------------------------------------------

# kind -> the file of that kind in a run directory
KINDS: dict[str, Callable[[Path], Path]] = {
    "record segment": lambda r: _rank_dir(r, 0) / segment_name(MIDDLE),
    "sites.json": lambda r: _rank_dir(r, 0) / "sites.json",
    "process.json": lambda r: _rank_dir(r, 0) / PROCESS_FILE,
    "manifest.json": lambda r: _rank_dir(r, 0) / "manifest.json",
    "run.json": lambda r: r / "run.json",
    "kineto.json.gz": lambda r: _rank_dir(r, 0) / KINETO_FILE,
    "nvml counters": lambda r: r / "raw" / NVML_DIR / COUNTERS_FILE,
}


def _random(path: Path) -> None:
    n = max(64, path.stat().st_size)
    path.write_bytes(random.Random(n).randbytes(n))


DAMAGES: dict[str, Callable[[Path], None]] = {
    "missing": lambda p: p.unlink(),
    "empty": lambda p: p.write_bytes(b""),
    "cut in half": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "random bytes": _random,
}

# (kind, damage) -> words of the one warning merge gives (exit 0), the loss stated
WARNS: dict[tuple[str, str], tuple[str, ...]] = {
    ("record segment", "missing"): ("missing", "records lost", "cycles"),
    ("record segment", "empty"): ("empty file", "records lost", "cycles"),
    ("record segment", "cut in half"): ("records lost", "cycles"),
    ("record segment", "random bytes"): ("damaged", "records lost", "cycles"),
    **{("sites.json", d): ("cannot be named", "nothing of rank 0") for d in DAMAGES},
    ("process.json", "missing"): ("process.json: missing", "rank is unknown", "left out"),
    **{("process.json", d): ("not readable JSON", "rank is unknown") for d in list(DAMAGES)[1:]},
    ("manifest.json", "missing"): ("missing", "rank 0's manifest"),
    **{("manifest.json", d): ("not readable JSON", "rank 0's manifest") for d in list(DAMAGES)[1:]},
    ("run.json", "missing"): ("missing", "cycle rule is unknown"),
    **{("run.json", d): ("not readable JSON", "cycle rule is unknown") for d in list(DAMAGES)[1:]},
    ("kineto.json.gz", "missing"): ("missing", "ranks [0]", "no kernel events"),
    ("kineto.json.gz", "empty"): ("could not be ingested", "ranks [0]", "no kernel events"),
    ("kineto.json.gz", "cut in half"): ("truncated", "salvaged"),
    ("kineto.json.gz", "random bytes"): ("could not be ingested", "ranks [0]", "no kernel events"),
    ("nvml counters", "missing"): ("missing", "no GPU counters"),
    ("nvml counters", "empty"): ("empty file", "no GPU counters"),
    ("nvml counters", "cut in half"): ("damaged after its last complete batch", "samples"),
    ("nvml counters", "random bytes"): ("damaged", "no GPU counters"),
}
CELLS = sorted(WARNS)

COMMANDS = [
    ["summary", "{run}"],
    ["breakdown", "{run}", "--json"],
    ["temporal", "{run}"],
    ["perfetto", "{run}", "-o", "{tmp}/t.pftrace"],
    ["report", "{run}", "-o", "{tmp}/r.html"],
    ["diff", "{run}", "{good}"],
    ["breakeven", "--baseline", "{good}", "--spec", "{run}"],
]


def _invoke(argv: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(cli, argv)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise AssertionError(f"tracekit {' '.join(argv)} raised {res.exception!r}:\n{res.output}")
    return res.exit_code, res.output


def _one_error(output: str) -> str:
    lines = [ln for ln in output.splitlines() if ln.startswith("tracekit: error:")]
    assert len(lines) == 1, output
    return lines[0]


def _commands_read_it_or_say_one_line(run_dir: Path, good: Path, tmp: Path) -> dict[str, int]:
    codes = {}
    for args in COMMANDS:
        argv = [a.format(run=run_dir, tmp=tmp, good=good) for a in args]
        code, output = _invoke(argv)
        assert code in (0, 2), (argv, output)
        if code == 2:
            _one_error(output)
            assert not (tmp / "r.html").exists() or args[0] != "report"
        codes[args[0]] = code
    return codes


@pytest.mark.parametrize(("kind", "damage"), CELLS, ids=[f"{k}-{d}" for k, d in CELLS])
def test_raw_fault_is_a_stated_loss(source: Path, tmp_path: Path, kind: str, damage: str) -> None:
    # GIVEN a copy of the run with one raw file damaged, and its store removed
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    shutil.rmtree(run_dir / "store")
    path = KINDS[kind](run_dir)
    DAMAGES[damage](path)
    # WHEN it is merged
    code, output = _invoke(["merge", str(run_dir)])
    # THEN exit 0 and one warning names the file and states the loss
    assert code == 0, output
    warnings = [ln for ln in output.splitlines() if ln.startswith("tracekit: warning:")]
    about = [ln for ln in warnings if path.name in ln and all(w in ln for w in WARNS[kind, damage])]
    assert len(about) == 1, warnings
    # and the store it wrote reads (every command: test_every_command_reads_what_merge_kept)
    check_store(run_dir)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_command_reads_what_merge_kept(source: Path, tmp_path: Path, kind: str) -> None:
    # GIVEN a run with one file of `kind` cut in half, merged (the loss stated: above)
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    DAMAGES["cut in half"](KINDS[kind](run_dir))
    code, output = _invoke(["merge", str(run_dir)])
    assert code == 0, output
    # THEN every command reads the store merge wrote (0), or says in one line why not (2)
    codes = _commands_read_it_or_say_one_line(run_dir, source, tmp_path)
    assert codes["summary"] == 0, codes


NOTHING_READABLE: dict[str, Callable[[Path], None]] = {
    "missing": DAMAGES["missing"],
    "empty": DAMAGES["empty"],
    "cut to 10 bytes": lambda p: p.write_bytes(p.read_bytes()[:10]),
    "random bytes": _random,
}


@pytest.mark.parametrize("damage", sorted(NOTHING_READABLE))
def test_every_record_file_damaged_is_one_line_exit_2(
    source: Path, tmp_path: Path, damage: str
) -> None:
    # GIVEN a copy whose every record segment, of every rank, is damaged the same way
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    segments = sorted((run_dir / "raw").glob("pid-*/records*.arrow"))
    for seg in segments:
        NOTHING_READABLE[damage](seg)
    # WHEN it is merged
    code, output = _invoke(["merge", str(run_dir)])
    # THEN one line, exit 2, and the store is left as it was
    assert code == 2, output
    line = _one_error(output)
    assert "nothing readable" in line
    assert f"{len(segments)} record file(s) damaged" in line
    assert read_table(run_dir, "cycles").height == 2 * CYCLES


# -- the store ---------------------------------------------------------------------------


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_store_fault_is_one_line_exit_2_for_every_command(
    source: Path, tmp_path: Path, damage: str
) -> None:
    # GIVEN a merged run whose rank 0 `phases` part is damaged
    run_dir = tmp_path / "run"
    shutil.copytree(source, run_dir)
    (part,) = (run_dir / "store" / "phases" / "rank=0").glob("*.parquet")
    DAMAGES[damage](part)
    # WHEN every command reads it THEN each exits 2 with the same line, naming the part
    lines = set()
    for args in COMMANDS:
        argv = [a.format(run=run_dir, tmp=tmp_path, good=source) for a in args]
        code, output = _invoke(argv)
        assert code == 2, (argv, output)
        lines.add(_one_error(output))
    assert not (tmp_path / "r.html").exists()  # no page from a store that does not read
    assert not (tmp_path / "t.pftrace").exists()
    (line,) = lines
    assert (
        ("phases" in line and "rank(s) [0]" in line) if damage == "missing" else str(part) in line
    )


# -- cycle identity after a lost segment -------------------------------------------------


def _cut_middle(source: Path, tmp_path: Path) -> Path:
    run_dir = tmp_path / "cut"
    shutil.copytree(source, run_dir)
    seg = _rank_dir(run_dir, 0) / segment_name(MIDDLE)
    seg.write_bytes(seg.read_bytes()[: seg.stat().st_size // 2])
    return run_dir


def test_cut_middle_segment_keeps_every_cycle_on_its_step(source: Path, tmp_path: Path) -> None:
    # GIVEN rank 0's middle record segment cut in half (a full disk, an interrupted copy)
    run_dir = _cut_middle(source, tmp_path)
    # WHEN it is merged in a real process
    res = subprocess.run(
        [sys.executable, "-m", "tracekit", "merge", str(run_dir)],
        capture_output=True,
        text=True,
        check=False,
    )
    # THEN exit 0, no traceback, one warning naming the file, the records and cycles lost
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("tracekit: warning:")]
    (line,) = warnings
    assert segment_name(MIDDLE) in line
    assert "records lost" in line
    assert "rank 0's cycles" in line
    cycles = read_table(run_dir, "cycles").select("rank", "cycle", "start_ns")
    per_rank = dict(cycles.group_by("rank").len().rows())
    assert per_rank[1] == CYCLES
    assert 0 < CYCLES - per_rank[0] < CYCLES // 2  # rank 0 lost cycles in the middle
    lost = sorted(set(range(CYCLES)) - set(cycles.filter(pl.col("rank") == 0)["cycle"]))
    assert f"rank 0's cycles {lost[0]}-{lost[-1]} ({len(lost)} cycles)" in line
    assert lost[-1] < CYCLES - 1  # cycles after the loss were read
    # and every common cycle starts within one cycle's time on both ranks, as in the run
    # before the cut (a number off by one step would be a whole cycle apart)
    apart, one, both = _apart(run_dir)
    assert both.height == per_rank[0]
    assert apart.max() < one, both.with_columns(apart=apart).sort("apart").tail(3)


def test_commands_on_a_partial_run_read_it(source: Path, tmp_path: Path) -> None:
    # GIVEN the merged run with rank 0's middle segment cut (the loss stated by merge)
    run_dir = _cut_middle(source, tmp_path)
    code, _output = _invoke(["merge", str(run_dir)])
    assert code == 0
    # THEN every command reads it
    codes = _commands_read_it_or_say_one_line(run_dir, source, tmp_path)
    assert set(codes.values()) == {0}, codes


# -- Kineto traces given to ingest -------------------------------------------------------


@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("suffix", [".json", ".json.gz"])
def test_kineto_trace_fault_is_one_line_exit_2(tmp_path: Path, damage: str, suffix: str) -> None:
    # GIVEN a real Kineto trace, as JSON or gzip, damaged
    data = gzip.decompress(KINETO.read_bytes())
    trace = tmp_path / f"rank0{suffix}"
    trace.write_bytes(gzip.compress(data) if suffix.endswith(".gz") else data)
    DAMAGES[damage](trace)
    # WHEN it is ingested
    code, output = _invoke(["ingest", str(trace), "-o", str(tmp_path / "run")])
    # THEN what was written before a cut is salvaged, and said; else one line, exit 2
    if damage == "cut in half":
        assert code == 0, output
        (line,) = [ln for ln in output.splitlines() if ln.startswith("tracekit: warning:")]
        assert trace.name in line
        assert "salvaged" in line
    else:
        assert code == 2, output
        assert trace.name in _one_error(output)
