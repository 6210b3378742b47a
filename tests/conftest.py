from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Tests see fresh results (a cached result would hide a monkeypatched failure); test_cache.py
# turns the cache back on where it is the subject.
os.environ["ACCEL_LINT_NO_CACHE"] = "1"
FIXTURES = REPO / "fixtures" / "lint"


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m accel_lint`` the way a user does; returns the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "accel_lint", *args], cwd=cwd or REPO, capture_output=True, text=True, timeout=300
    )


def json_findings(*args: str, cwd: Path | None = None) -> tuple[int, list[dict]]:
    proc = run_cli("--output-format", "json", *args, cwd=cwd)
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def write(tmp_path: Path):
    """Write a file under tmp_path and return its path."""

    def _write(name: str, text: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return _write
