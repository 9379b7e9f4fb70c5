"""`tracekit sweep`: one workload at several held acceptance lengths, break-even measured.

Each point is one `tracekit launch` run of the command with the server's acceptance held at one
value; one more run is plain decoding. From each run come the program's own tokens/s (where it
writes them) and tracekit's cycle time; `tracekit.analyzers.sweep` finds where the measured
tokens/s crosses the baseline's (interpolating linearly between the two measured points around
it, nothing fitted); `tracekit.report.sweep` draws it. Writes SWEEP_DIR/sweep.json and
SWEEP_DIR/sweep.html.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from tracekit.errors import CommandError, InputError

# The environment variable each knob sets to the held acceptance length (vLLM's knob is its
# --speculative-config instead).
KNOB_ENV = {
    "demo": "TRACEKIT_DEMO_SIMULATE_ACC_LEN",
    "sglang": "SGLANG_SIMULATE_ACC_LEN",
}
# Set for every point, whatever the knob, so a script can read them.
ENV_ACCEPT = "TRACEKIT_SWEEP_ACCEPT_LEN"
ENV_RESULT = "TRACEKIT_SWEEP_RESULT"
ACCEPT_HOLE = "{accept}"
RESULT_HOLE = "{result}"
VLLM_FLAGS = ("--speculative-config", "--speculative_config")
HTML_NAME = "sweep.html"


@dataclass(frozen=True)
class Plan:
    """One run of the sweep: its name, command and environment changes."""

    name: str
    accept: float | None  # None: the plain-decoding baseline
    command: list[str]
    env: dict[str, str]
    unset: tuple[str, ...]
    result: Path


def parse_accept(text: str) -> list[float]:
    values: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            x = float(part)
        except ValueError:
            msg = f"--accept {text!r}: {part!r} is not a number; give values like 1,1.5,2,2.5,3"
            raise InputError(msg) from None
        if not x >= 1.0:
            msg = f"--accept {text!r}: {x:g} is below 1 (a cycle emits at least one token)"
            raise InputError(msg)
        values.append(x)
    if not values:
        msg = "--accept needs at least one acceptance length, e.g. --accept 1,1.5,2,2.5,3"
        raise InputError(msg)
    if len(set(values)) != len(values):
        msg = f"--accept {text!r}: a value is repeated; give each acceptance length once"
        raise InputError(msg)
    return sorted(values)


def vllm_with_acceptance(argv: list[str], x: float) -> list[str]:
    """`argv` with its --speculative-config JSON set to vLLM's synthetic rejection sampling at
    mean acceptance length `x` (vLLM's `synthetic_acceptance_length`, bonus token included)."""
    out = list(argv)
    for i, arg in enumerate(out):
        flag, eq, inline = arg.partition("=")
        if flag not in VLLM_FLAGS:
            continue
        if eq:
            text, where = inline, i
        elif i + 1 < len(out):
            text, where = out[i + 1], i + 1
        else:
            break
        try:
            config = json.loads(text)
        except ValueError:
            msg = f"--knob vllm: {flag} {text!r} is not JSON; pass the speculative config as JSON"
            raise InputError(msg) from None
        if not isinstance(config, dict):
            msg = f"--knob vllm: {flag} must be a JSON object, got {text!r}"
            raise InputError(msg)
        config.pop("synthetic_acceptance_rates", None)
        config["rejection_sample_method"] = "synthetic"
        config["synthetic_acceptance_length"] = x
        new = json.dumps(config, separators=(",", ":"))
        out[where] = f"{flag}={new}" if eq else new
        return out
    msg = (
        "--knob vllm: the command has no --speculative-config JSON to set "
        "synthetic_acceptance_length in; add one, or put {accept} where your script takes "
        "the acceptance length"
    )
    raise InputError(msg)


def _fill(argv: list[str], accept: float | None, result: Path) -> list[str]:
    out = []
    for a in argv:
        if accept is not None:
            a = a.replace(ACCEPT_HOLE, f"{accept:g}")
        out.append(a.replace(RESULT_HOLE, str(result)))
    return out


def _point_name(x: float) -> str:
    return f"accept-{x:g}"


def plan_runs(
    *,
    knob: str,
    accepts: list[float],
    command: list[str],
    baseline_command: list[str] | None,
    results: Path,
) -> list[Plan]:
    """The baseline run (when there is a baseline command) and one run per acceptance."""
    knob_vars = tuple(KNOB_ENV.values())
    plans: list[Plan] = []
    if baseline_command is not None:
        res = results / "baseline.json"
        plans.append(
            Plan(
                name="baseline",
                accept=None,
                command=_fill(baseline_command, None, res),
                env={ENV_RESULT: str(res)},
                unset=(*knob_vars, ENV_ACCEPT),
                result=res,
            )
        )
    has_hole = any(ACCEPT_HOLE in a for a in command)
    for x in accepts:
        name = _point_name(x)
        res = results / f"{name}.json"
        argv = _fill(command, x, res)
        if knob == "vllm" and not has_hole:
            argv = vllm_with_acceptance(argv, x)
        env = {ENV_ACCEPT: f"{x:g}", ENV_RESULT: str(res)}
        if knob in KNOB_ENV:
            env[KNOB_ENV[knob]] = f"{x:g}"
        plans.append(Plan(name=name, accept=x, command=argv, env=env, unset=(), result=res))
    return plans


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
    type=click.Choice(["demo", "sglang", "vllm", "none"]),
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
@click.option(
    "--phases",
    "phases_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Your own phase map for `tracekit launch`.",
)
@click.option(
    "--mode",
    type=click.Choice(["light", "full"]),
    default="light",
    show_default=True,
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
    type=click.Choice(["tiny", "small", "medium", "large"]),
    default="tiny",
    show_default=True,
    help="--demo: model preset.",
)
@click.option(
    "--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
    help="--demo: device.",
)  # fmt: skip
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("tracekit-runs"),
    show_default=True,
    help="Directory that receives the sweep directory.",
)
@click.option("--name", default=None, help="Sweep directory name [default: sweep-<time>].")
@click.option("--cdn", is_flag=True, help="Link plotly.js from cdn.plot.ly in sweep.html.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def command(
    accept_text: str,
    use_demo: bool,
    knob: str | None,
    baseline: bool,
    baseline_cmd: str | None,
    adapter: str | None,
    phases_file: Path | None,
    mode: str,
    tps_key: str,
    ranks: int,
    cycles: int,
    draft_tokens: int,
    model_size: str,
    device: str,
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
    argv = list(cmd)
    if argv and argv[0] == "--":
        argv = argv[1:]
    base_argv: list[str] | None = shlex.split(baseline_cmd) if baseline_cmd else None
    if use_demo:
        if argv:
            msg = "--demo runs tracekit's demo: drop the command after --, or drop --demo"
            raise InputError(msg)
        _check_demo(accepts, ranks, cycles, draft_tokens)
        argv = _demo_command(ranks, cycles, draft_tokens, model_size, device)
        if baseline and base_argv is None:
            base_argv = _demo_command(ranks, cycles, draft_tokens, model_size, device, True)
        knob = knob or "demo"
        adapter = adapter or (None if phases_file else "demo")
    elif not argv:
        msg = "no command: give `-- CMD ...` (the speculative server or script), or --demo"
        raise InputError(msg)
    knob = knob or (adapter if adapter in ("demo", "sglang", "vllm") else None)
    if knob is None:
        msg = "which knob holds acceptance? pass --knob demo|sglang|vllm (or none with {accept} in CMD)"
        raise InputError(msg)
    if knob == "none" and not any(ACCEPT_HOLE in a for a in argv):
        msg = "--knob none holds nothing: put {accept} in the command where the acceptance goes"
        raise InputError(msg)
    if adapter is None and phases_file is None:
        adapter = knob if knob != "none" else None
    if adapter is None and phases_file is None:
        msg = "--knob none: say which phase map to launch with, --adapter NAME or --phases FILE"
        raise InputError(msg)

    sweep_dir = out / (name or time.strftime("sweep-%Y%m%d-%H%M%S"))
    if sweep_dir.exists():
        msg = (
            f"sweep directory already exists, will not overwrite: {sweep_dir}; pick another --name"
        )
        raise InputError(msg)
    results = sweep_dir / "results"
    plans = plan_runs(
        knob=knob, accepts=accepts, command=argv, baseline_command=base_argv, results=results
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
    sweep = _build(knob, argv, plans, figures, sweep_dir, {"mode": mode, "tps_key": tps_key})
    _write_and_print(sweep, sweep_dir, cdn, time.perf_counter() - started)


def _check_demo(accepts: list[float], ranks: int, cycles: int, draft_tokens: int) -> None:
    from tracekit.demo.config import preset

    preset("tiny").check(ranks)
    if cycles < 2 or draft_tokens < 1:
        msg = "--demo needs --cycles of at least 2 and --draft-tokens of at least 1"
        raise InputError(msg)
    over = [x for x in accepts if x > draft_tokens + 1]
    if over:
        msg = (
            f"--accept {over[0]:g} is above K+1 = {draft_tokens + 1} (--draft-tokens "
            f"{draft_tokens}): a cycle cannot emit more; lower it or raise --draft-tokens"
        )
        raise InputError(msg)


def _demo_command(
    ranks: int, cycles: int, k: int, size: str, device: str, baseline: bool = False
) -> list[str]:
    argv = [
        sys.executable, "-m", "tracekit.demo", "--ranks", str(ranks), "--cycles", str(cycles),
        "--model-size", size, "--device", device, "--result", RESULT_HOLE,
    ]  # fmt: skip
    return [*argv, "--baseline"] if baseline else [*argv, "--draft-tokens", str(k)]


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
    knob: str,
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
    html: Path | None = None
    note = ""
    try:
        from tracekit.report.sweep import write_sweep_page

        html = write_sweep_page(sweep, sweep_dir, sweep_dir / HTML_NAME, cdn=cdn)
    except ImportError as exc:
        note = f"  not done: {HTML_NAME} ({exc})"
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
    if html is not None:
        lines.append(f"  HTML:       {html}")
    if note:
        lines.append(note)
    if sweep.points:
        run = sweep_dir / sorted(sweep.points, key=lambda p: p.accept_target)[-1].run_dir
        lines += ["", "Next:", f"  tracekit report {run} --sweep {sweep_dir}"]
    click.echo("\n".join(lines))
