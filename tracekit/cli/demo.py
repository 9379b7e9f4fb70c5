"""`tracekit demo`: the embedded speculative decoder under `tracekit launch`, end to end.

Runs `python -m tracekit.demo` (8 CPU ranks by default) under `tracekit launch --adapter demo`,
which records and merges every rank; then summarises the run, writes the HTML report and the
Perfetto trace into the run directory and prints where everything is. Parts of tracekit that are
not installed are skipped with a message naming them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import click

from tracekit.cli._options import mode_option, out_option, profile_cycles_option
from tracekit.demo.config import Device, ModelSize, VerifyMode
from tracekit.errors import CommandError, InputError, MissingDependencyError, TracekitError
from tracekit.store.layout import Mode

# Full mode profiles a few cycles with torch.profiler, so the breakdown is measured on the
# device timeline (aten ops and gloo collectives on CPU); the other cycles are timed by the
# light collectors. Defaults keep `tracekit demo` under 90 s on a 2-core machine.
DEFAULT_CYCLES = 16
DEFAULT_PROFILE_CYCLES = "4:3"
RESULT_NAME = "demo_result.json"
PERFETTO_NAME = "tracekit.pftrace"
# Kineto prints one USDT line per rank at each profiler start and stop.
NOISE_PREFIXES = ("USDT:",)


@click.command(name="demo")
@click.option(
    "--ranks",
    type=int,
    default=None,
    help="Tensor-parallel ranks [default: 8 on CPU, one a GPU on CUDA].",
)
@click.option("--device", type=click.Choice(get_args(Device)), default="cpu", show_default=True)
@click.option(
    "--cycles", type=int, default=DEFAULT_CYCLES, show_default=True, help="Decode cycles to run."
)
@click.option(
    "--draft-tokens", type=int, default=3, show_default=True, help="K, tokens drafted a cycle."
)
@click.option(
    "--verify-mode",
    type=click.Choice(get_args(VerifyMode)),
    default="extend",
    show_default=True,
    help="Verify eagerly, or replay a captured CUDA graph (CUDA only).",
)
@click.option("--baseline", is_flag=True, help="Plain decoding (phase `decode`), no draft.")
@click.option(
    "--simulate-accept-len",
    type=float,
    default=None,
    metavar="X",
    help="Hold the mean acceptance length at X (1 to K+1); the work a cycle stays a real cycle's.",
)
@click.option(
    "--compile",
    "compile_target",
    is_flag=True,
    help=(
        "Run the target model under torch.compile (inductor; on CUDA mode reduce-overhead, "
        "whose CUDA graphs replay through cudagraph trees)."
    ),
)
@mode_option(
    default="full",
    help="light: phase timers only. full: also a torch.profiler window over a few cycles.",
)
@profile_cycles_option(
    default=DEFAULT_PROFILE_CYCLES, help="Cycles profiled on every rank in full mode."
)
@click.option(
    "--model-size",
    type=click.Choice(get_args(ModelSize)),
    default=None,
    help="Model preset [default: tiny on CPU, large on CUDA].",
)
@out_option(what="run", name_default="demo-<time>")
def command(
    ranks: int | None,
    device: Device,
    cycles: int,
    draft_tokens: int,
    verify_mode: VerifyMode,
    baseline: bool,
    simulate_accept_len: float | None,
    compile_target: bool,
    mode: Mode,
    profile_cycles: str,
    model_size: ModelSize | None,
    out: Path,
    name: str | None,
) -> None:
    """Run the embedded speculative decoder under tracekit, end to end.

    A small tensor-parallel EAGLE-style speculative decoder (Llama-style target, one-layer draft
    head, chain drafting, greedy verify) runs on RANKS processes; tracekit records the draft,
    verify, draft_extend and allreduce phases of every rank, merges them, and writes the summary,
    the HTML report and the Perfetto trace into the run directory.

    \b
    Example:
        tracekit demo
        tracekit demo --baseline --name base && tracekit demo --name spec
        tracekit breakeven --baseline tracekit-runs/base --spec tracekit-runs/spec
        tracekit demo --device cuda --ranks 1 --verify-mode graph
        tracekit demo --simulate-accept-len 2.5
        tracekit demo --compile --ranks 2 --mode light
    """
    started = time.perf_counter()
    _require_torch()
    if ranks is None and device == "cpu":
        ranks = 8
    size: ModelSize = model_size or ("tiny" if device == "cpu" else "large")
    _check_options(
        ranks,
        cycles,
        draft_tokens,
        verify_mode,
        device,
        baseline,
        mode,
        profile_cycles,
        size,
        simulate_accept_len,
        compile_target,
    )
    name = name or time.strftime("demo-%Y%m%d-%H%M%S")
    run_dir = out / name
    if run_dir.exists():
        msg = f"run directory already exists, will not overwrite: {run_dir}; pick another --name"
        raise InputError(msg)
    launch = [
        sys.executable, "-m", "tracekit", "launch", "--adapter", "demo",
        "--mode", mode, "--out", str(out), "--name", name,
    ]  # fmt: skip
    if mode == "full":
        launch += ["--profile-cycles", profile_cycles]
    with tempfile.TemporaryDirectory(prefix="tracekit-demo-") as tmp:
        result_tmp = Path(tmp) / RESULT_NAME
        server = _server_command(
            ranks, device, cycles, size, result_tmp, baseline, draft_tokens, verify_mode,
            simulate_accept_len, compile_target,
        )  # fmt: skip
        server_result = _launch_demo([*launch, "--", *server], result_tmp, run_dir)
    missing: list[str] = []
    outputs = _outputs(run_dir, missing)
    _print_summary(run_dir, server_result, outputs, missing, time.perf_counter() - started)


def _require_torch() -> None:
    """MissingDependencyError unless torch is installed (the `collect` extra, not a core
    dependency)."""
    if importlib.util.find_spec("torch") is None:
        msg = (
            "`torch` is required for `tracekit demo`. Please install using the command "
            "`pip install 'tracekit-spec[collect]'`"
        )
        raise MissingDependencyError(msg)


def _launch_demo(cmd: list[str], result_tmp: Path, run_dir: Path) -> dict[str, Any]:
    """Run `tracekit launch ... -- <demo server>` (`cmd`); copy the server's result
    (`result_tmp`) into the run directory and return it. CommandError when the launch failed."""
    code = _run(cmd)
    if code != 0:
        msg = f"the demo exited with code {code}; its messages are above"
        raise CommandError(msg, exit_code=code if code > 0 else 1)
    run_dir.mkdir(parents=True, exist_ok=True)
    server_result: dict[str, Any] = json.loads(result_tmp.read_text(encoding="utf-8"))
    (run_dir / RESULT_NAME).write_text(json.dumps(server_result, indent=2) + "\n")
    return server_result


def _server_command(
    ranks: int | None,
    device: Device,
    cycles: int,
    size: ModelSize,
    result: Path,
    baseline: bool,
    draft_tokens: int,
    verify_mode: VerifyMode,
    simulate_accept_len: float | None,
    compile_target: bool = False,
) -> list[str]:
    """The demo server's command line (`python -m tracekit.demo ...`)."""
    server = [
        sys.executable, "-m", "tracekit.demo",
        "--device", device, "--cycles", str(cycles),
        "--model-size", size, "--result", str(result),
    ]  # fmt: skip
    if ranks is not None:  # on CUDA the server defaults to one rank a GPU
        server += ["--ranks", str(ranks)]
    if compile_target:
        server.append("--compile")
    if baseline:
        server.append("--baseline")
    else:
        server += ["--draft-tokens", str(draft_tokens), "--verify-mode", verify_mode]
        if simulate_accept_len is not None:
            server += ["--simulate-accept-len", repr(simulate_accept_len)]
    return server


