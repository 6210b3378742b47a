"""``# noqa`` comments: bare (all codes) or with a list of codes or rule names."""

from __future__ import annotations

import re

_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z0-9_\-]+(?:[\s,]+[A-Za-z0-9_\-]+)*))?", re.IGNORECASE)


def noqa_codes(line: str) -> set[str] | None:
    """``None`` when the line has no ``# noqa``; an empty set for a bare one (suppress all)."""
    m = _NOQA.search(line)
    if m is None:
        return None
    codes = m.group("codes")
    if not codes:
        return set()
    return {c.upper() if c[:2].upper() == "AL" else c.lower() for c in re.split(r"[\s,]+", codes.strip()) if c}


def is_suppressed(lines: list[str], line: int, code: str, name: str) -> bool:
    if not 1 <= line <= len(lines):
        return False
    codes = noqa_codes(lines[line - 1])
    if codes is None:
        return False
    return not codes or code in codes or name in codes
