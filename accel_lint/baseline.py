"""Baselines for legacy code: record today's findings, then report only new ones.

The file is JSON: ``{"version": 1, "entries": [{"fingerprint", "code", "path", "scope",
"statement", "count"}]}``, sorted, so that it diffs well in review. A finding is "known" while
its fingerprint (see :mod:`accel_lint.fingerprints`) has fewer occurrences than the baseline
counts; entries that no longer occur are stale, and ``--update-baseline`` drops them, so the
baseline only ever shrinks (the ratchet).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .diagnostics import Diagnostic
from .fingerprints import fingerprint, relative_path

FORMAT_VERSION = 1


class BaselineError(Exception):
    """The baseline file cannot be read (exit code 2)."""


@dataclass(frozen=True)
class Filtered:
    new: list[Diagnostic]
    known: int
    stale: int  # baseline occurrences that no longer occur


def load(path: Path) -> Counter[str]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != FORMAT_VERSION:
            raise BaselineError(f"{path}: unsupported baseline version {data.get('version')!r}")
        return Counter({e["fingerprint"]: int(e["count"]) for e in data["entries"]})
    except FileNotFoundError:
        raise BaselineError(f"{path}: baseline file not found (create it with --update-baseline)") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BaselineError(f"{path}: not a valid accel-lint baseline ({exc})") from None


def filter_new(diagnostics: list[Diagnostic], known: Counter[str], root: Path) -> Filtered:
    remaining = Counter(known)
    new = []
    matched = 0
    for d in diagnostics:  # in path and line order: the first occurrences are the old ones
        fp = fingerprint(d, root)
        if remaining[fp] > 0:
            remaining[fp] -= 1
            matched += 1
        else:
            new.append(d)
    return Filtered(new, matched, sum(remaining.values()))


def write(path: Path, diagnostics: list[Diagnostic], root: Path) -> int:
    counts: Counter[str] = Counter()
    meta: dict[str, dict] = {}
    for d in diagnostics:
        fp = fingerprint(d, root)
        counts[fp] += 1
        meta.setdefault(fp, {"code": d.code, "path": relative_path(d.path, root), "scope": d.scope,
                             "statement": d.statement})
    entries = [{"fingerprint": fp, **meta[fp], "count": counts[fp]} for fp in counts]
    entries.sort(key=lambda e: (e["path"], e["code"], e["scope"], e["statement"], e["fingerprint"]))
    text = json.dumps({"version": FORMAT_VERSION, "entries": entries}, indent=2) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
    return len(diagnostics)
