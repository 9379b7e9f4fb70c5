"""How the analysis commands print (summary, breakdown, diff, breakeven, temporal): JSON on
stdout, numbers in tables, notes on stderr. Their options are in `tracekit.cli._options`."""

from __future__ import annotations

import json
import math
from typing import Any

import click


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


def echo_note(note: str | None) -> None:
    """A note about the data (the steady-state exclusion) on stderr."""
    if note:
        click.echo(f"note: {note}", err=True)
