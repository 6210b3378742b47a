"""Reporters: one module per output format, each a function of the diagnostics and the run.

Reporters know nothing of rules: the CLI passes each used rule's metadata (:class:`RuleInfo`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..diagnostics import Diagnostic
from ..doclinks import rule_url

FORMATS = ("text", "concise", "json", "json-lines", "github", "sarif", "junit")


@dataclass(frozen=True)
class RuleInfo:
    code: str
    name: str
    severity: str
    summary: str
    docs: str
    docs_base: str = ""  # the docs site's base URL (doclinks.base_url); empty: the default

    @property
    def url(self) -> str:
        return rule_url(self.code, self.docs_base or None)

    @property
    def docs_path(self) -> str:
        return f"docs/rules/{self.code}.md"


@dataclass(frozen=True)
class Run:
    """What a reporter may need besides the findings."""

    rules: dict[str, RuleInfo]
    root: Path  # URIs in SARIF are relative to this (the repository root)
    version: str
    files_checked: int = 0
    quiet: bool = False
    statistics: bool = False
    show_fixes: bool = False
    unsafe_fixes: bool = False
    show_evidence: bool = False
    docs_base: str = ""  # the docs site's base URL, for links that are not a rule's (SARIF informationUri)


def render(fmt: str, diagnostics: list[Diagnostic], run: Run) -> str:
    from . import github, json_format, junit, sarif, text

    if fmt == "text":
        return text.full(diagnostics, run)
    if fmt == "concise":
        return text.concise(diagnostics)
    if fmt == "json":
        return json_format.array(diagnostics, run)
    if fmt == "json-lines":
        return json_format.lines(diagnostics, run)
    if fmt == "github":
        return github.annotations(diagnostics, run)
    if fmt == "sarif":
        return sarif.log(diagnostics, run)
    if fmt == "junit":
        return junit.xml(diagnostics, run)
    raise ValueError(f"unknown output format {fmt!r}")
