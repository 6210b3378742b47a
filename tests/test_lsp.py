"""``accel-lint server``, driven by a real LSP client (pytest-lsp) over stdio in a subprocess:
diagnostics, code actions, hover, notebooks, two modules, configuration, bad input.

One server serves the module's tests (each in its own files of one workspace); the tests that
need another server (a broken rule, a client without ``codeAction/resolve``) start their own."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from accel_lint.config import Config
from accel_lint.fixes import fix_source
from conftest import REPO

try:
    import pytest_lsp
    from lsprotocol import types
    from pytest_lsp import ClientServerConfig, LanguageClient, client_capabilities
    from pytest_lsp.client import make_test_lsp_client
except ImportError:  # the `lsp` extra is not installed: the server's tests skip
    pytest_lsp = None

needs_lsp = pytest.mark.skipif(pytest_lsp is None, reason="pygls and pytest-lsp are not installed")
SERVER = [sys.executable, "-m", "accel_lint", "server"]
TRAIN = REPO / "fixtures" / "lsp" / "train.py"
PUBLISH = "textDocument/publishDiagnostics"
TIMEOUT = 60


# -- helpers ---------------------------------------------------------------------------------------

async def published(client, uri: str, until=lambda found: True, timeout: float = TIMEOUT):
    """The diagnostics last published for ``uri`` once ``until`` holds for them."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = client.diagnostics.get(uri)
        if found is not None and until(found):
            return list(found)
        await asyncio.wait_for(client.wait_for_notification(PUBLISH), max(deadline - loop.time(), 0.01))


def codes(found) -> list[str]:
    return sorted(d.code for d in found if d.code)


def by_code(found, code: str):
    return [d for d in found if d.code == code]


def open_file(client, path: Path, text: str | None = None, version: int = 1) -> str:
    uri = path.as_uri()
    client.diagnostics.pop(uri, None)
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=uri, language_id="python", version=version, text=path.read_text() if text is None else text)))
    return uri


def change(client, uri: str, version: int, text: str) -> None:
    client.diagnostics.pop(uri, None)
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangeWholeDocument(text=text)]))


def apply(text: str, edits) -> str:
    """Apply LSP text edits (UTF-16 positions; the texts here are ASCII) to ``text``."""
    lines = text.split("\n")
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line) + 1)

    def offset(p):
        return starts[p.line] + p.character

    for e in sorted(edits, key=lambda e: offset(e.range.start), reverse=True):
        text = text[:offset(e.range.start)] + e.new_text + text[offset(e.range.end):]
    return text


async def actions_at(client, uri: str, line: int, character: int, only=None):
    found = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri),
        range=types.Range(start=types.Position(line=line, character=character),
                          end=types.Position(line=line, character=character)),
        context=types.CodeActionContext(diagnostics=[], only=only)))
    return found or []


# -- the server shared by most tests --------------------------------------------------------------

if pytest_lsp is not None:
    @pytest.fixture(scope="module")
    def workspace(tmp_path_factory) -> Path:
        return tmp_path_factory.mktemp("workspace")

    @pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER), scope="module", loop_scope="module")
    async def client(lsp_client: LanguageClient, workspace: Path):
        lsp_client.registrations = []

        @lsp_client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def register(params: types.RegistrationParams) -> None:
            lsp_client.registrations.extend(params.registrations)

        await lsp_client.initialize_session(types.InitializeParams(
            capabilities=client_capabilities("visual-studio-code"),
            workspace_folders=[types.WorkspaceFolder(uri=workspace.as_uri(), name="workspace")]))
        yield
        await lsp_client.shutdown_session()



def lsp_test(fn):
    """A test that talks to the module's server."""
    fn = needs_lsp(fn)
    return pytest.mark.asyncio(loop_scope="module")(fn) if pytest_lsp is not None else fn


