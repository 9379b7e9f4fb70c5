"""Read the written .pftrace back (protobuf only, no binary) and check it against the store."""

from __future__ import annotations

import importlib.metadata
from collections import Counter
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.outputs_synth import FILL, GEMM, NCCL, make_run
from tests.pftrace_read import ReadBack, read_back
from tracekit.errors import InputError, StoreError
from tracekit.export.perfetto import export, export_run, write_perfetto
from tracekit.store import reader
from tracekit.store.reader import read_table
from tracekit.store.schema import SCHEMA_VERSION


def _rank_tracks(rb: ReadBack) -> dict[int, int]:
    """rank -> process track uuid."""
    out = {}
    for uuid, d in rb.processes().items():
        out[int(d.process.process_name.split()[1])] = uuid
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ReadBack]:
    run_dir = tmp_path_factory.mktemp("run")
    make_run(run_dir, ranks=2, cycles=4)
    out = write_perfetto(run_dir, run_dir / "t.pftrace", flows=True)
    return run_dir, read_back(out)


def test_every_slice_pairs_and_every_track_is_declared(run: tuple[Path, ReadBack]) -> None:
    _, rb = run
    assert rb.unmatched_ends == 0
    assert rb.unclosed == 0


def test_one_process_per_rank_named_with_rank_host_pid(run: tuple[Path, ReadBack]) -> None:
    _, rb = run
    names = sorted(d.process.process_name for d in rb.processes().values())
    assert names == ["rank 0 · node-a · pid 4000", "rank 1 · node-a · pid 4001"]
    assert len({d.process.pid for d in rb.processes().values()}) == 2


def test_kernels_all_present_with_exact_times_and_overlaps_on_lanes(
    run: tuple[Path, ReadBack],
) -> None:
    run_dir, rb = run
    events = read_table(run_dir, "events")
    for rank, proc in _rank_tracks(rb).items():
        # GIVEN the store's kernels of this rank
        kernels = events.filter((pl.col("rank") == rank) & (pl.col("cat") == "kernel"))
        expected = Counter(
            (n, s, s + d)
            for n, s, d in kernels.select(
                pl.col("name").cast(pl.String), "start_ns", "dur_ns"
            ).iter_rows()
        )
        # WHEN reading the slices under the rank's GPU track
        gpu = [
            u
            for u in rb.children(proc)
            if rb.track_name(u).startswith("GPU ") and not rb.tracks[u].HasField("counter")
        ]
        assert [rb.track_name(u) for u in gpu] == [f"GPU {rank}"]
        under = rb.under(gpu[0])
        got = Counter((s.name, s.start, s.end) for s in rb.slices if s.track in under)
        # THEN nothing is dropped or moved, and the overlapping draft kernels sit on a lane
        assert got == expected
        lanes = sorted(rb.track_name(u) for u in rb.children(gpu[0]))
        assert lanes == ["stream 7", "stream 7 · lane 1"]
        lane1 = next(u for u in rb.children(gpu[0]) if rb.track_name(u) == "stream 7 · lane 1")
        assert sum(1 for s in rb.slices if s.track == lane1) == 4  # one overlap a cycle
    assert {s.name for s in rb.slices} >= {GEMM, FILL, NCCL}


def test_cpu_threads_and_phases_cycles_tracks(run: tuple[Path, ReadBack]) -> None:
    run_dir, rb = run
    for rank, proc in _rank_tracks(rb).items():
        kids = {rb.track_name(u): u for u in rb.children(proc)}
        assert {"cycles", "phases", f"GPU {rank}", f"thread {4000 + rank}"} <= set(kids)
        cyc = [s for s in rb.slices if s.track == kids["cycles"]]
        table = read_table(run_dir, "cycles", rank=rank).sort("cycle")
        assert [
            (s.start, s.end, s.args["accept_len"]) for s in sorted(cyc, key=lambda s: s.start)
        ] == list(table.select("start_ns", "end_ns", "accept_len").iter_rows())
        ph = [s for s in rb.slices if s.track == kids["phases"]]
        assert Counter(s.name for s in ph) == {"draft": 4, "verify": 4}
        cpu = [s for s in rb.slices if s.track == kids[f"thread {4000 + rank}"]]
        assert Counter(s.name for s in cpu) == {
            "tracekit/cycle": 4,
            "tracekit/draft": 4,
            "tracekit/verify": 4,
            "aten::mm": 12,
            "cudaLaunchKernel": 28,
        }


