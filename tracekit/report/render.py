"""The report's page from its model (tracekit/report/section_data.py): one self-contained HTML file.

Tables and cards are rendered with every string escaped (tracekit/report/render_tables.py),
plots drawn by plotly.js from one embedded JSON payload (tracekit/report/render_figures.py).
plotly.js is embedded once, gzip-compressed and base64-encoded (1.9 MB instead of 4.8 MB) and
unpacked by the browser's DecompressionStream, so the file works offline; `cdn=True` links it
from cdn.plot.ly instead. Same model, same bytes, apart from the one line that says when the
report was generated.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Any

from tracekit._version import __version__
from tracekit.analyzers.sweep import Sweep
from tracekit.report import render_figures, render_tables
from tracekit.report.html_blocks import Rendered, esc
from tracekit.report.section_data import (
    BreakevenCurve,
    Diff,
    Distributions,
    GraphsAllreduce,
    Headline,
    Kernels,
    Manifest,
    NoCycles,
    Nvml,
    OverTime,
    ReportModel,
    Section,
    SectionId,
    Skew,
)
from tracekit.report.sweep import render_sweep
from tracekit.store.schema import SCHEMA_VERSION

RENDERERS: dict[type, Callable[[Any], Rendered]] = {
    Diff: render_tables.diff,
    Headline: render_tables.headline,
    NoCycles: render_tables.no_cycles,
    OverTime: render_figures.over_time,
    Distributions: render_figures.distributions,
    Skew: render_figures.skew,
    GraphsAllreduce: render_tables.graphs_allreduce,
    Kernels: render_tables.kernels,
    Nvml: render_figures.nvml,
    BreakevenCurve: render_figures.breakeven,
    Sweep: render_sweep,
    Manifest: render_tables.manifest,
}
# what a section says under its title whether or not it has data
INTROS: dict[SectionId, str] = {
    "over-time": "Forward compute, allreduce and overhead (device idle charged to the phase whose work runs next) of each phase instance, mean over ranks, cycle by cycle (every cycle, warm-up included).",
    "distributions": "Wall time of each phase instance (its share of the device timeline), by rank.",
    "skew": (
        "Each cell: how much more work (wall time minus allreduce wait, as `tracekit.analyzers.skew` "
        "defines it) the rank did in the cycle than the rank with the least, in µs. A rank that is "
        "always bright is the straggler the others wait for in allreduce."
    ),
    "kernels": "Summed duration of each kernel name inside each phase, all ranks together (overlapping kernels count twice).",
    "manifest": "What each rank ran with. Rows whose value differs between ranks are highlighted and listed first.",
}


def render_section(s: Section) -> Rendered:
    """A section's intro, body and figures (empty when it is unavailable)."""
    out = Rendered() if s.data is None else RENDERERS[type(s.data)](s.data)
    out.intro = out.intro or INTROS.get(s.id, "")
    return out


def _template(name: str) -> str:
    return (
        resources.files("tracekit.report").joinpath("templates", name).read_text(encoding="utf-8")
    )


def _plotly_js() -> tuple[str, str]:
    """(version, base64 of gzip of plotly.min.js): deterministic bytes (gzip mtime 0)."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    js = get_plotlyjs().encode("utf-8")
    packed = gzip.compress(js, compresslevel=9, mtime=0)
    return get_plotlyjs_version(), base64.b64encode(packed).decode("ascii")


def _plotly_version() -> str:
    from plotly.offline import get_plotlyjs_version

    return str(get_plotlyjs_version())


def json_for_script(payload: object) -> str:
    """JSON safe inside <script>: sorted keys, and `<`, `>`, `&`, U+2028/9 as \\u escapes."""
    text = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )
    for ch, rep in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(ch, rep)
    return text


def _plotly_tag(cdn: bool) -> str:
    if cdn:
        version = _plotly_version()
        return f'<script src="https://cdn.plot.ly/plotly-{esc(version)}.min.js" charset="utf-8"></script>'
    version, packed = _plotly_js()
    return f'<script type="application/octet-stream" id="tk-plotly" data-version="{esc(version)}">{packed}</script>'


def _sections(model: ReportModel) -> tuple[list[str], list[str], list[str], list[dict[str, Any]]]:
    """(nav links, section elements, 'not in this report' items, plot payloads)."""
    figures: list[dict[str, Any]] = []
    nav, parts, missing = [], [], []
    for s in model.sections:
        r = render_section(s)
        nav.append(f'<a href="#{esc(s.id)}">{esc(s.title)}</a>')
        inner = f"<h2>{esc(s.title)}</h2>"
        if r.intro:
            inner += f"<p class=intro>{esc(r.intro)}</p>"
        if s.unavailable:
            inner += f"<p class=unavailable>Unavailable: {esc(s.unavailable)}</p>"
            missing.append(
                f'<li><a href="#{esc(s.id)}">{esc(s.title)}</a>: {esc(s.unavailable)}</li>'
            )
        inner += r.body
        for fig in r.figures:
            inner += f'<div class=figure><div class=figtitle>{esc(fig["title"])}</div><div class=plot id="{esc(fig["id"])}"></div></div>'
            figures.append({"id": fig["id"], "data": fig["data"], "layout": fig["layout"]})
        parts.append(f'<section id="{esc(s.id)}">{inner}</section>')
    return nav, parts, missing, figures


def page(model: ReportModel, *, cdn: bool = False, generated: datetime | None = None) -> str:
    """The report's HTML."""
    nav, parts, missing, figures = _sections(model)
    when = (generated or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M:%S UTC")
    subs = {
        "title": esc(model.title),
        "css": _template("report.css"),
        "js": _template("report.js"),
        "plotly": _plotly_tag(cdn),
        "payload": json_for_script({"figures": figures}),
        "nav": "".join(nav),
        "sections": "".join(parts),
        "missing": (
            "<div class=missing><b>Not in this report:</b><ul>" + "".join(missing) + "</ul></div>"
        )
        if missing
        else "",
        "meta": esc(
            f"run {model.run_dir}"
            + (f" · baseline {model.baseline_dir}" if model.baseline_dir else "")
            + f" · tracekit {__version__} · store schema {SCHEMA_VERSION}"
        ),
        "generated": esc(when),
    }
    # one pass over the template: text from a trace can never be read as a placeholder
    return re.sub(r"\{\{(\w+)\}\}", lambda m: subs[m.group(1)], _template("report.html"))


def render(
    model: ReportModel, out_path: Path, *, cdn: bool = False, generated: datetime | None = None
) -> Path:
    """Write the report's page to `out_path` (atomically: a temporary file, then a rename)."""
    text = page(model, cdn=cdn, generated=generated)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(out_path)
    return out_path
