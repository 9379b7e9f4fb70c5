"""`tracekit breakeven`: acceptance length needed to beat plain decoding."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from tracekit.cli._options import cycles_option, json_option, run_dir_option
from tracekit.cli._output import echo_json, echo_note, fmt
from tracekit.errors import CommandError

if TYPE_CHECKING:
    from tracekit.analyzers.steady import CycleChoice


def render(r: dict[str, Any]) -> None:
    p50 = ""
    if r.get("cycle_ms_p50") is not None:
        p50 = f" (means; p50 {fmt(r['baseline_ms_p50'])} / {fmt(r['cycle_ms_p50'])} ms)"
    lines = [
        f"baseline step {fmt(r['baseline_ms'])} ms, speculative cycle {fmt(r['cycle_ms'])} ms{p50}",
        f"break-even acceptance length: {r['breakeven_accept_len']:.2f} tokens a cycle",
    ]
    if r["accept_len"] is not None:
        verdict = "faster" if r["speedup"] > 1 else "slower"
        lines.append(
            f"acceptance length {r['accept_len']:.2f} -> speedup {r['speedup']:.2f}x "
            f"({verdict} than plain decoding)"
        )
    w = r.get("what_if")
    if w:
        tail = "" if w["speedup"] is None else f", speedup {w['speedup']:.2f}x"
        lines.append(
            f"what if verify were {w['verify_faster_ms']:g} ms faster: cycle {w['cycle_ms']:.3f} "
            f"ms, break-even {w['breakeven_accept_len']:.2f}{tail}"
        )
    for line in lines:
        click.echo(line)


@click.command(name="breakeven")
@click.option("--baseline-ms", type=float, help="Plain decoding step time, ms.")
@click.option("--cycle-ms", type=float, help="Speculative cycle time, ms.")
@run_dir_option(
    "--baseline",
    help="Run directory of plain decoding: its mean steady-state cycle is the baseline step.",
)
@run_dir_option(
    "--spec",
    help="Run directory of speculative decoding: mean steady-state cycle and acceptance length.",
)
@click.option("--accept-len", type=float, help="Tokens emitted a cycle (accepted + bonus).")
@click.option("--verify-faster-ms", type=float, help="What if each cycle were N ms shorter.")
@json_option
@cycles_option
def command(
    baseline_ms: float | None,
    cycle_ms: float | None,
    baseline: Path | None,
    spec: Path | None,
    accept_len: float | None,
    verify_faster_ms: float | None,
    as_json: bool,
    choice: CycleChoice,
) -> None:
    """Acceptance length needed to beat plain decoding.

    break-even = cycle time / baseline step; speedup = acceptance length x baseline / cycle.
    From runs, the times are means over each run's steady-state cycles and the acceptance
    length is total tokens / cycles (so the speedup is the ratio of their tokens/s).

    \b
    Example:
        tracekit breakeven --baseline-ms 12.2 --cycle-ms 30 --accept-len 3.1
        tracekit breakeven --baseline runs/base --spec runs/eagle --verify-faster-ms 5
    """
    from tracekit.analyzers.breakeven import breakeven, breakeven_runs

    msg_usage = "give either --baseline-ms X --cycle-ms Y, or --baseline RUN --spec RUN"
    numbers = baseline_ms is not None or cycle_ms is not None
    runs = baseline is not None or spec is not None
    if (
        numbers == runs
        or (numbers and None in (baseline_ms, cycle_ms))
        or (runs and None in (baseline, spec))
    ):
        raise CommandError(msg_usage, exit_code=2)
    if baseline is not None and spec is not None:
        result = breakeven_runs(
            baseline, spec, accept_len=accept_len, verify_faster_ms=verify_faster_ms, choice=choice
        )
        for which in ("baseline", "spec"):
            note = result["steady"][which]["steady_note"]
            echo_note(None if note is None else f"{which} run: {note}")
    elif baseline_ms is not None and cycle_ms is not None:
        if choice.mode != "auto":
            msg = "--all-cycles and --cycles choose cycles of runs; use them with --baseline RUN --spec RUN"
            raise CommandError(msg, exit_code=2)
        result = breakeven(
            baseline_ms=baseline_ms,
            cycle_ms=cycle_ms,
            accept_len=accept_len,
            verify_faster_ms=verify_faster_ms,
        )
    else:  # unreachable: checked above
        raise CommandError(msg_usage, exit_code=2)
    if as_json:
        echo_json(result)
    else:
        render(result)
