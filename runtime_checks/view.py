"""``python -m runtime_checks view REPORT.json``: the report's timeline as one self-contained
HTML page (inline SVG and CSS, no script, no network asset), written next to the report.

The verdict's table has a row per group of ranks in the same state, the likely culprit first
(:mod:`runtime_checks.groups`). The timeline has a row per rank, a bar per collective (colour by
op kind, hover for op, shapes, call site and duration), a red line at the verdict, the culprit's
row marked. Bars narrower than a pixel are drawn one pixel wide, so thousands of collectives on
8 ranks stay readable.
"""

from __future__ import annotations

import html
import json
import os
import sys
import zlib
from typing import Any

from .groups import group_rows, ranks_cell

WIDTH = 1200
LABEL = 110
ROW = 30
TOP = 40
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#76b7b2", "#edc948", "#b07aa1", "#9c755f", "#bab0ac")


def _colour(kind: str) -> str:
    return PALETTE[zlib.crc32(kind.encode()) % len(PALETTE)]


def render(report: dict[str, Any], trace: dict[str, Any]) -> str:
    """The whole page: the verdict, its table, and the timeline."""
    finding = (report.get("findings") or [None])[0]
    culprit = finding.get("culprit") if finding else None
    slices = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    ranks = {e["tid"] for e in trace.get("traceEvents", []) if e.get("name") == "thread_name"}
    return _page(finding, culprit, len(slices), len(ranks), timeline_svg(trace, culprit))


def timeline_svg(trace: dict[str, Any], culprit: int | None) -> str:
    """The timeline alone, as an inline SVG element (the notebook report shows it too)."""
    events = trace.get("traceEvents", [])
    ranks = sorted({e["tid"] for e in events if e.get("name") == "thread_name"})
    slices = [e for e in events if e.get("ph") == "X"]
    instants = [e for e in events if e.get("ph") == "i"]
    end = max([e["ts"] + e.get("dur", 0) for e in slices] + [e["ts"] for e in instants] + [1.0])
    plot = WIDTH - LABEL - 20

    def x(ts: float) -> float:
        return LABEL + plot * ts / end

    height = TOP + ROW * len(ranks) + 30
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
             f'font-family="sans-serif" font-size="12">']
    for i in range(6):  # time axis
        ts = end * i / 5
        parts.append(f'<line x1="{x(ts):.1f}" y1="{TOP - 8}" x2="{x(ts):.1f}" y2="{height - 25}" stroke="#ddd"/>'
                     f'<text x="{x(ts):.1f}" y="{TOP - 12}" text-anchor="middle" fill="#555">{ts / 1e6:.2f} s</text>')
    for row, rank in enumerate(ranks):
        y = TOP + row * ROW
        mark = rank == culprit
        if mark:
            parts.append(f'<rect x="0" y="{y}" width="{WIDTH}" height="{ROW}" fill="#fde2e2"/>')
        label = f"rank {rank}" + (" (culprit)" if mark else "")
        parts.append(f'<text x="6" y="{y + ROW / 2 + 4}" fill="{"#b00" if mark else "#222"}" '
                     f'font-weight="{"bold" if mark else "normal"}">{html.escape(label)}</text>')
        for e in slices:
            if e["tid"] != rank:
                continue
            args = e.get("args", {})
            width = max(1.0, plot * e.get("dur", 0) / end)
            open_ = not args.get("completed", True)
            tip = (f"#{args.get('seq')} {e['name']}({args.get('shapes', '')}) at {args.get('site', '?')}, "
                   f"{e.get('dur', 0) / 1e3:.1f} ms" + (", still inside at the verdict" if open_ else ""))
            parts.append(f'<rect x="{x(e["ts"]):.1f}" y="{y + 5}" width="{width:.1f}" height="{ROW - 10}" '
                         f'fill="{_colour(e.get("cat", ""))}"' + (' stroke="#b00" stroke-width="2"' if open_ else "")
                         + f'><title>{html.escape(tip)}</title></rect>')
            name = e["name"].rsplit(".", 1)[-1]
            if width > 8 * len(name) + 8:  # wide enough to say what it is
                parts.append(f'<text x="{x(e["ts"]) + 4:.1f}" y="{y + ROW / 2 + 4}" fill="#fff" '
                             f'pointer-events="none">{html.escape(name)}</text>')
    for e in instants:
        if e.get("s") == "g":
            parts.append(f'<line x1="{x(e["ts"]):.1f}" y1="{TOP - 5}" x2="{x(e["ts"]):.1f}" y2="{height - 25}" '
                         f'stroke="#d00" stroke-width="2"><title>{html.escape(e["name"])}</title></line>')
    kinds = sorted({e.get("cat", "") for e in slices})
    legend_x = LABEL
    for kind in kinds:
        parts.append(f'<rect x="{legend_x}" y="{height - 18}" width="12" height="12" fill="{_colour(kind)}"/>'
                     f'<text x="{legend_x + 16}" y="{height - 8}">{html.escape(kind)}</text>')
        legend_x += 24 + 8 * len(kind)
    parts.append("</svg>")
    return "".join(parts)


