"""Suppression comments, read from the file's comment tokens (never from strings).

* ``# noqa`` (every code), ``# noqa: AL301, rank-gated-checkpoint`` (codes or rule names):
  on any physical line of the statement a finding belongs to. Codes of other tools in the
  same comment (``# noqa: E501, AL301``) are left to those tools.
* ``# accel-lint: file-ignore`` or ``# accel-lint: file-ignore[AL401, AL302]`` anywhere in
  the file: those rules (or all) are off for the file.

A directive that cannot be read is a warning (a :class:`Malformed`), never a crash. Which
codes of a ``# noqa`` suppressed nothing is recorded for AL002 (unused-suppression).
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

_NOQA = re.compile(r"#\s*noqa(?P<colon>\s*:\s*(?P<codes>[^#]*))?", re.IGNORECASE)
_FILE_IGNORE = re.compile(r"#\s*accel-lint\s*:\s*(?P<rest>.*)$", re.IGNORECASE)
_FILE_IGNORE_BODY = re.compile(r"^file-ignore(?:\[(?P<codes>[^\]]*)\])?\s*$", re.IGNORECASE)
_CODE = re.compile(r"^[A-Za-z]+[0-9]+$")
_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)+$")


@dataclass
class Noqa:
    """One ``# noqa`` comment: where it is, and the codes it names (empty: every code)."""

    line: int
    column: int  # 1-based column of the ``#``
    end_column: int
    codes: tuple[str, ...]  # as written, normalized: AL codes upper-case, names lower-case
    used: set[str] = field(default_factory=set)

    def matches(self, code: str, name: str) -> str | None:
        """The entry that suppresses ``code`` here ("" for a bare noqa), else ``None``."""
        if not self.codes:
            return ""
        for entry in self.codes:
            if entry == code or entry == name:
                return entry
        return None


@dataclass(frozen=True)
class Malformed:
    line: int
    message: str


@dataclass
class Suppressions:
    noqa: dict[int, Noqa] = field(default_factory=dict)
    file_ignores: set[str] | None = None  # None: no file-ignore; "*": every rule
    malformed: list[Malformed] = field(default_factory=list)

    def ignores_file(self, code: str, name: str) -> bool:
        if self.file_ignores is None:
            return False
        return "*" in self.file_ignores or code in self.file_ignores or name in self.file_ignores

    def suppress(self, first_line: int, last_line: int, code: str, name: str) -> bool:
        """Whether a ``# noqa`` on lines ``first_line..last_line`` suppresses the finding (and mark it used)."""
        for line in range(first_line, last_line + 1):
            directive = self.noqa.get(line)
            if directive is None:
                continue
            entry = directive.matches(code, name)
            if entry is not None:
                directive.used.add(entry)
                return True
        return False


EMPTY = Suppressions()


def might_have_directives(text: str) -> bool:
    """Cheap test before tokenizing: most files have no suppression comment at all."""
    lowered = text.lower()
    return "noqa" in lowered or "accel-lint" in lowered


def scan(text: str) -> Suppressions:
    """Every suppression directive of a file, from its comment tokens."""
    found = Suppressions()
    if not might_have_directives(text):
        return found
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return found  # the parser accepted the file; tokenize disagreeing is not worth a crash
    for token in tokens:
        if token.type != tokenize.COMMENT:
            continue
        line, col = token.start
        _read_file_ignore(token.string, line, found)
        m = _NOQA.search(token.string)
        if m is None:
            continue
        codes: list[str] = []
        if m.group("colon") is not None:
            raw = [c for c in re.split(r"[\s,]+", (m.group("codes") or "").strip()) if c]
            if not raw:
                found.malformed.append(Malformed(line, "`# noqa:` names no code; write `# noqa: AL301` or a bare `# noqa`"))
                continue
            for entry in raw:
                if _CODE.match(entry):
                    codes.append(entry.upper())
                elif _NAME.match(entry.lower()):
                    codes.append(entry.lower())
                else:
                    # as ruff reads it: the codes end at the first word that is not one
                    # (`# noqa: AL101 kept for the DDP hook test`); none at all is a mistake
                    if not codes:
                        found.malformed.append(Malformed(line, f"`{entry}` in `# noqa` is neither a rule code nor a rule name"))
                    break
            if not codes:
                continue
        start = col + m.start() + 1
        found.noqa[line] = Noqa(line, start, col + m.end() + 1, tuple(codes))
    return found


def _read_file_ignore(comment: str, line: int, found: Suppressions) -> None:
    m = _FILE_IGNORE.search(comment)
    if m is None:
        return
    body = _FILE_IGNORE_BODY.match(m.group("rest").strip())
    if body is None:
        found.malformed.append(Malformed(line, "unknown `# accel-lint:` directive; expected `# accel-lint: file-ignore[AL401]`"))
        return
    codes = body.group("codes")
    if found.file_ignores is None:
        found.file_ignores = set()
    if codes is None or not codes.strip():
        found.file_ignores.add("*")
        return
    for entry in (c.strip() for c in codes.split(",")):
        if entry:
            found.file_ignores.add(entry.upper() if _CODE.match(entry) else entry.lower())


def noqa_codes(line: str) -> set[str] | None:
    """The codes of a ``# noqa`` on one line of text: ``None`` when there is none, an empty
    set for a bare one. (For --add-noqa, which edits lines.)"""
    m = _NOQA.search(line)
    if m is None:
        return None
    if m.group("colon") is None:
        return set()
    return {c.upper() if _CODE.match(c) else c.lower() for c in re.split(r"[\s,]+", (m.group("codes") or "").strip()) if c}