@lsp_test
async def test_open_publishes_codes_ranges_severities_docs_and_related_lines(client, workspace):
    path = workspace / "train.py"
    shutil.copy(TRAIN, path)
    found = await published(client, open_file(client, path))
    assert codes(found) == ["AL101", "AL203", "AL302", "AL403", "AL403"]
    assert all(d.source == "accel-lint" for d in found)
    backward = by_code(found, "AL101")[0]
    # `loss.backward()` on line 73 (1-based), columns 17-32
    assert (backward.range.start.line, backward.range.start.character) == (72, 16)
    assert (backward.range.end.line, backward.range.end.character) == (72, 31)
    assert backward.severity == types.DiagnosticSeverity.Error
    assert backward.code_description.href.endswith("/rules/AL101.html")
    assert by_code(found, "AL403")[0].severity == types.DiagnosticSeverity.Information
    assert by_code(found, "AL203")[0].severity == types.DiagnosticSeverity.Warning
    # AL302 cites its guard, `if accelerator.is_main_process:` on line 85
    (related,) = by_code(found, "AL302")[0].related_information
    assert related.location.uri == path.as_uri()
    assert related.location.range.start.line == 84 and related.location.range.start.character == 8
    assert related.message == "if accelerator.is_main_process:"
    # AL101 cites where the optimizer it bypasses was made and prepared
    assert [r.message for r in backward.related_information][-1] == "`accelerator.prepare(...)` returned wrapped here"


@lsp_test
async def test_fix_action_resolves_to_the_edit_that_fix_makes(client, workspace):
    path = workspace / "fix_one.py"
    shutil.copy(TRAIN, path)
    uri = open_file(client, path)
    await published(client, uri, lambda found: "AL101" in codes(found))
    found = await actions_at(client, uri, 72, 20)
    fix = next(a for a in found if a.title.startswith("AL101:") and "noqa" not in a.title)
    assert fix.kind == types.CodeActionKind.QuickFix and fix.is_preferred and "unsafe" not in fix.title
    assert fix.edit is None  # computed on resolve
    resolved = await client.code_action_resolve_async(fix)
    fixed = apply(path.read_text(), resolved.edit.changes[uri])
    assert fixed.splitlines()[72] == "                accelerator.backward(loss)"
    # only the selected finding is fixed: the other fixable ones stay
    assert "accelerator.gather((predictions" in fixed and "print(f\"epoch" in fixed
    change(client, uri, 2, fixed)
    assert codes(await published(client, uri)) == ["AL203", "AL302", "AL403", "AL403"]


