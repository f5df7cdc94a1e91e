"""``gk-stream bench FILE --html PATH``: the report's tables and its latency histogram in one
self-contained page (nothing loaded from elsewhere)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pygpukit_dsp
from pygpukit_dsp.bench.html import latency_svg, markdown_html
from pygpukit_dsp.bench.report import ImplResult

ROOT = Path(__file__).resolve().parents[2]


def test_markdown_tables_become_html_tables_with_numbers_aligned():
    page = markdown_html("### w1: latency\n\nsome `code` and **bold**\n\n| impl | p50 us |\n|---|---:|\n"
                         "| numpy | 407.6 |\n| a<b | 1.01x |\n\n- one\n- two\n")
    assert "<h3>w1: latency</h3>" in page
    assert "<code>code</code>" in page and "<b>bold</b>" in page
    assert page.count("<tr>") == 3 and "<th>p50 us</th>" in page
    assert '<td class="num">407.6</td>' in page and '<td class="num">1.01x</td>' in page
    assert "<td>a&lt;b</td>" in page  # escaped
    assert "<ul><li>one</li><li>two</li></ul>" in page


def test_the_histogram_has_one_trace_per_timed_implementation():
    a = ImplResult("project", "project", latency_us={"p50": 10.0, "p99": 30.0}, raw_us=[10.0] * 50 + [30.0])
    b = ImplResult("numpy", "baseline", latency_us={"p50": 20.0, "p99": 40.0}, raw_us=[20.0] * 40 + [40.0])
    skipped = ImplResult("cupy", "baseline", status="skipped")
    svg = latency_svg([a, b, skipped])
    assert svg.count("<polyline") == 2 and svg.count('stroke-dasharray="2,3"') == 2
    assert "project: p50 10.0 us, p99 30.0 us" in svg and "cupy" not in svg
    assert latency_svg([skipped]) == ""


def test_bench_html_writes_one_self_contained_page(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(pygpukit_dsp.__file__).resolve().parents[1]),
                                         *filter(None, [env.get("PYTHONPATH")])])
    out = tmp_path / "report" / "w1.html"
    r = subprocess.run([sys.executable, "-m", "pygpukit_dsp.cli", "bench", str(ROOT / "benchmarks" / "w1.yaml"),
                        "--backend", "cpu", "--blocks", "40", "--warmup", "4", "--compare", "numpy", "--quiet",
                        "--html", str(out)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    page = out.read_text()
    assert page.startswith("<!doctype html>") and "<style>" in page
    assert page.count("<table>") >= 1 and "pygpukit-dsp (cpu)" in page and "numpy" in page
    assert page.count("<polyline") == 2
    # nothing fetched: no script, stylesheet, image or font from a URL (the SVG namespace is a name)
    assert not re.search(r"<(script|link|img|iframe)\b", page)
    assert re.findall(r"https?://[^\"' ]+", page) == ["http://www.w3.org/2000/svg"]
