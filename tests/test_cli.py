"""The command line: exit codes, selection, formats, configuration, suppressions, bad inputs."""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest
from click.testing import CliRunner

from accel_lint import __version__
from accel_lint.cli import main
from conftest import FIXTURES, run_cli

BAD = """\
import torch; from accelerate import Accelerator; from transformers import AutoModelForSequenceClassification
accelerator = Accelerator(); model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
model, optimizer, dl = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4), dl)
for batch in dl:
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
if accelerator.is_main_process:
    accelerator.wait_for_everyone()
"""


def invoke(*args, cwd=None):
    runner = CliRunner()
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        return runner.invoke(main, list(args), catch_exceptions=False)
    finally:
        os.chdir(old)


def test_text_output_lines_summary_and_exit_code(write, tmp_path):
    path = write("train.py", BAD)
    result = invoke(str(path))
    lines = result.output.strip().splitlines()
    assert lines[0].startswith(f"{path}:6:5: AL101 [*] `loss.backward()` bypasses `accelerator.backward()`")
    assert lines[1].startswith(f"{path}:9:5: AL301 `accelerator.wait_for_everyone()` runs only where")
    assert "(line 8)" in lines[1] and "hangs" in lines[1]
    assert lines[-2] == "Found 2 problems (2 errors) in 1 file."
    assert lines[-1] == "[*] 1 fixable with `--fix`."
    assert result.exit_code == 1


def test_clean_file_exits_zero(write):
    path = write("ok.py", "from accelerate import Accelerator\naccelerator = Accelerator()\n")
    result = invoke(str(path))
    assert result.exit_code == 0
    assert result.output.strip() == "All checks passed."


def test_exit_zero_quiet_and_statistics(write):
    path = write("train.py", BAD)
    assert invoke(str(path), "--exit-zero").exit_code == 0
    quiet = invoke(str(path), "-q")
    assert "Found" not in quiet.output and quiet.output.count("\n") == 2
    stats = invoke(str(path), "--statistics", "-q")
    assert "    1  AL101  raw-backward" in stats.output and "    1  AL301  rank-gated-collective" in stats.output


@pytest.mark.parametrize(
    "flags,codes",
    [
        (["--select", "AL3"], ["AL301"]),
        (["--select", "AL101"], ["AL101"]),
        (["--ignore", "AL1"], ["AL301"]),
        (["--select", "AL3", "--extend-select", "AL101"], ["AL101", "AL301"]),
        (["--select", "AL1,AL3", "--ignore", "AL301"], ["AL101"]),
    ],
)
def test_select_ignore_by_code_and_prefix(write, flags, codes):
    path = write("train.py", BAD)
    result = invoke(str(path), "--output-format", "json", *flags)
    assert [f["code"] for f in json.loads(result.output)] == codes


def test_json_fields(write):
    path = write("train.py", BAD)
    findings = json.loads(invoke(str(path), "--output-format", "json").output)
    first = findings[0]
    assert set(first) == {"path", "line", "column", "end_line", "end_column", "code", "name", "severity", "message",
                          "fix", "url", "docs", "evidence"}
    assert first["fix"] == "safe" and first["docs"] == "docs/rules/AL101.md" and first["url"].endswith("/rules/AL101.html")
    assert (first["line"], first["column"], first["end_line"], first["end_column"]) == (6, 5, 6, 20)
    assert (first["code"], first["name"], first["severity"]) == ("AL101", "raw-backward", "error")


def test_usage_errors_exit_2(write, tmp_path):
    path = write("train.py", BAD)
    assert invoke(str(path), "--select", "XYZ").exit_code == 2
    assert invoke(str(path), "--select", "AL9").exit_code == 2
    missing = invoke(str(tmp_path / "nope.py"))
    assert missing.exit_code == 2
    assert "nope.py: no such file or directory" in missing.output


def test_version_list_rules_explain():
    assert __version__ in invoke("--version").output
    listing = invoke("--list-rules").output
    for code in ("AL001", "AL101", "AL201", "AL301", "AL302", "AL401", "AL501"):
        assert code in listing
    docs = invoke("--explain", "AL301").output
    assert docs.startswith("# AL301 rank-gated-collective (error)")
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert section in docs
    assert invoke("--explain", "rank-gated-collective").output == docs
    assert invoke("--explain", "AL999").exit_code == 2


def test_noqa_bare_code_and_name(write):
    text = BAD.replace("loss.backward()", "loss.backward()  # noqa: AL101").replace(
        "accelerator.wait_for_everyone()", "accelerator.wait_for_everyone()  # noqa: rank-gated-collective"
    )
    assert invoke(str(write("a.py", text))).exit_code == 0
    other_code = BAD.replace("loss.backward()", "loss.backward()  # noqa: AL301")
    assert "AL101" in invoke(str(write("b.py", other_code))).output
    bare = BAD.replace("loss.backward()", "loss.backward()  # noqa")
    assert "AL101" not in invoke(str(write("c.py", bare))).output


