"""A pinned slice of the real-world corpus: the accelerate and trl wheels, linted end to end.

The wheels are downloaded with pip into a cache outside the repository (never committed);
set ACCEL_LINT_CORPUS_CACHE to choose the folder. Without network the test is skipped.
Every finding here was triaged by hand (see README, "Real-world check").
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from accel_lint.config import Config
from accel_lint.discovery import discover
from accel_lint.engine import lint_paths

WHEELS = {"accelerate": "1.15.0", "trl": "1.16.0"}
CACHE = Path(os.environ.get("ACCEL_LINT_CORPUS_CACHE", Path.home() / ".cache" / "accel-lint-corpus"))

# (path inside the unpacked wheels, line, code): what the rules report, all true positives
# (bench/ecosystem/wheels.tsv triages them); no longer reported: two raw backward() calls that only
# inspect gradients (no optimizer in the file) and state_dict() on a model an FSDP1 accelerator
# prepared (full and unprefixed on every rank). Each remaining one is deliberate in Accelerate's own
# multi-process test scripts: progress prints that every rank repeats (AL403, severity info) and
# tokenizing on every rank without main_process_first() (AL404).
EXPECTED = [
    ("accelerate/test_utils/scripts/external_deps/test_checkpointing.py", 53, "AL404"),
    ("accelerate/test_utils/scripts/external_deps/test_ds_multiple_model.py", 69, "AL404"),
    ("accelerate/test_utils/scripts/external_deps/test_metrics.py", 268, "AL403"),
    ("accelerate/test_utils/scripts/external_deps/test_metrics.py", 270, "AL403"),
    ("accelerate/test_utils/scripts/external_deps/test_peak_memory_usage.py", 157, "AL404"),
    ("accelerate/test_utils/scripts/external_deps/test_performance.py", 58, "AL404"),
    ("accelerate/test_utils/scripts/external_deps/test_pippy.py", 115, "AL403"),
    ("accelerate/test_utils/scripts/test_script.py", 533, "AL403"),
    ("accelerate/test_utils/scripts/test_script.py", 549, "AL403"),
    ("accelerate/test_utils/scripts/test_script.py", 587, "AL403"),
    ("accelerate/test_utils/scripts/test_script.py", 869, "AL403"),
]


@pytest.fixture(scope="module")
def corpus() -> Path:
    root = CACHE / "src"
    marker = CACHE / ("unpacked-" + "-".join(f"{k}{v}" for k, v in sorted(WHEELS.items())))
    if not marker.exists():
        wheels = CACHE / "wheels"
        wheels.mkdir(parents=True, exist_ok=True)
        specs = [f"{name}=={version}" for name, version in WHEELS.items()]
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *specs],
            capture_output=True, text=True, timeout=600,
        )
        if proc.returncode != 0:
            pytest.skip(f"cannot download the corpus wheels: {proc.stderr.strip()[-300:]}")
        for name, version in WHEELS.items():
            for wheel in wheels.glob(f"{name}-{version}-*.whl"):
                with zipfile.ZipFile(wheel) as archive:
                    archive.extractall(root)
        marker.touch()
    return root


@pytest.mark.corpus
def test_pinned_slice_gives_exactly_the_triaged_findings(corpus):
    files, missing = discover([str(corpus / name) for name in WHEELS], Config())
    assert not missing and len(files) > 150
    result = lint_paths(files, Config())
    assert result.errors == []
    found = sorted((Path(d.path).relative_to(corpus).as_posix(), d.line, d.code) for d in result.diagnostics)
    assert found == EXPECTED


# Packages of the running Python's standard library, analysed with the prefilter off so that
# the model and every rule see code written by other people (bench/corpus_errors.py runs all).
STDLIB_SLICE = ["json", "asyncio", "concurrent", "unittest", "logging", "importlib"]


@pytest.mark.corpus
def test_stdlib_slice_has_no_internal_errors(monkeypatch):
    import sysconfig

    import accel_lint.engine as engine

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for name in STDLIB_SLICE for p in (stdlib / name).rglob("*.py"))
    assert len(files) > 100
    monkeypatch.setattr(engine, "may_have_findings", lambda data, config: True)
    result = lint_paths(files, Config(), jobs=1)
    assert [e for e in result.errors if e.internal] == []
    assert result.files_checked == len(files)
