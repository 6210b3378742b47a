"""Notebooks: code cells as one program, `cell N:line:col` positions, magics, suppressions in
cells, fixes written back into the JSON with everything else byte for byte."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from accel_lint import notebooks
from conftest import REPO, json_findings, run_cli

NOTEBOOKS = REPO / "fixtures" / "notebooks"


def expected(path):
    """(cell, line, code) of every `# expect: CODE` comment in the notebook's code cells."""
    data = json.loads(path.read_text())
    out = []
    for index, cell in enumerate(data["cells"], 1):
        if cell["cell_type"] != "code":
            continue
        for number, line in enumerate("".join(cell["source"]).splitlines(), 1):
            m = re.search(r"#\s*expect:\s*(AL\d+)", line)
            if m:
                out.append((index, number, m.group(1)))
    return sorted(out)


@pytest.mark.parametrize("name", ["train_bugs.ipynb", "split_across_cells.ipynb", "train_clean.ipynb",
                                  "course_lesson.ipynb", "single_process_device.ipynb"])
def test_notebook_findings_are_on_the_marked_cell_lines(name):
    code, findings = json_findings(str(NOTEBOOKS / name), "--no-cache")
    assert sorted((f["cell"], f["line"], f["code"]) for f in findings) == expected(NOTEBOOKS / name)
    assert code == (1 if findings else 0)


def _launched(data: dict) -> dict:
    """The notebook with a cell defining ``train`` and a last cell that launches it: ``train``
    is then a program of several processes, while the top-level cells still run once."""
    data["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                          "source": ["def train():\n", "    if accelerator.is_main_process:\n",
                                     "        accelerator.wait_for_everyone()\n"]})
    data["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                          "source": ["from accelerate import notebook_launcher\n",
                                     "notebook_launcher(train, num_processes=2)"]})
    return data


def test_text_output_names_the_cell_and_messages_name_other_cells(tmp_path):
    path = tmp_path / "split_across_cells.ipynb"
    path.write_text(json.dumps(_launched(json.loads((NOTEBOOKS / "split_across_cells.ipynb").read_text())), indent=1))
    proc = run_cli(str(path), "--no-cache")
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{path}:cell 4:4:5: AL101 ")
    assert ":cell 7:3:9: AL301 `accelerator.wait_for_everyone()` runs only where `accelerator.is_main_process` " \
           "(line 2) is true" in proc.stdout
    assert proc.stderr == ""  # no notice about the cell separators or the masked magics


def test_a_notebook_that_starts_no_processes_keeps_only_the_one_process_findings(tmp_path):
    """The kernel is one process: a barrier under a rank guard hangs nothing there, while the
    raw backward still skips accumulation and fp16 scaling. The top-level cells stay one process
    when a launcher is added; the function it launches is a program of several processes, and
    its guarded barrier is reported."""
    code, findings = json_findings(str(NOTEBOOKS / "split_across_cells.ipynb"), "--no-cache")
    assert [(f["cell"], f["line"], f["code"]) for f in findings] == [(4, 4, "AL101")]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(_launched(json.loads((NOTEBOOKS / "split_across_cells.ipynb").read_text())), indent=1))
    code, findings = json_findings(str(path), "--no-cache")
    assert [(f["cell"], f["line"], f["code"]) for f in findings] == [(4, 4, "AL101"), (7, 3, "AL301")]


def test_a_folder_of_notebooks_is_discovered_and_include_patterns_extend_it(tmp_path):
    shutil.copy(NOTEBOOKS / "split_across_cells.ipynb", tmp_path / "nb.ipynb")
    (tmp_path / "script.pyw").write_text((REPO / "fixtures" / "lint" / "al101_raw_backward_bad.py").read_text())
    proc = run_cli(str(tmp_path), "--no-cache", "--output-format", "concise")
    assert "nb.ipynb:cell 4:4:5: AL101" in proc.stdout and "script.pyw" not in proc.stdout
    proc = run_cli(str(tmp_path), "--no-cache", "--output-format", "concise", "--extend-include", "*.pyw")
    assert "script.pyw" in proc.stdout


def test_magics_are_masked_without_shifting_lines():
    nb = notebooks.read((NOTEBOOKS / "train_bugs.ipynb").read_text())
    module_lines = nb.module.splitlines()
    assert module_lines[0] == "pass" and module_lines[1] == "pass"  # !pip install, %matplotlib inline
    for cell in nb.cells:
        for i, line in enumerate(cell.lines):
            at = nb.line_map.index((cell.index, i + 1))
            assert module_lines[at] == (line if i not in cell.masked else line[: len(line) - len(line.lstrip())] + "pass")
    source = "\n".join(module_lines)
    assert "model?" not in source and "%%time" not in source and "nvidia-smi" not in nb.module


