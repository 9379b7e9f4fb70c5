"""Shared bits of the analysis commands (summary, breakdown, diff, breakeven)."""

from __future__ import annotations

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
