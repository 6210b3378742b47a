"""The backend matrix's fixtures and runner (bench/backend_matrix.py), checked on CPU.

The GPU runs themselves are not tests (CI has no GPU); here: every bad fixture has its rule's
finding and every good one has none, the outcome classification, and a real 2-rank gloo run of
two cells through the runner.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from accel_lint.config import Config
from accel_lint.engine import lint_source

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "fixtures" / "matrix"
SCRIPTS = sorted(MATRIX.glob("al*.py"))


def _runner():
    spec = importlib.util.spec_from_file_location("backend_matrix", ROOT / "bench" / "backend_matrix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _code(script: Path) -> str:
    return re.match(r"al(\d{3})_", script.name).group(1)


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.stem)
def test_each_bad_fixture_has_its_finding_and_each_good_one_none(script):
    codes = {d.code for d in lint_source(script.read_bytes(), str(script), Config()).diagnostics}
    rule = f"AL{_code(script)}"
    if script.stem.endswith("_bad"):
        assert rule in codes, codes
    else:
        assert not {c for c in codes if c.startswith(("AL3", "AL5"))}, codes


def test_every_rank_gated_and_unwrap_rule_has_a_bad_and_a_good_fixture():
    from accel_lint.rules import all_rules

    # every AL3xx/AL5xx rule, and AL206, whose harm (ranks training on different data) is measured here too
    rules = {r.code for r in all_rules() if r.code.startswith(("AL3", "AL5"))} | {"AL206"}
    bad = {f"AL{_code(p)}" for p in SCRIPTS if p.stem.endswith("_bad")}
    good = {f"AL{_code(p)}" for p in SCRIPTS if p.stem.endswith("_good")}
    assert rules == bad == good


def test_classification_reads_the_guard_the_exit_and_the_observations():
    runner = _runner()
    hang = {"findings": [{"kind": "divergence", "detected_after": 0.4, "title": "t", "rows": []}]}
    assert runner.classify(10, False, hang, {}, "")["outcome"] == "hang"
    raised = {"findings": [{"kind": "rank_exception", "title": "rank 1 raised ValueError: x", "rows": []}]}
    assert runner.classify(13, False, raised, {}, "") ["detail"] == "rank 1 raised ValueError: x"
    assert runner.classify(None, True, None, {}, "")["outcome"] == "hang"
    assert runner.classify(1, False, None, {}, "Traceback\nRuntimeError: boom\n")["detail"] == "RuntimeError: boom"
    one_rng = {"0": {"checkpoint_files": ["model.safetensors", "random_states_0.pkl"], "num_processes": 2}}
    assert runner.classify(0, False, None, one_rng, "")["outcome"] == "silent"
    saved = {"keys": ["module.a"], "expected_keys": ["a"], "shapes": {"module.a": [0]}, "expected_shapes": {"a": [4]},
             "value_types": ["Tensor"]}
    problems = runner.silent_problems({"0": {"saved": saved}})
    assert problems == ["saved keys carry a `module.` prefix", "saved tensors are empty"]
    assert runner.silent_problems({"0": {"replica": "a"}, "1": {"replica": "b"}}) == \
        ["the ranks' replicas hold different weights"]
    clean = {"0": {"replica": "a", "checkpoint_files": ["random_states_0.pkl", "random_states_1.pkl"],
                   "num_processes": 2}, "1": {"replica": "a"}}
    assert runner.classify(0, False, None, clean, "")["outcome"] == "ok"


def test_the_runner_on_two_gloo_ranks_and_one_process(tmp_path):
    out = tmp_path / "matrix.json"
    runner = _runner()
    code = runner.main(["--cpu", "--jobs", "2", "--cap", "120", "--out", str(out),
                        "--fixtures", "al302_save_state_bad,al304_trigger_misuse_good"])
    assert code == 0
    cells = {(c["fixture"], c["config"]): c for c in json.loads(out.read_text())["cells"]}
    saved = cells["al302_save_state_bad", "cpu_ddp"]
    assert saved["outcome"] == "silent" and "1 of 2 ranks' RNG states" in saved["detail"], saved
    assert cells["al302_save_state_bad", "cpu_single"]["outcome"] == "ok"
    # one process: check_trigger() is no collective and set_trigger() must not look dangling
    assert {cells["al304_trigger_misuse_good", c]["outcome"] for c in ("cpu_ddp", "cpu_single")} == {"ok"}, cells
    page = runner.render(json.loads(out.read_text()))
    assert "| `al302_save_state_bad` | **silent**: checkpoint holds 1 of 2 ranks' RNG states | ran fine |" in page


def test_the_new_rules_harm_measured_on_two_gloo_ranks(tmp_path):
    """AL307, AL505 and AL506 (all five shapes): the bad fixtures end with different weights on the two ranks, the good
    ones with the same. AL206: with an unseeded split the ranks hold out different samples and
    train on each other's held-out ones; with a seeded one they agree."""
    out = tmp_path / "matrix.json"
    code = _runner().main(["--cpu", "--configs", "cpu_ddp", "--jobs", "2", "--cap", "120", "--out", str(out),
                           "--fixtures", "al206,al307,al505,al506"])
    assert code == 0
    cells = {c["fixture"]: c for c in json.loads(out.read_text())["cells"]}
    for rule in ("al307_rank_gated_scheduler_step", "al505_prepare_result_discarded", "al506_train_on_unwrapped", "al506_forward_of_given_module",
                 "al506_container_of_parts", "al506_inner_module", "al506_trainer_keeps_bare"):
        bad, good = cells[f"{rule}_bad"], cells[f"{rule}_good"]
        assert bad["outcome"] == "silent" and "replicas hold different weights" in bad["detail"], bad
        assert good["outcome"] == "ok", good
    split = cells["al206_rank_divergent_data_bad"]
    assert split["outcome"] == "silent" and "the ranks split the data differently" in split["detail"], split
    assert cells["al206_rank_divergent_data_good"]["outcome"] == "ok"


