"""The CLI on every script under fixtures/lint/: exactly the marked findings, nothing else."""

from __future__ import annotations

import pytest

from accel_lint.rules import all_rules
from accel_lint.rules.base import expected_lines
from conftest import FIXTURES, json_findings

SCRIPTS = sorted(FIXTURES.glob("*.py"))
CODES = [r.code for r in all_rules()]


def _expected(path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    return sorted((line, code) for code in CODES for line in expected_lines(text, code))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_fixture_reports_exactly_the_marked_lines(script):
    code, findings = json_findings(str(script))
    assert sorted((f["line"], f["code"]) for f in findings) == _expected(script)
    assert code == (1 if any(f["severity"] in ("error", "warning") for f in findings) else 0)  # info never fails


def test_every_core_rule_has_a_bad_and_a_good_fixture():
    names = {p.name for p in SCRIPTS}
    for rule in all_rules():
        if rule.code == "AL001":
            continue
        stem = f"{rule.code.lower()}_{rule.name.replace('-', '_')}"
        assert f"{stem}_bad.py" in names and f"{stem}_good.py" in names, stem
        assert any(c == rule.code for _, c in _expected(FIXTURES / f"{stem}_bad.py"))
        assert _expected(FIXTURES / f"{stem}_good.py") == []


def test_whole_fixture_directory_in_one_run_is_sorted_and_complete():
    code, findings = json_findings(str(FIXTURES))
    keys = [(f["path"], f["line"], f["column"]) for f in findings]
    assert keys == sorted(keys)
    assert len(findings) == sum(len(_expected(p)) for p in SCRIPTS)
    assert code == 1


def test_messages_name_the_guard_the_chain_and_the_call_site():
    _, findings = json_findings(str(FIXTURES / "al301_rank_gated_collective_bad.py"), str(FIXTURES / "al401_unguarded_write_bad.py"))
    by_line = {(f["path"].rsplit("/", 1)[-1], f["line"]): f["message"] for f in findings}
    assert by_line[("al301_rank_gated_collective_bad.py", 28)].startswith(
        "`evaluate() → compute_metrics() → accelerator.gather_for_metrics()` runs only where "
        "`accelerator.is_main_process and step % 100 == 0` (line 27) is true"
    )
    assert "early exit on `not accelerator.is_main_process` (line 35)" in by_line[("al301_rank_gated_collective_bad.py", 37)]
    assert "(through the unguarded call on line 21)" in by_line[("al401_unguarded_write_bad.py", 12)]
