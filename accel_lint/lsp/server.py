"""The pygls wiring: which notifications lint, the debounce, publishing, and the requests.

Linting runs in one worker thread, one lint at a time, so that requests are answered while a
large file is analysed (and the engine, which patches libcst while it parses, never runs twice
at once). Changes are debounced: a lint starts once no change came for :data:`DEBOUNCE_S`;
changes that arrive while one runs are linted together right after it.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer

from .. import __version__
from . import actions, convert
from .documents import Cell, Document, uri_to_path
from .project import Outcome, Project, Report

DEBOUNCE_S = 0.005  # a burst of notifications (a paste, a multi-cursor edit) is linted once
PYTHON_SUFFIXES = (".py", ".pyw")
WATCHED = ("**/pyproject.toml", "**/*.py", "**/*.ipynb")


class AccelLintServer(LanguageServer):
    def __init__(self) -> None:
        super().__init__(
            "accel-lint", __version__, text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[types.NotebookDocumentFilterWithCells(
                    notebook="*", cells=[types.NotebookCellLanguage(language="python")])],
                save=True),
        )
        self.project = Project()
        self.files: dict[str, None] = {}  # open file URIs (not notebook cells), in opening order
        self.notebooks: dict[str, None] = {}
        self.reports: dict[str, Report] = {}  # by document URI: the last lint's
        self._published: dict[str, tuple[int | None, list]] = {}  # target URI -> (version, diagnostics)
        self._targets: dict[str, set[str]] = {}  # document URI -> the URIs its diagnostics went to
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accel-lint")
        self._timer: asyncio.TimerHandle | None = None
        self._running = False
        self._dirty = False
        self._force: set[str] = set()
        self._everything = False
        self._config_errors: set[str] = set()

    # -- what is open -------------------------------------------------------------------------
    @property
    def encoding(self) -> str:
        return self.workspace.position_encoding or types.PositionEncodingKind.Utf16

    def snapshot(self) -> list[Document]:
        docs = []
        for uri in self.files:
            text = self.workspace.get_text_document(uri)
            docs.append(Document(uri, text.version, text.source))
        for uri in self.notebooks:
            notebook = self.workspace.get_notebook_document(notebook_uri=uri)
            if notebook is None:
                continue
            cells = []
            for cell in notebook.cells:
                text = self.workspace.text_documents.get(unquote(cell.document))  # pygls's keys
                code = text is not None and cell.kind == types.NotebookCellKind.Code
                cells.append(Cell(cell.document, text.source if code else "", code))
            docs.append(Document(uri, notebook.version, cells=tuple(cells)))
        return docs

    def report_for(self, uri: str) -> Report | None:
        """The report of a file, or of the notebook a cell belongs to."""
        if uri in self.reports:
            return self.reports[uri]
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return self.reports.get(notebook.uri) if notebook is not None else None

    def current_version(self, uri: str) -> int | None:
        if uri in self.notebooks:
            notebook = self.workspace.get_notebook_document(notebook_uri=uri)
            return notebook.version if notebook is not None else None
        return self.workspace.get_text_document(uri).version if uri in self.files else None

    # -- linting ------------------------------------------------------------------------------
    def schedule(self, delay: float = DEBOUNCE_S, force: Iterable[str] = (), everything: bool = False) -> None:
        """Lint the open documents once no change came for ``delay`` seconds; ``force``: URIs
        whose diagnostics are published even if unchanged (open, save); ``everything``: not only
        the documents whose text changed and those that share modules with them (files on disk
        or the set of open documents changed)."""
        self._force.update(force)
        self._everything |= everything
        self._dirty = True
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(delay, self._start)

    def _start(self) -> None:
        self._timer = None
        if not self._running:  # else the running lint goes again when it is done
            self._running = True
            asyncio.ensure_future(self._lint_while_dirty())

    async def _lint_while_dirty(self) -> None:
        try:
            while self._dirty:
                self._dirty = False
                force, self._force = self._force, set()
                everything, self._everything = self._everything, False
                documents = self.snapshot()
                try:
                    outcome = await self.in_worker(self.project.lint, documents, everything)
                    self._publish(outcome, force)
                except Exception as exc:  # a bug of ours: say so, keep serving
                    self.log(types.MessageType.Error, f"internal error while linting: {_traceback(exc)}")
        finally:
            self._running = False

    async def in_worker(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    def _publish(self, outcome: Outcome, force: set[str]) -> None:
        for error in outcome.internal:
            detail = f"\n{error.detail}" if error.detail else ""
            self.log(types.MessageType.Error, f"{error.path}: {error.message}{detail}")
        for message in outcome.config_errors:
            if message not in self._config_errors:
                self.window_show_message(types.ShowMessageParams(type=types.MessageType.Error,
                                                                 message=f"accel-lint: {message}"))
        self._config_errors = set(outcome.config_errors)
        for uri, report in outcome.reports.items():
            if uri not in self.files and uri not in self.notebooks:
                continue  # closed while it was linted
            if self.reports.get(uri) is report and uri not in force:
                continue  # not linted again: nothing new to say
            self.reports[uri] = report
            version = report.document.version
            per_target = convert.diagnostics(report, self.encoding)
            for target in self._targets.get(uri, set()) - set(per_target):
                self._send(target, None, [])  # a cell that was deleted
            self._targets[uri] = set(per_target)
            for target, found in per_target.items():
                last = self._published.get(target)
                if uri in force or last is None or last != (version, found):
                    self._send(target, version if report.document.cells is None else None, found)
                    self._published[target] = (version, found)

    def _send(self, uri: str, version: int | None, found: list) -> None:
        self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri=uri, diagnostics=found,
                                                                              version=version))

    def forget(self, uri: str) -> None:
        """A closed document: its diagnostics go away with it."""
        self.reports.pop(uri, None)
        for target in self._targets.pop(uri, {uri}):
            self._published.pop(target, None)
            self._send(target, None, [])

    def log(self, kind: types.MessageType, message: str) -> None:
        self.window_log_message(types.LogMessageParams(type=kind, message=f"accel-lint: {message}"))

    # -- client capabilities -------------------------------------------------------------------
    def _code_action_caps(self):
        text = self.client_capabilities.text_document
        return text.code_action if text is not None else None

    @property
    def can_resolve(self) -> bool:
        caps = self._code_action_caps()
        support = caps.resolve_support if caps is not None else None
        return support is not None and "edit" in support.properties

    @property
    def disabled_support(self) -> bool:
        caps = self._code_action_caps()
        return bool(caps is not None and caps.disabled_support)


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def _is_python(document: types.TextDocumentItem) -> bool:
    return document.language_id == "python" or uri_to_path(document.uri).endswith(PYTHON_SUFFIXES)


server = AccelLintServer()


@server.feature(types.INITIALIZE)
def initialize(ls: AccelLintServer, params: types.InitializeParams) -> None:
    folders = [uri_to_path(f.uri) for f in params.workspace_folders or []]
    if not folders and params.root_uri:
        folders = [uri_to_path(params.root_uri)]
    ls.project.roots = [f for f in folders if f]


@server.feature(types.INITIALIZED)
async def initialized(ls: AccelLintServer, params: types.InitializedParams) -> None:
    workspace = ls.client_capabilities.workspace
    watched = workspace.did_change_watched_files if workspace is not None else None
    if watched is not None and watched.dynamic_registration:
        # configuration and modules changed outside the editor (a checkout, a formatter)
        options = types.DidChangeWatchedFilesRegistrationOptions(
            watchers=[types.FileSystemWatcher(glob_pattern=glob) for glob in WATCHED])
        try:
            await ls.client_register_capability_async(types.RegistrationParams(registrations=[types.Registration(
                id="accel-lint-watched-files", method=types.WORKSPACE_DID_CHANGE_WATCHED_FILES,
                register_options=options)]))
        except Exception as exc:  # the files are looked at again on every lint anyway
            ls.log(types.MessageType.Info, f"file watching not registered ({exc}); files are checked on each lint")


@server.feature(types.WORKSPACE_DID_CHANGE_WORKSPACE_FOLDERS)
def folders_changed(ls: AccelLintServer, params: types.DidChangeWorkspaceFoldersParams) -> None:
    ls.project.roots = [r for r in (uri_to_path(f.uri) for f in ls.workspace.folders.values()) if r]
    ls.schedule(everything=True)


@server.feature(types.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: AccelLintServer, params: types.DidOpenTextDocumentParams) -> None:
    if ls.workspace.get_notebook_document(cell_uri=params.text_document.uri) is not None:
        return  # a cell: its notebook is the document
    if _is_python(params.text_document):
        ls.files[params.text_document.uri] = None
        ls.schedule(0, force=[params.text_document.uri])


@server.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: AccelLintServer, params: types.DidChangeTextDocumentParams) -> None:
    if params.text_document.uri in ls.files:
        ls.schedule()


@server.feature(types.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: AccelLintServer, params: types.DidSaveTextDocumentParams) -> None:
    if params.text_document.uri in ls.files:
        ls.schedule(0, force=[params.text_document.uri], everything=True)


@server.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: AccelLintServer, params: types.DidCloseTextDocumentParams) -> None:
    if params.text_document.uri in ls.files:
        del ls.files[params.text_document.uri]
        ls.forget(params.text_document.uri)
        ls.schedule(everything=True)  # the modules that imported it read it from disk again


@server.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def notebook_open(ls: AccelLintServer, params: types.DidOpenNotebookDocumentParams) -> None:
    ls.notebooks[params.notebook_document.uri] = None
    ls.schedule(0, force=[params.notebook_document.uri])


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def notebook_change(ls: AccelLintServer, params: types.DidChangeNotebookDocumentParams) -> None:
    if params.notebook_document.uri in ls.notebooks:
        ls.schedule()


@server.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def notebook_save(ls: AccelLintServer, params: types.DidSaveNotebookDocumentParams) -> None:
    if params.notebook_document.uri in ls.notebooks:
        ls.schedule(0, force=[params.notebook_document.uri], everything=True)


@server.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def notebook_close(ls: AccelLintServer, params: types.DidCloseNotebookDocumentParams) -> None:
    if params.notebook_document.uri in ls.notebooks:
        del ls.notebooks[params.notebook_document.uri]
        ls.forget(params.notebook_document.uri)
        ls.schedule(everything=True)


@server.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def watched_files_changed(ls: AccelLintServer, params: types.DidChangeWatchedFilesParams) -> None:
    ls.project.configs.clear()
    ls.schedule(everything=True)


@server.feature(types.TEXT_DOCUMENT_HOVER)
def hover(ls: AccelLintServer, params: types.HoverParams) -> types.Hover | None:
    report = ls.report_for(params.text_document.uri)
    return actions.hover(report, params.text_document.uri, params.position, ls.encoding) if report else None


@server.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, actions.FIX_ALL], resolve_provider=True))
async def code_action(ls: AccelLintServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    report = ls.report_for(params.text_document.uri)
    if report is None:
        return None
    found = actions.actions(report, params.text_document.uri, params.range, params.context.only, ls.encoding,
                            ls.disabled_support)
    if ls.can_resolve:
        return found
    out = []  # a client that cannot resolve: the edits now, and only actions that have one
    for action in found:
        if action.data is not None:
            action = await resolve_code_action(ls, action)
        if action.edit is not None or action.disabled is not None:
            out.append(action)
    return out


@server.feature(types.CODE_ACTION_RESOLVE)
async def resolve_code_action(ls: AccelLintServer, action: types.CodeAction) -> types.CodeAction:
    data = action.data if isinstance(action.data, dict) else {}
    report = ls.reports.get(data.get("uri", ""))
    if report is None or report.document.version != ls.current_version(report.document.uri) or \
            report.document.version != data.get("version"):
        ls.log(types.MessageType.Warning, f"code action {action.title!r}: the document changed; try again")
        return action
    resolved = await ls.in_worker(actions.resolve, report, data, ls.encoding)
    action.edit = resolved.edit
    if resolved.edit is None and resolved.notices:
        ls.window_show_message(types.ShowMessageParams(type=types.MessageType.Warning,
                                                       message="accel-lint: " + "; ".join(resolved.notices)))
    return action


def serve() -> None:
    server.start_io()