def test_flows_one_id_per_kernel_from_its_launch(run: tuple[Path, ReadBack]) -> None:
    _, rb = run
    kernel_flows = [f for s in rb.slices if s.name in (GEMM, FILL, NCCL) for f in s.flows]
    launch_flows = [f for s in rb.slices if s.name == "cudaLaunchKernel" for f in s.flows]
    assert len(kernel_flows) == 2 * 4 * 7
    assert len(set(kernel_flows)) == len(kernel_flows)  # a flow id never forks
    assert sorted(launch_flows) == sorted(kernel_flows)
    # each kernel's flow starts at the launch with the same correlation id
    by_flow = {f: s for s in rb.slices if s.name == "cudaLaunchKernel" for f in s.flows}
    for s in rb.slices:
        if s.flows and s.name != "cudaLaunchKernel":
            assert by_flow[s.flows[0]].correlation == s.correlation


def test_graph_launch_fans_out_with_one_flow_per_kernel(tmp_path: Path) -> None:
    make_run(tmp_path, ranks=1, cycles=2, graph=True)
    rb = read_back(write_perfetto(tmp_path, tmp_path / "g.pftrace", flows=True))
    launches = [s for s in rb.slices if s.name == "cudaGraphLaunch"]
    assert [len(s.flows) for s in launches] == [4, 4]
    assert len({f for s in launches for f in s.flows}) == 8


def test_counters_become_counter_tracks(run: tuple[Path, ReadBack]) -> None:
    run_dir, rb = run
    counters = read_table(run_dir, "counters")
    tracks = {rb.track_name(u): u for u, d in rb.tracks.items() if d.HasField("counter")}
    assert len(tracks) == 6  # 2 ranks x 3 metrics, one name each (the GPU index is the rank)
    assert rb.tracks[tracks["GPU 0 power_w"]].counter.unit_name == "W"
    got = sorted(v for ts, v in rb.counters[tracks["GPU 1 power_w"]])
    want = sorted(
        counters.filter((pl.col("rank") == 1) & (pl.col("metric").cast(pl.String) == "power_w"))[
            "value"
        ].to_list()
    )
    assert got == want


def test_a_metric_without_a_known_unit_is_still_a_counter_track(tmp_path: Path) -> None:
    import pyarrow as pa

    from tracekit.store.writer import write_partition

    make_run(tmp_path, ranks=1, cycles=1, counters=False)
    write_partition(
        tmp_path,
        "counters",
        0,
        pa.table(
            {
                "gpu": [0, 0],
                "host": ["h", "h"],
                "metric": ["pcie_gen", "pcie_gen"],
                "ts_ns": [1, 2],
                "value": [4.0, 5.0],
            }
        ),
    )
    rb = read_back(write_perfetto(tmp_path, tmp_path / "c.pftrace"))
    track = next(u for u in rb.tracks if rb.track_name(u) == "GPU 0 pcie_gen")
    assert rb.tracks[track].HasField("counter")
    assert rb.counters[track] == [(1, 4.0), (2, 5.0)]


def test_names_are_interned_once_per_rank(run: tuple[Path, ReadBack]) -> None:
    run_dir, _ = run
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    t = Trace()
    t.ParseFromString((run_dir / "t.pftrace").read_bytes())
    interned = Counter(
        (p.trusted_packet_sequence_id, n.name)
        for p in t.packet
        for n in p.interned_data.event_names
    )
    assert interned[(2, GEMM)] == 1
    assert max(interned.values()) == 1
    assert not any(
        p.track_event.name
        for p in t.packet
        if p.track_event.type in (1, 2) and p.trusted_packet_sequence_id > 1
    )