def test_the_doc_is_rendered_from_the_committed_results():
    results = ROOT / "bench" / "results" / "backend_matrix.json"
    if not results.exists():
        pytest.skip("no GPU results committed yet")
    assert (ROOT / "docs" / "backends.md").read_text() == _runner().render(json.loads(results.read_text()))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


# AL303 and AL502 stay warnings whatever the backend: whether the rank-local condition really
# differs between ranks depends on the data, which the analysis cannot know.
_DATA_DEPENDENT = {"AL303", "AL502"}


def test_config_dependent_severities_agree_with_the_measured_matrix():
    """A bug that hung on a backend (also without the guard) is an error under that backend's
    config; one that ran fine is not an error; one that crashed is at least a warning."""
    from accel_lint import accelerate_config

    results = ROOT / "bench" / "results" / "backend_matrix.json"
    if not results.exists():
        pytest.skip("no GPU results committed yet")
    truth: dict[tuple[str, str], str] = {}
    for cell in json.loads(results.read_text())["cells"]:  # a run without the guard has the last word
        key = (cell["fixture"], cell["config"])
        if cell.get("mode") == "plain" or key not in truth:
            truth[key] = cell["outcome"]
    wrong = []
    for (fixture, config), outcome in sorted(truth.items()):
        if not fixture.endswith("_bad"):
            continue
        script = MATRIX / f"{fixture}.py"
        rule = f"AL{_code(script)}"
        backend = accelerate_config.load(MATRIX / "configs" / f"{config}.yaml")
        severities = {accelerate_config.severity_under(d, backend)
                      for d in lint_source(script.read_bytes(), str(script), Config()).diagnostics if d.code == rule}
        if (outcome == "hang" and rule not in _DATA_DEPENDENT and severities != {"error"}) or \
                (outcome == "ok" and "error" in severities) or (outcome == "crash" and severities <= {"info"}):
            wrong.append((fixture, config, outcome, sorted(severities)))
    assert wrong == []
