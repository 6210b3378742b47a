"""Every registered rule's VALID/INVALID examples and documentation, run as tests."""

from __future__ import annotations

import textwrap

import pytest

from accel_lint.config import Config
from accel_lint.engine import lint_source
from accel_lint.rules import all_rules
from accel_lint.rules.base import DOC_SECTIONS, SEVERITIES, expected_lines

RULES = all_rules()
CONFIG = Config()


def _cases(kind: str):
    for rule in RULES:
        for i, source in enumerate(getattr(rule, kind)):
            yield pytest.param(rule, textwrap.dedent(source), id=f"{rule.code}-{kind.lower()}-{i}")


def _lines(rule, source: str) -> list[int]:
    rules = list(RULES) if rule.needs_other_rules else [rule]
    result = lint_source(source, "example.py", CONFIG, rules)
    assert not result.errors, result.errors
    return [d.line for d in result.diagnostics if d.code == rule.code]


@pytest.mark.parametrize("rule,source", list(_cases("VALID")))
def test_valid_example_is_clean(rule, source):
    assert _lines(rule, source) == []


@pytest.mark.parametrize("rule,source", list(_cases("INVALID")))
def test_invalid_example_is_flagged_on_marked_lines(rule, source):
    expected = expected_lines(source, rule.code)
    assert expected, "an INVALID example must mark at least one line with '# expect: CODE'"
    assert _lines(rule, source) == expected


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_rule_has_metadata_and_four_part_docs(rule):
    assert rule.code.startswith("AL") and len(rule.code) == 5
    assert rule.name == rule.name.lower() and " " not in rule.name
    assert rule.severity in SEVERITIES
    assert rule.summary and "\n" not in rule.summary
    docs = rule.docs()
    positions = [docs.find(section) for section in DOC_SECTIONS]
    assert all(p >= 0 for p in positions), f"{rule.code} docs miss a section"
    assert positions == sorted(positions)
    assert rule.VALID and rule.INVALID


def test_codes_and_names_are_unique():
    assert len({r.code for r in RULES}) == len(RULES)
    assert len({r.name for r in RULES}) == len(RULES)


def test_the_import_free_table_of_sharding_only_variants_matches_the_classes():
    from accel_lint.rules import LAUNCH_PRECISION_VARIANTS, SHARDING_ONLY_VARIANTS

    assert SHARDING_ONLY_VARIANTS == {r.code: r.sharding_only_variants for r in RULES if r.sharding_only_variants}
    assert LAUNCH_PRECISION_VARIANTS == {r.code: r.launch_precision_variants for r in RULES
                                         if r.launch_precision_variants}


def test_the_rule_table_read_from_module_names_matches_the_classes():
    from accel_lint.rules import rule_table

    assert list(rule_table()) == [(r.code, r.name) for r in RULES]


def test_a_warm_run_never_imports_libcst(tmp_path):
    import subprocess
    import sys

    (tmp_path / "train.py").write_text("import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
                                       "model = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                                       "model, opt = accelerator.prepare(model, opt)\nmodel(x).sum().backward()\nopt.step()\n")
    cache = tmp_path / "cache"
    code = ("import sys; from accel_lint.cli import main\n"
            "try:\n    main([%r, '--cache-dir', %r])\nexcept SystemExit:\n    pass\n"
            "print('libcst' in sys.modules)\n") % (str(tmp_path / "train.py"), str(cache))
    import os

    env = {k: v for k, v in os.environ.items() if k != "ACCEL_LINT_NO_CACHE"}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert first.stdout.strip().endswith("True") and "AL101" in first.stdout
    assert second.stdout.strip().endswith("False") and "AL101" in second.stdout


def _offers_a_fix(rule) -> bool:
    """Whether any of the rule's examples or lint fixtures gets a fix from the rule."""
    from conftest import REPO

    sources = [textwrap.dedent(s) for s in (*rule.INVALID, *rule.VALID)]
    sources += [p.read_text() for p in (REPO / "fixtures" / "lint").rglob("*.py")
                if rule.code.lower() in p.name.lower()]
    sources += [p.read_text() for p in (REPO / "fixtures" / "fix").glob(f"{rule.code.lower()}_*.py")]
    for source in sources:
        result = lint_source(source, "example.py", CONFIG, list(RULES), want_fixes=True)
        if any(d.code == rule.code for d, _ in result.fixes):
            return True
    return False


@pytest.mark.parametrize("rule", RULES, ids=[r.code for r in RULES])
def test_a_rule_with_a_fix_says_what_the_fix_assumes(rule):
    """Every rule that offers a fix has a "Fix safety" section that names its preconditions
    ("assumes"), and no rule documents a fix it never offers."""
    docs = rule.docs()
    if _offers_a_fix(rule):
        assert "## Fix safety" in docs, f"{rule.code} offers a fix but its docs have no 'Fix safety' section"
        section = docs.split("## Fix safety", 1)[1]
        assert "assumes" in section.lower(), f"{rule.code}'s 'Fix safety' does not say what the fix assumes"
    else:
        assert "## Fix safety" not in docs, f"{rule.code} documents a fix that none of its examples gets"


def test_a_move_to_the_accelerators_own_device_is_the_info_variant_however_it_is_spelled():
    (rule,) = [r for r in all_rules() if r.code == "AL504"]
    for example in rule.INVALID:
        source = textwrap.dedent(example)
        for d in lint_source(source.encode(), "example.py", Config()).diagnostics:
            line = source.splitlines()[d.line - 1]
            if d.code == "AL504" and ".to(" in line:
                same_device = "accelerator.device)" in line or "self.device)" in line or "accelerator's device" in line
                assert (d.severity == "info") == same_device, line
