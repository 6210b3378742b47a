"""Applying fixes safely: one pass per round, overlaps skipped, every result verified, atomic writes.

A rule's :class:`~accel_lint.rules.base.Fix` names nodes and their replacements; here they
become text edits of the file:

* an **expression** is replaced in place (its source range, parentheses kept), and the result
  is checked with CPython's ``ast``: at that place the fixed file must hold exactly the
  expression the fix meant. Where precedence would change the meaning (``-value`` with
  ``value`` -> ``a - b``), the replacement is parenthesized; if even that does not verify, the
  fix is dropped;
* **statements** (moved out of a guard) are rendered by libcst, which owns indentation;
* **comment** edits (AL002) are raw text.

A round applies every non-overlapping fix in one pass, then the file must still parse (libcst
and ``ast``); the file is re-linted and fixed again, up to :data:`MAX_ROUNDS` rounds ("did not
converge" after that). The file is written once, atomically (a temporary file in the same
directory, then ``os.replace``), with its mode, encoding, BOM and line endings, and only when
its content changed.
"""

from __future__ import annotations

import ast
import os
import re
import stat
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import libcst as cst

from .config import Config
from .diagnostics import Diagnostic, Notice
from .engine import LintResult, lint_source
from .model.moves import reads_bound_on_some_ranks
from .rules.base import Fix

MAX_ROUNDS = 10
MAX_ATTEMPTS = 3  # attempts after a fix whose follow-up finding no later fix removed
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass(frozen=True)
class TextEdit:
    start: int
    end: int
    text: str
    kind: str  # "expression" (verified with ast), "statements" or "comment"


@dataclass
class FileFix:
    """What fixing one file did."""

    path: str
    original: str = ""
    fixed: str = ""
    applied: list[tuple[Diagnostic, str]] = field(default_factory=list)  # (finding, fix description)
    notices: list[Notice] = field(default_factory=list)
    remaining: LintResult | None = None
    encoding: str = "utf-8"

    @property
    def changed(self) -> bool:
        return self.fixed != self.original


def fix_source(data: bytes, path: str, config: Config, unsafe: bool,
               select: set[tuple[str, int, int]] | None = None) -> FileFix:
    """Fix one file's contents in memory (nothing is written).

    ``select``: fix only the findings at these (code, line, column) of ``data`` (an editor's
    code action for one finding), and the findings their fixes bring in that a later fix takes
    out again; every other check is the same as for the whole file."""
    outcome = FileFix(path)
    first = lint_source(data, path, config, want_fixes=True)
    if first.module is None:
        outcome.remaining = first
        return outcome
    outcome.encoding = first.module.encoding
    try:
        text = data.decode(first.module.encoding)
    except (UnicodeDecodeError, LookupError):
        text = None
    if text != first.module.code:
        outcome.notices.append(Notice(path, "not fixed: the parser does not reproduce this file exactly"))
        outcome.remaining = first
        return outcome
    outcome.original = outcome.fixed = text
    rejected: dict[tuple[str, str, str], str] = {}
    for _ in range(MAX_ATTEMPTS):
        rounds = _Rounds(path, config, unsafe, outcome.encoding, rejected, select, first)
        rounds.run(first, text)
        # a finding a fix brought in may stay only as long as a later fix takes it out again
        left = _introduced(_problems(first), _problems(rounds.result))
        culprits = {rounds.introduced_by[key]: key for key in left if key in rounds.introduced_by}
        if not culprits:
            break
        for identity, key in culprits.items():
            rejected[identity] = _describe(key)
    outcome.notices += list(dict.fromkeys(rounds.notices))  # two findings may share one fix (and one refusal)
    outcome.applied = rounds.applied
    outcome.fixed = rounds.text
    if rounds.broken:
        outcome.notices.append(Notice(path, "not fixed: the fixed file did not parse (please report this)"))
        outcome.applied = []
        outcome.fixed = outcome.original
        outcome.remaining = first
        return outcome
    outcome.remaining = lint_source(_encode(outcome.fixed, outcome.encoding), path, config)
    return outcome


