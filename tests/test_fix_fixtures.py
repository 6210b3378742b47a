"""Fixed programs run for real: every fixture under ``fixtures/fix/`` is a small training
script with a bug a rule fixes. Each runs on 2 gloo ranks before and after
``--fix --unsafe-fixes``; both runs must exit 0, and the fixed file no longer has the
finding (or the fix refused with its notice). Where the fix changes what the run does (which
ranks save RNG state, which ranks log), the run's output shows it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, run_cli

FIXTURES = REPO / "fixtures" / "fix"
SCRIPTS = sorted(p.name for p in FIXTURES.glob("al*.py"))
# fixes: the fix (safe or unsafe) removes the finding; safe-fixes: plain `--fix` applies the
# safe fixes and leaves the unsafe ones; refuses: no fix is applied, with a notice
_HEADER = re.compile(r"\b(fixes|safe-fixes|refuses): (AL\d{3})")

pytest.importorskip("accelerate")


def expectation(name: str) -> tuple[str, str]:
    """``("fixes" | "refuses", code)`` from the fixture's docstring."""
    found = _HEADER.search((FIXTURES / name).read_text())
    assert found, f"{name} does not say what it fixes"
    return found.group(1), found.group(2)


def run_on_two_ranks(workdir: Path, script: str, out: Path) -> subprocess.CompletedProcess:
    """Through ``_run.py``, which skips the interpreter teardown that DDP's gloo group aborts in."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(workdir)}
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "_run.py", script,
         str(out)],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=240)


def lint_codes(workdir: Path, script: str) -> list[str]:
    proc = run_cli("--no-cache", "--output-format", "json", script, cwd=workdir)
    return [d["code"] for d in json.loads(proc.stdout)]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    target = tmp_path / "fix"
    shutil.copytree(FIXTURES, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def test_every_rule_with_a_fix_has_a_runnable_fixture():
    from accel_lint.rules import all_rules

    fixed = {expectation(name)[1] for name in SCRIPTS}
    with_fixes = {rule.code for rule in all_rules() if "## Fix safety" in (rule.__doc__ or "")}
    assert with_fixes <= fixed, f"no runnable fix fixture for {sorted(with_fixes - fixed)}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_fixture_runs_before_and_after_its_fix(workdir: Path, script: str):
    what, code = expectation(script)
    assert code in lint_codes(workdir, script)
    before = run_on_two_ranks(workdir, script, workdir / "out-before")
    assert before.returncode == 0, before.stderr[-6000:]

    fix = run_cli("--no-cache", "--fix", *(() if what == "safe-fixes" else ("--unsafe-fixes",)), script, cwd=workdir)
    if what == "safe-fixes":
        assert (workdir / script).read_text() != (FIXTURES / script).read_text()
        left = run_cli("--no-cache", "--output-format", "json", script, cwd=workdir)
        assert {(d["code"], d["fix"]) for d in json.loads(left.stdout)} == {(code, "unsafe")}, fix.stderr
    elif what == "fixes":
        assert code not in lint_codes(workdir, script), fix.stderr
        assert (workdir / script).read_text() != (FIXTURES / script).read_text()
    else:
        assert f"{code} not fixed:" in fix.stderr and "by hand" in fix.stderr
        assert (workdir / script).read_text() == (FIXTURES / script).read_text()
    compile((workdir / script).read_text(), script, "exec")

    after = run_on_two_ranks(workdir, script, workdir / "out-after")
    assert after.returncode == 0, after.stderr[-6000:]
    check = BEHAVIOUR.get(script)
    if check is not None:
        check(workdir / "out-before", workdir / "out-after")


def _rng_states(out: Path) -> set[str]:
    return {p.name for p in out.glob("checkpoint-*/random_states_*.pkl")}


def _checkpoint_rotation(before: Path, after: Path) -> None:
    # rotation keeps the last two checkpoints; only the fixed run saves rank 1's RNG state
    assert sorted(p.name for p in after.glob("checkpoint-*")) == ["checkpoint-12", "checkpoint-9"]
    assert _rng_states(before) == {"random_states_0.pkl"}
    assert _rng_states(after) == {"random_states_0.pkl", "random_states_1.pkl"}


def _final_save(before: Path, after: Path) -> None:
    assert sorted(p.name for p in (before / "final").glob("random_states_*")) == ["random_states_0.pkl"]
    assert sorted(p.name for p in (after / "final").glob("random_states_*")) == \
        ["random_states_0.pkl", "random_states_1.pkl"]


def _tracker(before: Path, after: Path) -> None:
    # one tracker run per rank before the fix, one in all after it
    assert len(list(before.glob("tracker-*.log"))) == 2
    assert len(list(after.glob("tracker-*.log"))) == 1


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def _per_rank_loss(before: Path, after: Path) -> None:
    # 25 samples on 2 ranks of batches of 4 are padded to 32; the safe fix counts the 25
    assert _metrics(before)["samples"] == 32 and _metrics(after)["samples"] == 25
    assert _metrics(after)["mean_loss"] == _metrics(before)["mean_loss"]


BEHAVIOUR = {
    "al203_per_rank_loss.py": _per_rank_loss,
    "al302_checkpoint_rotation.py": _checkpoint_rotation,
    "al302_final_save.py": _final_save,
    "al402_unguarded_tracker.py": _tracker,
}


def test_the_unsafe_gather_fix_on_a_per_rank_scalar_changes_the_metric(workdir: Path):
    """Why AL203's fix is unsafe on a value that is not per sample: with `--unsafe-fixes` the
    per-rank loss is gathered by `gather_for_metrics`, which cuts the last round to its one real
    sample and so drops rank 1's loss of that batch."""
    script = "al203_per_rank_loss.py"
    before = run_on_two_ranks(workdir, script, workdir / "out-before")
    assert before.returncode == 0, before.stderr[-6000:]
    run_cli("--no-cache", "--fix", "--unsafe-fixes", script, cwd=workdir)
    assert (workdir / script).read_text().count("accelerator.gather_for_metrics(") == 2
    after = run_on_two_ranks(workdir, script, workdir / "out-after")
    assert after.returncode == 0, after.stderr[-6000:]
    assert _metrics(workdir / "out-after")["mean_loss"] != pytest.approx(_metrics(workdir / "out-before")["mean_loss"])


def test_diff_shows_exactly_what_fix_writes(tmp_path: Path):
    """`--diff --unsafe-fixes` on one copy equals the change `--fix --unsafe-fixes` writes on another."""
    import difflib

    shown, written = tmp_path / "shown", tmp_path / "written"
    for target in (shown, written):
        shutil.copytree(FIXTURES, target, ignore=shutil.ignore_patterns("__pycache__"))
    diff = run_cli("--no-cache", "--diff", "--unsafe-fixes", ".", cwd=shown)
    assert diff.returncode == 1
    run_cli("--no-cache", "--fix", "--unsafe-fixes", ".", cwd=written)
    expected = []
    for name in sorted(p.name for p in FIXTURES.glob("*.py")):
        before, after = (FIXTURES / name).read_text(), (written / name).read_text()
        if before != after:
            expected += difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                             fromfile=f"a/{name}", tofile=f"b/{name}")
    assert diff.stdout == "".join(expected)
    assert all((shown / p.name).read_text() == p.read_text() for p in FIXTURES.glob("*.py"))  # nothing written