def test_directory_walk_default_excludes_and_globs(write, tmp_path):
    write("pkg/train.py", BAD)
    write("pkg/.venv/lib/site.py", BAD)
    write("pkg/build/gen.py", BAD)
    write("pkg/__pycache__/x.py", BAD)
    write("pkg/legacy/old.py", BAD)
    write("pkg/notes.txt", BAD)
    result = json.loads(invoke(str(tmp_path / "pkg"), "--output-format", "json").output)
    assert sorted({os.path.relpath(f["path"], tmp_path) for f in result}) == ["pkg/legacy/old.py", "pkg/train.py"]
    result = json.loads(invoke(str(tmp_path / "pkg"), "--output-format", "json", "--extend-exclude", "legacy").output)
    assert {os.path.relpath(f["path"], tmp_path) for f in result} == {"pkg/train.py"}
    result = json.loads(invoke(str(tmp_path / "pkg"), "--output-format", "json", "--exclude", "train.py").output)
    paths = {os.path.relpath(f["path"], tmp_path) for f in result}
    assert "pkg/.venv/lib/site.py" in paths and "pkg/train.py" not in paths


def test_default_path_is_current_directory(write, tmp_path):
    write("train.py", BAD)
    result = invoke("--output-format", "json", cwd=tmp_path)
    assert [f["code"] for f in json.loads(result.output)] == ["AL101", "AL301"]


def test_pyproject_configuration_and_cli_precedence(write, tmp_path):
    write("src/train.py", BAD)
    write("src/vendored/copy.py", BAD)
    write("tests/test_x.py", BAD)
    write(
        "pyproject.toml",
        '[tool.accel-lint]\nignore = ["AL101"]\nextend-exclude = ["vendored"]\n'
        '[tool.accel-lint.per-file-ignores]\n"tests/*" = ["AL3"]\n',
    )
    result = json.loads(invoke("--output-format", "json", cwd=tmp_path).output)
    assert [(f["path"], f["code"]) for f in result] == [("src/train.py", "AL301")]
    # CLI flags win: --select starts a new layer (the configured ignore no longer applies), as in ruff
    result = json.loads(invoke("--output-format", "json", "--select", "AL1", cwd=tmp_path).output)
    assert [(f["path"], f["code"]) for f in result] == [("src/train.py", "AL101"), ("tests/test_x.py", "AL101")]
    result = json.loads(invoke("--output-format", "json", "--ignore", "AL3", cwd=tmp_path).output)
    assert result == []
    result = json.loads(invoke("--output-format", "json", "--select", "AL101", "src", cwd=tmp_path).output)
    assert [f["code"] for f in result] == ["AL101"]


def test_bad_pyproject_is_a_usage_error(write, tmp_path):
    write("train.py", BAD)
    write("pyproject.toml", "[tool.accel-lint]\nselekt = ['AL1']\n")
    result = invoke(cwd=tmp_path)
    assert result.exit_code == 2
    assert "unknown [tool.accel-lint] keys: selekt" in result.output


def test_syntax_error_is_AL001_and_the_run_continues(write, tmp_path):
    write("a_broken.py", "from accelerate import Accelerator\ndef train(:\n    pass\n")
    write("b_train.py", BAD)
    findings = json.loads(invoke(str(tmp_path), "--output-format", "json").output)
    assert [(os.path.basename(f["path"]), f["line"], f["code"]) for f in findings] == [
        ("a_broken.py", 2, "AL001"),
        ("b_train.py", 6, "AL101"),
        ("b_train.py", 9, "AL301"),
    ]


def test_unreadable_binary_and_undecodable_files_are_reported_and_skipped(write, tmp_path):
    write("binary.py", b"accelerator\x00\x01\x02")
    write("latin.py", "accelerator = 1  # caf\xe9\n".encode("latin-1"))
    write("cookie.py", "# -*- coding: latin-1 -*-\naccelerator = 'caf\xe9'\n".encode("latin-1"))
    write("z_train.py", BAD)
    locked = write("locked.py", BAD)
    locked.chmod(0)
    try:
        result = invoke(str(tmp_path))
    finally:
        locked.chmod(stat.S_IRUSR | stat.S_IWUSR)
    out = result.output
    assert "binary.py: binary file (contains NUL bytes); skipped" in out
    assert "latin.py: cannot decode" in out
    assert "cookie.py" not in out  # a coding cookie makes it readable
    if os.geteuid() != 0:  # root reads anything
        assert "locked.py: cannot read: Permission denied; skipped" in out
    assert "z_train.py:6:5: AL101" in out
    assert result.exit_code == 2


