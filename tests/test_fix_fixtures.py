"""Fixed programs run for real: every fixture under ``fixtures/fix/`` is a small training
script with a bug a rule fixes. Each runs on 2 gloo ranks before and after
``--fix --unsafe-fixes``; both runs must exit 0, and the fixed file no longer has the
finding (or the fix refused with its notice). Where the fix changes what the run does (which
ranks save RNG state, which ranks log), the run's output shows it.

The runs share one ``torchrun`` launch (``fix_batch_runner.py``): its two ranks run every "before"
copy, then every "after" copy, one after another, each as ``fixtures/fix/_run.py`` runs one in a
fresh process; starting ranks and importing torch costs ~20 s on 2 cores, a fixture's run ~0.1 s.
Each test asserts on its own script's recorded exit status and stderr."""

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


RUNNER = Path(__file__).resolve().parent / "fix_batch_runner.py"
UNSAFE_GATHER = "al203_per_rank_loss.py"  # test_the_unsafe_gather_fix_... runs it with --unsafe-fixes


def lint_codes(workdir: Path, script: str) -> list[str]:
    proc = run_cli("--no-cache", "--output-format", "json", script, cwd=workdir)
    return [d["code"] for d in json.loads(proc.stdout)]


class Run:
    """One fixture's run on 2 gloo ranks inside the module's batch launch (``fix_batch_runner.py``:
    the same two processes run every fixture in turn, each as ``fixtures/fix/_run.py`` runs one)."""

    def __init__(self, workdir: Path, script: str, out: Path, record: Path):
        self.workdir, self.script, self.out, self.record = workdir, script, out, record
        self.launch: subprocess.CompletedProcess | str | None = None

    def job(self) -> dict:
        return {"dir": str(self.workdir), "script": self.script, "out": str(self.out), "record": str(self.record)}

    def assert_exited_0(self) -> None:
        """Both ranks ran the script to the end with exit status 0; else their stderr."""
        report, ok = [], True
        for rank in (0, 1):
            result = Path(f"{self.record}-rank{rank}.json")
            stderr = Path(f"{self.record}-rank{rank}.stderr")
            tail = stderr.read_text(errors="replace")[-3000:] if stderr.exists() else "(never started)"
            status = json.loads(result.read_text())["status"] if result.exists() else "none: the run never finished"
            ok = ok and status == 0
            report.append(f"--- rank {rank}: exit status {status}; stderr:\n{tail}")
        if not ok and not all(Path(f"{self.record}-rank{rank}.json").exists() for rank in (0, 1)):
            launch = self.launch
            said = launch if isinstance(launch, str) else f"exit status {launch.returncode}\n{launch.stderr[-3000:]}"
            report.append(f"--- the batch launch: {said}")
        assert ok, "\n".join(report)


class Prepared:
    """A fixture's copy as it is (run before the fix) and a copy with the fix applied (run after),
    with the linter's answers on both."""

    def __init__(self, root: Path, script: str, unsafe: bool = False):
        self.script, self.error = script, None
        self.what, self.code = expectation(script)
        if unsafe:
            self.what = "fixes"
        base = root / (script[:-3] + ("-unsafe" if unsafe else ""))
        for name in ("before", "after"):
            shutil.copytree(FIXTURES, base / name, ignore=shutil.ignore_patterns("__pycache__"))
        self.before = Run(base / "before", script, base / "out-before", base / "run-before")
        self.after = Run(base / "after", script, base / "out-after", base / "run-after")

    def lint_and_fix(self) -> None:
        """Lint, fix, lint again; an exception is kept for the test to raise, so that a broken CLI
        call fails only this fixture's test."""
        try:
            self._lint_and_fix()
        except Exception as exc:  # noqa: BLE001 - re-raised by the test
            self.error = exc

    def _lint_and_fix(self) -> None:
        self.codes_before = lint_codes(self.before.workdir, self.script)
        unsafe = () if self.what == "safe-fixes" else ("--unsafe-fixes",)
        self.fix = run_cli("--no-cache", "--fix", *unsafe, self.script, cwd=self.after.workdir)
        if self.what == "safe-fixes":
            self.left = run_cli("--no-cache", "--output-format", "json", self.script, cwd=self.after.workdir)
        elif self.what == "fixes":
            self.codes_after = lint_codes(self.after.workdir, self.script)

    @property
    def fixed_text(self) -> str:
        return (self.after.workdir / self.script).read_text()


