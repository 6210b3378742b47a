"""The on-disk cache of per-file results, keyed by content hash + enabled rules + settings +
version + a fingerprint of the analyzer's own sources (so an upgraded or edited analyzer never
reuses what an older one found).

Layout (as ruff does): ``.accel_lint_cache/`` next to the configuration, with a ``.gitignore``
that ignores everything in it; one small JSON file per cached result. Only files that pass the
byte prefilter are cached (the prefilter is cheaper than hashing). Results with internal errors
are never cached, so a fixed bug is re-checked. A corrupt or unreadable entry is a miss.

The key depends on the file's content alone: cross-module analysis, when it comes, has to add
what a file's findings depend on in other files.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from . import __version__
from .diagnostics import Diagnostic, FileError, Notice

CACHE_DIR_NAME = ".accel_lint_cache"
CACHE_FORMAT = 8  # bump when an entry's layout changes


@functools.lru_cache(maxsize=1)
def analyzer_fingerprint() -> str:
    """A digest of the package's Python sources and data files: a result is only valid for the
    analyzer that computed it, and the version number alone does not change with every fix."""
    digest = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".toml") and p.is_file()):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            pass
    return digest.hexdigest()[:16]


def cache_key(data: bytes, enabled_codes: list[str], settings: str) -> str:
    digest = hashlib.sha256()
    digest.update(f"{__version__}\0{CACHE_FORMAT}\0{analyzer_fingerprint()}\0{','.join(enabled_codes)}\0"
                  f"{settings}\0".encode())
    digest.update(data)
    return digest.hexdigest()


class ResultCache:
    """Get and put one file's diagnostics and (non-internal) errors by key."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, key: str) -> Path:
        return self.directory / __version__ / key[:2] / f"{key}.json"

    def get(self, key: str, path: str) -> tuple | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            diagnostics = [Diagnostic(path, *d[:12], evidence=tuple((line, fact) for line, fact in d[12]))
                           for d in data["diagnostics"]]
            errors = [FileError(path, message) for message in data["errors"]]
            notices = [Notice(path, message) for message in data.get("notices", [])]
            summary = {name: [tuple(op) for op in ops] for name, ops in data.get("summary", {}).items()}
            imports = [tuple(i) for i in data.get("imports", [])]
            passes = [tuple(p) for p in data.get("passes", [])]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return diagnostics, errors, notices, summary, imports, passes

    def put(self, key: str, diagnostics: list[Diagnostic], errors: list[FileError], notices: list[Notice],
            summary: dict | None = None, imports: list | None = None, passes: list | None = None) -> None:
        if any(e.internal for e in errors):
            return
        entry = {
            "diagnostics": [[d.line, d.column, d.end_line, d.end_column, d.code, d.name, d.severity, d.message,
                             d.scope, d.statement, d.fix, d.tag, [list(e) for e in d.evidence]] for d in diagnostics],
            "errors": [e.message for e in errors],
            "notices": [n.message for n in notices],
            "summary": summary or {},
            "imports": imports or [],
            "passes": passes or [],
        }
        self._write(key, entry)

    def get_facts(self, key: str) -> dict | None:
        """What a module of the tree that the first pass did not analyse makes (``made_facts``)."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            return {name: [tuple(fact) for fact in facts] for name, facts in data["facts"].items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def put_facts(self, key: str, facts: dict) -> None:
        self._write(key, {"facts": facts})

    def _write(self, key: str, entry: dict) -> None:
        target = self._path(key)
        try:
            self._ensure_root()
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f)
            os.replace(tmp, target)  # atomic: parallel workers never see half an entry
        except OSError:
            pass  # a read-only tree still gets linted, just without a cache

    def _ensure_root(self) -> None:
        ignore = self.directory / ".gitignore"
        if not ignore.exists():
            self.directory.mkdir(parents=True, exist_ok=True)
            ignore.write_text("# Automatically created by accel-lint.\n*\n", encoding="utf-8")
