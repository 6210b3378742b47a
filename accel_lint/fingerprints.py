"""Stable identities of findings, shared by baselines and SARIF ``partialFingerprints``.

A fingerprint is the rule code, the file's path relative to the project root, the qualified
name of the enclosing function and the statement's normalized source. Line numbers are not in
it, so a finding survives lines added above it; two identical statements in one function share
a fingerprint, and counts tell them apart.
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from pathlib import Path

from .diagnostics import Diagnostic


def relative_path(path: str, root: Path) -> str:
    """``path`` relative to ``root`` with forward slashes (unchanged when outside it)."""
    absolute = os.path.abspath(path)
    base = os.path.abspath(root)
    if absolute == base or absolute.startswith(base.rstrip(os.sep) + os.sep):
        return Path(os.path.relpath(absolute, base)).as_posix()
    return Path(path).as_posix()


def fingerprint(d: Diagnostic, root: Path) -> str:
    key = "\0".join((d.code, relative_path(d.path, root), d.scope, d.statement or d.message))
    return hashlib.sha256(key.encode()).hexdigest()[:20]


def fingerprints_with_occurrence(diagnostics: list[Diagnostic], root: Path) -> list[tuple[str, int]]:
    """Each diagnostic's fingerprint and its occurrence number among equal ones (in line order)."""
    seen: Counter[str] = Counter()
    out = []
    for d in diagnostics:
        fp = fingerprint(d, root)
        out.append((fp, seen[fp]))
        seen[fp] += 1
    return out
