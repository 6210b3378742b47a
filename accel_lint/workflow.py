"""Whole-run workflows on top of a lint result: ``--fix``/``--diff`` and ``--add-noqa``."""

from __future__ import annotations

import difflib
import io
import tokenize
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from .config import Config
from .diagnostics import Diagnostic, Notice
from .engine import LintResult
from .fixes import FileFix, fix_source, write_atomically
from .rules import all_rules
from .report.text import location
from .suppressions import noqa_codes


@dataclass
class FixRun:
    diagnostics: list[Diagnostic] = field(default_factory=list)  # what remains after fixing
    files: list[FileFix] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)

    @property
    def applied(self) -> list[tuple[Diagnostic, str]]:
        return [a for f in self.files for a in f.applied]

    @property
    def applied_count(self) -> int:
        return len(self.applied)

    def diff(self) -> str:
        out = []
        for f in self.files:
            if f.changed:
                out.extend(difflib.unified_diff(
                    f.original.splitlines(keepends=True), f.fixed.splitlines(keepends=True),
                    fromfile=f"a/{f.path}", tofile=f"b/{f.path}"))
                if out and not out[-1].endswith(("\n", "\r")):
                    out[-1] += "\n\\ No newline at end of file\n"
        return "".join(out)

    def summary(self, show_fixes: bool) -> str:
        n = self.applied_count
        lines = [f"Fixed {n} problem{'s' if n != 1 else ''}, {len(self.diagnostics)} remaining."]
        if show_fixes:
            for f in self.files:
                for d, description in f.applied:
                    lines.append(f"  {location(d)}: {d.code} {description}")
        return "\n".join(lines)


def fix_files(result: LintResult, config: Config, unsafe: bool, write: bool) -> FixRun:
    """Fix every file that has an applicable fix; write the changed ones when ``write``."""
    run = FixRun()
    # a finding whose fix may be refused is looked at too: --fix then says why it was not fixed
    refusing = {r.code for r in all_rules() if r.fix_may_refuse}
    wanted = {d.path for d in result.diagnostics
              if d.fix == "safe" or (unsafe and (d.fix or d.code in refusing))}
    run.diagnostics = [d for d in result.diagnostics if d.path not in wanted]
    for path in sorted(wanted):
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            run.notices.append(Notice(path, f"not fixed: cannot read: {exc.strerror or exc}"))
            run.diagnostics.extend(d for d in result.diagnostics if d.path == path)
            continue
        outcome = _fix_notebook(data, path, config, unsafe) if path.endswith(".ipynb") else \
            fix_source(data, path, config, unsafe)
        run.files.append(outcome)
        run.notices.extend(outcome.notices)
        remaining = outcome.remaining.diagnostics if outcome.remaining is not None else []
        run.diagnostics.extend(remaining)
        if write and outcome.changed:
            try:
                write_atomically(Path(path), outcome.fixed, outcome.encoding)
            except OSError as exc:
                run.notices.append(Notice(path, f"not written: {exc.strerror or exc}"))
    run.diagnostics.sort(key=Diagnostic.sort_key)
    return run


def _fix_notebook(data: bytes, path: str, config: Config, unsafe: bool) -> FileFix:
    """Fix the notebook's code as one module, then write back only the cells that changed."""
    from . import notebooks
    from .engine import _to_cell, lint_notebook

    outcome = FileFix(path)
    try:
        text = data.decode("utf-8")
        notebook = notebooks.read(text)
    except (UnicodeDecodeError, notebooks.NotebookError) as exc:
        outcome.notices.append(Notice(path, f"not fixed: {exc}"))
        outcome.remaining = lint_notebook(data, path, config)
        return outcome
    outcome.original = outcome.fixed = text
    module_fix = fix_source(notebook.module.encode("utf-8"), path, config, unsafe)
    outcome.notices.extend(module_fix.notices)
    if module_fix.changed:
        new_text, refusals, written = notebooks.apply_fixed_module(notebook, module_fix.fixed)
        outcome.notices.extend(Notice(path, message) for message in refusals)
        outcome.fixed = new_text
        for d, description in module_fix.applied:
            mapped = _to_cell(d, notebook)
            if mapped.cell in written:
                outcome.applied.append((mapped, description))
    outcome.remaining = lint_notebook(outcome.fixed.encode("utf-8"), path, config)
    return outcome


def add_noqa(diagnostics: list[Diagnostic]) -> int:
    """Append ``# noqa: CODE`` (merged into an existing ``# noqa: ...``) where each finding is
    reported; on the line that ends a multi-line string when the finding starts inside one."""
    by_file: dict[str, list[Diagnostic]] = defaultdict(list)
    for d in diagnostics:
        if d.code != "AL002" and d.cell is None:  # notebooks: not edited by --add-noqa
            by_file[d.path].append(d)
    added = 0
    for path, found in by_file.items():
        target = Path(path)
        data = target.read_bytes()
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
        lines = text.splitlines(keepends=True)
        moved = _string_continuations(text)
        codes_by_line: dict[int, set[str]] = defaultdict(set)
        for d in found:
            codes_by_line[moved.get(d.line, d.line)].add(d.code)
        for number, codes in codes_by_line.items():
            line = lines[number - 1]
            body = line.rstrip("\r\n")
            ending = line[len(body):]
            new_body = with_noqa(body, codes)
            if new_body is None:
                continue
            lines[number - 1] = new_body + ending
            added += len(codes - (noqa_codes(body) or set()))
        write_atomically(target, "".join(lines), encoding)
    return added


def with_noqa(body: str, codes: set[str]) -> str | None:
    """``body`` (one line, without its line end) with ``# noqa: CODES`` appended or merged into
    its ``# noqa: ...``; ``None`` when a bare ``# noqa`` already covers everything."""
    existing = noqa_codes(body)
    if existing is not None and not existing:
        return None
    if existing is not None:
        head = body[: body.lower().rindex("noqa")].rstrip()
        head = head[:-1].rstrip() if head.endswith("#") else head
        return f"{head}  # noqa: {', '.join(sorted(existing | codes))}"
    return f"{body}  # noqa: {', '.join(sorted(codes))}"


def noqa_line(text: str, line: int) -> int:
    """The line where a ``# noqa`` for a finding on ``line`` can go: the line that ends a
    multi-line string when ``line`` is inside one."""
    return _string_continuations(text).get(line, line)


def _string_continuations(text: str) -> dict[int, int]:
    """Lines inside a multi-line string token -> the line where that token ends (a comment
    can only go after it)."""
    moved: dict[int, int] = {}
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                for line in range(token.start[0], token.end[0]):
                    moved[line] = token.end[0]
    except (tokenize.TokenError, SyntaxError):
        pass
    return moved
