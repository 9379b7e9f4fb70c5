"""The HTML report: numbers from the analyzers, escaping, determinism, missing sections."""

from __future__ import annotations

import base64
import gzip
import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.outputs_synth import make_run
from tracekit.cli import cli
from tracekit.errors import InputError, StoreError
from tracekit.report.build import build_model
from tracekit.report.html import write_report
from tracekit.report.render import json_for_script, render

FIXED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("runs")
    make_run(root / "spec", ranks=2, cycles=6, graph=True)
    make_run(root / "base", ranks=2, cycles=6, baseline=True)
    return root / "spec", root / "base"


@pytest.fixture(scope="module")
def page(runs: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("out") / "r.html"
    render(build_model(runs[0], baseline=runs[1]), out, generated=FIXED)
    return out.read_text(encoding="utf-8")


def _payload(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="tk-data">(.*?)</script>', page, re.S)
    assert m
    return json.loads(m.group(1))


def test_trace_strings_are_escaped(page: str) -> None:
    # the manifest's argv holds `</code><script>alert(1)</script>`; kernel names hold < and >
    assert "<script>alert(1)" not in page
    assert "&lt;/code&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "cutlass::Kernel2&lt;cutlass_80_tensorop" in page
    assert "FillFunctor<float>" not in page
    # exactly three script elements: payload, plotly, the report's own code
    assert page.count("<script") == 3
    assert page.count("</script>") == 3


def test_embedded_json_cannot_close_its_script() -> None:
    text = json_for_script({"name": "</script><script>x()</script>", "b": "a&b\u2028"})
    assert "</" not in text
    assert "<" not in text
    assert json.loads(text) == {"b": "a&b\u2028", "name": "</script><script>x()</script>"}


def test_same_input_same_bytes_apart_from_the_timestamp(
    runs: tuple[Path, Path], tmp_path: Path
) -> None:
    a, b = tmp_path / "a.html", tmp_path / "b.html"
    write_report(runs[0], a, baseline=runs[1])
    render(build_model(runs[0], baseline=runs[1]), b, generated=FIXED)
    la, lb = a.read_text().splitlines(), b.read_text().splitlines()
    diff = [(x, y) for x, y in zip(la, lb) if x != y]
    assert len(la) == len(lb)
    assert len(diff) == 1
    assert diff[0][1] == "<p class=meta>Generated 2026-01-02 03:04:05 UTC</p>"


def test_plotly_embedded_once_and_unpacks_to_plotly_js(page: str) -> None:
    from plotly.offline import get_plotlyjs

    m = re.findall(
        r'<script type="application/octet-stream" id="tk-plotly"[^>]*>([A-Za-z0-9+/=]+)</script>',
        page,
    )
    assert len(m) == 1
    assert gzip.decompress(base64.b64decode(m[0])).decode() == get_plotlyjs()
    assert 'src="https://cdn.plot.ly' not in page


def test_cdn_links_plotly_instead(runs: tuple[Path, Path], tmp_path: Path) -> None:
    out = write_report(runs[0], tmp_path / "cdn.html", cdn=True)
    text = out.read_text()
    assert re.search(r'<script src="https://cdn.plot.ly/plotly-[0-9.]+\.min\.js"', text)
    assert 'id="tk-plotly"' not in text
    assert out.stat().st_size < 200_000


def test_headline_numbers_known_answers(runs: tuple[Path, Path], tmp_path: Path) -> None:
    # GIVEN the synthetic speculative run (2 ranks, 6 cycles 2 ms apart, graph-replayed verify)
    # and a plain-decoding baseline whose steps are 1.6 ms apart. By hand (tests/outputs_synth.py,
    # DEFINITIONS.md "Cycle time", "Acceptance length, throughput, break-even, speedup"): cycle
    # times come from the collector's records of every cycle; there a cycle's device work is
    # its CPU range, and the last phase (verify) ends 10 + 3 x 100 + 50 + 20 + 4 x 150 + 100 =
    # 1,080 µs after the cycle's start. So cycle 0 takes 1.08 ms (its start to its end) and
    # cycles 1-5 take 2.0 ms (previous end to own end, no gap: the 0.92 ms between cycles is
    # shorter than a cycle and holds no other work); total 11.08 ms on each rank. Tokens 1, 2,
    # 3, 4, 1, 2: 13 in 6 cycles, acceptance 2.17; tokens/s = 13 / 11.08 ms = 1,173.3. The
    # baseline has no draft: its step ends 10 + 50 + 20 + 4 x 150 + 100 = 780 µs after its
    # start, so 0.78 ms, then 1.6 ms x 5 = 8.78 ms for 6 steps. Break-even = mean cycle / mean
    # step = 11.08 / 8.78 = 1.26; speedup = (13/6) x (8.78/6) / (11.08/6) = 1.72.
    base = tmp_path / "base16"
    make_run(base, ranks=2, cycles=6, baseline=True, cycle_ns=1_600_000)
    out = tmp_path / "r.html"
    render(build_model(runs[0], baseline=base), out, generated=FIXED)
    cards = {
        label: value
        for value, label in re.findall(
            r"<div class=value>(.*?)</div><div class=label>(.*?)</div>", out.read_text()
        )
    }
    assert cards["ranks"] == "2"
    assert cards["cycles"] == "6"
    assert cards["tokens / s"] == "1,173.3"
    assert cards["acceptance length"] == "2.17"
    assert cards["break-even acceptance length"] == "1.26"
    assert cards["speedup vs plain decoding"] == "1.72x"
    assert cards["cycles with graph replay"] == "100.0 %"  # every verify replays a graph


def test_comparison_leads_and_all_sections_present(page: str) -> None:
    ids = re.findall(r'<section id="([^"]+)">', page)
    assert ids == [
        "diff",
        "headline",
        "over-time",
        "distributions",
        "skew",
        "graphs-allreduce",
        "kernels",
        "nvml",
        "breakeven",
        "manifest",
    ]
    assert "Unavailable" not in page
    figs = _payload(page)["figures"]
    ids = [f["id"] for f in figs]
    assert {"fig-skew", "fig-breakeven", "fig-distributions", "fig-nvml-power"} <= set(ids)
    assert len(ids) == len(set(ids))
    for f in figs:
        assert f'id="{f["id"]}"' in page


def test_per_cycle_bars_show_the_models_numbers(page: str) -> None:
    # verify of the synthetic run, every cycle and rank (tests/outputs_synth.py): three 100 µs
    # GEMMs (forward 0.3 ms), one 100 µs NCCL allreduce (0.1 ms), 150 µs idle before its first
    # kernel and 3 x 50 µs between them (overhead 0.3 ms)
    figs = [f for f in _payload(page)["figures"] if f["id"].startswith("fig-over-time")]
    assert len(figs) == 2  # draft, verify
    bars = {t["name"]: t for t in figs[1]["data"]}
    assert bars["forward"]["x"] == [0, 1, 2, 3, 4, 5]
    assert bars["forward"]["y"] == [0.3] * 6
    assert bars["allreduce"]["y"] == [0.1] * 6
    assert bars["overhead"]["y"] == [0.3] * 6
    # draft: 220 µs busy a cycle (110 + 60 - 10 overlapping + 60); the idle before it is 80 µs
    # in cycle 0 (from the cycle's start) and 1,080 µs after (from the last verify kernel)
    draft = {t["name"]: t for t in figs[0]["data"]}
    assert draft["forward"]["y"] == [0.22] * 6
    assert draft["overhead"]["y"] == [0.08] + [1.08] * 5


def test_manifest_difference_highlighted(page: str) -> None:
    # the synthetic ranks report different NCCL versions
    row = re.search(
        r'<tr class="differs"><td>versions</td><td>nccl</td><td>2.28.9</td><td>2.27.7</td></tr>',
        page,
    )
    assert row


def test_missing_parts_are_said_not_faked(tmp_path: Path) -> None:
    # GIVEN a light-mode run: no events (no kernels), no NVML, no baseline
    make_run(tmp_path / "light", ranks=1, cycles=3, events=False, counters=False)
    out = write_report(tmp_path / "light", tmp_path / "l.html")
    text = out.read_text()
    missing = re.search(r"<div class=missing>(.*?)</div>", text, re.S)
    assert missing
    assert "GPU clocks, power and temperature" in missing.group(1)
    assert "Break-even" in missing.group(1)
    assert "--baseline RUN" in text
    assert "n/a" in text  # the break-even card says n/a, not a number


def test_bad_inputs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such run directory"):
        build_model(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreError, match="tracekit ingest"):
        build_model(tmp_path / "empty")


def test_cli_default_path_and_refusals(runs: tuple[Path, Path], tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["report", str(runs[0])])
    assert r.exit_code == 0, r.output
    assert (runs[0] / "tracekit-report.html").is_file()
    r = CliRunner().invoke(cli, ["report", str(runs[0]), "--baseline", str(tmp_path / "missing")])
    assert r.exit_code == 2
    assert "--baseline" in r.output
    existing = tmp_path / "x.html"
    existing.write_text("keep")
    r = CliRunner().invoke(cli, ["report", str(runs[0]), "-o", str(existing)])
    assert r.exit_code == 2
    assert existing.read_text() == "keep"
    r = CliRunner().invoke(cli, ["report", str(tmp_path / "nope")])
    assert r.exit_code == 2
    assert "Traceback" not in r.output


def test_lead_sentence_splits_the_device_time(page: str) -> None:
    # per rank over the 6 cycles (µs, test_report_model.py): forward 3,120, allreduce 600,
    # overhead 7,280 of 11,000 -> 28 %, 5 %, 66 %; draft p50 1.3 ms, verify 0.7 ms
    lead = re.search(r"<p class=lead>(.*?)</p>", page)
    assert lead
    assert lead.group(1) == (
        "Cycle p50 2.0 ms; phase p50s: draft 1.3 ms, verify 0.7 ms. Of the device time, 28 % is "
        "forward compute, 5 % allreduce and 66 % overhead (idle)."
    )


def test_diff_table_renders_the_models_numbers() -> None:
    from tracekit.report.render_tables import diff
    from tracekit.report.section_data import Diff, DiffPhase, ManifestChange

    phase = DiffPhase("draft", 1.3, 1.8, 0.5, (0.4996, 0.5004), True, 0.0, None, 0.5)
    body = diff(Diff(["draft is slower"], [phase], [ManifestChange("env", "X", "1", None)])).body
    assert "<ul class=headline><li>draft is slower</li></ul>" in body
    assert (
        '<tr class="differs"><td>draft</td><td class=num>1.300</td><td class=num>1.800</td>'
        "<td class=num>0.500</td><td class=num>0.500 to 0.500</td><td>yes</td>"
        "<td class=num>0.000</td><td class=num>n/a</td><td class=num>0.500</td></tr>"
    ) in body
    assert "<tr><td>env</td><td>X</td><td>1</td><td></td></tr>" in body
