"""The HTML report in a real browser: Debian's chromium, headless.

Each page is loaded twice: once for its DOM (`--dump-dom`, with the console logged to stderr by
`--enable-logging=stderr --v=0`) and once for a screenshot. The plots must be drawn (plotly's
`main-svg` elements, and the report's own `data-plots-rendered` mark), the console must be
empty, and the detection itself is checked on pages with a broken plotly.js and a JS error.
Screenshots land in the test's temporary directory, and also in $TRACEKIT_SCREENSHOTS when set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.outputs_synth import make_run
from tracekit.report.html import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (scripts/install-chromium.sh)"
    ),
]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=30000",
]
CONSOLE = re.compile(r':CONSOLE[^\]]*\] "(.*)", source: ')


@dataclass
class Loaded:
    dom: str
    console: list[str]
    screenshot: Path


def load(html: Path, tmp: Path, *, height: int = 5000, screenshot: bool = True) -> Loaded:
    assert CHROMIUM is not None
    dom = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile-dom'}", "--dump-dom", html.as_uri()],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = tmp / f"{html.stem}.png"
    if not screenshot:
        return Loaded(dom.stdout, CONSOLE.findall(dom.stderr), shot)
    snap = subprocess.run(
        [
            CHROMIUM,
            *FLAGS,
            f"--user-data-dir={tmp / 'profile-shot'}",
            f"--window-size=1400,{height}",
            f"--screenshot={shot}",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert snap.returncode == 0, snap.stderr[-2000:]
    keep = os.environ.get("TRACEKIT_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)
    return Loaded(dom.stdout, CONSOLE.findall(dom.stderr) + CONSOLE.findall(snap.stderr), shot)


def figure_count(html: Path) -> int:
    m = re.search(
        r'<script type="application/json" id="tk-data">(.*?)</script>', html.read_text(), re.S
    )
    assert m
    return len(json.loads(m.group(1))["figures"])


def assert_rendered(page: Loaded, figures: int) -> None:
    assert page.console == []
    assert f'data-plots-rendered="{figures}"' in page.dom
    # every plot is an SVG plotly drew (each plot has two main-svg layers)
    assert page.dom.count('class="main-svg"') >= 2 * figures
    assert re.search(r'<div id="tk-error" class="error" hidden="', page.dom)
    png = page.screenshot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(png) > 50_000


@pytest.mark.slow
def test_comparison_report_renders_every_plot(tmp_path: Path) -> None:
    # GIVEN a speculative run and a plain-decoding baseline (every section has data)
    make_run(tmp_path / "spec", ranks=4, cycles=30, graph=True)
    make_run(tmp_path / "base", ranks=4, cycles=30, baseline=True)
    html = write_report(
        tmp_path / "spec", tmp_path / "spec-vs-base.html", baseline=tmp_path / "base"
    )
    # WHEN chromium loads it from disk, offline
    page = load(html, tmp_path)
    # THEN all of its plots are drawn and the console is silent
    n = figure_count(html)
    assert n == 8  # 2 phases over time, distributions, skew, 3 NVML, break-even
    assert_rendered(page, n)


@pytest.mark.slow
def test_detection_catches_a_broken_plotly_and_a_js_error(tmp_path: Path) -> None:
    make_run(tmp_path / "run", ranks=1, cycles=2)
    html = write_report(tmp_path / "run", tmp_path / "ok.html")
    text = html.read_text()
    # GIVEN a report whose embedded plotly.js is damaged, and one with a script error
    broken = tmp_path / "broken.html"
    broken.write_text(re.sub(r'(id="tk-plotly"[^>]*>)[^<]+', r"\1AAAA", text))
    failing = tmp_path / "failing.html"
    failing.write_text(text.replace("</body>", "<script>undefinedFunction();</script></body>"))
    # WHEN loaded
    b = load(broken, tmp_path / "b", screenshot=False)
    f = load(failing, tmp_path / "f", screenshot=False)
    # THEN the test machinery sees it
    assert any("The plots could not be drawn" in m for m in b.console)
    assert 'data-plots-rendered="' not in b.dom
    assert any("Uncaught ReferenceError: undefinedFunction" in m for m in f.console)


@pytest.mark.slow
def test_demo_report_in_the_browser(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # GIVEN the demo's own run directory (2 CPU ranks, a few cycles)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit",
            "demo",
            "--ranks",
            "2",
            "--cycles",
            "8",
            "--out",
            str(tmp_path),
            "--name",
            "demo",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    m = re.search(r"HTML report:\s+(\S+)", proc.stdout + proc.stderr)
    assert m, proc.stdout
    html = Path(m.group(1))
    assert html.is_file()
    assert (tmp_path / "demo" / "tracekit.pftrace").is_file()
    # WHEN chromium loads its report
    page = load(html, tmp_path)
    # THEN it renders with a silent console
    assert_rendered(page, figure_count(html))
    assert "Where each cycle" in page.dom