@lsp_test
async def test_unsafe_fix_is_marked_and_a_fix_fix_would_drop_is_not_applied(client, workspace):
    source = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            accelerator.backward(model(**batch).loss)
            optimizer.step()
        torch.save({"step": 1}, "final.pt")
        torch.save(accelerator.get_state_dict(model), "model.pt")
    """)
    path = workspace / "unsafe.py"
    path.write_text(source)
    uri = open_file(client, path)
    assert codes(await published(client, uri)) == ["AL401", "AL401"]
    (fix,) = [a for a in await actions_at(client, uri, 8, 3) if "noqa" not in a.title]
    assert fix.title == "AL401: guard with `if accelerator.is_main_process:` (unsafe fix)"
    assert not fix.is_preferred
    resolved = await client.code_action_resolve_async(fix)
    assert apply(source, resolved.edit.changes[uri]).endswith(
        'if accelerator.is_main_process:\n    torch.save({"step": 1}, "final.pt")\n'
        'torch.save(accelerator.get_state_dict(model), "model.pt")\n')
    # guarding the second would gate `get_state_dict` (a collective under FSDP): `--fix` drops it
    client.messages.clear()
    (fix,) = [a for a in await actions_at(client, uri, 9, 3) if "noqa" not in a.title]
    resolved = await client.code_action_resolve_async(fix)
    assert resolved.edit is None
    assert "AL401 fix not applied: it would introduce a new AL302 finding" in client.messages[-1].message


@lsp_test
async def test_noqa_action_and_unused_suppression(client, workspace):
    source = textwrap.dedent("""\
        import torch; from accelerate import Accelerator
        from tqdm import tqdm
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator(); model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model, optimizer, loader = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4), loader)
        for batch in tqdm(loader, desc="🚀"):
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
        x = 1  # noqa: AL203
        y = 2  # noqa:
    """)
    path = workspace / "noqa.py"
    path.write_text(source)
    uri = open_file(client, path)
    found = await published(client, uri)
    assert codes(found) == ["AL002", "AL101", "AL403"]
    unused = by_code(found, "AL002")[0]
    assert list(unused.tags) == [types.DiagnosticTag.Unnecessary] and unused.range.start.line == 9
    # the emoji counts two UTF-16 code units: the range ends after the closing parenthesis
    bar = by_code(found, "AL403")[0]
    assert (bar.range.start.character, bar.range.end.character) == (13, 13 + len('tqdm(loader, desc="🚀")') + 1)
    (malformed,) = [d for d in found if d.code is None]
    assert malformed.range.start.line == 10 and "names no code" in malformed.message
    assert malformed.severity == types.DiagnosticSeverity.Information
    (noqa,) = [a for a in await actions_at(client, uri, 7, 6) if "noqa" in a.title]
    assert noqa.title == "AL101: suppress with `# noqa: AL101`"
    edited = apply(source, noqa.edit.changes[uri])
    assert edited.splitlines()[7] == "    loss.backward()  # noqa: AL101"
    change(client, uri, 2, edited)
    assert codes(await published(client, uri)) == ["AL002", "AL403"]
    assert not [a for a in await actions_at(client, uri, 9, 2) if "noqa" in a.title]  # AL002: removed, not suppressed


@lsp_test
async def test_fix_all_safe_in_file(client, workspace):
    path = workspace / "fix_all.py"
    shutil.copy(TRAIN, path)
    uri = open_file(client, path)
    await published(client, uri)
    found = await actions_at(client, uri, 0, 0, only=[types.CodeActionKind.SourceFixAll])
    (fix_all,) = found
    assert fix_all.kind == "source.fixAll.accel-lint"
    resolved = await client.code_action_resolve_async(fix_all)
    fixed = apply(path.read_text(), resolved.edit.changes[uri])
    expected = fix_source(TRAIN.read_bytes(), str(path), Config(), unsafe=False).fixed
    assert fixed == expected  # what `accel-lint --fix` writes
    change(client, uri, 2, fixed)
    assert codes(await published(client, uri)) == ["AL302"]  # AL302's fix is unsafe
    assert not await actions_at(client, uri, 0, 0, only=[types.CodeActionKind.SourceFixAll])


@lsp_test
async def test_a_syntax_error_mid_typing_then_its_repair(client, workspace):
    path = workspace / "typing.py"
    shutil.copy(TRAIN, path)
    text = path.read_text()
    uri = open_file(client, path)
    await published(client, uri)
    broken = text.replace("    for epoch in range(args.epochs):\n", "    for epoch in range(args.epochs\n")
    change(client, uri, 2, broken)
    (error,) = await published(client, uri)
    assert error.code == "AL001" and error.severity == types.DiagnosticSeverity.Error
    # where CPython's parser says it: the "(" that is never closed
    assert error.range.start.line == text.splitlines().index("    for epoch in range(args.epochs):")
    assert error.range.start.character == len("    for epoch in range")
    assert "'(' was never closed" in error.message
    change(client, uri, 3, text)
    assert codes(await published(client, uri)) == ["AL101", "AL203", "AL302", "AL403", "AL403"]


@lsp_test
async def test_text_that_cannot_be_encoded_gives_one_diagnostic(client, workspace):
    path = workspace / "latin.py"
    uri = open_file(client, path, "# -*- coding: latin-1 -*-\nfrom accelerate import Accelerator\nprice = '€'\n")
    (only,) = await published(client, uri)
    assert "cannot encode '€' on line 3 as latin-1" in only.message
    assert only.severity == types.DiagnosticSeverity.Error
    path = workspace / "unknown.py"
    uri = open_file(client, path, "# coding: no-such-codec\nfrom accelerate import Accelerator\n")
    (only,) = await published(client, uri)
    assert "cannot decode" in only.message
    # text that its declared encoding can hold is linted in that encoding: columns stay the editor's
    path = workspace / "latin_ok.py"
    uri = open_file(client, path, "# -*- coding: latin-1 -*-\nimport torch\nfrom accelerate import Accelerator\n"
                                  "accelerator = Accelerator()\nmodel = torch.nn.Linear(4, 1)\n"
                                  "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
                                  "model, opt, dl = accelerator.prepare(model, opt, dl)\n"
                                  "for batch in dl:\n    s = 'é'; loss = model(batch); loss.backward()\n")
    (backward,) = await published(client, uri)
    assert backward.code == "AL101" and backward.range.start.character == len("    s = 'é'; loss = model(batch); ")


@lsp_test
async def test_hover_shows_the_rules_four_part_docs(client, workspace):
    path = workspace / "hover.py"
    shutil.copy(TRAIN, path)
    uri = open_file(client, path)
    await published(client, uri)
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=88, character=30)))
    assert hover.contents.kind == types.MarkupKind.Markdown
    text = hover.contents.value
    assert text.startswith("**AL302** `rank-gated-checkpoint` (error)")
    for section in ("## What it does", "## Why is this bad?", "## Example", "## Use instead"):
        assert section in text
    assert hover.range.start.line == 88
    nothing = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=3, character=3)))
    assert nothing is None


@lsp_test
async def test_save_publishes_and_close_clears(client, workspace):
    path = workspace / "saved.py"
    shutil.copy(TRAIN, path)
    uri = open_file(client, path)
    first = await published(client, uri)
    client.diagnostics.pop(uri)
    client.text_document_did_save(types.DidSaveTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert await published(client, uri) == first
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    assert await published(client, uri, lambda found: not found) == []
    untitled = "untitled:Untitled-1"
    client.text_document_did_open(types.DidOpenTextDocumentParams(types.TextDocumentItem(
        uri=untitled, language_id="python", version=1, text=TRAIN.read_text())))
    assert "AL101" in codes(await published(client, untitled))


NOTEBOOK_CELLS = [
    ("code", "import torch\nfrom accelerate import Accelerator\nfrom torch.utils.data import DataLoader\n"
             "from transformers import AutoModelForSequenceClassification\naccelerator = Accelerator()\n"
             "model = AutoModelForSequenceClassification.from_pretrained(\"bert-base-uncased\")\n"
             "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)\n"
             "loader = DataLoader(train_ds, batch_size=8, shuffle=True)\n"
             "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"),
    ("markdown", "# Training\n"),
    ("code", "def train():\n    for batch in loader:\n        loss = model(**batch).loss\n        loss.backward()\n"
             "        optimizer.step()\n    if accelerator.is_main_process:\n        accelerator.save_state(\"ckpt\")\n"),
    ("code", "print(model)\n"),
    # the kernel is one process: the function the notebook launches runs on several, so rank rules apply there
    ("code", "from accelerate import notebook_launcher\nnotebook_launcher(train, num_processes=2)\n"),
]


@lsp_test
async def test_notebook_cells_are_one_program_with_per_cell_diagnostics(client, workspace):
    notebook_uri = (workspace / "explore.ipynb").as_uri()
    cell_uris = [f"vscode-notebook-cell:{(workspace / 'explore.ipynb').as_posix()}#W{i}sZmlsZQ%3D%3D"
                 for i in range(len(NOTEBOOK_CELLS))]
    kinds = {"code": types.NotebookCellKind.Code, "markdown": types.NotebookCellKind.Markup}
    client.notebook_document_did_open(types.DidOpenNotebookDocumentParams(
        notebook_document=types.NotebookDocument(uri=notebook_uri, notebook_type="jupyter-notebook", version=1,
                                                 cells=[types.NotebookCell(kind=kinds[k], document=u)
                                                        for (k, _), u in zip(NOTEBOOK_CELLS, cell_uris)]),
        cell_text_documents=[types.TextDocumentItem(uri=u, language_id="python" if k == "code" else "markdown",
                                                    version=1, text=t)
                             for (k, t), u in zip(NOTEBOOK_CELLS, cell_uris)]))
    third = await published(client, cell_uris[2])
    assert codes(third) == ["AL101", "AL302"]
    assert by_code(third, "AL101")[0].range.start.line == 3  # line 4 of the cell, not of the program
    (guard,) = by_code(third, "AL302")[0].related_information
    assert guard.location.uri == cell_uris[2] and guard.location.range.start.line == 5
    # a fact in cell 1 (where the optimizer was made and prepared): the related location is in cell 1
    made = [r for r in by_code(third, "AL101")[0].related_information if "made by" in r.message]
    assert [(r.location.uri, r.location.range.start.line) for r in made] == [(cell_uris[0], 6)]
    assert await published(client, cell_uris[3]) == []  # top level: runs once, in the kernel
    assert await published(client, cell_uris[0]) == []
    # a fix in a cell edits that cell
    fix = next(a for a in await actions_at(client, cell_uris[2], 3, 10) if a.title.startswith("AL101:") and "noqa" not in a.title)
    resolved = await client.code_action_resolve_async(fix)
    fixed = apply(NOTEBOOK_CELLS[2][1], resolved.edit.changes[cell_uris[2]])
    assert "        accelerator.backward(loss)\n" in fixed and list(resolved.edit.changes) == [cell_uris[2]]
    # an edit of one cell
    client.diagnostics.pop(cell_uris[2])
    client.notebook_document_did_change(types.DidChangeNotebookDocumentParams(
        notebook_document=types.VersionedNotebookDocumentIdentifier(uri=notebook_uri, version=2),
        change=types.NotebookDocumentChangeEvent(cells=types.NotebookDocumentCellChanges(text_content=[
            types.NotebookDocumentCellContentChanges(
                document=types.VersionedTextDocumentIdentifier(uri=cell_uris[2], version=2),
                changes=[types.TextDocumentContentChangeWholeDocument(text=fixed)])]))))
    assert codes(await published(client, cell_uris[2], lambda found: "AL101" not in codes(found))) == ["AL302"]


@lsp_test
async def test_editing_an_imported_module_updates_the_open_script(client, workspace):
    project = workspace / "project"
    shutil.copytree(REPO / "fixtures" / "project", project)
    train = open_file(client, project / "pkg" / "train.py")
    # the helpers' collectives come from engine.py, read from disk: it is not open
    found = await published(client, train)
    assert codes(found) == ["AL301", "AL302"]
    engine_path = project / "pkg" / "engine.py"
    engine = open_file(client, engine_path)
    # train.py passes the prepared model to export_weights: engine.py's finding needs its caller;
    # and to evaluate() under `is_main_process` only, so evaluate's forward is rank-gated (the
    # editor knows the open files' callers: run_eval.py, which calls it on every rank, is not open)
    assert codes(await published(client, engine)) == ["AL305", "AL401", "AL501"]
    client.diagnostics.pop(train)
    edited = engine_path.read_text().replace("    return accelerator.gather_for_metrics(preds)\n", "    return preds\n")
    change(client, engine, 2, edited)
    assert codes(await published(client, train)) == ["AL302"]  # evaluate() no longer gathers
    # and back, without saving: the editor's text of engine.py is what counts
    client.diagnostics.pop(train)
    change(client, engine, 3, engine_path.read_text())
    assert codes(await published(client, train)) == ["AL301", "AL302"]


@lsp_test
async def test_pyproject_is_read_again_when_it_changes(client, workspace):
    folder = workspace / "configured"
    (folder / "vendored").mkdir(parents=True)
    pyproject = folder / "pyproject.toml"
    pyproject.write_text('[tool.accel-lint]\nignore = ["AL403"]\nextend-exclude = ["vendored"]\n'
                         'per-file-ignores = {"legacy_*.py" = ["AL101"]}\n')
    path = folder / "legacy_train.py"
    shutil.copy(TRAIN, path)
    uri = open_file(client, path)
    assert codes(await published(client, uri)) == ["AL203", "AL302"]
    excluded = folder / "vendored" / "train.py"
    shutil.copy(TRAIN, excluded)
    assert await published(client, open_file(client, excluded)) == []
    # the watched-files notification, which the server asked for
    (watch,) = [r for r in client.registrations if r.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES]
    assert "**/pyproject.toml" in [w["globPattern"] for w in watch.register_options["watchers"]]
    pyproject.write_text('[tool.accel-lint]\nper-file-ignores = {"legacy_*.py" = ["AL101"]}\n')
    client.diagnostics.pop(uri)
    client.workspace_did_change_watched_files(types.DidChangeWatchedFilesParams(changes=[types.FileEvent(
        uri=pyproject.as_uri(), type=types.FileChangeType.Changed)]))
    assert codes(await published(client, uri)) == ["AL203", "AL302", "AL403", "AL403"]
    # no notification (a client that does not watch files): the next lint looks at the file again
    pyproject.write_text('[tool.accel-lint]\nselect = ["AL1"]\n')
    change(client, uri, 2, path.read_text() + "\n")
    assert codes(await published(client, uri)) == ["AL101"]


# -- servers of their own -------------------------------------------------------------------------

BROKEN_RULE = """\
from accel_lint.rules import all_rules
def boom(self, model):
    raise RuntimeError("rule exploded")
    yield