@pytest.fixture(scope="module")
def fix_runs(request, tmp_path_factory) -> dict[str, Prepared]:
    """Every fixture this session's tests of the module need, linted and fixed (the CLI calls two
    at a time), then run in one 2-rank launch: all the "before" copies, then all the "after"
    ones. A failed run fails only its own test, with its ranks' stderr."""
    from concurrent.futures import ThreadPoolExecutor

    module = request.node.module
    wanted, unsafe = set(), False
    for item in request.session.items:
        if getattr(item, "module", None) is module:
            if item.originalname == "test_the_fixture_runs_before_and_after_its_fix":
                wanted.add(item.callspec.params["script"])
            unsafe = unsafe or item.originalname == "test_the_unsafe_gather_fix_on_a_per_rank_scalar_changes_the_metric"
    root = tmp_path_factory.mktemp("fix")
    prepared = {script: Prepared(root, script) for script in sorted(wanted)}
    if unsafe:
        prepared["unsafe-gather"] = Prepared(root, UNSAFE_GATHER, unsafe=True)
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(Prepared.lint_and_fix, prepared.values()))
    runs = [p.before for p in prepared.values()] + [p.after for p in prepared.values()]
    (root / "jobs.json").write_text(json.dumps([run.job() for run in runs]))
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    try:
        launch = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(RUNNER),
             str(root / "jobs.json")],
            cwd=root, env=env, capture_output=True, text=True, timeout=240 + 30 * len(runs))
    except subprocess.TimeoutExpired as exc:
        launch = f"timed out after {exc.timeout} s"
    for run in runs:
        run.launch = launch
    return prepared


def test_every_rule_with_a_fix_has_a_runnable_fixture():
    from accel_lint.rules import all_rules

    fixed = {expectation(name)[1] for name in SCRIPTS}
    with_fixes = {rule.code for rule in all_rules() if "## Fix safety" in (rule.__doc__ or "")}
    assert with_fixes <= fixed, f"no runnable fix fixture for {sorted(with_fixes - fixed)}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_fixture_runs_before_and_after_its_fix(fix_runs: dict[str, Prepared], script: str):
    prepared = fix_runs[script]
    if prepared.error is not None:
        raise prepared.error
    what, code, fix = prepared.what, prepared.code, prepared.fix
    assert code in prepared.codes_before
    prepared.before.assert_exited_0()

    if what == "safe-fixes":
        assert prepared.fixed_text != (FIXTURES / script).read_text()
        assert {(d["code"], d["fix"]) for d in json.loads(prepared.left.stdout)} == {(code, "unsafe")}, fix.stderr
    elif what == "fixes":
        assert code not in prepared.codes_after, fix.stderr
        assert prepared.fixed_text != (FIXTURES / script).read_text()
    else:
        assert f"{code} not fixed:" in fix.stderr and "by hand" in fix.stderr
        assert prepared.fixed_text == (FIXTURES / script).read_text()
    compile(prepared.fixed_text, script, "exec")

    prepared.after.assert_exited_0()
    check = BEHAVIOUR.get(script)
    if check is not None:
        check(prepared.before.out, prepared.after.out)


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


def test_the_unsafe_gather_fix_on_a_per_rank_scalar_changes_the_metric(fix_runs: dict[str, Prepared]):
    """Why AL203's fix is unsafe on a value that is not per sample: with `--unsafe-fixes` the
    per-rank loss is gathered by `gather_for_metrics`, which cuts the last round to its one real
    sample and so drops rank 1's loss of that batch."""
    prepared = fix_runs["unsafe-gather"]
    if prepared.error is not None:
        raise prepared.error
    prepared.before.assert_exited_0()
    assert prepared.fixed_text.count("accelerator.gather_for_metrics(") == 2
    prepared.after.assert_exited_0()
    assert _metrics(prepared.after.out)["mean_loss"] != pytest.approx(_metrics(prepared.before.out)["mean_loss"])


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