class _Rounds:
    """One attempt at fixing a file: rounds of non-overlapping fixes, each round linted again
    before it is kept."""

    def __init__(self, path: str, config: Config, unsafe: bool, encoding: str,
                 rejected: dict[tuple[str, str, str], str], select: set[tuple[str, int, int]] | None = None,
                 first: LintResult | None = None) -> None:
        self.path, self.config, self.unsafe, self.encoding = path, config, unsafe, encoding
        self.select, self.first = select, first
        self.original_text: str | None = None
        self.rejected = dict(rejected)  # finding identity -> why its fix is not applied
        self.notices: list[Notice] = []
        self.applied: list[tuple[Diagnostic, str]] = []
        self.introduced_by: dict[tuple, tuple[str, str, str]] = {}  # problem -> the fix that brought it
        self.broken = False
        self.text = ""
        self.result: LintResult | None = None

    def lint(self, text: str) -> LintResult:
        return lint_source(_encode(text, self.encoding), self.path, self.config, want_fixes=True)

    def run(self, first: LintResult, text: str) -> None:
        self.text, self.result = text, first
        self.original_text = text
        applied_rounds = 0
        # only rounds that change the file count: a round that only drops fixes makes progress
        # (the dropped ones are not tried again), so it cannot go on for ever
        while applied_rounds < MAX_ROUNDS:
            wanted = self._wanted()
            if not wanted:
                return
            new_text, applied, failed = _one_round(self.result.module, self.text, wanted)
            new_result = None
            if new_text != self.text:
                new_text, applied, new_result, broke = self._keep_what_breaks_nothing(new_text, applied, wanted)
                failed += broke
            for d, why in failed:
                self._reject(d, why)
            if new_text == self.text:
                if not failed:
                    return
                self.result = self.lint(self.text)
                continue
            applied_rounds += 1
            self.text, self.result = new_text, new_result
            self.applied.extend(applied)
            if new_result.module is None:  # cannot happen after verification; never write a broken file
                self.broken = True
                return
        self.notices.append(Notice(self.path, f"fixes did not converge after {MAX_ROUNDS} rounds; "
                                              "the file holds the last round's result"))

    def _wanted(self) -> list[tuple[Diagnostic, Fix]]:
        wanted = []
        selected = self._selected() if self.select is not None else None
        for d, f in self.result.fixes:
            if f.applicability != "safe" and not self.unsafe:
                continue
            if selected is not None and not selected(d):
                continue
            if _identity(d) in self.rejected:
                why = self.rejected[_identity(d)]
                if why:  # carried over from an earlier attempt: said once, then kept as rejected
                    self._reject(d, why)
                continue
            if f.refusal is not None:
                self.rejected[_identity(d)] = ""
                self.notices.append(Notice(self.path, f"line {d.line}: {d.code} not fixed: {f.refusal}"))
                continue
            wanted.append((d, f))
        return wanted

    def _selected(self):
        """Which findings a selection lets this round fix: in the given text, those at the
        selected positions; once it changed, only findings the applied fixes brought in (more
        of a rule in a function than the given text had, less those fixed)."""
        if self.text == self.original_text:
            return lambda d: (d.code, d.line, d.column) in self.select
        brought = set(_introduced(_problems(self.first), _problems(self.result), [d for d, _ in self.applied]))
        return lambda d: (d.code, d.scope) in brought

    def _reject(self, d: Diagnostic, why: str) -> None:
        self.rejected[_identity(d)] = ""
        self.notices.append(Notice(self.path, f"line {d.line}: {d.code} fix not applied: {why}"))

    def _keep_what_breaks_nothing(self, new_text, applied, wanted):
        """Lint the round's result. When it adds a finding or an unbound read, find the fixes
        that do (each applied alone): one that adds an unbound read, or a finding no applicable
        fix takes out again, is dropped. Returns (text, applied, result, dropped)."""
        baseline = _problems(self.result)
        new_result = self.lint(new_text)
        if new_result.module is not None and not _introduced(baseline, _problems(new_result), [d for d, _ in applied]):
            return new_text, applied, new_result, []
        keep: list[tuple[Diagnostic, Fix]] = []
        dropped: list[tuple[Diagnostic, str]] = []
        for d, f in wanted:
            if not any(d is a for a, _ in applied):
                continue
            alone, _, _ = _one_round(self.result.module, self.text, [(d, f)])
            alone_result = self.lint(alone)
            if alone_result.module is None:
                dropped.append((d, "the fixed file did not parse"))
                continue
            added = _introduced(baseline, _problems(alone_result), [d])
            fatal = [key for key in added if not self._fixable(key, alone_result)]
            if fatal:
                dropped.append((d, _describe(fatal[0])))
                continue
            keep.append((d, f))
            for key in added:
                self.introduced_by.setdefault(key, _identity(d))
        if not keep:
            return self.text, [], self.result, dropped
        together, done, _ = _one_round(self.result.module, self.text, keep)
        together_result = self.lint(together)
        if together_result.module is None or any(not self._fixable(key, together_result) for key in
                                                 _introduced(baseline, _problems(together_result), [d for d, _ in done])):
            # each is fine alone but not together: one per round, the rest wait
            together, done, _ = _one_round(self.result.module, self.text, keep[:1])
            together_result = self.lint(together)
        return together, done, together_result, dropped

    def _fixable(self, key: tuple, result: LintResult) -> bool:
        """A new finding that an applicable fix of the next round removes again (AL101's fix
        makes a manual loss division double scaling, which AL102's fix removes)."""
        if key[0] in ("unbound", "before-binding"):
            return False
        return any((d.code, d.scope) == key and f.refusal is None and (f.applicability == "safe" or self.unsafe)
                   and _identity(d) not in self.rejected for d, f in result.fixes)


