"""Engine findings -> LSP diagnostics, and positions between the engine and the client.

The engine counts 1-based lines and columns in characters (code points); LSP counts 0-based
lines and columns in the client's position encoding (UTF-16 unless negotiated otherwise). A
client's positions are compared with converted ranges, never converted back.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from lsprotocol import types

from ..config import Config
from ..diagnostics import Diagnostic
from ..doclinks import base_url, rule_url
from .project import Report

SOURCE = "accel-lint"
SEVERITY = {"error": types.DiagnosticSeverity.Error, "warning": types.DiagnosticSeverity.Warning,
            "info": types.DiagnosticSeverity.Information}
# tags where they fit: an unused suppression is code that does nothing (editors fade it)
TAGS = {"AL002": [types.DiagnosticTag.Unnecessary]}
# rules cite the guard or `prepare` line they mean as "line 27" (in a notebook "cell 3, line 2",
# as the engine rewrites them): the same form the engine relies on for notebooks
_CITED = re.compile(r"\b(?:cell (\d+), )?line (\d+)\b")
_NOTICE_AT = re.compile(r"^(?:cell (\d+), )?line (\d+): ")


def units(line: str, column: int, encoding: str) -> int:
    """Code-point ``column`` (0-based) of ``line`` in the client's encoding (past the line's
    end: one unit per column, as for the line end a node may reach)."""
    prefix, beyond = line[:column], max(0, column - len(line))
    if encoding == types.PositionEncodingKind.Utf8:
        return len(prefix.encode("utf-8", "surrogatepass")) + beyond
    if encoding == types.PositionEncodingKind.Utf32:
        return len(prefix) + beyond
    return len(prefix.encode("utf-16-le", "surrogatepass")) // 2 + beyond


def position(lines: Sequence[str], line: int, column: int, encoding: str) -> types.Position:
    """1-based engine (line, column) -> LSP position."""
    text = lines[line - 1] if 1 <= line <= len(lines) else ""
    return types.Position(line=max(line - 1, 0), character=units(text, max(column - 1, 0), encoding))


def span(lines: Sequence[str], d: Diagnostic, encoding: str) -> types.Range:
    start = position(lines, d.line, d.column, encoding)
    end = position(lines, d.end_line, d.end_column, encoding)
    if (end.line, end.character) <= (start.line, start.character):
        # a point (AL001's parser position): one character wide where there is one, so it shows
        text = lines[d.line - 1] if 1 <= d.line <= len(lines) else ""
        width = 1 if d.column - 1 < len(text) else 0
        end = position(lines, d.line, d.column + width, encoding)
    return types.Range(start=start, end=end)


def line_range(lines: Sequence[str], line: int, encoding: str) -> types.Range:
    """A line's text without its indentation (what a related location points at)."""
    text = lines[line - 1] if 1 <= line <= len(lines) else ""
    start = len(text) - len(text.lstrip())
    return types.Range(start=types.Position(line=line - 1, character=units(text, start, encoding)),
                       end=types.Position(line=line - 1, character=units(text, len(text.rstrip()), encoding)))


def docs_url(code: str, config: Config) -> str:
    """The rule's page under the docs site the document's configuration names (``docs-url``)."""
    return rule_url(code, base_url(config.docs_url))


def diagnostics(report: Report, encoding: str) -> dict[str, list[types.Diagnostic]]:
    """LSP diagnostics per URI: the document's, or each cell's of a notebook (every cell has a
    list, so that a cell whose findings went away is cleared)."""
    doc = report.document
    out: dict[str, list[types.Diagnostic]] = {c.uri: [] for c in doc.cells} if doc.cells is not None else {doc.uri: []}
    first = _first_code_cell(report)
    for d in report.diagnostics:
        out.setdefault(doc.cell_uri(d.cell), []).append(one(report, d, encoding))
    for error in report.errors:
        out.setdefault(doc.cell_uri(first), []).append(types.Diagnostic(
            range=types.Range(start=types.Position(line=0, character=0), end=types.Position(line=0, character=0)),
            message=error.message, severity=types.DiagnosticSeverity.Error, source=SOURCE))
    for notice in report.notices:
        m = _NOTICE_AT.match(notice.message)
        cell = int(m.group(1)) if m and m.group(1) else first
        line = int(m.group(2)) if m else 1
        lines = doc.lines(cell)
        message = notice.message[m.end():] if m else notice.message
        out.setdefault(doc.cell_uri(cell), []).append(types.Diagnostic(
            range=line_range(lines, line, encoding), message=message,
            severity=types.DiagnosticSeverity.Information, source=SOURCE))
    return out


# how the engine writes a fact of another notebook cell (engine._to_cell)
_OTHER_CELL = re.compile(r"cell (\d+), line (\d+): (.*)", re.DOTALL)


def one(report: Report, d: Diagnostic, encoding: str) -> types.Diagnostic:
    doc = report.document
    lines = doc.lines(d.cell)
    related = []
    for cell, line in _cited(d):
        cited_lines = doc.lines(cell)
        if not 1 <= line <= len(cited_lines):
            continue
        related.append(types.DiagnosticRelatedInformation(
            location=types.Location(uri=doc.cell_uri(cell), range=line_range(cited_lines, line, encoding)),
            message=_excerpt(cited_lines[line - 1])))
    cited = set(_cited(d))
    for line, fact in d.evidence:  # the facts the finding rests on, where the message cites no line there
        cell = d.cell
        elsewhere = _OTHER_CELL.match(fact)
        if elsewhere:  # a fact in another cell of a notebook, which the engine put on the finding's line
            cell, line, fact = int(elsewhere.group(1)), int(elsewhere.group(2)), elsewhere.group(3)
        if (cell, line) in cited:
            continue
        fact_lines = doc.lines(cell)
        if 1 <= line <= len(fact_lines):
            related.append(types.DiagnosticRelatedInformation(
                location=types.Location(uri=doc.cell_uri(cell), range=line_range(fact_lines, line, encoding)),
                message=fact))
    return types.Diagnostic(
        range=span(lines, d, encoding), message=d.message, severity=SEVERITY.get(d.severity),
        code=d.code, code_description=types.CodeDescription(href=docs_url(d.code, report.config)), source=SOURCE,
        tags=TAGS.get(d.code), related_information=related or None,
    )


def _cited(d: Diagnostic) -> list[tuple[int | None, int]]:
    """(cell, line) of each line the message cites, but the finding's own."""
    out: list[tuple[int | None, int]] = []
    for m in _CITED.finditer(d.message):
        cited = (int(m.group(1)) if m.group(1) else d.cell, int(m.group(2)))
        if cited not in out and cited != (d.cell, d.line):
            out.append(cited)
    return out


def _excerpt(text: str, limit: int = 80) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _first_code_cell(report: Report) -> int | None:
    for number, cell in enumerate(report.document.cells or (), 1):
        if cell.code:
            return number
    return None


def find(report: Report, uri: str, target: types.Range | types.Position, encoding: str) -> list[Diagnostic]:
    """The engine diagnostics of ``report`` on ``uri`` whose range meets ``target``."""
    doc = report.document
    cell = doc.cell_index(uri) if doc.cells is not None else None
    if doc.cells is not None and cell is None:
        return []
    if isinstance(target, types.Position):
        target = types.Range(start=target, end=target)
    lines = doc.lines(cell)
    found = []
    for d in report.diagnostics:
        if d.cell != cell:
            continue
        r = span(lines, d, encoding)
        if (r.start.line, r.start.character) <= (target.end.line, target.end.character) and \
                (target.start.line, target.start.character) <= (r.end.line, r.end.character):
            found.append(d)
    return found
