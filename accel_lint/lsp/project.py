"""What the server keeps between edits: each file's configuration and lint results, and the
analysis across modules over the open documents and the modules they import.

Every lint runs the command line's algorithm (:func:`accel_lint.engine._across_modules`) over
the open documents and, transitively, the modules of the workspace they import: their first
passes, then the passes with what the other modules say. Results are memoized per file by
content, configuration and context, so an edit analyses again only the edited file and the
files whose context it changed: editing ``engine.py`` relints an open ``train.py`` that imports
a helper whose collectives changed, and nothing else. Open documents whose modules do not meet
the edited one's are not looked at at all. Memory stays bounded: only the modules some open
document reaches are kept, a few results each, and the last syntax tree of each (which the next
edit re-parses only in part: :mod:`accel_lint.reparse`).
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Config, ConfigError, find_pyproject, load_config
from ..diagnostics import Diagnostic, FileError, Notice
from ..engine import (LintResult, _across_modules, _module_files, _no_cyclic_gc, _parse_trusted, lint_notebook,
                      lint_source)
from ..reparse import Reparser
from .documents import Document

MAX_MODULES = 256  # modules beyond the open documents one lint may read (imports of imports)
MEMO_PER_FILE = 4  # results kept per file: its latest contents and contexts


@dataclass(frozen=True)
class FixInfo:
    applicability: str
    description: str
    refusal: str | None = None


@dataclass
class Report:
    """One open document's findings, as the engine gives them (1-based; per cell in a notebook)."""

    document: Document
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)  # the file was not checked (not internal errors)
    notices: list[Notice] = field(default_factory=list)
    fixes: dict[Diagnostic, FixInfo] = field(default_factory=dict)
    config: Config = field(default_factory=Config)


@dataclass
class Outcome:
    reports: dict[str, Report]  # by document URI
    internal: list[FileError]  # internal errors of this lint's fresh analyses (for the log)
    config_errors: list[str]


@dataclass
class _Entry:
    result: LintResult
    fixes: dict[Diagnostic, FixInfo]


class Configs:
    """``[tool.accel-lint]`` of the nearest pyproject.toml, read again when any pyproject.toml
    between the file and the root changed (a few ``stat`` calls per lint)."""

    def __init__(self) -> None:
        self._cache: dict[str, tuple[tuple, Config, str | None]] = {}
        self._stats: dict[str, tuple] = {}  # folder -> pyproject.toml stats, during one lint

    def begin(self) -> None:
        """A new lint: look at the files again."""
        self._stats = {}

    def get(self, path: str) -> tuple[Config, str | None]:
        folder = os.path.dirname(path) if path else os.getcwd()
        key = self._stats.get(folder)
        if key is None:
            key = self._stats[folder] = _pyproject_stats(folder)
        hit = self._cache.get(folder)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        try:
            config, error = load_config(find_pyproject(Path(folder))), None
        except (ConfigError, OSError, ValueError) as exc:
            config, error = Config(root=Path(folder)), f"configuration not used: {exc}"
        self._cache[folder] = (key, config, error)
        return config, error

    def clear(self) -> None:
        self._cache.clear()
        self._stats = {}


def _pyproject_stats(folder: str) -> tuple:
    out = []
    while True:
        candidate = os.path.join(folder, "pyproject.toml")
        try:
            st = os.stat(candidate)
            out.append((candidate, st.st_mtime_ns, st.st_size))
        except OSError:
            pass
        parent = os.path.dirname(folder)
        if parent == folder:
            return tuple(out)
        folder = parent