def test_metadata_records_versions(run: tuple[Path, ReadBack]) -> None:
    run_dir, rb = run
    # the versions the store's own files were written with (Parquet key-value metadata), and
    # the installed distribution's version
    _, part = reader.table_files(run_dir, "events")[0]
    meta_kv = pq.read_schema(part).metadata
    store_schema = int(meta_kv[b"tracekit.schema_version"])
    meta = next(s for s in rb.instants if s.name == "tracekit run")
    assert meta.args["schema_version"] == store_schema == SCHEMA_VERSION
    # the version of the distribution that installed the `tracekit` package (its name is
    # looked up, not written here: a renamed distribution still passes)
    (dist,) = set(importlib.metadata.packages_distributions()["tracekit"])
    assert meta.args["tracekit_version"] == importlib.metadata.version(dist)
    assert meta.args["tracekit_version"] == meta_kv[b"tracekit.version"].decode()


def test_light_run_without_events_still_has_phases(tmp_path: Path) -> None:
    make_run(tmp_path, ranks=1, cycles=3, events=False, counters=False)
    stats = export_run(tmp_path, tmp_path / "l.pftrace")
    rb = read_back(stats.path)
    assert Counter(s.name for s in rb.slices) == {
        "draft": 3,
        "verify": 3,
        "cycle 0": 1,
        "cycle 1": 1,
        "cycle 2": 1,
    }


def test_bad_inputs_raise_tracekit_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a run directory"):
        write_perfetto(tmp_path / "nope", tmp_path / "x.pftrace")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="tracekit ingest"):
        write_perfetto(tmp_path / "empty", tmp_path / "x.pftrace")
    assert not (tmp_path / "x.pftrace").exists()


def test_phase_and_cycle_args_carry_the_breakdown(run: tuple[Path, ReadBack]) -> None:
    # GIVEN the analyzers' breakdown of the run
    from tracekit.analyzers.run_analysis import analyze

    run_dir, rb = run
    bd = analyze(run_dir).breakdown
    # WHEN reading the phases tracks' slices
    got = {}
    for rank, proc in _rank_tracks(rb).items():
        kids = {rb.track_name(u): u for u in rb.children(proc)}
        for s in rb.slices:
            if s.track == kids["phases"]:
                got[(rank, s.args["cycle"], s.name, s.start)] = s.args
    # THEN every breakdown row is on its phase slice, field for field
    assert len(got) == bd.height == 2 * 4 * 2
    for row in bd.iter_rows(named=True):
        args = got[(row["rank"], row["cycle"], row["phase"], row["start_ns"])]
        for key in (
            "wall_ns",
            "forward_ns",
            "allreduce_ns",
            "overhead_ns",
            "graph_replayed",
            "kernels",
        ):
            assert args[key] == row[key], key
        assert args.get("allreduce_impl") == row["allreduce_impl"]
    # and each cycle slice sums its phases
    for rank, proc in _rank_tracks(rb).items():
        kids = {rb.track_name(u): u for u in rb.children(proc)}
        for s in rb.slices:
            if s.track == kids["cycles"]:
                rows = bd.filter((pl.col("rank") == rank) & (pl.col("cycle") == s.args["cycle"]))
                assert s.args["forward_ns"] == rows["forward_ns"].sum()
                assert s.args["allreduce_ns"] == rows["allreduce_ns"].sum()
                assert s.args["overhead_ns"] == rows["overhead_ns"].sum()
                assert s.args["wall_ns"] == rows["wall_ns"].sum()