next(r for r in all_rules() if r.code == "AL101").check = boom
from accel_lint.lsp.server import serve
serve()
"""


@lsp_test
async def test_a_rule_that_raises_is_logged_and_the_server_goes_on(tmp_path):
    shutil.copy(TRAIN, tmp_path / "train.py")
    refused = HELPER_PATH_REFUSED
    (tmp_path / "refused.py").write_text(refused)
    capabilities = client_capabilities("visual-studio-code")
    capabilities.text_document.code_action.resolve_support = None  # edits come with the actions
    client = make_test_lsp_client()
    client.feature(types.CLIENT_REGISTER_CAPABILITY)(lambda params: None)
    await client.start_io(sys.executable, "-c", BROKEN_RULE)
    try:
        await client.initialize_session(types.InitializeParams(capabilities=capabilities, workspace_folders=[
            types.WorkspaceFolder(uri=tmp_path.as_uri(), name="t")]))
        uri = open_file(client, tmp_path / "train.py")
        assert codes(await published(client, uri)) == ["AL203", "AL302", "AL403", "AL403"]  # no AL101
        assert any("internal error in AL101: RuntimeError: rule exploded" in m.message
                   and m.type == types.MessageType.Error for m in client.log_messages)
        # still serving, and without codeAction/resolve the fix comes with its edit
        (fix,) = [a for a in await actions_at(client, uri, 40, 40, only=[types.CodeActionKind.QuickFix])
                  if "noqa" not in a.title]
        assert fix.title == "AL203: use `gather_for_metrics`" and fix.edit is not None
        assert "accelerator.gather_for_metrics((predictions" in apply(TRAIN.read_text(), fix.edit.changes[uri])
        # a fix the rule refuses is shown disabled, with the reason
        other = open_file(client, tmp_path / "refused.py")
        await published(client, other)
        (disabled,) = [a for a in await actions_at(client, other, 8, 10, only=[types.CodeActionKind.QuickFix])
                       if "noqa" not in a.title]
        assert disabled.edit is None and "by hand" in disabled.disabled.reason
    finally:
        await client.shutdown_session()
        await client.stop()


HELPER_PATH_REFUSED = """\
from accelerate import Accelerator

accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for step, batch in enumerate(loader):
    accelerator.backward(model(**batch).loss)
    if accelerator.is_main_process:
        save_path = make_checkpoint_dir("out", step)
        accelerator.save_state(save_path)
"""


# -- no pygls, and the fix selection the actions use (no server needed) ----------------------------

def test_server_is_a_subcommand_that_leaves_the_linters_arguments_alone(tmp_path):
    from click.testing import CliRunner

    from accel_lint.cli import main

    result = CliRunner().invoke(main, ["server", "--help"])
    assert result.exit_code == 0 and "language server" in result.output
    (tmp_path / "server").mkdir()  # a folder named server is still linted as ./server
    (tmp_path / "server" / "train.py").write_text(TRAIN.read_text())
    result = CliRunner().invoke(main, [str(tmp_path / "server"), "--no-cache", "-q"])
    assert result.exit_code == 1 and "AL101" in result.output


def test_server_without_pygls_says_how_to_install_it():
    code = "import sys; sys.modules['pygls'] = None; from accel_lint.cli import main; main(['server'])"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 2
    assert "pip install 'accel-lint[lsp]'" in proc.stderr


def test_a_selected_fix_leaves_the_other_findings_but_takes_its_follow_up_along():
    source = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification

        def train(args, accelerator, model, loader, eval_ds, metric):
            model, optimizer, loader, eval_loader = accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=args.lr), loader, DataLoader(eval_ds, batch_size=8))
            for batch in loader:
                with accelerator.accumulate(model):
                    loss = model(**batch).loss / args.gradient_accumulation_steps
                    loss.backward()
                    optimizer.step()
            model.eval()
            for batch in eval_loader:
                metric.add_batch(predictions=accelerator.gather(model(**batch)), references=accelerator.gather(batch))


        def main(args, train_ds, eval_ds, metric):
            accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps)
            model = AutoModelForSequenceClassification.from_pretrained(args.model_name_or_path)
            train(args, accelerator, model, DataLoader(train_ds, batch_size=8, shuffle=True), eval_ds, metric)
    """)
    # two findings on one statement: only the selected one
    one = fix_source(source.encode(), "t.py", Config(), True, select={("AL203", 15, 85)})
    assert [(d.code, d.column) for d, _ in one.applied] == [("AL203", 85)]
    assert "predictions=accelerator.gather(model" in one.fixed and "references=accelerator.gather_for_metrics(" in one.fixed
    assert "loss.backward()" in one.fixed
    # AL101's fix makes the manual division double scaling (AL102), whose fix comes along
    chained = fix_source(source.encode(), "t.py", Config(), True, select={("AL101", 11, 13)})
    assert sorted(d.code for d, _ in chained.applied) == ["AL101", "AL102"]
    assert "accelerator.backward(loss)" in chained.fixed and "/ args.gradient" not in chained.fixed
    assert chained.fixed.count("accelerator.gather(") == 2


