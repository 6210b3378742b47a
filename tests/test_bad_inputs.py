"""Inputs that must give a clear diagnostic (or none) and never stop the run."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from accel_lint.cli import main
from accel_lint.config import Config
from accel_lint.engine import lint_paths, lint_source

TRAIN = (
    "from accelerate import Accelerator\n"
    "accelerator = Accelerator()\n"
    "if accelerator.is_main_process:\n"
    "    accelerator.wait_for_everyone()\n"
)


def run(*args):
    return CliRunner().invoke(main, ["--output-format", "json", *args], catch_exceptions=False)


def codes(source: bytes | str) -> list[tuple[int, str]]:
    result = lint_source(source, "x.py", Config())
    assert not [e for e in result.errors if e.internal], result.errors
    return [(d.line, d.code) for d in result.diagnostics]


def test_python2_print_statement_is_a_syntax_error():
    assert codes("from accelerate import Accelerator\nprint 'hello'\n") == [(2, "AL001")]


STRAY_LINE = (
    "import torch\n"
    "from accelerate import Accelerator\n"
    "accelerator = Accelerator()\n"
    "model = accelerator.prepare(torch.nn.Linear(2, 2))\n"
    "for step in range(3):\n"
    "    //print(step)\n"
    "    torch.save(model.state_dict(), 'last.pt')\n"
    "if accelerator.is_main_process:\n"
    "    accelerator.wait_for_everyone()\n"
)


def test_a_stray_line_is_left_out_and_the_rest_of_the_file_is_checked():
    """As ruff does: the line CPython stops at is AL001, and the file is checked as if it were
    `pass` (no line moves)."""
    result = lint_source(STRAY_LINE, "x.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == [
        (6, "AL001"), (7, "AL401"), (7, "AL501"), (9, "AL301")]
    assert result.diagnostics[0].message == "syntax error: invalid syntax; the rest was checked reading line 6 as `pass`"
    assert all(d.fix is None for d in result.diagnostics)  # a fix would write the stand-in back


def test_a_block_header_without_its_colon_or_a_line_indented_to_no_level_is_read_as_meant():
    """`if flag` without its colon is read with the colon; a line indented to no enclosing level
    is read at the nearest one: the block's body is checked where it belongs."""
    no_colon = STRAY_LINE.replace("    //print(step)\n", "    if step\n        print(step)\n")
    result = lint_source(no_colon, "x.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == [
        (6, "AL001"), (7, "AL403"), (8, "AL401"), (8, "AL501"), (10, "AL301")]
    assert result.diagnostics[0].message.endswith("reading line 6 as if it ended with ':'")
    misindented = STRAY_LINE.replace("    //print(step)\n", "").replace(
        "if accelerator.is_main_process:", " if accelerator.is_main_process:")
    result = lint_source(misindented, "x.py", Config())
    assert sorted((d.line, d.code) for d in result.diagnostics) == [
        (6, "AL401"), (6, "AL501"), (7, "AL001"), (8, "AL301")]
    assert "as if indented by 0" in next(d.message for d in result.diagnostics if d.code == "AL001")