class Project:
    """Lints snapshots of the open documents; see the module docstring."""

    def __init__(self, roots: list[str] | None = None) -> None:
        self.roots = [os.path.abspath(r) for r in roots or []]  # workspace folders: imports resolve inside them
        self.configs = Configs()
        self._memo: dict[str, OrderedDict[tuple, _Entry]] = {}
        self.reparser = Reparser(_parse_trusted)  # the last tree of each file, to re-parse only what an edit changed
        self._disk: dict[str, tuple[tuple[int, int], bytes, str]] = {}
        self._last: dict[str, _Last] = {}  # by document URI: what its last lint saw and said

    def lint(self, documents: list[Document], everything: bool = False) -> Outcome:
        """Reports for every document. Only the documents whose text or configuration changed
        are linted, with the open documents whose modules meet theirs (what one imports, or
        passes prepared objects to, in either direction): the others cannot have changed.
        ``everything``: lint all of them (files on disk may have changed)."""
        self.configs.begin()
        internal: list[FileError] = []
        config_errors: list[str] = []
        configs: dict[str, Config] = {}
        for doc in documents:
            config, error = self.configs.get(doc.path)
            configs[doc.uri] = config
            if error and error not in config_errors:
                config_errors.append(error)
        last = {uri: seen for uri, seen in self._last.items() if uri in configs}
        group = {d.uri for d in documents if everything or d.uri not in last or last[d.uri].digest != d.digest
                 or last[d.uri].config != configs[d.uri]}
        # a changed document's old modules count too: what it no longer passes them changes them
        touched = set().union(*(last[uri].closure for uri in group if uri in last))
        while True:
            reports, closures = self._lint_group([d for d in documents if d.uri in group], documents, configs,
                                                 internal)
            touched |= set().union(*closures.values())
            more = {uri for uri, seen in last.items() if uri not in group and seen.closure & touched}
            if not more:
                break
            group |= more
        for doc in documents:
            if doc.uri in group:
                last[doc.uri] = _Last(doc.digest, configs[doc.uri], frozenset(closures[doc.uri]), reports[doc.uri])
        self._last = last
        self._forget(set().union(*(seen.closure for seen in last.values())))
        return Outcome({d.uri: last[d.uri].report for d in documents}, internal, config_errors)

    def _lint_group(self, documents: list[Document], everyone: list[Document], doc_configs: dict[str, Config],
                    internal: list[FileError]) -> tuple[dict[str, Report], dict[str, set[str]]]:
        """The command line's analysis over ``documents`` and the modules they reach (an open
        one as the editor has it): a report and the modules reached (paths) for each document."""
        reports: dict[str, Report] = {}
        closures: dict[str, set[str]] = {}
        by_path = {d.path: d for d in documents if d.path}
        open_paths = {d.path: d for d in everyone if d.path}
        members: list[str] = []  # absolute paths, open documents first
        sources: dict[str, tuple[bytes, str, bool]] = {}  # path -> (data, digest, notebook)
        configs: dict[str, Config] = {}
        results: list[_Entry] = []
        for doc in documents:
            config = doc_configs[doc.uri]
            closures[doc.uri] = {doc.path or doc.uri}
            if doc.path and _excluded(doc.path, config):
                reports[doc.uri] = Report(doc, config=config)
                continue
            data, problem = doc.encoded
            if problem is not None:
                reports[doc.uri] = Report(doc, errors=[FileError(doc.path or doc.uri, problem)], config=config)
                continue
            if not doc.path:  # an unsaved buffer: no module of its own, linted alone
                entry = self._lint(doc.uri, data, doc.digest, doc.is_notebook, config, None, internal)
                reports[doc.uri] = _report(doc, entry, config)
                continue
            members.append(doc.path)
            sources[doc.path] = (data, doc.digest, doc.is_notebook)
            configs[doc.path] = config
        roots = self._roots(configs)
        queue = list(members)
        seen = set(members)
        dependencies: dict[str, list[str]] = {}
        while queue:
            path = queue.pop(0)
            if path not in sources:  # an imported module: the editor's text if open, else from disk
                read = self._open_source(open_paths[path]) if path in open_paths else self._read(path)
                if read is None:
                    continue
                configs[path] = doc_configs[open_paths[path].uri] if path in open_paths else self.configs.get(path)[0]
                if _excluded(path, configs[path]):
                    continue
                sources[path] = read
                members.append(path)
            data, digest, notebook = sources[path]
            entry = self._lint(path, data, digest, notebook, configs[path], None, internal)
            results.append(entry)
            dependencies[path] = _dependencies(path, entry.result, open_paths, roots)
            for dependency in dependencies[path]:
                if dependency not in seen and len(seen) < len(open_paths) + MAX_MODULES:
                    seen.add(dependency)
                    queue.append(dependency)
        entries = {path: entry for path, entry in zip(members, results)}

        def relint(out: list[LintResult], again: list[tuple[int, tuple]]) -> list[LintResult]:
            out = list(out)
            for i, context in again:
                path = members[i]
                data, digest, notebook = sources[path]
                entries[path] = self._lint(path, data, digest, notebook, configs[path], context, internal)
                out[i] = entries[path].result
            return out

        finals = _across_modules([e.result for e in results], Config(), relint=relint)
        for path, final in zip(members, finals):
            doc = by_path.get(path)
            if doc is not None:
                reports[doc.uri] = _report(doc, _Entry(final, entries[path].fixes), configs[path])
                closures[doc.uri] = _reached(path, dependencies)
        return reports, closures

    # -- sources and memo --------------------------------------------------------------------
    @staticmethod
    def _open_source(doc: Document) -> tuple[bytes, str, bool] | None:
        data, problem = doc.encoded
        return None if problem is not None else (data, doc.digest, doc.is_notebook)

    def _read(self, path: str) -> tuple[bytes, str, bool] | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_mtime_ns, st.st_size)
        hit = self._disk.get(path)
        if hit is None or hit[0] != key:
            try:
                data = Path(path).read_bytes()
            except OSError:
                return None
            hit = self._disk[path] = (key, data, hashlib.blake2b(data, digest_size=16).hexdigest())
        return hit[1], hit[2], path.endswith(".ipynb")

    def _lint(self, path: str, data: bytes, digest: str, notebook: bool, config: Config, context: tuple | None,
              internal: list[FileError]) -> _Entry:
        external, incoming = context if context is not None else ({}, {})
        key = (digest, config, repr(sorted(external.items())), repr(sorted(incoming.items())))
        memo = self._memo.setdefault(path, OrderedDict())
        hit = memo.get(key)
        if hit is not None:
            memo.move_to_end(key)
            return hit
        # the model is released before the cyclic collector runs again: else its first collection
        # walks everything the lint allocated, still alive
        with _no_cyclic_gc():
            if notebook:
                result, _ = lint_notebook(data, path, config, want_fixes=True, external=external or None,
                                          reparser=self.reparser)
            else:
                result = lint_source(data, path, config, want_fixes=True, external=external or None,
                                     incoming=incoming or None, reparser=self.reparser)
            internal.extend(e for e in result.errors if e.internal)
            fixes = {d: FixInfo(f.applicability, f.description, f.refusal) for d, f in result.fixes}
            # the syntax tree and the fixes' nodes are what weighs: an action re-runs the fix checks anyway
            if result.model is not None:
                result.model.release()
            result.module = result.model = None
            result.fixes = []
        entry = memo[key] = _Entry(result, fixes)
        while len(memo) > MEMO_PER_FILE:
            memo.popitem(last=False)
        return entry

    def _forget(self, keep: set[str]) -> None:
        """Only the modules some open document reaches stay in memory."""
        for path in [p for p in self._memo if p not in keep]:
            del self._memo[path]
        self.reparser.forget(keep)
        for path in [p for p in self._disk if p not in keep]:
            del self._disk[path]

    def _roots(self, configs: dict[str, Config]) -> list[str]:
        """Where imported modules are looked for: the workspace folders, else the folders of the
        configurations (or of the files) of the open documents."""
        if self.roots:
            return self.roots
        return sorted({os.path.abspath(c.root) if _has_pyproject(c) else os.path.dirname(p) for p, c in configs.items()})

    def memo_size(self) -> int:
        return sum(len(m) for m in self._memo.values())


