"""docs/rules/ is generated from the rule modules and must be current; every rule's page has
the four documentation sections; every machine-readable finding points at its page."""

from __future__ import annotations

from accel_lint.docs import DOCS, main, pages
from accel_lint.rules import all_rules
from accel_lint.rules.base import DOC_SECTIONS


def test_generated_rule_docs_are_committed_and_current(capsys):
    assert main(["--check"]) == 0, capsys.readouterr().err


def test_every_rule_page_has_every_section_and_an_example():
    generated = pages()
    for rule in all_rules():
        page = generated[f"{rule.code}.md"]
        assert page.startswith(f"# {rule.code} {rule.name}\n")
        assert all(section in page for section in DOC_SECTIONS), rule.code
        assert "```python" in page
        assert (DOCS / f"{rule.code}.md").read_text() == page
    assert all(f"[{r.code}]({r.code}.md)" in generated["README.md"] for r in all_rules())


def test_check_reports_a_stale_page(tmp_path, capsys):
    main(["--out", str(tmp_path)])
    (tmp_path / "AL101.md").write_text("edited by hand\n")
    assert main(["--check", "--out", str(tmp_path)]) == 1
    assert "AL101.md is not current" in capsys.readouterr().err
