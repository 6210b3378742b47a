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
        props = (f"file={_escape_property(d.path)},line={d.line},col={d.column},endLine={d.end_line},"
                 f"endColumn={d.end_column},title={_escape_property(title)}")
        out.append(f"::{_LEVEL.get(d.severity, 'warning')} {props}::{_escape_data(message)}")
    report = text.full(diagnostics, run)
    return "\n".join(out + ([report] if report else []))