def _check_options(
    ranks: int | None,
    cycles: int,
    draft_tokens: int,
    verify_mode: VerifyMode,
    device: Device,
    baseline: bool,
    mode: Mode,
    profile_cycles: str,
    size: ModelSize,
    simulate_accept_len: float | None,
    compile_target: bool = False,
) -> None:
    # The server's own checks, those that need no torch (the server makes the rest).
    from tracekit.demo.options import DemoOptions, check

    opts = DemoOptions(
        ranks=ranks or 1,
        device=device,
        cycles=cycles,
        draft_tokens=draft_tokens,
        verify_mode=verify_mode,
        baseline=baseline,
        model_size=size,
        simulate_accept_len=simulate_accept_len,
        compile=compile_target,
    )
    check(opts, ranks_known=ranks is not None)
    if mode == "full":
        start, _, count = profile_cycles.partition(":")
        if not (start.isdigit() and count.isdigit() and int(count) > 0):
            msg = f"--profile-cycles {profile_cycles!r}: expected START:COUNT, e.g. 4:3"
            raise InputError(msg)


def _run(cmd: list[str], env: dict[str, str] | None = None) -> int:
    """Run `cmd`, passing its output on (to stderr) without Kineto's per-rank noise."""
    env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if not line.startswith(NOISE_PREFIXES):
                click.echo(line.rstrip("\n"), err=True)
    except KeyboardInterrupt:
        proc.wait()
        raise
    return proc.wait()


