"""Reporters: text (``path:line:col: CODE message`` and a summary) and json."""

from __future__ import annotations

import json
from collections import Counter

from .diagnostics import Diagnostic


def text_report(diagnostics: list[Diagnostic], quiet: bool, statistics: bool) -> str:
    lines = [f"{d.path}:{d.line}:{d.column}: {d.code} {d.message}" for d in diagnostics]
    if statistics:
        counts = Counter((d.code, d.name) for d in diagnostics)
        lines.extend(f"{n:5d}  {code}  {name}" for (code, name), n in sorted(counts.items()))
    if not quiet:
        lines.append(summary_line(diagnostics))
    return "\n".join(lines)


def summary_line(diagnostics: list[Diagnostic]) -> str:
    if not diagnostics:
        return "All checks passed."
    by_severity = Counter(d.severity for d in diagnostics)
    parts = [f"{by_severity[s]} {s}{'s' if by_severity[s] != 1 else ''}" for s in ("error", "warning", "info") if by_severity[s]]
    files = len({d.path for d in diagnostics})
    n = len(diagnostics)
    return f"Found {n} problem{'s' if n != 1 else ''} ({', '.join(parts)}) in {files} file{'s' if files != 1 else ''}."


def json_report(diagnostics: list[Diagnostic]) -> str:
    return json.dumps([d.to_dict() for d in diagnostics], indent=2)
