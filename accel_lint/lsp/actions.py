"""Code actions and hover on findings.

* A finding's fix: the safe one preferred; an unsafe one says so in its title and is never
  preferred. Its edit comes from :func:`accel_lint.fixes.fix_source` with the finding selected:
  the same rounds, re-lints and refusals as ``--fix``, so an action never offers an edit that
  ``--fix`` would drop.
* "Suppress with ``# noqa: ALxxx``" on the finding's line (merged into a ``# noqa`` already
  there; after the multi-line string the finding starts in, as ``--add-noqa`` does).
* "Fix all safe problems" for the file, kind ``source.fixAll.accel-lint``.

Fixing a large file lints it several times, so fix edits are computed when the client resolves
the action (``codeAction/resolve``); a client that cannot resolve gets them at once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from lsprotocol import types

from ..fixes import fix_source
from ..rules import rule_by_code
from ..workflow import noqa_line, with_noqa
from . import convert
from .documents import LINE_END, split_lines
from .project import Report

FIX_ALL = "source.fixAll.accel-lint"
UNSUPPRESSIBLE = {"AL001", "AL002"}  # a syntax error; an unused suppression is removed, not suppressed


@dataclass
class Resolved:
    edit: types.WorkspaceEdit | None
    notices: list[str] = field(default_factory=list)


def wanted(kind: str, only: list[str] | None) -> bool:
    """Whether the client asked for actions of ``kind`` (a kind covers its sub-kinds)."""
    return only is None or any(kind == o or kind.startswith(o + ".") for o in only)


def actions(report: Report, uri: str, where: types.Range, only: list[str] | None, encoding: str,
            disabled_support: bool = False) -> list[types.CodeAction]:
    """The actions for the findings of ``report`` on ``uri`` that meet ``where``; fix edits are
    left to :func:`resolve` (``data`` says what to compute)."""
    doc = report.document
    out: list[types.CodeAction] = []
    base = {"uri": doc.uri, "version": doc.version}
    if wanted(types.CodeActionKind.QuickFix, only):
        for d in convert.find(report, uri, where, encoding):
            lsp = convert.one(report, d, encoding)
            info = report.fixes.get(d)
            if info is not None:
                unsafe = info.applicability != "safe"
                title = f"{d.code}: {info.description}" + (" (unsafe fix)" if unsafe else "")
                if info.refusal is not None:
                    if disabled_support:
                        out.append(types.CodeAction(title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[lsp],
                                                    disabled=types.CodeActionDisabled(reason=info.refusal)))
                else:
                    out.append(types.CodeAction(
                        title=title, kind=types.CodeActionKind.QuickFix, diagnostics=[lsp], is_preferred=not unsafe,
                        data={**base, "action": "fix", "unsafe": unsafe, "code": d.code, "cell": d.cell,
                              "line": d.line, "column": d.column}))
            if d.code not in UNSUPPRESSIBLE:
                edit = _noqa_edit(report, d, encoding)
                if edit is not None:
                    out.append(types.CodeAction(title=f"{d.code}: suppress with `# noqa: {d.code}`",
                                                kind=types.CodeActionKind.QuickFix, diagnostics=[lsp], edit=edit))
    if wanted(FIX_ALL, only) and any(i.applicability == "safe" and i.refusal is None for i in report.fixes.values()):
        out.append(types.CodeAction(title="accel-lint: fix all safe problems", kind=FIX_ALL,
                                    data={**base, "action": "fixAll"}))
    return out


def resolve(report: Report, data: dict, encoding: str) -> Resolved:
    """The edit of a fix action, from the document ``report`` was made for."""
    doc = report.document
    unsafe = bool(data.get("unsafe"))
    select = None
    if data.get("action") == "fix":
        select = {(data["code"], data["line"], data["column"])}
    source, problem = doc.encoded
    if problem is not None:
        return Resolved(None, [problem])
    path = doc.path or doc.uri
    if doc.cells is None:
        outcome = fix_source(source, path, report.config, unsafe, select)
        notices = [n.message for n in outcome.notices]
        if not outcome.changed:
            return Resolved(None, notices or [_nothing(data)])
        return Resolved(types.WorkspaceEdit(changes={doc.uri: [text_edit(outcome.original, outcome.fixed, encoding)]}),
                        notices)
    return _resolve_notebook(report, source, path, unsafe, data, encoding)


def _resolve_notebook(report: Report, source: bytes, path: str, unsafe: bool, data: dict, encoding: str) -> Resolved:
    """Fix the cells as one program (as ``--fix`` does a notebook), then edit the cells that changed."""
    from .. import notebooks

    doc = report.document
    notebook = notebooks.read(source.decode("utf-8"))
    select = None
    if data.get("action") == "fix":
        try:
            module_line = notebook.line_map.index((data["cell"], data["line"])) + 1
        except ValueError:
            return Resolved(None, [_nothing(data)])
        select = {(data["code"], module_line, data["column"])}
    outcome = fix_source(notebook.module.encode("utf-8"), path, report.config, unsafe, select)
    notices = [n.message for n in outcome.notices]
    if not outcome.changed:
        return Resolved(None, notices or [_nothing(data)])
    new_text, refusals, written = notebooks.apply_fixed_module(notebook, outcome.fixed)
    notices += refusals
    if not written:
        return Resolved(None, notices)
    cells = json.loads(new_text)["cells"]
    changes = {}
    for number in sorted(written):
        old = doc.cells[number - 1].text
        new = "".join(cells[number - 1]["source"])
        changes[doc.cells[number - 1].uri] = [text_edit(old, new, encoding)]
    return Resolved(types.WorkspaceEdit(changes=changes), notices)


def _nothing(data: dict) -> str:
    what = f"{data.get('code')} on line {data.get('line')}" if data.get("action") == "fix" else "this file"
    return f"not fixed: {what} has no fix that applies when the file is fixed on its own (as `--fix` does)"


def _noqa_edit(report: Report, d, encoding: str) -> types.WorkspaceEdit | None:
    doc = report.document
    text = doc.cells[d.cell - 1].text if doc.cells is not None and d.cell else doc.text
    lines = split_lines(text)
    number = noqa_line(text, d.line)
    if not 1 <= number <= len(lines):
        return None
    body = lines[number - 1]
    new = with_noqa(body, {d.code})
    if new is None:
        return None
    # only the end of the line changes: keep the edit there (cursors and marks before it stay)
    keep = len(_common_prefix(body, new))
    rng = types.Range(start=types.Position(line=number - 1, character=convert.units(body, keep, encoding)),
                      end=types.Position(line=number - 1, character=convert.units(body, len(body), encoding)))
    return types.WorkspaceEdit(changes={doc.cell_uri(d.cell): [types.TextEdit(range=rng, new_text=new[keep:])]})


def text_edit(old: str, new: str, encoding: str) -> types.TextEdit:
    """One edit that turns ``old`` into ``new``: the span between their common prefix and suffix."""
    start = len(_common_prefix(old, new))
    end_old, end_new = len(old), len(new)
    while end_old > start and end_new > start and old[end_old - 1] == new[end_new - 1]:
        end_old -= 1
        end_new -= 1
    return types.TextEdit(range=types.Range(start=_position_at(old, start, encoding), end=_position_at(old, end_old, encoding)),
                          new_text=new[start:end_new])


def _common_prefix(a: str, b: str) -> str:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return a[:n]


def _position_at(text: str, offset: int, encoding: str) -> types.Position:
    line, start = 0, 0
    for m in LINE_END.finditer(text, 0, offset):
        line, start = line + 1, m.end()
    end = LINE_END.search(text, start)
    line_text = text[start:end.start() if end else len(text)]
    return types.Position(line=line, character=convert.units(line_text, offset - start, encoding))


def hover(report: Report, uri: str, where: types.Position, encoding: str) -> types.Hover | None:
    """The four-part documentation of the rules of the findings under the cursor."""
    found = convert.find(report, uri, where, encoding)
    parts = []
    for code in dict.fromkeys(d.code for d in found):
        rule = rule_by_code(code)
        if rule is not None:
            parts.append(f"**{rule.code}** `{rule.name}` ({rule.severity}) · [docs]({convert.docs_url(code, report.config)})\n\n"
                         f"{rule.docs().strip()}")
    if not parts:
        return None
    doc = report.document
    lines = doc.lines(found[0].cell)
    return types.Hover(contents=types.MarkupContent(kind=types.MarkupKind.Markdown, value="\n\n---\n\n".join(parts)),
                       range=convert.span(lines, found[0], encoding))
