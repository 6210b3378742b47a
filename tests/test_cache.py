"""The result cache: a second run reuses results; content, rule selection and settings invalidate them."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

import accel_lint.engine as engine
from accel_lint.cli import main

TRAIN = (
    "from accelerate import Accelerator\n"
    "accelerator = Accelerator()\n"
    "if accelerator.is_main_process:\n"
    "    accelerator.wait_for_everyone()\n"
)


def run(cwd, *args):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(main, ["--output-format", "json", *args], catch_exceptions=False)
    finally:
        os.chdir(old)


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEL_LINT_NO_CACHE", raising=False)
    (tmp_path / "train.py").write_text(TRAIN)
    return tmp_path


def no_parsing(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("parsed although the cache holds the result")

    monkeypatch.setattr(engine, "_parse_trusted", refuse)


def test_second_run_is_served_from_the_cache(project, monkeypatch):
    first = run(project, "--jobs", "1")
    cache = project / ".accel_lint_cache"
    assert (cache / ".gitignore").read_text().splitlines()[-1] == "*"
    no_parsing(monkeypatch)
    second = run(project, "--jobs", "1")
    assert second.output == first.output and second.exit_code == first.exit_code == 1
    assert [f["code"] for f in json.loads(second.output)] == ["AL301"]


def test_changed_content_selection_or_settings_miss_the_cache(project, monkeypatch):
    run(project, "--jobs", "1")
    (project / "train.py").write_text(TRAIN.replace("is_main_process", "is_local_main_process"))
    assert "is_local_main_process" in run(project, "--jobs", "1").output
    assert json.loads(run(project, "--jobs", "1", "--select", "AL1").output) == []
    assert json.loads(run(project, "--jobs", "1", "--select", "AL3").output)[0]["code"] == "AL301"


def test_no_cache_writes_nothing_and_a_corrupt_entry_is_a_miss(project):
    run(project, "--jobs", "1", "--no-cache")
    assert not (project / ".accel_lint_cache").exists()
    run(project, "--jobs", "1")
    for entry in (project / ".accel_lint_cache").rglob("*.json"):
        entry.write_text("{not json")
    assert [f["code"] for f in json.loads(run(project, "--jobs", "1").output)] == ["AL301"]


def test_cache_dir_flag(project, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("cache")
    run(project, "--jobs", "1", "--cache-dir", str(elsewhere))
    assert list(elsewhere.rglob("*.json")) and not (project / ".accel_lint_cache").exists()


def test_environment_variable_turns_the_cache_off(project, monkeypatch):
    monkeypatch.setenv("ACCEL_LINT_NO_CACHE", "1")
    run(project, "--jobs", "1")
    assert not (project / ".accel_lint_cache").exists()
