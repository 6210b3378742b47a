"""The documentation site: it builds with ``mkdocs build --strict`` (a broken link or a missing
page fails), every rule and every ``[tool.accel-lint]`` key has its page, README's rules table
is the rule classes', README stays short with the test command ``.ci/run`` runs, and no link
names a repository that does not exist. Rule links follow the one docs base URL setting."""

from __future__ import annotations

import ast
import inspect
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from accel_lint import cli, config, doclinks, library
from accel_lint.config_keys import KEYS
from accel_lint.docs import README_MARKERS, configuration_page
from accel_lint.rules import all_rules

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_the_site_builds_strict(tmp_path):
    # mkdocs-material is in the test extra, so CI always runs this (never skipped). No -q: with it
    # mkdocs logs no warning, and --strict then counts none (a broken link passed)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    site = tmp_path / "site"
    for rule in all_rules():  # the pages rule links point at (doclinks.rule_url) exist
        assert rule.name in (site / "rules" / f"{rule.code}.html").read_text(encoding="utf-8")
    built = (site / "configuration.html").read_text(encoding="utf-8")
    assert all(f'id="{key}"' in built for key in KEYS)
    assert (site / "runtime" / "timeline.html").is_file() and (site / "real-world.html").is_file()


def test_every_rule_has_its_page_and_a_nav_entry():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for rule in all_rules():
        page = ROOT / "docs" / "rules" / f"{rule.code}.md"
        assert page.read_text(encoding="utf-8").startswith(f"# {rule.code} {rule.name}\n"), rule.code
        assert f": rules/{rule.code}.md\n" in nav, rule.code


def _keys_read(function) -> set[str]:
    """The string keys a loader reads from its ``data`` table: ``data["k"]``, ``"k" in data``,
    ``data.get("k")``."""
    keys = set()
    for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(function)))):
        if isinstance(node, ast.Subscript) and getattr(node.value, "id", None) == "data":
            keys.add(node.slice.value)
        elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) \
                and any(getattr(c, "id", None) == "data" for c in node.comparators):
            keys.add(node.left.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and getattr(node.func.value, "id", None) == "data" and node.args:
            keys.add(node.args[0].value)
    return keys


def _undocumented(page: str, keys) -> list[str]:
    return [key for key in keys if f"\n## `{key}` {{#{key}}}\n" not in page]


def test_every_config_key_the_loaders_read_has_its_entry():
    read = _keys_read(config.load_config) | _keys_read(library.parse_extension)
    assert "docs-url" in read and "extend-writes" in read  # the scan sees both loaders
    assert read == set(KEYS) == set(config.KNOWN_KEYS)
    committed = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == configuration_page()
    assert _undocumented(committed, read) == []
    # the check fails on a page that lacks a key's entry
    without = committed.replace("\n## `docs-url` {#docs-url}\n", "\n")
    assert _undocumented(without, read) == ["docs-url"]


def _readme_rules() -> list[tuple[str, str, str]]:
    text = README.read_text(encoding="utf-8")
    table = text.split(README_MARKERS[0], 1)[1].split(README_MARKERS[1], 1)[0]
    return re.findall(r"^\| \[(AL\d+)\]\(docs/rules/\1\.md\) \| ([\w-]+) \| (.*) \|$", table, re.MULTILINE)


def test_the_readme_rules_table_is_the_rule_classes():
    assert _readme_rules() == [(r.code, r.name, r.summary) for r in all_rules()]


def test_the_readme_is_short_and_runs_the_ci_command():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    ci_command = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert f"\n{ci_command}\n" in text
    assert "\npython3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/accel-lint fixtures/lint/\n" in text


def test_no_link_names_the_repository_that_does_not_exist():
    ghost = "accel-lint/" + "accel-lint"  # split, so this file does not match itself
    files = [README, ROOT / "mkdocs.yml", ROOT / "pyproject.toml", *(ROOT / "docs").rglob("*.md"),
             *(ROOT / "accel_lint").rglob("*.py"), *(ROOT / "runtime_checks").rglob("*.py"),
             *(ROOT / "tests").rglob("*.py")]
    assert [str(f) for f in files if ghost in f.read_text(encoding="utf-8")] == []


def test_docs_url_default_setting_and_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(doclinks.ENV, raising=False)
    assert doclinks.rule_url("AL101") == (ROOT / "site").as_uri() + "/rules/AL101.html"
    assert doclinks.base_url("https://docs.example.org/al") == "https://docs.example.org/al/"
    monkeypatch.setenv(doclinks.ENV, "https://env.example.org/")
    assert doclinks.base_url("https://docs.example.org/al") == "https://env.example.org/"


def test_sarif_and_json_links_follow_docs_url(tmp_path, monkeypatch):
    monkeypatch.delenv(doclinks.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[tool.accel-lint]\ndocs-url = "https://docs.example.org/al"\n')
    (tmp_path / "train.py").write_text((ROOT / "fixtures" / "lint" / "al101_raw_backward_bad.py").read_text())
    runner = CliRunner()
    sarif = json.loads(runner.invoke(cli.main, ["train.py", "--output-format", "sarif", "--no-cache"]).output)
    driver = sarif["runs"][0]["tool"]["driver"]
    assert driver["informationUri"] == "https://docs.example.org/al/index.html"
    assert {r["id"]: r["helpUri"] for r in driver["rules"]}["AL101"] == "https://docs.example.org/al/rules/AL101.html"
    findings = json.loads(runner.invoke(cli.main, ["train.py", "--output-format", "json", "--no-cache"]).output)
    assert findings and all(f["url"] == f"https://docs.example.org/al/rules/{f['code']}.html" for f in findings)
    assert runner.invoke(cli.main, ["docs", "al101"]).output.strip() == "https://docs.example.org/al/rules/AL101.html"
    (tmp_path / "pyproject.toml").write_text("[tool.accel-lint]\ndocs-url = 3\n")
    assert runner.invoke(cli.main, ["train.py", "--no-cache"]).exit_code == 2


@pytest.mark.parametrize("name", ["mkdocs.yml", "README.md"])
def test_generated_stretches_have_their_markers(name):
    text = (ROOT / name).read_text(encoding="utf-8")
    assert text.count("generated by python -m accel_lint.docs") == 1