def test_suppression_comments_work_inside_cells_and_unused_ones_are_reported(tmp_path):
    data = _launched(json.loads((NOTEBOOKS / "split_across_cells.ipynb").read_text()))
    data["cells"][3]["source"][3] = "    loss.backward()  # noqa: AL101\n"
    data["cells"][0]["source"][1] = "accelerator = Accelerator()  # noqa: AL301\n"
    (tmp_path / "nb.ipynb").write_text(json.dumps(data, indent=1))
    code, findings = json_findings(str(tmp_path / "nb.ipynb"), "--no-cache")
    assert [(f["cell"], f["line"], f["code"]) for f in findings] == [(1, 2, "AL002"), (7, 3, "AL301")]


def test_sarif_and_github_point_at_the_notebook_files_own_lines(tmp_path):
    path = NOTEBOOKS / "split_across_cells.ipynb"
    text_lines = path.read_text().splitlines()
    log = json.loads(run_cli(str(path), "--no-cache", "--output-format", "sarif").stdout)
    result = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "AL101")
    region = result["locations"][0]["physicalLocation"]["region"]
    assert "loss.backward()" in text_lines[region["startLine"] - 1]
    assert result["properties"] == {"cell": 4, "cellLine": 4, "cellColumn": 5}
    github = run_cli(str(path), "--no-cache", "--output-format", "github").stdout.splitlines()[0]
    assert f"line={region['startLine']}," in github and "title=AL101 raw-backward (cell 4%2C line 4)" in github


def test_fix_rewrites_only_the_changed_cells_and_keeps_the_rest_byte_for_byte(tmp_path):
    original_text = (NOTEBOOKS / "train_bugs.ipynb").read_text()
    path = tmp_path / "train_bugs.ipynb"
    path.write_text(original_text)
    proc = run_cli(str(path), "--fix", "--unsafe-fixes", "--no-cache")
    assert "Fixed 3 problems, 1 remaining." in proc.stderr, proc.stderr
    fixed_text = path.read_text()
    before, after = json.loads(original_text), json.loads(fixed_text)
    code = "".join(after["cells"][4]["source"])
    assert "accelerator.backward(loss)" in code and "gather_for_metrics" in code
    assert "        accelerator.save_state(\"checkpoints\")" in code and "is_main_process" not in code
    # everything but cell 5's source is unchanged, as data and as text
    for key in ("metadata", "nbformat", "nbformat_minor"):
        assert after[key] == before[key]
    for i, (old, new) in enumerate(zip(before["cells"], after["cells"])):
        if i != 4:
            assert old == new
        else:
            assert {k: v for k, v in old.items() if k != "source"} == {k: v for k, v in new.items() if k != "source"}
    start, end, _ = notebooks.source_spans(original_text)[5]
    new_start, new_end, _ = notebooks.source_spans(fixed_text)[5]
    assert fixed_text[:new_start] == original_text[:start]
    assert fixed_text[new_end:] == original_text[end:]
    # a second --fix changes nothing
    again = run_cli(str(path), "--fix", "--unsafe-fixes", "--no-cache")
    assert path.read_text() == fixed_text and "Fixed" not in again.stderr


def test_fix_keeps_magics_of_the_cell_it_edits(tmp_path):
    path = tmp_path / "nb.ipynb"
    shutil.copy(NOTEBOOKS / "split_across_cells.ipynb", path)
    run_cli(str(path), "--fix", "--no-cache")
    cell = json.loads(path.read_text())["cells"][3]["source"]
    assert cell[0] == "%%capture\n" and cell[3] == "    accelerator.backward(loss)  # expect: AL101\n"
    assert json.loads(path.read_text())["cells"][4]["source"][0] == "%%bash\n"


