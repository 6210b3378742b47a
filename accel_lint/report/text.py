"""``path:line:col: CODE message`` lines, and (text format) a summary as ruff prints it."""

from __future__ import annotations

from collections import Counter

from ..diagnostics import Diagnostic


def location(d: Diagnostic) -> str:
    """``path:line:col``, or ``path.ipynb:cell 7:line:col`` in a notebook (as ruff prints it)."""
    cell = f"cell {d.cell}:" if d.cell is not None else ""
    return f"{d.path}:{cell}{d.line}:{d.column}"


def line(d: Diagnostic, marker: bool = False) -> str:
    mark = "[*] " if marker else ""
    return f"{location(d)}: {d.code} {mark}{d.message}"


def concise(diagnostics: list[Diagnostic]) -> str:
    return "\n".join(line(d) for d in diagnostics)


def evidence_lines(d: Diagnostic) -> list[str]:
    """The facts a finding rests on, indented under it (``--show-evidence``)."""
    where = f"{d.path}:cell {d.cell}:" if d.cell is not None else f"{d.path}:"
    return [f"    {where}{line}: {fact}" for line, fact in d.evidence]


def full(diagnostics: list[Diagnostic], run) -> str:
    lines = []
    for d in diagnostics:
        lines.append(line(d, marker=_applies(d, run)))
        if run.show_evidence:
            lines.extend(evidence_lines(d))
    if run.statistics:
        counts = Counter((d.code, d.name) for d in diagnostics)
        lines.extend(f"{n:5d}  {code}  {name}" for (code, name), n in sorted(counts.items()))
    if not run.quiet:
        lines.append(summary_line(diagnostics))
        fixable = [d for d in diagnostics if d.fix]
        safe = sum(1 for d in fixable if d.fix == "safe")
        unsafe = len(fixable) - safe
        if safe or unsafe:
            if run.unsafe_fixes:
                lines.append(f"[*] {safe + unsafe} fixable with `--fix --unsafe-fixes`.")
            else:
                parts = [f"[*] {safe} fixable with `--fix`"] if safe else []
                if unsafe:
                    parts.append(f"{unsafe} more with `--unsafe-fixes`")
                lines.append(" (".join(parts) + (")." if len(parts) == 2 else "."))
    return "\n".join(lines)


def _applies(d: Diagnostic, run) -> bool:
    return d.fix == "safe" or (d.fix == "unsafe" and run.unsafe_fixes)


def summary_line(diagnostics: list[Diagnostic]) -> str:
    if not diagnostics:
        return "All checks passed."
    by_severity = Counter(d.severity for d in diagnostics)
    parts = [f"{by_severity[s]} {s}{'s' if by_severity[s] != 1 else ''}" for s in ("error", "warning", "info")
             if by_severity[s]]
    files = len({d.path for d in diagnostics})
    n = len(diagnostics)
    return f"Found {n} problem{'s' if n != 1 else ''} ({', '.join(parts)}) in {files} file{'s' if files != 1 else ''}."
