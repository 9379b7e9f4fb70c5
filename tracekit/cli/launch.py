"""`tracekit launch -- CMD`: run a server command with every rank instrumented."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from tracekit.cli._options import mode_option, out_option, phases_option, profile_cycles_option
from tracekit.store.layout import Mode

if TYPE_CHECKING:
    from tracekit.launch.options import LaunchResult


@click.command(
    name="launch",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--adapter",
    default=None,
    help="Built-in phase map: demo, sglang or vllm (default: demo unless --phases is given).",
)
@phases_option(help="Your own phase map (TOML); see docs/launch.md.")
@mode_option(
    default="light",
    help="light: NVTX ranges, CPU times, CUDA events. full: also a torch.profiler window.",
)
@profile_cycles_option(
    default=None, help="Cycles profiled on every rank in full mode [default: 2:3]."
)
@out_option(what="run", name_default="<time>-<program>")
@click.option(
    "--no-merge", is_flag=True, help="Leave the raw output; run `tracekit merge RUN_DIR` later."
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="Seconds the command gets to stop after SIGINT/SIGTERM before its group is killed.",
)
@click.option(
    "--flush-interval",
    "--flush-seconds",
    "flush_seconds",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Each process writes its records at least this often, also while idle (a timer "
    "thread), so a process killed with SIGKILL loses at most this much (nothing when the "
    "kill follows a signal sent to launch: every process is asked to flush first).",
)
@click.option(
    "--node-rank",
    type=click.IntRange(min=0),
    default=None,
    help="Multi-node: this node's rank; its part goes to OUT/NAME/parts/node-K (default: the "
    "command's --node-rank, else NODE_RANK). See docs/multinode.md.",
)
@click.option(
    "--nnodes",
    type=click.IntRange(min=1),
    default=None,
    help="Multi-node: the number of nodes (default: the command's --nnodes, else NNODES).",
)
@click.option(
    "--keep",
    "keep",
    default=None,
    metavar="SIZE",
    help="Keep at most SIZE of records per process (e.g. 2GB, 500MB): the oldest segments "
    "are deleted first, and merge says what was dropped [default: keep all].",
)
@click.option(
    "--keep-hours",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    metavar="HOURS",
    help="Delete record segments older than HOURS [default: keep all].",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    metavar="PORT",
    help="Serve live Prometheus metrics on PORT (0: any free port) while CMD runs; "
    "see docs/production.md.",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics are served on.",
)
@click.option(
    "--gpu-sample",
    type=click.IntRange(min=1),
    default=8,  # collectors/recording/gpu.py DEFAULT_GPU_SAMPLE (a test keeps them equal)
    show_default=True,
    metavar="N",
    help="CUDA events on one cycle in N only (CPU clocks on all; 1: every cycle, for short "
    "runs): light mode's per-call cost on CUDA is mostly the events. Breakdowns of the other "
    "cycles use CPU times (`gpu_timed` false); per-phase statistics come from the timed cycles.",
)
@click.option(
    "--no-nvml",
    is_flag=True,
    help="Do not sample the GPUs through NVML (clocks, power, temperature, PCIe at 10 Hz): "
    "the run then has no counters table.",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def command(
    adapter: str | None,
    phases_file: Path | None,
    mode: Mode,
    profile_cycles: str | None,
    out: Path,
    name: str | None,
    no_merge: bool,
    grace: float,
    flush_seconds: float,
    node_rank: int | None,
    nnodes: int | None,
    keep: str | None,
    keep_hours: float | None,
    metrics_port: int | None,
    metrics_host: str,
    gpu_sample: int,
    no_nvml: bool,
    cmd: tuple[str, ...],
) -> None:
    """Run CMD with the draft, verify and allreduce phases of every rank recorded.

    Every Python process of CMD's tree is instrumented through a `sitecustomize` bootstrap on
    PYTHONPATH; SIGINT/SIGTERM are forwarded; the run is merged at the end and tracekit exits
    with CMD's exit code.

    \b
    Example:
        tracekit launch --adapter demo -- python -m tracekit.demo --ranks 8 --cycles 20
        tracekit launch --adapter sglang -- python -m sglang.launch_server --model-path M \\
            --speculative-algorithm EAGLE --speculative-draft-model-path D --tp 8
        tracekit launch --phases my_map.toml -- python my_program.py
        tracekit summary tracekit-runs/<run>
    """
    import sys

    from tracekit.cli._sizes import parse_size
    from tracekit.collectors import phasemap
    from tracekit.collectors import runtime as rt
    from tracekit.errors import CollectorError
    from tracekit.launch.launcher import launch
    from tracekit.launch.options import LaunchOptions

    if adapter and phases_file:
        msg = "--adapter and --phases cannot be used together; keep one"
        raise CollectorError(msg)
    path = phases_file if phases_file else phasemap.builtin_path(adapter or "demo")
    if profile_cycles and mode != "full":
        click.echo("tracekit: --profile-cycles only applies with --mode full; ignored", err=True)
        profile_cycles = None
    if mode == "full" and not profile_cycles:
        profile_cycles = "2:3"
    opts = LaunchOptions(
        command=list(cmd),
        phasemap_path=path,
        mode=mode,
        profile_cycles=profile_cycles,
        out=out,
        name=name,
        merge=not no_merge,
        grace_s=grace,
        flush_seconds=flush_seconds,
        node_rank=node_rank,
        nnodes=nnodes,
        keep_bytes=parse_size(keep, option="--keep") if keep else 0,
        keep_seconds=keep_hours * 3600 if keep_hours else 0.0,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        nvml=not no_nvml,
        # passed to every rank like the other settings (a TRACEKIT_* variable)
        extra_env={rt.ENV_GPU_SAMPLE: str(gpu_sample)},
    )
    result = launch(opts)
    _print_outcome(result)
    sys.exit(result.exit_code)


def _print_outcome(result: LaunchResult) -> None:
    """The run directory, merge's warnings and counts, and the next command to run."""
    click.echo(f"Run directory: {result.run_dir}", err=True)
    m = result.merge_result
    if m is not None:
        for w in m.warnings:
            click.echo(f"tracekit: warning: {w}", err=True)
        click.echo(
            f"Merged {len(m.ranks)} rank(s): {m.phases} phase calls, {m.cycles} cycles, "
            f"{m.counters} counter samples, {m.events} events",
            err=True,
        )
        if not m.ranks:
            click.echo("Nothing to analyse: no rank recorded a call (see above)", err=True)
        elif result.run_manifest.get("node_rank") is not None:
            run = result.run_dir.parent.parent
            click.echo(f"Next, once every node finished: tracekit merge {run}", err=True)
        else:
            click.echo(f"Next: tracekit summary {result.run_dir}", err=True)
    else:
        click.echo(f"Next: tracekit merge {result.run_dir}", err=True)
