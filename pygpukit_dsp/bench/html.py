"""``gk-stream bench FILE --html report.html``: the bench's tables and plots in one self-contained page.

The page is the report's Markdown (headings, paragraphs, lists, tables) as HTML, with inline CSS and,
for a latency report, each implementation's latency histogram as inline SVG (log-spaced bins, the
p99 dotted): nothing is fetched from the network, so the file opens anywhere and can be attached.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#1d2330;padding:0 1em}
table{border-collapse:collapse;margin:.6em 0}th,td{border:1px solid #c9d0dc;padding:.25em .6em}
th{background:#eef1f6}td.num{text-align:right;font-variant-numeric:tabular-nums}code{background:#f1f3f7;padding:0 .2em}
h1{font-size:1.4em}h2,h3{font-size:1.15em;margin-top:1.4em}svg{background:#fbfcfe;border:1px solid #dde2ea}
.legend span{display:inline-block;margin-right:1.2em}"""
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _inline(text: str) -> str:
    """Markdown inline marks: `code`, **bold**, escaped otherwise."""
    out = html.escape(text)
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _is_number(cell: str) -> bool:
    return re.fullmatch(r"[-+]?[\d.,]+(x|%| us| ms)?", cell.strip()) is not None


def markdown_html(markdown: str) -> str:
    """The report's Markdown as HTML (the subset the bench reports write)."""
    parts: list[str] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        heading = re.match(r"(#{1,6})\s+(.*)", line)
        if heading:
            level = len(heading.group(1))
            parts.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
            i += 1
        elif line.lstrip().startswith("|"):
            rows = []
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append(lines[i])
                i += 1
            parts.append(_table(rows))
        elif re.match(r"\s*[-*]\s+", line):
            items = []
            while i < len(lines) and re.match(r"\s*[-*]\s+", lines[i]):
                items.append("<li>" + _inline(re.sub(r"^\s*[-*]\s+", "", lines[i])) + "</li>")
                i += 1
            parts.append("<ul>" + "".join(items) + "</ul>")
        else:
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].lstrip().startswith(("|", "#")):
                para.append(lines[i].strip())
                i += 1
            parts.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(parts)


def _table(rows: list[str]) -> str:
    header = _cells(rows[0])
    body = [r for r in rows[1:] if not re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", r)]
    out = ["<table><thead><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in header) + "</tr></thead><tbody>"]
    for r in body:
        cells = _cells(r)
        out.append("<tr>" + "".join(f"<td class=\"num\">{_inline(c)}</td>" if _is_number(c) else f"<td>{_inline(c)}</td>"
                                    for c in cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def latency_svg(results: list[Any], *, width: int = 860, height: int = 320) -> str:
    """Each result's per-block latencies (``raw_us``) as a step histogram over log-spaced bins, the
    p99 dotted, blocks on a log axis; '' when no result has latencies."""
    timed = [r for r in results if getattr(r, "raw_us", None)]
    if not timed:
        return ""
    lo = max(0.1, min(min(r.raw_us) for r in timed) * 0.9)
    hi = max(max(r.raw_us) for r in timed) * 1.1
    if hi <= lo:
        hi = lo * 2
    edges = np.geomspace(lo, hi, 81)
    counts = [np.histogram(r.raw_us, bins=edges)[0] for r in timed]
    top = max(1, max(int(c.max()) for c in counts))
    left, right, top_m, bottom = 60, 15, 12, 42
    pw, ph = width - left - right, height - top_m - bottom

    def x(v: float) -> float:
        return left + (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * pw

    def y(c: float) -> float:
        return top_m + ph - (math.log10(c + 1) / math.log10(top + 1)) * ph

    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
           f'aria-label="latency histogram">', '<g font-size="11" fill="#444">']
    decade = 10 ** math.floor(math.log10(lo))
    while decade <= hi:
        for m in (1, 2, 5):
            v = decade * m
            if lo <= v <= hi:
                svg.append(f'<line x1="{x(v):.1f}" y1="{top_m}" x2="{x(v):.1f}" y2="{top_m + ph}" stroke="#e3e7ee"/>'
                           f'<text x="{x(v):.1f}" y="{top_m + ph + 14}" text-anchor="middle">{v:g}</text>')
        decade *= 10
    for c in sorted({1, 10, 100, 1000, 10000, top}):
        if c <= top:
            svg.append(f'<text x="{left - 6}" y="{y(c) + 4:.1f}" text-anchor="end">{c}</text>')
    svg.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle">per-block latency (us, log); '
               f'dotted: p99</text>')
    svg.append(f'<text x="14" y="{top_m + ph / 2}" transform="rotate(-90 14 {top_m + ph / 2})" '
               f'text-anchor="middle">blocks (log)</text></g>')
    legend = []
    for k, (r, c) in enumerate(zip(timed, counts)):
        color = COLORS[k % len(COLORS)]
        pts = [f"{x(edges[0]):.1f},{y(0):.1f}"]
        for i, n in enumerate(c):
            pts += [f"{x(edges[i]):.1f},{y(n):.1f}", f"{x(edges[i + 1]):.1f},{y(n):.1f}"]
        svg.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.4" points="{" ".join(pts)}"/>')
        p99 = r.latency_us.get("p99")
        if p99:
            svg.append(f'<line x1="{x(p99):.1f}" y1="{top_m}" x2="{x(p99):.1f}" y2="{top_m + ph}" stroke="{color}" '
                       'stroke-dasharray="2,3"/>')
        legend.append(f'<span style="color:{color}">&#9644; {html.escape(r.name)}: p50 '
                      f'{r.latency_us.get("p50", 0):.1f} us, p99 {r.latency_us.get("p99", 0):.1f} us</span>')
    svg.append("</svg>")
    return "\n".join(svg) + f'\n<p class="legend">{"".join(legend)}</p>'


def report_html(report: Any, title: str | None = None) -> str:
    """The whole page of one bench report."""
    name = title or f"gk-stream bench: {getattr(report, 'pipeline', '') or 'report'}"
    body = [markdown_html(report.markdown())]
    plot = latency_svg(getattr(report, "results", []) or [])
    if plot:
        body.append("<h2>Latency per block</h2>\n" + plot)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(name)}</title>'
            f"<style>{CSS}</style></head><body>\n<h1>{html.escape(name)}</h1>\n" + "\n".join(body) + "\n</body></html>\n")


def write_html(report: Any, path: str | Path) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(report_html(report), encoding="utf-8")
