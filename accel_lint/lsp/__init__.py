"""``accel-lint server``: the linter as a Language Server Protocol server, for editors.

* :mod:`.documents`: what the editor has open (files and notebooks) and the bytes the engine
  lints for each;
* :mod:`.project`: configuration per file and lint results kept warm between edits, with the
  analysis across modules of :func:`accel_lint.engine.lint_paths`;
* :mod:`.convert`: engine diagnostics -> LSP diagnostics (positions, docs links, related lines);
* :mod:`.actions`: code actions (fixes with ``--fix``'s checks, ``# noqa``, fix all) and hover;
* :mod:`.server`: the pygls wiring (debounced linting, publishing, requests).

pygls is an optional dependency (``pip install 'accel-lint[lsp]'``): nothing here is imported
by the command-line linter.
"""
