"""The runs of `tracekit sweep`: acceptance lengths parsed, each point's command and environment
(the knob that holds acceptance: an environment variable, or vLLM's --speculative-config), and
the demo's command lines. No run is started here."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracekit.demo.config import Device, ModelSize
from tracekit.errors import InputError

if TYPE_CHECKING:
    from tracekit.analyzers.sweep import Knob

# The environment variable each knob sets to the held acceptance length (vLLM's knob is its
# --speculative-config instead).
KNOB_ENV = {
    "demo": "TRACEKIT_DEMO_SIMULATE_ACC_LEN",
    "sglang": "SGLANG_SIMULATE_ACC_LEN",
}
# Set for every point, whatever the knob, so a script can read them.
# The knob of each built-in phase map, when --knob is not given.
ADAPTER_KNOBS: dict[str, Knob] = {"demo": "demo", "sglang": "sglang", "vllm": "vllm"}
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
    knob: Knob,
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
    ranks: int, cycles: int, k: int, size: ModelSize, device: Device, baseline: bool = False
) -> list[str]:
    argv = [
        sys.executable, "-m", "tracekit.demo", "--ranks", str(ranks), "--cycles", str(cycles),
        "--model-size", size, "--device", device, "--result", RESULT_HOLE,
    ]  # fmt: skip
    return [*argv, "--baseline"] if baseline else [*argv, "--draft-tokens", str(k)]


@dataclass(frozen=True)
class DemoSpec:
    """`tracekit sweep --demo`: the demo server's settings."""

    ranks: int
    cycles: int
    draft_tokens: int
    model_size: ModelSize
    device: Device
    baseline: bool  # also run plain decoding


@dataclass(frozen=True)
class Workload:
    """What the sweep runs: the command, the plain-decoding one, the knob and the phase map."""

    argv: list[str]
    baseline_argv: list[str] | None
    knob: Knob
    adapter: str | None  # None: --phases FILE


def resolve_workload(
    *,
    cmd: list[str],
    baseline_cmd: str | None,
    knob: Knob | None,
    adapter: str | None,
    phases_file: Path | None,
    demo: DemoSpec | None,
    accepts: list[float],
) -> Workload:
    """The command line's choices made whole (defaults from --demo and --adapter), or
    InputError with the fix."""
    argv = cmd[1:] if cmd[:1] == ["--"] else cmd
    base_argv: list[str] | None = shlex.split(baseline_cmd) if baseline_cmd else None
    if demo is not None:
        if argv:
            msg = "--demo runs tracekit's demo: drop the command after --, or drop --demo"
            raise InputError(msg)
        d = demo
        _check_demo(accepts, d.ranks, d.cycles, d.draft_tokens)
        argv = _demo_command(d.ranks, d.cycles, d.draft_tokens, d.model_size, d.device)
        if d.baseline and base_argv is None:
            base_argv = _demo_command(
                d.ranks, d.cycles, d.draft_tokens, d.model_size, d.device, True
            )
        knob = knob or "demo"
        adapter = adapter or (None if phases_file else "demo")
    elif not argv:
        msg = "no command: give `-- CMD ...` (the speculative server or script), or --demo"
        raise InputError(msg)
    knob = knob or ADAPTER_KNOBS.get(adapter or "")
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
    return Workload(argv, base_argv, knob, adapter)
