"""``json`` (one array) and ``json-lines`` (one object per line): every field, plus the rule's docs."""

from __future__ import annotations

import json

from ..diagnostics import Diagnostic


def _record(d: Diagnostic, run) -> dict:
    record = d.to_dict()
    info = run.rules.get(d.code)
    record["url"] = info.url if info else None
    record["docs"] = info.docs_path if info else None
    return record


def array(diagnostics: list[Diagnostic], run) -> str:
    return json.dumps([_record(d, run) for d in diagnostics], indent=2)


def lines(diagnostics: list[Diagnostic], run) -> str:
    return "\n".join(json.dumps(_record(d, run), sort_keys=True) for d in diagnostics)