# -- what a fix must not add ---------------------------------------------------------------------

def _problems(result: LintResult) -> Counter:
    """Findings per (rule, function), and reads of a name that only some ranks bind
    (``save_path`` set under ``is_main_process`` and read outside it)."""
    found = Counter((d.code, d.scope) for d in result.diagnostics)
    if result.model is not None:
        found.update({("unbound", scope, name): n
                      for (scope, name), n in reads_bound_on_some_ranks(result.model).items()})
        found.update({("before-binding", scope, name): n
                      for (scope, name), n in result.model.bound_names.reads_maybe_unbound().items()})
    return found


def _introduced(before: Counter, after: Counter, fixed: list[Diagnostic] = ()) -> list[tuple]:
    """What ``after`` has more of than ``before`` once the ``fixed`` findings are gone (a fix
    that removes one AL302 while another adds one in the same function nets out otherwise)."""
    expected = before - Counter((d.code, d.scope) for d in fixed)
    return sorted(key for key, n in after.items() if n > expected.get(key, 0))


def _describe(problem: tuple) -> str:
    where = f" in `{problem[1]}`" if problem[1] else ""
    if problem[0] == "unbound":
        return f"it would leave `{problem[2]}` unbound{where} on the ranks the guard skips"
    if problem[0] == "before-binding":
        return f"it would read `{problem[2]}`{where} where some path has not bound it (UnboundLocalError)"
    return f"it would introduce a new {problem[0]} finding{where}"


def write_atomically(path: Path, text: str, encoding: str) -> None:
    """Replace ``path``'s content keeping its mode; readers never see half a file."""
    data = _encode(text, encoding)
    mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".accel-lint.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _encode(text: str, encoding: str) -> bytes:
    return text.encode(encoding)  # "utf-8-sig" writes the BOM back


def _identity(d: Diagnostic) -> tuple[str, str, str]:
    return d.code, d.scope, d.statement


# -- one round ---------------------------------------------------------------------------------

def _one_round(module: cst.Module, text: str, wanted: list[tuple[Diagnostic, Fix]]):
    """Apply every non-overlapping fix once. Returns (text, applied, failed)."""
    lines = _LineTable(text)
    positions = cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True).resolve(cst.metadata.PositionProvider)
    chosen: list[tuple[Diagnostic, Fix, list[TextEdit]]] = []
    taken: list[tuple[int, int]] = []
    failed: list[tuple[Diagnostic, str]] = []
    for d, fix in sorted(wanted, key=lambda item: (item[0].line, item[0].column)):
        try:
            edits = _edits(module, text, lines, positions, fix)
        except _Unfixable as exc:
            failed.append((d, str(exc)))
            continue
        if any(_overlaps(e, t) for e in edits for t in taken):
            continue  # another fix touches this range; the next round sees the result
        chosen.append((d, fix, edits))
        taken.extend((e.start, e.end) for e in edits)
    if not chosen:
        return text, [], failed
    new_text = _apply(text, [e for _, _, edits in chosen for e in edits])
    if _verified(new_text, text, [e for _, _, edits in chosen for e in edits]):
        return new_text, [(d, f.description) for d, f, _ in chosen], failed
    # together they do not verify: keep the first fix alone if it does, the rest wait a round
    d, fix, edits = chosen[0]
    alone = _apply(text, edits)
    if _verified(alone, text, edits):
        return alone, [(d, fix.description)], failed
    failed.append((d, "the result did not mean what the fix intended"))
    return text, [], failed


class _Unfixable(Exception):
    pass