def test_internal_error_names_file_and_rule_and_others_continue(write, tmp_path, monkeypatch):
    from accel_lint.rules.AL501_missing_unwrap import MissingUnwrap

    def boom(self, model):
        raise RuntimeError("kaboom")
        yield

    monkeypatch.setattr(MissingUnwrap, "check", boom)
    path = write("train.py", BAD)
    result = invoke(str(path))
    assert f"{path}: internal error in AL501: RuntimeError: kaboom" in result.output
    assert "AL101" in result.output and "AL301" in result.output
    assert "Traceback" not in result.output
    assert result.exit_code == 2
    verbose = invoke(str(path), "--verbose")
    assert "Traceback (most recent call last)" in verbose.output and 'raise RuntimeError("kaboom")' in verbose.output
    assert verbose.exit_code == 2


def test_python_dash_m_and_console_script(write, tmp_path):
    path = write("train.py", BAD)
    proc = run_cli(str(path))
    assert proc.returncode == 1 and "AL101" in proc.stdout
    script = os.path.join(os.path.dirname(sys.executable), "accel-lint")
    if os.path.exists(script):
        import subprocess

        proc = subprocess.run([script, str(FIXTURES / "al301_rank_gated_collective_good.py")], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_linter_never_imports_torch_or_accelerate(write):
    import subprocess

    path = write("train.py", BAD)
    code = (
        "import sys; from accel_lint.cli import main\n"
        "try:\n    main([%r])\nexcept SystemExit:\n    pass\n"
        "assert 'torch' not in sys.modules and 'accelerate' not in sys.modules, 'heavy import'\n" % str(path)
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_deeply_nested_file_is_reported_and_skipped(write, tmp_path):
    # 3,000 implicitly concatenated strings nest 3,000 levels deep in libcst's tree: the
    # model walks them without recursion, but resolving the position of a finding in that
    # statement recurses.
    strings = " ".join(f'"part{i}"' for i in range(3000))
    write("a_generated.py", BAD.replace("loss.backward()", f"loss.backward(({strings}))"))
    write("b_train.py", BAD)
    result = invoke(str(tmp_path))
    assert "a_generated.py: too deeply nested to analyse (recursion limit); skipped" in result.output
    assert "b_train.py:6:5: AL101" in result.output
    assert result.exit_code == 2


def test_a_deep_statement_does_not_stop_the_findings_of_the_others(write, tmp_path):
    # positions are resolved in the statement of each finding, never over the whole file
    strings = " ".join(f'"part{i}"' for i in range(3000))
    write("generated.py", BAD.replace("for batch", f"TEXT = ({strings})\nfor batch"))
    result = invoke(str(tmp_path))
    assert "generated.py:7:5: AL101" in result.output
    assert "generated.py:10:5: AL301" in result.output
    assert "too deeply nested" not in result.output
    assert result.exit_code == 1


def test_deep_file_without_findings_is_analysed(write, tmp_path):
    strings = " ".join(f'"part{i}"' for i in range(3000))
    write("generated.py", f"accelerator = None\nTEXT = ({strings})\n")
    result = invoke(str(tmp_path))
    assert result.output == "All checks passed.\n"
    assert result.exit_code == 0


def test_valid_file_the_parser_cannot_handle_is_not_a_syntax_error(write, tmp_path):
    strings = " ".join(f'"part{i}"' for i in range(10000))  # past libcst's parser nesting limit
    write("generated.py", f"accelerator = None\nTEXT = ({strings})\n")
    result = invoke(str(tmp_path))
    assert "AL001" not in result.output
    assert "generated.py: valid Python that the parser cannot handle" in result.output
    assert result.exit_code == 2


def test_parallel_run_gives_the_same_output_as_a_single_process(write, tmp_path):
    for i in range(12):
        write(f"pkg/train_{i:02d}.py", BAD)
    write("pkg/broken.py", "from accelerate import Accelerator\ndef f(:\n")
    write("pkg/binary.py", b"accelerator\x00")
    one = invoke(str(tmp_path / "pkg"), "--jobs", "1")
    two = invoke(str(tmp_path / "pkg"), "--jobs", "2")
    assert one.output == two.output and one.exit_code == two.exit_code == 2
    assert one.output.count("AL101") == 12 and "AL001" in one.output
    assert invoke(str(tmp_path / "pkg"), "--jobs", "0").exit_code == 2


def _stderr_through_a_terminal(args, cwd, env):
    import pty
    import subprocess

    leader, follower = pty.openpty()
    proc = subprocess.run([sys.executable, "-m", "accel_lint", *args], cwd=cwd, stdout=subprocess.PIPE,
                          stderr=follower, env=env, timeout=120)
    os.close(follower)
    chunks = []
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(leader)
    return proc, b"".join(chunks).decode(errors="replace")


def test_progress_on_a_terminal_only_and_never_in_ci(tmp_path):
    for i in range(250):
        (tmp_path / f"m{i:03d}.py").write_text("x = 1\n")
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    proc, err = _stderr_through_a_terminal([str(tmp_path), "--jobs", "1"], tmp_path, env)
    assert proc.returncode == 0 and "accel-lint: " in err and "/250 files" in err
    proc, err = _stderr_through_a_terminal([str(tmp_path), "--jobs", "1"], tmp_path, {**env, "CI": "true"})
    assert "files" not in err
    piped = run_cli(str(tmp_path), "--jobs", "1")
    assert "files" not in piped.stderr


def test_permission_denied_is_reported_even_when_running_as_root(write, tmp_path, monkeypatch):
    # chmod 0 does not stop root (CI runs as root): make the read itself fail instead
    import pathlib

    locked = write("locked.py", BAD)
    write("z_train.py", BAD)
    real_read = pathlib.Path.read_bytes

    def read_bytes(self):
        if self.name == "locked.py":
            raise PermissionError(13, "Permission denied", str(self))
        return real_read(self)

    monkeypatch.setattr(pathlib.Path, "read_bytes", read_bytes)
    result = invoke(str(tmp_path), "-j", "1")
    assert f"{locked}: cannot read: Permission denied; skipped" in result.output
    assert "z_train.py:6:5: AL101" in result.output
    assert result.exit_code == 2


def test_collectives_in_another_module_of_the_tree_are_seen_at_the_guarded_call(tmp_path):
    import shutil

    from conftest import REPO

    shutil.copytree(REPO / "fixtures" / "project", tmp_path / "project")
    for args in ((), ("--jobs", "1")):
        found = json.loads(run_cli(str(tmp_path / "project"), "--no-cache", "--output-format", "json", *args).stdout)
        assert [(os.path.basename(f["path"]), f["line"], f["code"]) for f in found] == \
            [("engine.py", 19, "AL401"), ("engine.py", 19, "AL501"), ("train.py", 13, "AL301"), ("train.py", 14, "AL302")]
        assert "`evaluate() → accelerator.gather_for_metrics()`" in found[2]["message"]
    # the summaries survive the cache: a warm run gives the same findings
    cache = tmp_path / "cache"
    first = run_cli(str(tmp_path / "project"), "--cache-dir", str(cache), "--output-format", "concise").stdout
    second = run_cli(str(tmp_path / "project"), "--cache-dir", str(cache), "--output-format", "concise").stdout
    assert first == second and "AL302" in second
    # a helper that stops performing the collective takes its callers' findings with it
    (tmp_path / "project" / "pkg" / "engine.py").write_text("def evaluate(a, m, b):\n    return 1\n"
                                                            "def save_everything(a, p):\n    pass\n"
                                                            "def plain_helper(x):\n    return x\n"
                                                            "def export_weights(m, p):\n    pass\n")
    third = run_cli(str(tmp_path / "project"), "--cache-dir", str(cache), "--output-format", "concise").stdout
    assert "AL301" not in third and "AL302" not in third and "AL501" not in third
    # a caller that stops passing the prepared model takes the helper's finding with it
    train = tmp_path / "project" / "pkg" / "train.py"
    shutil.copy(REPO / "fixtures" / "project" / "pkg" / "engine.py", tmp_path / "project" / "pkg" / "engine.py")
    train.write_text(train.read_text().replace('export_weights(model, "weights.pt")', 'export_weights(None, "w.pt")'))
    fourth = run_cli(str(tmp_path / "project"), "--cache-dir", str(cache), "--output-format", "concise").stdout
    assert "AL501" not in fourth and "AL301" in fourth


def test_a_helper_in_another_module_that_expects_the_wrapper_is_not_flagged(tmp_path):
    # trl/models/utils.py add_hooks(model: "DeepSpeedEngine") reads model.optimizer on purpose
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils.py").write_text('def add_hooks(model: "DeepSpeedEngine") -> None:\n'
                                  '    return model.optimizer.parameter_offload\n'
                                  'def describe(model):\n    return model.optimizer\n')
    (pkg / "trainer.py").write_text("from accelerate import Accelerator\nfrom transformers import AutoModelForCausalLM\n"
                                    "from .utils import add_hooks, describe\naccelerator = Accelerator()\n"
                                    "model = accelerator.prepare(AutoModelForCausalLM.from_pretrained('gpt2'))\n"
                                    "add_hooks(model)\ndescribe(model)\n")
    found = json.loads(run_cli(str(tmp_path), "--no-cache", "--output-format", "json").stdout)
    assert [(os.path.basename(f["path"]), f["line"], f["code"]) for f in found] == [("utils.py", 4, "AL501")]