@dataclass(frozen=True)
class _Last:
    digest: str
    config: Config
    closure: frozenset[str]  # the modules its analysis read (paths), itself included
    report: Report


def _reached(start: str, dependencies: dict[str, list[str]]) -> set[str]:
    out, stack = {start}, [start]
    while stack:
        for dependency in dependencies.get(stack.pop(), ()):
            if dependency not in out:
                out.add(dependency)
                stack.append(dependency)
    return out


def _has_pyproject(config: Config) -> bool:
    return os.path.isfile(os.path.join(config.root, "pyproject.toml"))


def _report(doc: Document, entry: _Entry, config: Config) -> Report:
    result = entry.result
    return Report(doc, diagnostics=list(result.diagnostics), errors=[e for e in result.errors if not e.internal],
                  notices=list(result.notices), fixes=entry.fixes, config=config)


def _dependencies(path: str, result: LintResult, open_paths: dict, roots: list[str]) -> list[str]:
    """The modules of the workspace whose summaries this file's analysis reads: what it imports
    and calls under a guard or assigns from, and where it passes prepared objects."""
    here = os.path.dirname(path)
    wanted = [(level, module) for level, module, *_ in result.imports] + \
        [(level, module) for level, module, *_ in result.passes]
    out = []
    for level, module in dict.fromkeys(wanted):
        for candidate in _module_files(here, level, module):
            if candidate in open_paths or (_inside(candidate, roots) and os.path.isfile(candidate)):
                out.append(candidate)
                break
    return out


def _inside(path: str, roots: list[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _excluded(path: str, config: Config) -> bool:
    """As with ``--force-exclude``: the editor shows what ``accel-lint .`` reports. Only the
    folders inside the configuration's root count (a checkout under ``~/build/`` is linted)."""
    root = os.path.abspath(config.root)
    current = Path(path)
    if config.is_excluded(current):
        return True
    for parent in current.parents:
        if not _inside(str(parent), [root]) or str(parent) == root:
            break
        if config.is_excluded(parent):
            return True
    return False