def _edits(module, text, lines, positions, fix: Fix) -> list[TextEdit]:
    edits = []
    for old, new in fix.replacements:
        if isinstance(old, cst.BaseExpression) and isinstance(new, cst.BaseExpression):
            edits.append(_expression_edit(module, text, lines, positions, old, new))
        else:
            edits.append(_statement_edit(module, text, old, new))
    for line, start_col, end_col, new_text in fix.text_edits:
        offset = lines.offset(line, start_col - 1)
        edits.append(TextEdit(offset, lines.offset(line, end_col - 1), new_text, "comment"))
    return edits


def _expression_edit(module, text, lines, positions, old, new) -> TextEdit:
    """Replace ``old``'s source (inside its own parentheses, which stay) with ``new``; wrap
    ``new`` in parentheses when that is what it takes to keep its meaning."""
    rng = positions[old]
    start = lines.offset(rng.start.line, rng.start.column)
    end = lines.offset(rng.end.line, rng.end.column)
    bare = module.code_for_node(new.with_changes(lpar=[], rpar=[]) if getattr(new, "lpar", None) else new)
    for candidate in (bare, f"({bare})"):
        edit = TextEdit(start, end, candidate, "expression")
        if _verified(_apply(text, [edit]), text, [edit]):
            return edit
    raise _Unfixable("no parenthesization keeps the intended meaning")


def _statement_edit(module, text, old, new) -> TextEdit:
    """Statements: let libcst render the module with the replacement (it owns indentation)
    and take the changed span."""
    rendered = module.deep_replace(old, new).code
    start = 0
    limit = min(len(text), len(rendered))
    while start < limit and text[start] == rendered[start]:
        start += 1
    end_old, end_new = len(text), len(rendered)
    while end_old > start and end_new > start and text[end_old - 1] == rendered[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return TextEdit(start, end_old, rendered[start:end_new], "statements")


def _overlaps(edit: TextEdit, span: tuple[int, int]) -> bool:
    start, end = span
    if edit.start == edit.end or start == end:  # insertions collide only at the same point or inside
        return start < edit.start < end or edit.start < start < edit.end or edit.start == start
    return edit.start < end and start < edit.end


def _apply(text: str, edits: list[TextEdit]) -> str:
    out, cursor = [], 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        out.append(text[cursor:edit.start])
        out.append(edit.text)
        cursor = edit.end
    out.append(text[cursor:])
    return "".join(out)


# -- verification ------------------------------------------------------------------------------

def _verified(new_text: str, old_text: str, edits: list[TextEdit]) -> bool:
    """The fixed text parses (libcst and ast) and every replaced expression means what was meant."""
    try:
        cst.parse_module(new_text)
        tree = ast.parse(new_text)
    except (cst.ParserSyntaxError, SyntaxError, ValueError, RecursionError):
        return False
    lines = _LineTable(new_text)
    spans: dict[tuple[int, int], list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and getattr(node, "end_lineno", None) is not None:
            span = (lines.offset_from_bytes(node.lineno, node.col_offset),
                    lines.offset_from_bytes(node.end_lineno, node.end_col_offset))
            spans.setdefault(span, []).append(node)
    shift = 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        new_start = edit.start + shift
        shift += len(edit.text) - (edit.end - edit.start)
        if edit.kind != "expression":
            continue
        try:
            meant = ast.parse(edit.text.strip(), mode="eval").body
        except SyntaxError:
            return False
        inner = _LineTable(edit.text.strip())
        lead = len(edit.text) - len(edit.text.lstrip())
        span = (new_start + lead + inner.offset_from_bytes(meant.lineno, meant.col_offset),
                new_start + lead + inner.offset_from_bytes(meant.end_lineno, meant.end_col_offset))
        found = spans.get(span, [])
        if not any(ast.dump(node) == ast.dump(meant) for node in found):
            return False
    return True


class _LineTable:
    """Offsets of line starts, to turn (line, column) into string offsets."""

    def __init__(self, text: str) -> None:
        # Python's line ends only (str.splitlines also splits at form feeds and others)
        self.lines = _LINE.findall(text) or [""]
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, line: int, column: int) -> int:
        """``line`` 1-based, ``column`` 0-based in characters."""
        return self.starts[line - 1] + column

    def offset_from_bytes(self, line: int, byte_column: int) -> int:
        """``ast``'s columns count UTF-8 bytes."""
        text = self.lines[line - 1] if line - 1 < len(self.lines) else ""
        return self.starts[line - 1] + len(text.encode("utf-8")[:byte_column].decode("utf-8", errors="ignore"))