def test_phase_and_cycle_args_have_the_known_figures(run: tuple[Path, ReadBack]) -> None:
    # GIVEN make_run's figures (tests/outputs_synth.py, 3 draft kernels: 110, 60 and 60 µs, the
    # first two overlapping by 10 µs; 4 verify kernels of 100 µs, the last an NCCL allreduce)
    _, rb = run
    for _rank, proc in _rank_tracks(rb).items():
        kids = {rb.track_name(u): u for u in rb.children(proc)}
        phases = [s for s in rb.slices if s.track == kids["phases"]]
        cycles = [s for s in rb.slices if s.track == kids["cycles"]]
        # THEN each phase slice carries them
        for s in phases:
            if s.name == "draft":
                assert (s.args["kernels"], s.args["forward_ns"], s.args["allreduce_ns"]) == (
                    3,
                    220_000,
                    0,
                )
                assert "allreduce_impl" not in s.args
            else:
                assert (s.args["kernels"], s.args["forward_ns"], s.args["allreduce_ns"]) == (
                    4,
                    300_000,
                    100_000,
                )
                assert s.args["allreduce_impl"].startswith("nccl:")
        # and each cycle slice their sums
        assert len(cycles) == 4
        for s in cycles:
            assert (s.args["forward_ns"], s.args["allreduce_ns"]) == (520_000, 100_000)
            assert s.args["allreduce_impl"].startswith("nccl:")
            assert s.args["graph_replayed"] is False


def test_an_analysis_exports_the_same_bytes_as_its_run_dir(
    run: tuple[Path, ReadBack], tmp_path: Path
) -> None:
    from tracekit.analyzers.run_analysis import analyze

    run_dir, _ = run
    out = export(analyze(run_dir), tmp_path / "a.pftrace", flows=True).path
    assert out.read_bytes() == (run_dir / "t.pftrace").read_bytes()


def test_phase_args_are_joined_on_the_instance_id(tmp_path: Path) -> None:
    # GIVEN a run's analysis whose breakdown rows say wall_ns = 1000 + inst and start_ns = 0
    # (the key is the instance id, not the row's start), and whose cycle frame says wall_ns =
    # 7000 + cycle (figures no phase or cycle has)
    from dataclasses import replace

    from tracekit.analyzers.run_analysis import analyze

    make_run(tmp_path, ranks=1, cycles=3, counters=False)
    analysis = analyze(tmp_path)
    (ra,) = analysis.ranks
    assert ra.breakdown is not None
    assert ra.cycles is not None
    ra = replace(
        ra,
        breakdown=ra.breakdown.with_columns(wall_ns=1000 + pl.col("inst"), start_ns=0),
        cycles=ra.cycles.with_columns(wall_ns=7000 + pl.col("cycle")),
    )
    # WHEN exporting it
    rb = read_back(export(replace(analysis, ranks=(ra,)), tmp_path / "i.pftrace").path)
    # THEN each phase slice has its own instance's row, and each cycle its cycle frame's wall
    inst = {
        (p, s): i for p, s, i in ra.phases.instances.select("phase", "start_ns", "inst").iter_rows()
    }
    kids = {rb.track_name(u): u for u in rb.children(next(iter(_rank_tracks(rb).values())))}
    phases = [s for s in rb.slices if s.track == kids["phases"]]
    assert len(phases) == 6
    assert all(s.args["wall_ns"] == 1000 + inst[(s.name, s.start)] for s in phases)
    cycles = [s for s in rb.slices if s.track == kids["cycles"]]
    assert sorted(s.args["wall_ns"] for s in cycles) == [7000, 7001, 7002]


@pytest.mark.slow
def test_parallel_ranks_write_the_same_trace(tmp_path: Path) -> None:
    # GIVEN a 3-rank run, written in this process and by 2 worker processes
    make_run(tmp_path / "run", ranks=3, cycles=3)
    one = read_back(write_perfetto(tmp_path / "run", tmp_path / "one.pftrace", flows=True, jobs=1))
    two = read_back(write_perfetto(tmp_path / "run", tmp_path / "two.pftrace", flows=True, jobs=2))

    def content(rb: ReadBack) -> Counter[tuple[object, ...]]:
        return Counter(
            (
                rb.track_name(s.track),
                s.name,
                s.start,
                s.end,
                tuple(sorted(s.args.items())),
                tuple(s.flows),
            )
            for s in rb.slices
        )

    # THEN the same slices on the same tracks (the files differ only in packet order, if at all)
    assert content(one) == content(two)
    assert len(one.tracks) == len(two.tracks)
