"""pytest plugin (entry point ``pytest11``): run a script under N guarded ranks in a test.

    def test_training_loop_is_collective_safe(distributed_run):
        result = distributed_run("train.py", "--epochs", "1", nproc=2, timeout=10)
        assert result.kind == "ok", result.stderr
        assert result.leftover_pids == []

Importing this module costs nothing: torch is only needed by the ranks it starts.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .watch import process_alive


@dataclass
class DistributedRun:
    """What a guarded run gave: exit code, the JSON report, output, and any process left behind."""

    exit_code: int
    report: dict[str, Any]
    stdout: str
    stderr: str
    elapsed: float
    leftover_pids: list[int] = field(default_factory=list)

    @property
    def finding(self) -> dict[str, Any] | None:
        findings = self.report.get("findings") or []
        return findings[0] if findings else None

    @property
    def kind(self) -> str:
        return self.finding["kind"] if self.finding else "ok"

    def row(self, rank: int) -> dict[str, Any]:
        """The report's row for one rank (state, op, site, stack, ...)."""
        assert self.finding is not None, "the run reported nothing"
        return next(r for r in self.finding["rows"] if r["rank"] == rank)


def processes_running(token: str) -> list[int]:
    """PIDs of live processes whose command line contains ``token`` (for orphan checks)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if token in cmdline and "runtime_checks" in cmdline and process_alive(int(entry)):
            found.append(int(entry))
    return found


@pytest.fixture
def distributed_run(tmp_path: Path):
    """A function that runs ``python -m runtime_checks`` on a script and returns a DistributedRun."""
    counter = itertools.count()

    def run(script: str | os.PathLike, *args: str, nproc: int = 2, timeout: float | None = None,
            module: bool = False, env: dict[str, str] | None = None, limit: float = 180) -> DistributedRun:
        report = tmp_path / f"runtime_checks_report_{next(counter)}.json"
        cmd = [sys.executable, "-m", "runtime_checks", "--nproc", str(nproc), "--report", str(report)]
        if timeout is not None:
            cmd += ["--timeout", str(timeout)]
        cmd += (["-m", str(script)] if module else ["--", str(script)]) + list(args)
        started = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env={**os.environ, **(env or {})})
        elapsed = time.time() - started
        data = json.loads(report.read_text()) if report.exists() else {}
        time.sleep(0.2)
        return DistributedRun(proc.returncode, data, proc.stdout, proc.stderr, elapsed,
                              processes_running(str(script)))

    return run
