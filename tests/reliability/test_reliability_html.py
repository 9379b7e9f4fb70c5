"""Strings from traces are text, never markup: a trace whose kernel, op, device and backend
names are HTML/JS payloads goes through `ingest` and `report`; nothing of it becomes an element
or an attribute, and in a real browser no payload runs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.reliability._hostile import MARKERS, XSS_IMG, XSS_SCRIPT, XSS_SVG, write_hostile

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class _Scan(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []
        self.text: list[str] = []
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))
        self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        if not (self._in and self._in[-1] in ("script", "style")):
            self.text.append(data)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    trace = write_hostile(root / "in" / "rank0.json.gz")
    for cmd in (
        ["ingest", str(trace), "-o", str(root / "run")],
        ["report", str(root / "run"), "-o", str(root / "report.html")],
    ):
        res = subprocess.run(
            [sys.executable, "-m", "tracekit", *cmd], capture_output=True, text=True, check=False
        )
        assert res.returncode == 0, res.stderr
    return root / "report.html"


def test_trace_strings_in_the_report_are_text(report: Path) -> None:
    scan = _Scan()
    scan.feed(report.read_text(encoding="utf-8"))
    # no element and no attribute came from the trace
    for tag, attrs in scan.tags:
        assert tag not in ("img", "svg"), (tag, attrs)
        for name, value in attrs:
            assert not name.startswith("on"), (tag, name, value)
            assert not any(m in (value or "") for m in MARKERS), (tag, name, value)
    assert [t for t, _ in scan.tags].count("script") == 3  # the report's own three
    # and the payloads are shown, as text, where the names belong
    text = "".join(scan.text)
    assert XSS_IMG in text  # a kernel name (top kernels) and the distributed backend
    assert XSS_SVG in text  # a kernel name and the device name
    assert XSS_SCRIPT in text


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_no_payload_runs_in_a_browser(report: Path, tmp_path: Path) -> None:
    assert CHROMIUM is not None
    res = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=8000",
            "--dump-dom",
            report.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    dom = res.stdout
    assert "<title>tracekit report" in dom, res.stderr[-2000:]
    # every payload would have renamed the page; the page's scripts ran (plots are drawn)
    assert not any(m in dom.split("</title>", 1)[0] for m in MARKERS)
    assert "plot-container" in dom  # the report's own scripts did run
    scan = _Scan()
    scan.feed(dom)
    for tag, attrs in scan.tags:
        assert tag != "img" or not any(n.startswith("on") for n, _ in attrs)
        for _name, value in attrs:
            assert not any(m in (value or "") for m in MARKERS)
    assert XSS_IMG in "".join(scan.text)
