"""`tracekit sweep`: one workload at several held acceptance lengths, break-even measured.

Each point is one `tracekit launch` run of the command with the server's acceptance held at one
value; one more run is plain decoding. From each run come the program's own tokens/s (where it
writes them) and tracekit's cycle time; `tracekit.analyzers.sweep` finds where the measured
tokens/s crosses the baseline's (interpolating linearly between the two measured points around
it, nothing fitted); `tracekit.report.sweep` draws it. Writes SWEEP_DIR/sweep.json and
SWEEP_DIR/sweep.html.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import click

from tracekit.cli._options import mode_option, out_option, phases_option
from tracekit.cli._sweep_plan import (
    HTML_NAME,
    DemoSpec,
    Plan,
    parse_accept,
    plan_runs,
    resolve_workload,
)
from tracekit.demo.config import Device, ModelSize
from tracekit.errors import CommandError, InputError
from tracekit.store.layout import Mode

if TYPE_CHECKING:
    from tracekit.analyzers.sweep import Knob


@click.command(
    name="sweep",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False},
)
@click.option(
    "--accept",
    "accept_text",
    required=True,
    metavar="X,Y,...",
    help="Acceptance lengths to hold, comma-separated (tokens a cycle, bonus included).",
)
@click.option("--demo", "use_demo", is_flag=True, help="Sweep tracekit's demo (no CMD needed).")
@click.option(
    "--knob",
    type=click.Choice(["demo", "sglang", "vllm", "none"]),  # analyzers.sweep.Knob
    default=None,
    help=(
        "How acceptance is held: demo (TRACEKIT_DEMO_SIMULATE_ACC_LEN), sglang "
        "(SGLANG_SIMULATE_ACC_LEN), vllm (synthetic rejection sampling in --speculative-config), "
        "none ({accept} in CMD only) [default: demo with --demo, else the --adapter's]."
    ),
)
@click.option(
    "--baseline/--no-baseline",
    default=True,
    show_default=True,
    help="With --demo: also run plain decoding (the break-even needs it).",
)
@click.option(
    "--baseline-cmd",
    default=None,
    metavar="'CMD ...'",
    help="The plain-decoding command of a server (one shell-quoted string).",
)
@click.option(
    "--adapter", default=None, help="Phase map for `tracekit launch` [default: the knob's]."
)
@phases_option(help="Your own phase map for `tracekit launch`.")
@mode_option(
    default="light",
    help="`tracekit launch` mode (light: no profiler window slowing a few cycles).",
)
@click.option(
    "--tps-key",
    default="tokens_per_s",
    show_default=True,
    help="Key of the tokens/s in the JSON the program writes to {result}.",
)
@click.option("--ranks", type=int, default=2, show_default=True, help="--demo: ranks.")
@click.option("--cycles", type=int, default=32, show_default=True, help="--demo: cycles a run.")
@click.option(
    "--draft-tokens", type=int, default=3, show_default=True, help="--demo: K, tokens drafted."
)
@click.option(
    "--model-size",
    type=click.Choice(get_args(ModelSize)),
    default="tiny",
    show_default=True,
    help="--demo: model preset.",
)
@click.option(
    "--device", type=click.Choice(get_args(Device)), default="cpu", show_default=True,
    help="--demo: device.",
)  # fmt: skip
@out_option(what="sweep", name_default="sweep-<time>")
@click.option("--cdn", is_flag=True, help="Link plotly.js from cdn.plot.ly in sweep.html.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def command(
    accept_text: str,
    use_demo: bool,
    knob: Knob | None,
    baseline: bool,
    baseline_cmd: str | None,
    adapter: str | None,
    phases_file: Path | None,
    mode: Mode,
    tps_key: str,
    ranks: int,
    cycles: int,
    draft_tokens: int,
    model_size: ModelSize,
    device: Device,
    out: Path,
    name: str | None,
    cdn: bool,
    cmd: tuple[str, ...],
) -> None:
    """Run one workload at several held acceptance lengths; measure the break-even.

    Every point is a `tracekit launch` run with the server's acceptance held at one value; one
    more run is plain decoding. The measured break-even acceptance length is where the measured
    tokens/s crosses the baseline's (linear interpolation between the two measured points
    around the crossing). In CMD, {accept} is replaced by the point's acceptance length and
    {result} by a JSON path where the program may write its own tokens/s.

    \b
    Example:
        tracekit sweep --demo --accept 1,1.5,2,2.5,3
        tracekit sweep --accept 1.5,2,2.5,3 --knob sglang \\
            --baseline-cmd 'python -m sglang.launch_server --model M --tp 8' \\
            -- python -m sglang.launch_server --model M --tp 8 --speculative-algorithm EAGLE ...
        tracekit report tracekit-runs/sweep-1/accept-2 --sweep tracekit-runs/sweep-1
    """
    accepts = parse_accept(accept_text)
    w = resolve_workload(
        cmd=list(cmd),
        baseline_cmd=baseline_cmd,
        knob=knob,
        adapter=adapter,
        phases_file=phases_file,
        demo=DemoSpec(ranks, cycles, draft_tokens, model_size, device, baseline)
        if use_demo
        else None,
        accepts=accepts,
    )
    argv, base_argv, knob_, adapter = w.argv, w.baseline_argv, w.knob, w.adapter

    sweep_dir = out / (name or time.strftime("sweep-%Y%m%d-%H%M%S"))
    if sweep_dir.exists():
        msg = (
            f"sweep directory already exists, will not overwrite: {sweep_dir}; pick another --name"
        )
        raise InputError(msg)
    results = sweep_dir / "results"
    plans = plan_runs(
        knob=knob_, accepts=accepts, command=argv, baseline_command=base_argv, results=results
    )
    results.mkdir(parents=True)
    if base_argv is None:
        click.echo(
            "tracekit sweep: no plain-decoding run (give --baseline-cmd), so no break-even",
            err=True,
        )
    launch = [sys.executable, "-m", "tracekit", "launch", "--mode", mode, "--out", str(sweep_dir)]
    launch += ["--adapter", adapter] if adapter else ["--phases", str(phases_file)]
    started = time.perf_counter()
    figures: dict[str, Any] = {}
    for i, plan in enumerate(plans, 1):
        what = "plain decoding" if plan.accept is None else f"acceptance held at {plan.accept:g}"
        click.echo(f"tracekit sweep: run {i}/{len(plans)}, {what}", err=True)
        figures[plan.name] = _run_point(plan, [*launch, "--name", plan.name], sweep_dir, tps_key)
    sweep = _build(knob_, argv, plans, figures, sweep_dir, {"mode": mode, "tps_key": tps_key})
    _write_and_print(sweep, sweep_dir, cdn, time.perf_counter() - started)


def _run_point(plan: Plan, launch: list[str], sweep_dir: Path, tps_key: str) -> Any:
    from tracekit.analyzers.sweep import measure_run
    from tracekit.cli.demo import _run

    env = dict(os.environ)
    for var in plan.unset:
        env.pop(var, None)
    env.update(plan.env)
    code = _run([*launch, "--", *plan.command], env=env)
    if code != 0:
        msg = (
            f"the {plan.name} run exited with code {code} (its messages are above); the runs so "
            f"far are in {sweep_dir}"
        )
        raise CommandError(msg, exit_code=code if code > 0 else 1)
    return measure_run(sweep_dir / plan.name, plan.result, tps_key)


def _build(
    knob: Knob,
    argv: list[str],
    plans: list[Plan],
    figures: dict[str, Any],
    sweep_dir: Path,
    extra: dict[str, Any],
) -> Any:
    from tracekit.analyzers.sweep import Baseline, SweepPoint, build_sweep

    base = None
    points = []
    for plan in plans:
        f = figures[plan.name]
        if plan.accept is None:
            base = Baseline(
                run_dir=plan.name,
                tokens_per_s=f.tokens_per_s,
                tokens_per_s_source=f.tokens_per_s_source,
                step_ms_mean=f.cycle_ms_mean,
                step_ms_p50=f.cycle_ms_p50,
                tokens_per_s_tracekit=f.tokens_per_s_tracekit,
            )
            continue
        points.append(
            SweepPoint(
                accept_target=plan.accept,
                run_dir=plan.name,
                accept_len=f.accept_len,
                tokens_per_s=f.tokens_per_s,
                tokens_per_s_source=f.tokens_per_s_source,
                cycle_ms_mean=f.cycle_ms_mean,
                cycle_ms_p50=f.cycle_ms_p50,
                accept_len_tracekit=f.accept_len_tracekit,
                tokens_per_s_tracekit=f.tokens_per_s_tracekit,
                cycles=f.cycles,
            )
        )
    return build_sweep(knob=knob, command=argv, points=points, baseline=base, extra=extra)


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _write_and_print(sweep: Any, sweep_dir: Path, cdn: bool, wall_s: float) -> None:
    from tracekit.analyzers.sweep import write_sweep

    path = write_sweep(sweep, sweep_dir)
    from tracekit.report.sweep import write_sweep_page

    html = write_sweep_page(sweep, sweep_dir, sweep_dir / HTML_NAME, cdn=cdn)
    lines = [
        "",
        f"tracekit sweep: {len(sweep.points)} acceptance lengths"
        + (" + plain decoding" if sweep.baseline else "")
        + f" in {wall_s:.1f} s",
        "  held at  measured  tokens/s  from      cycle ms mean  model break-even",
    ]
    for p in sorted(sweep.points, key=lambda p: p.accept_target):
        lines.append(
            f"  {p.accept_target:7g}  {_fmt(p.accept_len, '8.3f')}  {_fmt(p.tokens_per_s, '8.1f')}"
            f"  {p.tokens_per_s_source or '-':<8}  {_fmt(p.cycle_ms_mean, '13.3f')}"
            f"  {_fmt(p.model_breakeven_accept_len, '16.2f')}"
        )
    base = sweep.baseline
    if base is not None:
        lines.append(
            f"  baseline  {1.0:8.3f}  {_fmt(base.tokens_per_s, '8.1f')}  "
            f"{base.tokens_per_s_source or '-':<8}  {_fmt(base.step_ms_mean, '13.3f')}"
        )
    be = sweep.breakeven
    if be.status == "measured":
        lines.append(
            f"  measured break-even acceptance length: {be.accept_len:.2f} ({be.method}; {be.note})"
        )
    else:
        lines.append(f"  measured break-even: none in the measured range ({be.note})")
    if sweep.model_breakeven_accept_len is not None:
        lines.append(
            f"  model break-even (cycle / baseline step): {sweep.model_breakeven_accept_len:.2f}"
            f" ({sweep.model_breakeven_note})"
        )
    lines += ["", f"Sweep directory: {sweep_dir}", f"  sweep.json: {path}"]
    lines.append(f"  HTML:       {html}")
    if sweep.points:
        run = sweep_dir / sorted(sweep.points, key=lambda p: p.accept_target)[-1].run_dir
        lines += ["", "Next:", f"  tracekit report {run} --sweep {sweep_dir}"]
    click.echo("\n".join(lines))
