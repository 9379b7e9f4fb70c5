"""Shared bits of the analysis commands (summary, breakdown, diff, breakeven)."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])

run_dir_argument = click.argument(
    "run_dir", type=click.Path(exists=True, file_okay=False, path_type=Path)
)


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON on stdout.")(f)


def rules_option(f: F) -> F:
    f = click.option(
        "--impl-table",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="TOML file of extra [[impl]] allreduce-implementation entries, tried first.",
    )(f)
    return click.option(
        "--rules",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="TOML file of extra [[rule]] entries mapping annotation names to phases.",
    )(f)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def echo_json(payload: Any) -> None:
    click.echo(json.dumps(_clean(payload), indent=2, sort_keys=False))


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def ms(ns: Any) -> str:
    return "-" if ns is None else f"{ns / 1e6:.3f}"


def cycles_option(f: F) -> F:
    """`--all-cycles` / `--cycles A:B`, handed to the command as `choice` (a CycleChoice)."""

    @functools.wraps(f)
    def wrapper(*args: Any, all_cycles: bool, cycles: str | None, **kwargs: Any) -> Any:
        from tracekit.analyzers.steady import CycleChoice

        choice = CycleChoice.parse(all_cycles=all_cycles, cycles=cycles)
        return f(*args, choice=choice, **kwargs)

    wrapped = click.option(
        "--cycles",
        metavar="A:B",
        default=None,
        help="Use cycles A to B-1 only (a slice: `64:` from cycle 64 on) instead of the "
        "steady state.",
    )(wrapper)
    wrapped = click.option(
        "--all-cycles",
        is_flag=True,
        help="Use every recorded cycle, warm-up included (default: the steady state, see "
        "docs/DEFINITIONS.md).",
    )(wrapped)
    return wrapped  # type: ignore[return-value]


def echo_note(note: str | None) -> None:
    """A note about the data (the steady-state exclusion) on stderr."""
    if note:
        click.echo(f"note: {note}", err=True)
