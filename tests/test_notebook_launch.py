"""``runtime_checks.notebook_launch``: guarded ranks forked from the calling process (a notebook
kernel or plain Python), a displayable report, and nothing left behind on an interrupt."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

pytest.importorskip("accelerate")

from runtime_checks.watch import process_alive  # noqa: E402

PRELUDE = """\
import json, sys, time
from runtime_checks import notebook_launch
"""
RANK_GATED = """\
def training_function(steps):
    import torch
    from accelerate import Accelerator
    accelerator = Accelerator()
    value = torch.ones(2) * accelerator.process_index
    for step in range(steps):
        accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        accelerator.wait_for_everyone()
    accelerator.gather(value)
"""


def run_notebook_code(tmp_path, body: str, timeout: float = 120, env=None):
    script = tmp_path / "kernel.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=timeout, cwd=tmp_path,
                          env=env)


def test_rank_gated_collective_is_diagnosed_from_the_calling_process(tmp_path):
    proc = run_notebook_code(tmp_path, RANK_GATED + """
report = notebook_launch(training_function, args=(2,), num_processes=2, timeout=10)
print(json.dumps({"kind": report.kind, "code": report.exit_code, "ok": report.ok,
                  "rows": [(r["rank"], r["op"], r["site"]["line"]) for r in report.finding.rows],
                  "html": report._repr_html_(), "md": report._repr_markdown_(), "text": str(report)}))
""")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["kind"], result["code"], result["ok"]) == ("divergence", 10, False), proc.stderr
    assert result["rows"] == [[0, "accelerator.wait_for_everyone", 11], [1, "accelerator.gather", 12]]
    assert "<table>" in result["html"] and "<td>accelerator.gather</td>" in result["html"]
    # the same timeline as `python -m runtime_checks view`, inline: a row per rank, a bar per collective
    assert "<svg" in result["html"] and "rank 0" in result["html"] and "rank 1" in result["html"]
    assert "accelerator.gather(float32[2])" in result["html"] and os.path.exists(tmp_path / "runtime_checks_report.trace.json")
    assert "| 0 | in collective | accelerator.wait_for_everyone | kernel.py:11 |" in result["md"]
    assert result["text"].startswith("[runtime_checks] DIVERGENCE at collective #2")
    assert os.path.exists(tmp_path / "runtime_checks_report.json")


def test_hang_names_the_rank_that_never_came_and_a_clean_run_is_ok(tmp_path):
    proc = run_notebook_code(tmp_path, """
def stuck():
    import time
    from accelerate import Accelerator
    accelerator = Accelerator()
    accelerator.wait_for_everyone()
    if accelerator.process_index == 1:
        time.sleep(600)
    accelerator.wait_for_everyone()

def fine():
    from accelerate import Accelerator
    accelerator = Accelerator()
    accelerator.wait_for_everyone()

hang = notebook_launch(stuck, num_processes=2, timeout=3)
ok = notebook_launch(fine, num_processes=2)
print(json.dumps({"hang": hang.kind, "culprit": hang.finding.culprit, "ok": ok.kind, "ok_text": str(ok),
                  "ok_md": ok._repr_markdown_()}))
""")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (result["hang"], result["culprit"], result["ok"]) == ("hang", 1, "ok"), (result, proc.stderr[-3000:])
    assert result["ok_text"].startswith("[runtime_checks] ok") and "ok" in result["ok_md"]


def _ranks_with(token: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if f"RC_TEST_TOKEN={token}".encode() in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return [p for p in found if process_alive(p)]


def test_interrupting_the_kernel_leaves_no_rank_behind(tmp_path):
    token = uuid.uuid4().hex
    script = tmp_path / "kernel.py"
    # A Jupyter kernel turns SIGINT into KeyboardInterrupt; a process started from a background
    # shell job inherits SIGINT ignored (bash does that to `cmd &`), so say it explicitly.
    script.write_text(PRELUDE + "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                      + textwrap.dedent("""
        def forever():
            import time
            from accelerate import Accelerator
            accelerator = Accelerator()
            accelerator.wait_for_everyone()
            print("ranks up", flush=True)
            time.sleep(600)

        try:
            notebook_launch(forever, num_processes=2)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        """))
    env = dict(os.environ, RC_TEST_TOKEN=token, PYTHONUNBUFFERED="1")
    kernel = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and len(_ranks_with(token)) < 3:  # the kernel and its two ranks
            time.sleep(0.2)
        assert len(_ranks_with(token)) >= 3
        time.sleep(1.0)  # let the ranks reach their sleep
        kernel.send_signal(signal.SIGINT)  # what "Interrupt kernel" does
        out, _ = kernel.communicate(timeout=30)
        assert "interrupted" in out
        deadline = time.time() + 10
        while time.time() < deadline and _ranks_with(token):
            time.sleep(0.2)
        assert _ranks_with(token) == []
    finally:
        if kernel.poll() is None:
            kernel.kill()


def test_a_real_notebook_kernel_reports_the_hang_as_a_table(tmp_path):
    """Executes fixtures/notebooks/launch_hang.ipynb in a Jupyter kernel, as a user runs it."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from conftest import REPO

    notebook = nbformat.read(REPO / "fixtures" / "notebooks" / "launch_hang.ipynb", as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    outputs = notebook.cells[-1].outputs
    result = next(o for o in outputs if o.output_type == "execute_result")
    assert "<b>runtime_checks: HANG</b>" in result.data["text/html"]
    assert "<td>1</td><td>computing</td><td></td><td>" in result.data["text/html"] and "culprit" in result.data["text/html"]
    assert result.data["text/markdown"].startswith("**runtime_checks: HANG**")


def test_the_course_lesson_notebook_runs_and_its_gather_counts_duplicates(tmp_path):
    """fixtures/notebooks/course_lesson.ipynb in a Jupyter kernel, cell by cell: the single-process
    loop, the launched function on 2 CPU ranks (``notebook_launch`` in place of
    ``notebook_launcher``), the model card. The linter's one finding there, AL203, is the harm
    measured: 10 samples, batches of 4 on 2 ranks, and the metric given `gather`'s results sees
    16; with `gather_for_metrics` it sees 10."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from conftest import REPO

    notebook = nbformat.read(REPO / "fixtures" / "notebooks" / "course_lesson.ipynb", as_version=4)
    notebook.cells = [c for c in notebook.cells if "pip install" not in c.source]  # no network here
    launcher = next(c for c in notebook.cells if c.source.startswith("notebook_launcher("))
    training = next(c for c in notebook.cells if c.source.startswith("def training_function"))
    launcher.source = ("from runtime_checks import notebook_launch\n"
                       "report = notebook_launch(training_function, args=('seen_gather.txt',), num_processes=2)\n"
                       "exec(fixed_source)\n"
                       "fixed = notebook_launch(training_function, args=('seen_for_metrics.txt',), num_processes=2)\n"
                       "print(report.kind, fixed.kind)")
    fixed_source = training.source.replace("accelerator.gather((", "accelerator.gather_for_metrics((")
    notebook.cells.insert(notebook.cells.index(launcher), nbformat.v4.new_code_cell(f"fixed_source = {fixed_source!r}"))
    client = nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    printed = "".join(o.get("text", "") for o in launcher.outputs if o.output_type == "stream")
    assert printed.split() == ["ok", "ok"], launcher.outputs
    assert (tmp_path / "seen_gather.txt").read_text() == "16"
    assert (tmp_path / "seen_for_metrics.txt").read_text() == "10"
    assert (tmp_path / "MODEL_CARD.md").exists()  # the cell after the launcher ran once, in the kernel
