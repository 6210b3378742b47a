"""GitHub Actions workflow commands (``::error file=...::message``), then the plain report:
annotations show on the pull request, the plain lines stay readable in the log."""

from __future__ import annotations

from ..diagnostics import Diagnostic
from . import text

_LEVEL = {"error": "error", "warning": "warning", "info": "notice"}


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def annotations(diagnostics: list[Diagnostic], run) -> str:
    out = []
    for d in diagnostics:
        info = run.rules.get(d.code)
        title = f"{d.code} {d.name}"
        message = d.message + (f" ({info.url})" if info else "")
        if d.cell is not None:  # annotate the notebook file's own line; say which cell in the title
            title += f" (cell {d.cell}, line {d.line})"
            where = f"line={d.file_line or 1}"
        else:
            where = f"line={d.line},col={d.column},endLine={d.end_line},endColumn={d.end_column}"
        props = f"file={_escape_property(d.path)},{where},title={_escape_property(title)}"
        out.append(f"::{_LEVEL.get(d.severity, 'warning')} {props}::{_escape_data(message)}")
    report = text.full(diagnostics, run)
    return "\n".join(out + ([report] if report else []))