def test_fix_refuses_what_it_cannot_write_back_exactly(tmp_path):
    data = json.loads((NOTEBOOKS / "split_across_cells.ipynb").read_text())
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(data))  # one line: still fixable (inline arrays)
    run_cli(str(path), "--fix", "--no-cache")
    assert "accelerator.backward(loss)" in "".join(json.loads(path.read_text())["cells"][3]["source"])
    # a cell with a magic whose fix would change its line count is left alone, with a notice
    data["cells"][3]["source"] = ["%time x = 1\n", "def train():\n", "    if accelerator.is_main_process:\n",
                                  "        accelerator.save_state('ckpt')\n"]
    data["cells"].append({"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                          "source": ["notebook_launcher(train, num_processes=2)"]})
    path.write_text(json.dumps(data, indent=1))
    proc = run_cli(str(path), "--fix", "--unsafe-fixes", "--no-cache")
    assert "cell 4: not fixed: the fix moves lines in a cell with IPython magics" in proc.stderr
    assert json.loads(path.read_text())["cells"][3]["source"] == data["cells"][3]["source"]


def test_not_a_notebook_is_a_clear_error(tmp_path):
    (tmp_path / "bad.ipynb").write_text("{not json")
    (tmp_path / "r.ipynb").write_text(json.dumps({"cells": [], "metadata": {"kernelspec": {"language": "R"}}}))
    proc = run_cli(str(tmp_path), "--no-cache")
    assert "bad.ipynb: cannot read notebook: not valid JSON" in proc.stderr
    assert "r.ipynb: cannot read notebook: a R notebook, not Python" in proc.stderr
    assert proc.returncode == 2


def test_bare_magics_ipython_runs_without_a_prefix_are_masked():
    """Under automagic, IPython runs `pip install -q accelerate` or `cd ..` as magics: masked like
    `%pip`, so the notebook parses. A line that is Python (`time.sleep(1)`, `ls = []`) stays."""
    source = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                         "source": ["pip install -q accelerate\n", "cd ..\n", "rm -rf outputs\n",
                                    "import time\n", "time.sleep(1)\n", "ls = []\n"]}],
              "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    nb = notebooks.read(json.dumps(source))
    assert nb.module.splitlines()[:6] == ["pass", "pass", "pass", "import time", "time.sleep(1)", "ls = []"]


def test_a_cell_that_does_not_parse_is_left_out_and_the_other_cells_are_checked():
    """Jupyter compiles each cell on its own: a helper cell cut off inside its docstring (cell 3)
    and a cell with an unclosed call (cell 5) raise SyntaxError, the training cell still runs.
    Each broken cell gets AL001 at its own error; the launched function keeps its findings."""
    path = NOTEBOOKS / "broken_cells.ipynb"
    code, findings = json_findings(str(path), "--no-cache")
    got = sorted((f["cell"], f["line"], f["code"]) for f in findings)
    assert got == sorted([*expected(path), (3, 2, "AL001")])
    docstring = next(f for f in findings if f["cell"] == 3)
    assert docstring["message"].startswith("syntax error: unterminated triple-quoted string literal; this cell was")
    assert code == 1


def test_fix_writes_the_cells_that_parse_and_leaves_the_broken_ones_as_they_are(tmp_path):
    path = tmp_path / "broken_cells.ipynb"
    shutil.copy(NOTEBOOKS / "broken_cells.ipynb", path)
    before = json.loads(path.read_text())
    proc = run_cli(str(path), "--no-cache", "--fix")
    after = json.loads(path.read_text())
    assert "accelerator.backward(loss)" in "".join(after["cells"][3]["source"]), proc.stdout + proc.stderr
    assert [after["cells"][i]["source"] for i in (2, 4)] == [before["cells"][i]["source"] for i in (2, 4)]


def _with_last_cell(source: str) -> dict:
    data = json.loads((NOTEBOOKS / "writefile_launch.ipynb").read_text())
    data["cells"][-1]["source"] = [source]
    return data


def test_a_writefile_script_launched_on_ranks_is_linted_as_that_script_in_its_cell():
    """`%%writefile train.py` then `!accelerate launch ... train.py`: the cell's body is the
    program every rank runs, its findings placed on the cell's own lines (line 1 is the magic)."""
    path = NOTEBOOKS / "writefile_launch.ipynb"
    code, findings = json_findings(str(path), "--no-cache")
    assert sorted((f["cell"], f["line"], f["code"]) for f in findings) == expected(path)
    assert all(f["fix"] is None for f in findings)  # the file on disk runs, not the cell
    assert code == 1


@pytest.mark.parametrize("last_cell, several", [("!torchrun --nproc_per_node 2 train.py", True),
                                                ("!python train.py", False),
                                                ("%run train.py", False),
                                                ("print('the script is launched elsewhere')", None)])
