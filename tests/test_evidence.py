"""Every finding carries the facts it rests on, and replacing one of them with something unknown
makes the finding disappear (or stand on another fact it names): unknown is silent."""

from __future__ import annotations

import json
import re
import textwrap

import pytest

from accel_lint.config import Config
from accel_lint.engine import lint_source
from accel_lint.rules import all_rules
from conftest import json_findings, run_cli

SCRIPT = textwrap.dedent("""\
    import torch
    from accelerate import Accelerator
    from mylib import Net

    accelerator = Accelerator()
    model = Net()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer = accelerator.prepare(model, optimizer)
    if accelerator.is_main_process:
        accelerator.save_state("ckpt")
    accelerator.print(model.config)
    """)


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_json_names_where_the_object_was_made_what_made_it_a_model_and_which_prepare(script):
    _, found = json_findings("--no-cache", str(script))
    by_code = {f["code"]: f for f in found}
    assert by_code["AL501"]["evidence"] == [
        {"line": 6, "fact": "made by `Net()`"},
        {"line": 7, "fact": "used as a module (`model.parameters()`): a model"},
        {"line": 8, "fact": "`accelerator.prepare(...)` returned wrapped here"},
    ]
    assert by_code["AL302"]["evidence"] == [
        {"line": 9, "fact": "runs only where `accelerator.is_main_process`, which differs between ranks"}]


def test_text_shows_the_evidence_under_the_finding_only_when_asked(script):
    plain = run_cli("--no-cache", str(script)).stdout
    shown = run_cli("--no-cache", "--show-evidence", str(script)).stdout
    assert "used as a module" not in plain
    assert f"    {script}:7: used as a module (`model.parameters()`): a model" in shown.splitlines()


def test_sarif_gives_the_evidence_as_related_locations(script):
    log = json.loads(run_cli("--no-cache", "--output-format", "sarif", str(script)).stdout)
    result = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "AL501")
    assert [(r["physicalLocation"]["region"]["startLine"], r["message"]["text"]) for r in result["relatedLocations"]] \
        == [(6, "made by `Net()`"), (7, "used as a module (`model.parameters()`): a model"),
            (8, "`accelerator.prepare(...)` returned wrapped here")]


# -- unknown is silent ------------------------------------------------------------------------------
def _findings(source: str) -> list:
    return lint_source(source.encode(), "example.py", Config()).diagnostics


def _mutations(source: str, line: int, fact: str) -> list[str]:
    """The source with the fact on ``line`` replaced by something the model cannot know: the
    constructor or factory by an unknown function, a module use by an unknown method, the
    prepare call by an unknown method, the guard by an unknown flag."""
    lines = source.splitlines(keepends=True)
    text = lines[line - 1]
    quoted = re.findall(r"`([^`]+)`", fact)
    out = []
    if fact.startswith("made by") and quoted:
        callee = re.match(r"([\w.]+)\(", quoted[0])
        if callee and callee.group(1) + "(" in text:
            out.append(text.replace(callee.group(1) + "(", "unknown_factory(", 1))
    elif fact.startswith("used as a module") and quoted:
        method = re.search(r"\.(\w+)\(\)", quoted[0])
        if method:
            out.append(text.replace(f".{method.group(1)}(", ".unknown_method(", 1))
    elif "returned" in fact and quoted:
        method = re.search(r"\.(prepare\w*)", quoted[0])
        if method:
            out.append(text.replace(f".{method.group(1)}(", ".unknown_method(", 1))
    elif fact.startswith("runs ") and quoted and quoted[0] in text:
        out.append(text.replace(quoted[0], "unknown_flag()", 1))
    return ["".join(lines[: line - 1] + [mutated] + lines[line:]) for mutated in out]


CASES = [(rule.code, i, textwrap.dedent(example)) for rule in all_rules() for i, example in enumerate(rule.INVALID)]


@pytest.mark.parametrize("code, index, source", CASES, ids=[f"{c}-{i}" for c, i, _ in CASES])
def test_replacing_a_fact_a_finding_names_with_an_unknown_silences_it(code, index, source):
    mutated_any = False
    for finding in [d for d in _findings(source) if d.code == code and d.evidence]:
        for line, fact in finding.evidence:
            for mutated in _mutations(source, line, fact):
                mutated_any = True
                after = [d for d in _findings(mutated) if d.code == code and d.line == finding.line]
                # gone, or standing on facts that no longer include the one replaced
                assert all((line, fact) not in d.evidence for d in after), (fact, mutated)
                assert all(d.evidence for d in after), (fact, mutated)
    if not mutated_any:
        pytest.skip(f"{code} example {index}: no finding with evidence to mutate")


# the tool's own findings (a syntax error, an unused suppression) rest on no fact about the code
_NO_FACTS = {"AL001", "AL002"}
EVIDENCE_CASES = [case for case in CASES if case[0] not in _NO_FACTS]


@pytest.mark.parametrize("code, index, source", EVIDENCE_CASES, ids=[f"{c}-{i}" for c, i, _ in EVIDENCE_CASES])
def test_every_finding_of_a_bad_example_names_the_facts_it_rests_on(code, index, source):
    found = [d for d in _findings(source) if d.code == code]
    assert found
    assert all(d.evidence for d in found), [d.message for d in found if not d.evidence]