@needs_lsp
@pytest.mark.skipif(shutil.which("nvim") is None, reason="nvim is not installed")
def test_neovim_with_the_readme_config_receives_the_diagnostics():
    """The editors page's (docs/editors.md) Neovim 0.7-to-0.10 block, as written, in a headless Neovim."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("nvim_diagnostics", REPO / "bench" / "nvim_diagnostics.py")
    nvim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nvim)
    proc = nvim.run(TRAIN)
    output = proc.stdout + proc.stderr
    assert sorted(set(re.findall(r'\n    code = "(AL\d+)"', output))) == ["AL101", "AL203", "AL302", "AL403"], output
    assert 'message = "if accelerator.is_main_process:"' in output  # the related guard line


def test_an_edit_lints_again_only_the_documents_that_share_modules_with_it(tmp_path):
    from accel_lint.lsp.documents import Document
    from accel_lint.lsp.project import Project

    shutil.copytree(REPO / "fixtures" / "project", tmp_path / "project")
    shutil.copy(TRAIN, tmp_path / "alone.py")
    paths = {"train": tmp_path / "project" / "pkg" / "train.py", "engine": tmp_path / "project" / "pkg" / "engine.py",
             "alone": tmp_path / "alone.py"}
    docs = {name: Document(path.as_uri(), 1, path.read_text()) for name, path in paths.items()}
    project = Project([str(tmp_path)])
    first = project.lint(list(docs.values())).reports
    assert sorted(d.code for d in first[docs["train"].uri].diagnostics) == ["AL301", "AL302"]
    docs["alone"] = Document(docs["alone"].uri, 2, docs["alone"].text + "# edited\n")
    second = project.lint(list(docs.values())).reports
    assert second[docs["alone"].uri] is not first[docs["alone"].uri]
    assert second[docs["train"].uri] is first[docs["train"].uri]  # not linted again
    assert second[docs["engine"].uri] is first[docs["engine"].uri]
    # engine.py is train.py's module: editing it lints train.py again, and only that pair
    docs["engine"] = Document(docs["engine"].uri, 2, docs["engine"].text.replace(
        "return accelerator.gather_for_metrics(preds)", "return preds"))
    third = project.lint(list(docs.values())).reports
    assert sorted(d.code for d in third[docs["train"].uri].diagnostics) == ["AL302"]
    assert third[docs["alone"].uri] is second[docs["alone"].uri]
    # train.py no longer passes the prepared model to export_weights: engine.py's AL401 and AL501 go
    # (evaluate's forward stays rank-gated: train.py, the one open caller, guards it)
    docs["train"] = Document(docs["train"].uri, 2, docs["train"].text.replace('export_weights(model, "weights.pt")\n', ""))
    fourth = project.lint(list(docs.values())).reports
    assert sorted(d.code for d in fourth[docs["engine"].uri].diagnostics) == ["AL305"]
    assert sorted(d.code for d in third[docs["engine"].uri].diagnostics) == ["AL305", "AL401", "AL501"]


@needs_lsp
def test_columns_in_each_position_encoding():
    from accel_lint.lsp.convert import units

    line = 'x = "🚀é"; y'
    column = line.index(";")  # code points
    assert units(line, column, types.PositionEncodingKind.Utf32) == 8
    assert units(line, column, types.PositionEncodingKind.Utf16) == 9  # the rocket is a surrogate pair
    assert units(line, column, types.PositionEncodingKind.Utf8) == 12  # 4 bytes for the rocket, 2 for é