def test_how_the_notebook_runs_a_written_script_decides_which_findings_hold(tmp_path, last_cell, several):
    """A launcher of ranks: every finding. `!python`/`%run`: one process, so only the findings
    whose harm exists in one process (none here). Never run by the notebook: its launch is
    unknown, so it is not linted."""
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(_with_last_cell(last_cell)))
    scripts = notebooks.written_scripts(notebooks.read(path.read_text()))
    assert [s.several_processes for s in scripts] == ([] if several is None else [several])
    _, findings = json_findings(str(path), "--no-cache")
    assert sorted(f["code"] for f in findings) == (["AL201", "AL302"] if several else [])


def _lines_of(module: str, *names: str) -> set[int]:
    tree = __import__("ast").parse(module)
    return {line for node in tree.body if getattr(node, "name", None) in names
            for line in range(node.lineno, node.end_lineno + 1)}


@pytest.mark.parametrize("launch, launched", [
    ("notebook_launcher(train, (1,), num_processes=2)", ("train", "evaluate", "Metric")),
    ("notebook_launcher(functools.partial(train, lr=1), num_processes=2)", ("train", "evaluate", "Metric")),
    ("notebook_launcher(lambda: evaluate(), num_processes=2)", ("evaluate", "Metric")),
    ("mp.spawn(evaluate, nprocs=2)", ("evaluate", "Metric")),
    ("notebook_launcher(trainer.train, num_processes=2)", ("train", "evaluate", "Metric", "plot")),  # unknown
])
def test_what_a_launcher_runs_on_several_processes_is_its_function_and_what_that_uses(launch, launched):
    """Top-level statements run once in the kernel; the launched function, the functions and
    classes it uses (transitively) run on several. When the launched function is not one of the
    notebook's, any of them may run on several."""
    module = ("import functools\n"
              "class Metric:\n    pass\n"
              "def evaluate():\n    return Metric()\n"
              "def train(lr=0):\n    evaluate()\n"
              "def plot():\n    pass\n"
              "loss = 1\n" + launch + "\n")
    assert notebooks.launched_lines(module) == _lines_of(module, *launched)


def test_a_broken_cells_message_names_its_own_lines(tmp_path):
    """CPython counts lines in the cell it compiled ("after 'for' statement on line 3"): the
    message keeps naming that line of that cell, not line 3 of the notebook's first cell."""
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": ["x = 1\n"]},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": ["import os\n", "\n", "for i in range(3):\n", "print(i)\n"]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    _, findings = json_findings(str(path), "--no-cache")
    assert [(f["cell"], f["line"], f["code"]) for f in findings] == [(2, 4, "AL001")]
    assert "after 'for' statement on line 3;" in findings[0]["message"]


def test_a_cell_in_the_syntax_of_a_newer_python_is_not_left_out(tmp_path):
    """Nested f-string quotes (PEP 701) are valid in a Python 3.12 kernel: when the Python running
    the linter rejects them but its parser (libcst) reads them, the cell is checked."""
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
         "source": ["def path_of(row):\n", "    return f'/data/{row['id']}.jpg'\n"]}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    assert json_findings(str(path), "--no-cache")[1] == []


def test_a_notebook_that_launches_with_runtime_checks_is_a_program_of_several_processes(tmp_path):
    """`runtime_checks.notebook_launch(fn)` starts processes as `notebook_launcher` does: the
    launched function's unguarded write is a race; with no launch the kernel is one process."""
    def notebook(launch: str) -> str:
        cells = ["from accelerate import Accelerator\nimport torch\n",
                 "def train():\n    accelerator = Accelerator()\n"
                 "    model = accelerator.prepare(torch.nn.Linear(2, 2))\n"
                 "    torch.save({'step': 1}, 'progress.pt')\n",
                 launch]
        return json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                                      "source": c} for c in cells],
                           "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    (tmp_path / "launched.ipynb").write_text(notebook("from runtime_checks import notebook_launch\n"
                                                      "notebook_launch(train, num_processes=2)\n"))
    (tmp_path / "kernel.ipynb").write_text(notebook("train()\n"))
    # a launch of one process, by a literal, runs the function in one process too
    (tmp_path / "one.ipynb").write_text(notebook("from accelerate import notebook_launcher\n"
                                                 "notebook_launcher(train, (), 1)\n"
                                                 "notebook_launcher(train, num_processes=1)\n"))
    _, findings = json_findings(str(tmp_path), "--no-cache", "--select", "AL401")
    assert [(Path(f["path"]).name, f["cell"], f["line"]) for f in findings] == [("launched.ipynb", 2, 4)]
