"""The pre-commit hooks, run by real pre-commit as a user sets them up: a throwaway git
repository whose ``.pre-commit-config.yaml`` points at a snapshot of this checkout (the working
tree, uncommitted changes included, committed into a temporary repository)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

BAD = """\
import torch
from accelerate import Accelerator
accelerator = Accelerator(); model = torch.nn.Linear(4, 1)
model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
for loss in [model(x).sum() for x in torch.ones(8, 4)]:
    loss.backward()
    optimizer.step()
"""
GOOD = BAD.replace("loss.backward()", "accelerator.backward(loss)")


def _pre_commit() -> list[str]:
    exe = shutil.which("pre-commit", path=str(Path(sys.executable).parent)) or shutil.which("pre-commit")
    if exe is None:
        pytest.skip("pre-commit is not installed (pip install -e '.[test]')")
    return [exe]


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args], cwd=repo, check=True,
                   capture_output=True)


def _run_hook(repo: Path, hook: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*_pre_commit(), "run", hook, "--all-files"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=900)


def _snapshot_of_this_checkout(target: Path) -> str:
    """Commit the working tree (tracked and untracked, not ignored) into a new repository."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    _git(target, "init", "-q")
    _git(target, "add", "-A")
    _git(target, "commit", "-q", "-m", "snapshot")
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=target, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def user_repo(tmp_path):
    snapshot = tmp_path / "accel-lint"
    snapshot.mkdir()
    rev = _snapshot_of_this_checkout(snapshot)
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".pre-commit-config.yaml").write_text(
        f"repos:\n  - repo: {snapshot}\n    rev: {rev}\n    hooks:\n      - id: accel-lint\n      - id: accel-lint-fix\n"
    )
    _git(repo, "add", ".pre-commit-config.yaml")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"))
    env.pop("VIRTUAL_ENV", None)
    return repo, env


def test_hooks_fail_on_a_bad_file_pass_on_a_good_one_and_fix(user_repo):
    repo, env = user_repo
    (repo / "train.py").write_text(BAD)
    _git(repo, "add", "train.py")
    failed = _run_hook(repo, "accel-lint", env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "train.py:6:5: AL101" in failed.stdout

    fixing = _run_hook(repo, "accel-lint-fix", env)
    assert fixing.returncode == 1  # pre-commit fails a hook that modified files
    assert (repo / "train.py").read_text() == GOOD
    _git(repo, "add", "train.py")
    passed = _run_hook(repo, "accel-lint", env)
    assert passed.returncode == 0, passed.stdout + passed.stderr

    # the hook environment has neither torch nor accelerate
    envs = list((Path(env["PRE_COMMIT_HOME"])).glob("repo*/py_env-*/bin/python"))
    assert envs
    probe = subprocess.run([str(envs[0]), "-c", "import importlib.util as u; print(u.find_spec('torch'), "
                            "u.find_spec('accelerate'), u.find_spec('libcst') is not None)"],
                           capture_output=True, text=True)
    assert probe.stdout.split() == ["None", "None", "True"], probe.stdout + probe.stderr


def test_hook_passes_when_no_python_file_changed(user_repo):
    repo, env = user_repo
    (repo / "README.md").write_text("no python here\n")
    _git(repo, "add", "README.md")
    result = _run_hook(repo, "accel-lint", env)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hook_checks_notebooks(user_repo):
    repo, env = user_repo
    shutil.copy(REPO / "fixtures" / "notebooks" / "split_across_cells.ipynb", repo / "explore.ipynb")
    _git(repo, "add", "explore.ipynb")
    result = _run_hook(repo, "accel-lint", env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "explore.ipynb:cell 4:4:5: AL101" in result.stdout