def _page(finding: dict | None, culprit: int | None, collectives: int, ranks: int, svg: str) -> str:
    head = "<h1>runtime_checks: no finding</h1>"
    if finding:
        head = (f"<h1>{html.escape(finding['kind'])}: {html.escape(finding['title'])}</h1>"
                f"<p><b>why:</b> {html.escape(finding['why'])}<br><b>fix:</b> {html.escape(finding['hint'])}</p>"
                "<table><tr><th>ranks</th><th>state</th><th>op</th><th>line</th><th></th></tr>"
                + "".join(f"<tr{' class=culprit' if g.role else ''}><td>{html.escape(ranks_cell(g.ranks))}</td>"
                          f"<td>{html.escape(str(g.row.get('state', '')))}</td>"
                          f"<td>{html.escape(str(g.row.get('op') or ''))}</td>"
                          f"<td>{html.escape(_site(g.row.get('site')))} <code>{html.escape(g.row.get('code') or '')}"
                          f"</code></td><td>{html.escape(g.role or '')}</td></tr>"
                          for g in group_rows(finding.get("rows", []), culprit))
                + "</table>" + _flight_recorder_html((finding.get("extra") or {}).get("flight_recorder")))
    style = ("body{font-family:sans-serif;margin:16px;color:#222}h1{font-size:18px}table{border-collapse:collapse;"
             "margin:8px 0}td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px;text-align:left}"
             "tr.culprit{background:#fde2e2}code{font-size:12px}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>runtime_checks timeline</title>"
            f"<style>{style}</style></head><body>{head}<p>{collectives} collectives on {ranks} ranks "
            f"(hover a bar for its op, shapes and line)</p>{svg}</body></html>\n")


def _flight_recorder_html(fr: dict | None) -> str:
    """Each group of ranks' last NCCL collective, from the flight recorder dumps, and the analyzer's command."""
    if not fr:
        return ""
    rows = "".join(f"<tr{' class=culprit' if g.get('role') else ''}><td>{html.escape(ranks_cell(g['ranks']))}</td>"
                   f"<td>{html.escape(str(g.get('text', '')))}</td></tr>" for g in fr.get("groups") or [])
    command = f"<br><code>{html.escape(fr['command'])}</code>" if fr.get("command") else ""
    return ("<p><b>NCCL flight recorder</b>, each rank's last collective (NCCL's sequence number, state):</p>"
            f"<table><tr><th>ranks</th><th>last NCCL collective</th></tr>{rows}</table>{command}")


def _site(site: dict | None) -> str:
    return f"{os.path.basename(site['file'])}:{site['line']}" if site and site.get("file") else ""


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m runtime_checks view REPORT.json", file=sys.stderr)
        return 2
    report_path = argv[0]
    try:
        with open(report_path, encoding="utf-8") as f:
            report = json.load(f)
        trace_path = report.get("trace")
        if not trace_path:
            print(f"python -m runtime_checks view: {report_path} names no trace (re-run with --trace)", file=sys.stderr)
            return 2
        if not os.path.isabs(trace_path) and not os.path.exists(trace_path):
            trace_path = os.path.join(os.path.dirname(os.path.abspath(report_path)), os.path.basename(trace_path))
        with open(trace_path, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"python -m runtime_checks view: {exc}", file=sys.stderr)
        return 2
    out = (report_path[:-5] if report_path.endswith(".json") else report_path) + ".html"
    with open(out, "w", encoding="utf-8") as f:
        f.write(render(report, trace))
    print(out)
    return 0