def _outputs(run_dir: Path, missing: list[str]) -> dict[str, Any]:
    """Summary, HTML report and Perfetto trace, each as far as its part exists."""
    done: dict[str, Any] = {}
    steps: list[tuple[str, Callable[[], Any]]] = [
        ("summary", lambda: _summary(run_dir)),
        ("report", lambda: _report(run_dir)),
        ("perfetto", lambda: _perfetto(run_dir)),
    ]
    have_store = (run_dir / "store").is_dir()
    for key, fn in steps:
        if not have_store:
            missing.append(f"{key}: the run has no merged store")
            continue
        try:
            done[key] = fn()
        except TracekitError as exc:  # the run is kept; say what failed and go on
            missing.append(f"{key} failed: {exc}")
    return done


def _summary(run_dir: Path) -> dict[str, Any]:
    from tracekit.analyzers.summary import summarize

    return summarize(run_dir).to_json()


def _report(run_dir: Path) -> Path:
    from tracekit.report.html import write_report

    path: Path = write_report(run_dir, run_dir / f"tracekit-report-{run_dir.name}.html")
    return path


def _perfetto(run_dir: Path) -> Path:
    from tracekit.export.perfetto import write_perfetto

    path: Path = write_perfetto(run_dir, run_dir / PERFETTO_NAME)
    return path


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _rate_lines(server: dict[str, Any], summary: dict[str, Any] | None) -> list[str]:
    """tokens/s as DEFINITIONS.md defines it (`tracekit summary`'s, the steady-state cycles'
    total tokens / total time), then the demo server's own clock, labelled by what it covers."""
    own = (
        f"the demo server's own clock: {server['tokens_per_s']:.1f} tokens/s over all "
        f"{server['cycles']} cycles, warm-up and profiled ones included"
    )
    if not summary or summary.get("tokens_per_s") is None:
        return [f"  {own}   mean acceptance length {server['accept_len_mean']:.2f}"]
    steady = summary.get("steady_cycles")
    which = f"steady-state cycles {steady[0]}-{steady[1]}" if steady else "the cycles"
    return [
        f"  tokens/s {summary['tokens_per_s']:.1f} ({which}: total tokens / total time)   "
        f"mean acceptance length {_fmt(summary.get('accept_len_mean'), '.2f')}",
        f"  ({own})",
    ]


def _print_summary(
    run_dir: Path,
    server: dict[str, Any],
    outputs: dict[str, Any],
    missing: list[str],
    wall_s: float,
) -> None:
    mode = server["mode"]
    lines = [
        "",
        f"tracekit demo: {server['ranks']} ranks on {server['device']} ({server['backend']}), "
        f"{mode}, {server['cycles']} cycles in {wall_s:.1f} s",
    ]
    summary = outputs.get("summary")
    lines += _rate_lines(server, summary)
    if summary:
        lines.append(
            f"  recorded: {summary.get('cycles')} cycles a rank, cycle p50 "
            f"{_fmt(summary.get('cycle_ms_p50'), '.1f')} ms"
        )
        lines.append("  phase          p50 ms  forward%  allreduce%  overhead%")
        for phase, p in sorted(summary.get("phases", {}).items()):
            lines.append(
                f"  {phase:<13} {_fmt(p.get('wall_ms_p50'), '7.1f')}  "
                f"{_fmt(p.get('forward_pct'), '8.1f')}  {_fmt(p.get('allreduce_pct'), '10.1f')}  "
                f"{_fmt(p.get('overhead_pct'), '9.1f')}"
            )
    cores = os.cpu_count() or 1
    if server["device"] == "cpu" and server["ranks"] > cores:
        lines.append(
            f"  note: {server['ranks']} ranks share {cores} CPU cores, so allreduces wait for "
            "ranks to be scheduled: this CPU breakdown is allreduce-heavy by construction."
        )
    lines += ["", f"Run directory: {run_dir}"]
    if "report" in outputs:
        lines.append(f"  HTML report:    {outputs['report']}")
    if "perfetto" in outputs:
        lines.append(f"  Perfetto trace: {outputs['perfetto']}")
    lines.append(f"  demo result:    {run_dir / RESULT_NAME}")
    for m in missing:
        lines.append(f"  not done: {m}")
    lines += [
        "",
        "Next:",
        f"  tracekit summary {run_dir}",
        f"  tracekit breakdown {run_dir} --by phase",
        f"  tracekit view {run_dir}",
    ]
    if mode != "baseline":
        base = run_dir.parent / f"{run_dir.name}-baseline"
        lines += [
            f"  tracekit demo --baseline --name {base.name} --out {run_dir.parent}",
            f"  tracekit breakeven --baseline {base} --spec {run_dir}",
        ]
    click.echo("\n".join(lines))