def test_a_file_with_a_stray_line_is_never_rewritten_by_fix(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(STRAY_LINE)
    result = CliRunner().invoke(main, ["--no-cache", "--fix", "--unsafe-fixes", str(script)], catch_exceptions=False)
    assert result.exit_code == 1
    assert script.read_text() == STRAY_LINE
    assert "AL001" in result.output and "AL501" in result.output


def test_a_broken_block_header_still_stops_the_check_of_its_file():
    """Leaving out `def f(:` makes its body an unexpected indent: no stand-in parses, and the
    file is not checked (nothing is guessed)."""
    broken = TRAIN + "def train(:\n    accelerator.wait_for_everyone()\n"
    result = lint_source(broken, "x.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == [(5, "AL001")]
    assert result.diagnostics[0].message.endswith("the file was not checked")


def test_utf8_bom_crlf_mixed_endings_and_tabs_still_report_the_right_line():
    assert codes(b"\xef\xbb\xbf" + TRAIN.encode()) == [(4, "AL301")]
    assert codes(TRAIN.replace("\n", "\r\n").encode()) == [(4, "AL301")]
    mixed = TRAIN.replace("\n", "\r\n", 2).encode()
    assert codes(mixed) == [(4, "AL301")]
    assert codes(TRAIN.replace("    ", "\t")) == [(4, "AL301")]


def test_empty_and_whitespace_files():
    assert codes(b"") == []
    assert codes(b"\n\n   \n# accelerator\n") == []


@pytest.mark.parametrize("opening,closing", [("(", ")"), ("[", "]"), ("-", "")])
def test_expressions_nested_500_levels_are_analysed(opening, closing):
    nested = TRAIN + "x = " + opening * 500 + "1" + closing * 500 + "\n"
    result = lint_source(nested, "deep.py", Config())
    assert result.errors == []
    assert [(d.line, d.code) for d in result.diagnostics] == [(4, "AL301")]


def test_symlink_loop_directory_named_py_and_missing_path(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "train.py").write_text(TRAIN)
    (root / "pkg" / "loop").symlink_to(root / "pkg", target_is_directory=True)
    (root / "pkg" / "weird.py").mkdir()
    (root / "pkg" / "dangling.py").symlink_to(root / "nowhere.py")
    result = run(str(root), str(tmp_path / "absent.py"))
    out = result.output
    assert '"code": "AL301"' in out and out.count('"code": "AL301"') == 1  # the loop is not followed
    assert "absent.py: no such file or directory" in out
    assert "dangling.py: cannot read" in out
    assert result.exit_code == 2


def test_directory_named_x_py_given_explicitly_is_walked(tmp_path):
    folder = tmp_path / "x.py"
    folder.mkdir()
    (folder / "inner.py").write_text(TRAIN)
    assert '"AL301"' in run(str(folder)).output


def test_file_deleted_during_the_run(tmp_path):
    keep = tmp_path / "a.py"
    gone = tmp_path / "b.py"
    keep.write_text(TRAIN)
    gone.write_text(TRAIN)
    files = [keep, gone]
    gone.unlink()  # listed by discovery, gone by the time it is read
    result = lint_paths(files, Config())
    assert [(os.path.basename(d.path), d.code) for d in result.diagnostics] == [("a.py", "AL301")]
    assert [e.message for e in result.errors] == ["cannot read: No such file or directory; skipped"]


def test_files_over_max_file_size_are_skipped_with_a_notice_not_a_failure(tmp_path):
    big = tmp_path / "generated.py"
    big.write_text(TRAIN + "\n".join(f"x{i} = {i}  # accelerator" for i in range(175_000)) + "\n")
    size_mb = big.stat().st_size / 1024 / 1024
    assert size_mb > 5
    small = tmp_path / "train.py"
    small.write_text(TRAIN.replace("is_main_process", "is_main_process and True"))
    result = CliRunner().invoke(main, [str(tmp_path)], catch_exceptions=False)
    assert f"accel-lint: notice: {big}: skipped: {size_mb:.1f} MB is over max-file-size (2.0 MB)" in result.output
    assert "train.py:4:5: AL301" in result.output
    assert result.exit_code == 1  # the finding fails the run; the notice does not


def test_max_file_size_flag(tmp_path):
    medium = tmp_path / "medium.py"
    medium.write_text(TRAIN + "#" * 30_000 + "\n")
    skipped = CliRunner().invoke(main, [str(medium), "--max-file-size", "10kB"], catch_exceptions=False)
    assert "is over max-file-size (10.0 kB)" in skipped.output and skipped.exit_code == 0
    checked = CliRunner().invoke(main, [str(medium), "--max-file-size", "100kB", "-q"], catch_exceptions=False)
    assert "notice" not in checked.output and "medium.py:4:5: AL301" in checked.output
    assert CliRunner().invoke(main, [str(medium), "--max-file-size", "lots"]).exit_code == 2


def test_max_file_size_in_pyproject(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.accel-lint]\nmax-file-size = "1kB"\n')
    (tmp_path / "train.py").write_text(TRAIN + "#" * 2000 + "\n")
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(main, [], catch_exceptions=False)
    finally:
        os.chdir(old)
    assert "train.py: skipped: 2.1 kB is over max-file-size (1.0 kB)" in result.output
    assert result.exit_code == 0
