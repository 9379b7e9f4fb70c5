"""An acceptance sweep: measured tokens/s and cycle cost at held acceptance lengths.

`tracekit sweep` runs one workload several times, each with the server's acceptance held at one
value (the demo's `--simulate-accept-len`, SGLang's `SGLANG_SIMULATE_ACC_LEN`, vLLM's synthetic
rejection sampling), plus one plain-decoding run. This module is the data model of the result
(`Sweep`, written as sweep.json) and the one computation on it: the **measured break-even
acceptance length**, where the measured tokens/s curve crosses the baseline's measured tokens/s.
Nothing is fitted: between the two measured points around the crossing the curve is taken as a
straight line (linear interpolation), and the result says so. Outside the measured range there
is no number, only which side it lies on.

Next to it, each point carries the model's break-even (DEFINITIONS.md: mean cycle time / mean
baseline step time, from tracekit's cycles), so the two can be compared.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from tracekit._version import __version__
from tracekit.errors import InputError

SWEEP_FILE = "sweep.json"
SWEEP_SCHEMA = 1

Knob = Literal["demo", "sglang", "vllm", "none"]
TpsSource = Literal["program", "tracekit"]
CrossingStatus = Literal["measured", "below_range", "above_range", "no_baseline", "too_few_points"]

INTERPOLATION = "linear interpolation between the two measured points around the crossing"


@dataclass
class SweepPoint:
    """One run at one held acceptance length.

    `accept_len` is the measured mean (the program's own count when it reports one, else
    tracekit's); `tokens_per_s` the program's own measurement when it reports one
    (`tokens_per_s_source` says which); `cycle_ms_mean` / `cycle_ms_p50` tracekit's cycle times.
    """

    accept_target: float
    run_dir: str
    accept_len: float | None
    tokens_per_s: float | None
    tokens_per_s_source: TpsSource | None
    cycle_ms_mean: float | None
    cycle_ms_p50: float | None
    accept_len_tracekit: float | None = None
    tokens_per_s_tracekit: float | None = None
    cycles: int | None = None
    model_breakeven_accept_len: float | None = None


@dataclass
class Baseline:
    """The plain-decoding run: its measured tokens/s and tracekit's decode step time."""

    run_dir: str
    tokens_per_s: float | None
    tokens_per_s_source: TpsSource | None
    step_ms_mean: float | None
    step_ms_p50: float | None
    tokens_per_s_tracekit: float | None = None


@dataclass
class Crossing:
    """Where the measured tokens/s reaches the baseline's.

    `status` is `measured` (then `accept_len` is the interpolated crossing, between points
    `between[0]` and `between[1]`, indices into the points sorted by acceptance),
    `below_range` (already faster at the lowest measured acceptance), `above_range` (slower at
    every measured one), `no_baseline` or `too_few_points`.
    """

    status: CrossingStatus
    accept_len: float | None = None
    between: tuple[int, int] | None = None
    method: str = INTERPOLATION
    note: str = ""


@dataclass
class Sweep:
    knob: Knob
    command: list[str]
    points: list[SweepPoint]
    baseline: Baseline | None
    breakeven: Crossing
    model_breakeven_accept_len: float | None = None
    model_breakeven_note: str = ""
    schema: int = SWEEP_SCHEMA
    tracekit_version: str = __version__
    extra: dict[str, Any] = field(default_factory=dict)

    def sorted_points(self) -> list[SweepPoint]:
        """Points with a measured acceptance and tokens/s, by acceptance (the crossing's order)."""
        usable = [p for p in self.points if p.accept_len is not None and p.tokens_per_s is not None]
        return sorted(usable, key=lambda p: (p.accept_len, p.accept_target))

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        if self.breakeven.between is not None:
            out["breakeven"]["between"] = list(self.breakeven.between)
        return out


def measured_breakeven(points: list[tuple[float, float]], baseline_tps: float | None) -> Crossing:
    """The lowest acceptance length at which the measured tokens/s reaches `baseline_tps`.

    `points` are (measured acceptance, measured tokens/s). Sorted by acceptance, the first pair
    of neighbours with y_i < baseline <= y_j gives x_i + (baseline - y_i) (x_j - x_i) / (y_j - y_i).
    """
    if baseline_tps is None:
        return Crossing("no_baseline", note="no plain-decoding run, so nothing to cross")
    pts = sorted(points)
    if len(pts) < 2:
        return Crossing("too_few_points", note="a crossing needs at least two measured points")
    if pts[0][1] >= baseline_tps:
        return Crossing(
            "below_range",
            note=(
                f"already at or above the baseline at the lowest measured acceptance "
                f"({pts[0][0]:.3f}): the break-even is at or below it"
            ),
        )
    for i in range(len(pts) - 1):
        (x0, y0), (x1, y1) = pts[i], pts[i + 1]
        if y0 < baseline_tps <= y1:
            x = x0 if x1 == x0 else x0 + (baseline_tps - y0) * (x1 - x0) / (y1 - y0)
            return Crossing(
                "measured",
                accept_len=x,
                between=(i, i + 1),
                note=f"between the measured points at acceptance {x0:.3f} and {x1:.3f}",
            )
    return Crossing(
        "above_range",
        note=(
            f"below the baseline at every measured acceptance (up to {pts[-1][0]:.3f}): the "
            "break-even is above it"
        ),
    )


def model_breakevens(points: list[SweepPoint], baseline: Baseline | None) -> None:
    """Fill each point's model break-even: its mean cycle / the baseline's mean step."""
    if baseline is None or not baseline.step_ms_mean:
        return
    for p in points:
        if p.cycle_ms_mean:
            p.model_breakeven_accept_len = p.cycle_ms_mean / baseline.step_ms_mean


def build_sweep(
    *,
    knob: Knob,
    command: list[str],
    points: list[SweepPoint],
    baseline: Baseline | None,
    extra: dict[str, Any] | None = None,
) -> Sweep:
    """The sweep of measured points: model break-evens filled in, the crossing measured."""
    model_breakevens(points, baseline)
    sweep = Sweep(
        knob=knob,
        command=command,
        points=points,
        baseline=baseline,
        breakeven=Crossing("too_few_points"),
        extra=dict(extra or {}),
    )
    usable = sweep.sorted_points()
    pairs = [(float(p.accept_len), float(p.tokens_per_s)) for p in usable]  # type: ignore[arg-type]
    sweep.breakeven = measured_breakeven(pairs, baseline.tokens_per_s if baseline else None)
    sweep.model_breakeven_accept_len, sweep.model_breakeven_note = _model_summary(sweep, usable)
    return sweep


def _model_summary(sweep: Sweep, usable: list[SweepPoint]) -> tuple[float | None, str]:
    """The model's break-even at the point nearest the measured crossing (or the median point)."""
    with_model = [p for p in usable if p.model_breakeven_accept_len is not None]
    if not with_model:
        return None, "no baseline step time"
    if sweep.breakeven.accept_len is not None:
        x = sweep.breakeven.accept_len
        near = min(with_model, key=lambda p: abs(float(p.accept_len) - x))  # type: ignore[arg-type]
        why = "the point nearest the measured crossing"
    else:
        near = with_model[len(with_model) // 2]
        why = "the middle point, there being no measured crossing"
    return near.model_breakeven_accept_len, (
        f"mean cycle / mean baseline step at {why}, held at {near.accept_target:g}"
    )


def write_sweep(sweep: Sweep, out_dir: Path) -> Path:
    path = out_dir / SWEEP_FILE
    path.write_text(json.dumps(sweep.to_json(), indent=2) + "\n", encoding="utf-8")
    return path


def load_sweep(path: Path) -> Sweep:
    """Read sweep.json (or the directory holding it); one-line `InputError` when it is not one."""
    file = path / SWEEP_FILE if path.is_dir() else path
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        msg = f"{file}: no such file; give the directory `tracekit sweep` wrote or its {SWEEP_FILE}"
        raise InputError(msg) from None
    except (OSError, ValueError) as exc:
        msg = f"{file}: not a readable sweep ({exc}); run `tracekit sweep` again"
        raise InputError(msg) from None
    try:
        be = dict(data["breakeven"])
        if be.get("between") is not None:
            be["between"] = tuple(be["between"])
        base = data.get("baseline")
        return Sweep(
            knob=data["knob"],
            command=list(data["command"]),
            points=[SweepPoint(**p) for p in data["points"]],
            baseline=None if base is None else Baseline(**base),
            breakeven=Crossing(**be),
            model_breakeven_accept_len=data.get("model_breakeven_accept_len"),
            model_breakeven_note=data.get("model_breakeven_note", ""),
            schema=int(data.get("schema", SWEEP_SCHEMA)),
            tracekit_version=str(data.get("tracekit_version", "")),
            extra=dict(data.get("extra") or {}),
        )
    except (KeyError, TypeError) as exc:
        msg = f"{file}: not a tracekit sweep (missing or unexpected field {exc}); run `tracekit sweep` again"
        raise InputError(msg) from None


# --------------------------------------------------------------------------------------------
# measuring one run


@dataclass
class RunFigures:
    """What one run measured: the program's own figures (when it wrote them) and tracekit's."""

    tokens_per_s: float | None
    tokens_per_s_source: TpsSource | None
    accept_len: float | None
    accept_len_tracekit: float | None
    tokens_per_s_tracekit: float | None
    cycle_ms_mean: float | None
    cycle_ms_p50: float | None
    cycles: int | None


def read_program_result(path: Path, tps_key: str) -> dict[str, float | None]:
    """`tokens_per_s` and `accept_len_mean` from the JSON the program wrote (None when absent)."""
    if not path.is_file():
        return {"tokens_per_s": None, "accept_len_mean": None}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        msg = f"{path}: the program's result is not JSON ({exc}); check what the command writes"
        raise InputError(msg) from None
    if not isinstance(data, dict):
        msg = f"{path}: expected a JSON object with {tps_key!r}; check what the command writes"
        raise InputError(msg)

    def num(key: str) -> float | None:
        v = data.get(key)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    return {"tokens_per_s": num(tps_key), "accept_len_mean": num("accept_len_mean")}


def measure_run(run_dir: Path, result: Path, tps_key: str = "tokens_per_s") -> RunFigures:
    """A run's figures: tokens/s and acceptance from the program's result JSON where it wrote
    them, else tracekit's (acceptance x 1000 / mean cycle ms); cycle times from tracekit."""
    from tracekit.analyzers.summary import summarize

    program = read_program_result(result, tps_key)
    sm = summarize(run_dir) if (run_dir / "store").is_dir() else None
    tk_tps = None if sm is None else sm.tokens_per_s
    tk_accept = None if sm is None else sm.accept_len_mean
    tps, source = program["tokens_per_s"], "program"
    if tps is None:
        tps, source = tk_tps, "tracekit"
    accept = program["accept_len_mean"]
    if accept is None:
        accept = tk_accept
    return RunFigures(
        tokens_per_s=tps,
        tokens_per_s_source=None if tps is None else source,  # type: ignore[arg-type]
        accept_len=accept,
        accept_len_tracekit=tk_accept,
        tokens_per_s_tracekit=tk_tps,
        cycle_ms_mean=None if sm is None else sm.cycle_ms_mean,
        cycle_ms_p50=None if sm is None else sm.cycle_ms_p50,
        cycles=None if sm is None else sm.cycles,
    )
