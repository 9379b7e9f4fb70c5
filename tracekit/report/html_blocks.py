"""HTML and plotly building blocks of the report's renderer: escaping, number formats, tables,
cards, axes. Every string that reaches the page goes through `esc` (HTML) or `plot_text`
(plotly labels)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any

NS_PER_MS = 1_000_000


@dataclass
class Rendered:
    """A section's rendered parts: its intro text, escaped HTML body and plotly figures."""

    intro: str = ""
    body: str = ""
    figures: list[dict[str, Any]] = field(default_factory=list)


def esc(value: object) -> str:
    """HTML-escape any value (quotes too)."""
    return html.escape("" if value is None else str(value), quote=True)


def plot_text(value: object) -> str:
    """A string for plotly labels: plotly reads a few HTML tags in labels, so escape `<`, `>`, `&`."""
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def fmt(value: object, digits: int = 2, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}{unit}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def rnd(values: list[Any], digits: int = 4) -> list[float | None]:
    return [None if v is None else round(float(v), digits) for v in values]


def cycle_axis(cycles: list[int]) -> dict[str, Any]:
    """An x axis of whole cycle numbers (no 3.5), at most ~20 ticks."""
    if not cycles:
        return {"title": {"text": "cycle"}}
    step = max(1, math.ceil((max(cycles) - min(cycles) + 1) / 20))
    return {"title": {"text": "cycle"}, "tick0": min(cycles), "dtick": step}


def table(
    headers: list[str],
    rows: list[list[object]],
    *,
    classes: list[str] | None = None,
    numeric: set[int] | None = None,
) -> str:
    numeric = numeric or set()
    head = "".join(
        f"<th{' class=num' if i in numeric else ''}>{esc(h)}</th>" for i, h in enumerate(headers)
    )
    body = []
    for r, row in enumerate(rows):
        cls = f' class="{esc(classes[r])}"' if classes and classes[r] else ""
        cells = "".join(
            f"<td{' class=num' if i in numeric else ''}>{esc(c)}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def card(label: str, value: str, sub: str = "") -> str:
    return f"<div class=card><div class=value>{esc(value)}</div><div class=label>{esc(label)}</div><div class=sub>{esc(sub)}</div></div>"


def figure(
    fig_id: str, title: str, data: list[dict[str, Any]], layout: dict[str, Any]
) -> dict[str, Any]:
    return {"id": fig_id, "title": title, "data": data, "layout": layout}
