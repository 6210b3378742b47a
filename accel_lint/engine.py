"""File -> parse once -> semantic model -> every enabled rule -> diagnostics.

The linted code is never imported or run. A file that does not parse gives one AL001
diagnostic; a file that cannot be read or decoded gives a FileError; an exception in
one rule is an internal error for that file and rule, and the run goes on.
"""

from __future__ import annotations

import ast
import functools
import gc
import os
import re
import sys
import traceback
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from .accelerate_config import adjust as adjust_severities
from .cache import ResultCache, cache_key
from .collectives import ACCELERATOR, ACCELERATOR_FACTORY, RETURNS_KIND, CLIPS_GRADIENTS, DOWNLOADS, END, MADE_FACTS, RANK_PREDICATE, REPLACES_PRINT, STARTS_TRACKER, WRITES_FILE, \
    WAITS_FOR_CALLERS
from .config import Config
from .diagnostics import Diagnostic, FileError, Notice
from .rules import LAUNCH_PRECISION_VARIANTS, SHARDING_ONLY_VARIANTS, all_rules, rule_table

if TYPE_CHECKING:
    import libcst as cst

    from .model import FileModel
    from .reparse import Layout, Reparser

    from .rules.base import Fix, Rule

ENGINE_RULES = {"AL001", "AL002"}  # reported by the engine itself, not by a rule's check()
from .suppressions import Suppressions, scan as scan_suppressions

# A file that mentions none of these cannot hold a finding: every rule needs an
# accelerator-like object (every source of one spells Accelerator, AcceleratorState,
# PartialState, a member of the accelerator protocol, or a declared accelerator name) or an import of
# torch.distributed. "accelerate" alone is not enough: diffusers mentions it in most
# files for `is_accelerate_available`; nor is "distributed": every Apache header has it.
PREFILTER_TOKENS = (b"ccelerator", b"PartialState", b"torch.distributed", b"import distributed",
                    b"is_main_process", b"wait_for_everyone", b"unwrap_model", b"sync_gradients")


def may_have_findings(data: bytes, config: Config) -> bool:
    """The cheap byte test run before parsing (documented in the README)."""
    if any(token in data for token in PREFILTER_TOKENS):
        return True
    return any(name.encode() in data for name in config.accelerator_names)


@dataclass
class LintResult:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    errors: list[FileError] = field(default_factory=list)
    notices: list[Notice] = field(default_factory=list)
    files_checked: int = 0
    # only with want_fixes (never cached, never sent between processes): the parsed module
    # and each fixable diagnostic's fix, for accel_lint.fixes
    module: cst.Module | None = None
    fixes: list[tuple[Diagnostic, Fix]] = field(default_factory=list)
    model: object = None  # the FileModel, with want_fixes: what a fix may not break
    # for the analysis across modules: what this file exports (functions that perform
    # collectives) and what it imports by name; see resolve_project
    summary: dict = field(default_factory=dict)
    imports: list = field(default_factory=list)
    passes: list = field(default_factory=list)  # prepared objects passed to imported functions
    path: str = ""
    one_process: bool = False  # the project runs this file as one process (_apply_launch)


def lint_source(source: bytes | str, path: str, config: Config, rules: list[type[Rule]] | None = None,
                want_fixes: bool = False, external: dict | None = None, cache_only: bool = False,
                incoming: dict | None = None, reparser: Reparser | None = None) -> LintResult | None:
    """Lint one file's contents. ``rules`` defaults to every enabled rule. ``external``: what the
    functions this file imports from other modules of the tree do (see :func:`lint_paths`).
    ``cache_only``: return the cached result, or ``None`` instead of analysing. ``reparser``: parse
    an edit of the file this reparser saw last by re-parsing only the statement it changed."""
    result = LintResult(files_checked=1, path=path)
    data = source.encode("utf-8") if isinstance(source, str) else source
    if len(data) > config.max_file_size:
        result.notices.append(_too_large(path, len(data), config))
        return result
    if b"\x00" in data:
        result.errors.append(FileError(path, "binary file (contains NUL bytes); skipped"))
        return result
    if not may_have_findings(data, config) and not incoming:  # a file that receives prepared objects is analysed
        return result
    codes = [code for code, _ in rule_table()] if rules is None else [r.code for r in rules]
    codes = [code for code in codes if config.is_enabled(code, path)]
    use_cache = config.cache_dir is not None and rules is None and not want_fixes
    cache = ResultCache(config.cache_dir) if use_cache else None
    # a second-pass result depends on what the imported functions do: that is part of its key
    settings = config.settings_fingerprint() + (f"|{sorted(external.items())}" if external else "") + \
        (f"|{sorted(incoming.items())}" if incoming else "")
    key = cache_key(data, codes, settings) if cache else ""
    if cache is not None:
        hit = cache.get(key, path)
        if hit is not None:
            (result.diagnostics, result.errors, result.notices, result.summary, result.imports,
             result.passes) = hit
            _apply_launch(result, path, data, config)
            result.diagnostics = adjust_severities(result.diagnostics, config.accelerate_configs)
            return result
    if cache_only:
        return None
    enabled = [r for r in (rules if rules is not None else all_rules()) if r.code in codes]
    _lint_parsed(data, path, config, enabled, result, want_fixes, external, incoming, reparser)
    if cache is not None:
        cache.put(key, result.diagnostics, result.errors, result.notices, result.summary, result.imports,
                  result.passes)
    # after the cache: the same file content gives the same findings under any config
    _apply_launch(result, path, data, config)
    result.diagnostics = adjust_severities(result.diagnostics, config.accelerate_configs)
    if result.fixes:
        adjusted = {d: d.severity for d in result.diagnostics}
        result.fixes = [(replace(d, severity=adjusted.get(d, d.severity)), f) for d, f in result.fixes]
    return result


def _lint_parsed(data: bytes, path: str, config: Config, enabled: list[type[Rule]], result: LintResult,
                 want_fixes: bool = False, external: dict | None = None, incoming: dict | None = None,
                 reparser: Reparser | None = None) -> None:
    """Parse, build the model, run the rules; everything goes into ``result``."""
    with _no_cyclic_gc():
        _parse_and_analyse(data, path, config, enabled, result, want_fixes, external, incoming, reparser)


def _evidence(model, finding) -> tuple[tuple[int, str], ...]:
    """A finding's facts as (line, fact), in line order, each once."""
    seen: dict[tuple[int, str], None] = {}
    for node, fact in finding.evidence:
        seen.setdefault((model.line_of(node), fact), None)
    return tuple(sorted(seen))


def _no_validation(node) -> None:
    pass


def _parse_trusted(data: bytes) -> cst.Module:
    """libcst validates every node it constructs, which is a tenth of the parse; the parser's
    own output is valid by construction (libcst's source says as much), so validation is off
    while it parses. Nodes built later (fixes) are validated as usual, and fixes are re-parsed."""
    import libcst as cst

    original = cst.CSTNode.__post_init__
    cst.CSTNode.__post_init__ = _no_validation  # type: ignore[method-assign]
    try:
        return cst.parse_module(data)
    finally:
        cst.CSTNode.__post_init__ = original  # type: ignore[method-assign]


@contextmanager
def _no_cyclic_gc():
    """A parse allocates millions of nodes and the cyclic collector would scan them again
    and again (a quarter of the parse time); trees are freed by reference counting, and
    the collector runs as usual between files."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _parse_and_analyse(data: bytes, path: str, config: Config, enabled: list[type[Rule]], result: LintResult,
                       want_fixes: bool, external: dict | None = None, incoming: dict | None = None,
                       reparser: Reparser | None = None) -> None:
    import libcst as cst

    layout = previous = None
    try:
        if reparser is not None:
            module, layout = reparser.parse(path, data)
            previous = reparser.walks_before(path)
        else:
            module = _parse_trusted(data)
    except cst.ParserSyntaxError as exc:
        position = _syntax_error_position(data, exc)
        if position is None:  # valid Python that libcst's parser cannot handle (e.g. its nesting limit)
            reason = str(exc.message).splitlines()[0] if exc.message else "parser error"
            result.errors.append(FileError(path, f"valid Python that the parser cannot handle ({reason}); skipped"))
            return
        line, col, message = position
        recovered = _leave_out_broken_lines(data, line, message)
        if config.is_enabled("AL001", path):
            left_out = "the file was not checked" if recovered is None else (
                "the rest was checked reading " + ", ".join(recovered[1]))
            result.diagnostics.append(
                Diagnostic(path, line, col, line, col, "AL001", "syntax-error", "error",
                           f"syntax error: {message}; {left_out}")
            )
        if recovered is None:
            return
        # ruff's way: the rest of the file is still checked, as if the broken lines were `pass`
        # (no line moves); no fix is offered, since a fix would write the stand-in back
        syntax_error = list(result.diagnostics)
        _parse_and_analyse(recovered[0], path, config, enabled, result, False, external, incoming)
        result.diagnostics = sorted(set(syntax_error) | {replace(d, fix=None) for d in result.diagnostics})
        result.fixes = []
        return
    except (SyntaxError, UnicodeDecodeError, LookupError) as exc:
        result.errors.append(FileError(path, f"cannot decode: {exc} (not UTF-8 and no valid coding cookie); skipped"))
        return
    except RecursionError:
        result.errors.append(FileError(path, "too deeply nested to parse; skipped"))
        return
    try:
        with _deep_recursion():
            model = _analyse(module, data, path, config, enabled, result, external, incoming, layout, previous)
            if reparser is not None and model is not None:
                reparser.keep_walks(path, module, model.walks())
    except RecursionError:
        # e.g. hundreds of implicitly concatenated strings nest that deep in libcst's tree
        result.diagnostics = []
        result.fixes = []
        result.model = None
        result.errors.append(FileError(path, "too deeply nested to analyse (recursion limit); skipped"))
    result.diagnostics = sorted(set(result.diagnostics))
    if want_fixes:
        result.module = module
    else:
        result.fixes = []
        if result.model is not None:
            result.model.release()
        result.model = None


def _analyse(module: cst.Module, data: bytes, path: str, config: Config, enabled: list[type[Rule]],
             result: LintResult, external: dict | None = None, incoming: dict | None = None,
             layout: Layout | None = None, previous: dict | None = None) -> FileModel | None:
    """Model once, then every enabled rule; an exception in one rule is that rule's internal error.
    Suppression comments are applied here, and AL002 reports the ones that suppressed nothing.
    Returns the model (``None`` if it could not be built)."""
    import libcst as cst

    from .library import library_for
    from .model import FileModel

    try:
        model = FileModel(module, config.accelerator_names, external, incoming, layout, previous,
                          library=library_for(config.library_extension))
    except RecursionError:
        raise
    except Exception as exc:  # an analysis bug must not stop the run
        result.errors.append(FileError(path, _internal("building the model", exc), internal=True, detail=_traceback(exc)))
        return None
    result.model = model
    text = data.decode(module.encoding, errors="replace")
    # Tokenizing for comments costs as much as a tenth of the analysis: only when a finding
    # may be suppressed, or a directive of ours could be unused or malformed.
    suppressions = scan_suppressions(text) if _names_our_directives(text) else None
    codes = {r.code for r in enabled}
    for rule_cls in enabled:
        if rule_cls.code in ENGINE_RULES:
            continue
        rule = rule_cls()
        try:
            if not rule.applies_to(model):
                continue
            for finding in rule.check(model):
                if model.never_runs(finding.node):
                    continue  # code no launch runs
                if suppressions is None:
                    suppressions = scan_suppressions(text)
                if suppressions.ignores_file(rule.code, rule.name):
                    continue
                line, col, end_line, end_col = model.position_of(finding.node)
                statement = model.statement_of(finding.node)
                first, last = model.position_of(statement)[0], end_line
                if type(statement) is cst.SimpleStatementLine:
                    last = max(last, model.position_of(statement)[2])
                if suppressions.suppress(first, last, rule.code, rule.name):
                    continue
                diagnostic = Diagnostic(
                    path, line, col, end_line, end_col, rule.code, rule.name, finding.severity or rule.severity,
                    finding.message, scope=model.qualname_of(finding.node), statement=model.statement_text(statement),
                    fix=finding.fix.applicability if finding.fix and finding.fix.refusal is None else None, tag=finding.tag,
                    evidence=_evidence(model, finding),
                )
                result.diagnostics.append(diagnostic)
                if finding.fix is not None:
                    result.fixes.append((diagnostic, finding.fix))
        except RecursionError:
            raise
        except Exception as exc:
            result.errors.append(FileError(path, _internal(rule.code, exc), internal=True, detail=_traceback(exc)))
    try:
        result.summary = model.module_summary()
        result.imports = model.project_imports()
        result.passes = model.prepared_arguments()
    except RecursionError:
        raise
    except Exception as exc:
        result.errors.append(FileError(path, _internal("the module summary", exc), internal=True, detail=_traceback(exc)))
    if suppressions is None:
        return model
    for bad in suppressions.malformed:
        result.notices.append(Notice(path, f"line {bad.line}: {bad.message} (ignored)"))
    if "AL002" in codes and not suppressions.ignores_file("AL002", "unused-suppression"):
        _unused_suppressions(path, text.splitlines(), suppressions, enabled, result)
    return model


_OUR_DIRECTIVE = re.compile(r"accel-lint|noqa\s*:[^\n]*(\bAL\d|\b[a-z]+(-[a-z]+){1,})", re.IGNORECASE)


def _names_our_directives(text: str) -> bool:
    """A directive that names our codes or rule names, a malformed one, or a file-ignore."""
    return bool(_OUR_DIRECTIVE.search(text)) or bool(re.search(r"noqa\s*:\s*(#|$)", text, re.MULTILINE))


def _unused_suppressions(path: str, text_lines: list[str], suppressions: Suppressions, enabled: list[type[Rule]],
                         result: LintResult) -> None:
    """AL002: codes of ours in a ``# noqa`` that suppressed nothing. Only rules that ran can
    be judged; codes of other tools are theirs; an unknown AL code is reported as unknown."""
    from .rules import all_rules

    ran = {r.code for r in enabled} | {r.name for r in enabled}
    known = {r.code for r in all_rules()} | {r.name for r in all_rules()}
    for noqa in suppressions.noqa.values():
        unused = []
        for entry in noqa.codes:
            ours = entry.startswith("AL") or entry in known
            if not ours or entry in noqa.used:
                continue
            if entry not in known:
                unused.append((entry, "unknown rule"))
            elif entry in ran:
                unused.append((entry, "nothing to suppress here"))
        if not unused:
            continue
        what = ", ".join(f"`{e}` ({why})" for e, why in unused)
        diagnostic = Diagnostic(path, noqa.line, noqa.column, noqa.line, noqa.end_column, "AL002", "unused-suppression",
                                "warning", f"unused suppression {what}; remove it so it cannot hide a future finding",
                                statement=f"noqa:{','.join(e for e, _ in unused)}", fix="safe")
        result.diagnostics.append(diagnostic)
        from .rules.base import Fix

        edit = _noqa_rewrite(text_lines[noqa.line - 1], noqa, {e for e, _ in unused})
        result.fixes.append((diagnostic, Fix("safe", "remove the unused suppression", text_edits=(edit,))))


def _noqa_rewrite(line_text: str, noqa, drop: set[str]) -> tuple[int, int, int, str]:
    """(line, start column, end column, new text): the ``# noqa`` without the codes in ``drop``,
    or no comment at all (with the spaces before it) when nothing is left."""
    keep = [c for c in noqa.codes if c not in drop]
    start, end = noqa.column, noqa.end_column
    if keep:
        return noqa.line, start, end, "# noqa: " + ", ".join(keep)
    while start > 1 and line_text[start - 2] in " \t":
        start -= 1
    return noqa.line, start, end, ""


NOTEBOOK_SIZE_FACTOR = 20  # a notebook's outputs (images) may be large: the size limit applies to its code


# what a script written for several processes uses: it starts them itself, trains (a backward, a
# library's Trainer), tests its rank, or waits for the other ranks
_STARTS_PROCESSES = (b"notebook_launcher", b"notebook_launch(", b"debug_launcher", b"spawn(", b"start_processes",
                     b"elastic_launch",
                     b"Process(")
_SEVERAL_PROCESSES = _STARTS_PROCESSES + (
    b".backward(", b"Trainer(", b"is_main_process", b"is_local_main_process", b"get_rank()",
    b"wait_for_everyone", b"main_process_first", b"split_between_processes")


def starts_processes(code: bytes) -> bool:
    """The code starts processes itself (``notebook_launcher``, ``mp.spawn``, ...)."""
    return any(token in code for token in _STARTS_PROCESSES)


def written_for_several_processes(data: bytes) -> bool:
    """The script is written for several processes, whatever its documented launch: it starts
    its own (``notebook_launcher``, ``mp.spawn``), trains (``.backward(``, a library's
    ``Trainer(``), tests its rank (``is_main_process``)
    or waits for the others. A README's ``python train.py`` then shows one way to run it, not
    the only one; only a script with none of these (an evaluation or export run as one process,
    which may still pick its device by ``process_index`` or gather what it computes) is taken at
    its launch commands' word."""
    return any(token in data for token in _SEVERAL_PROCESSES)


def _keep_one_process_findings(result: LintResult, several_processes: Collection[int] = frozenset()) -> None:
    """Only the findings of rules whose harm exists in one process too (``Rule.holds_in_one_process``)
    stay, with their fixes, except on the lines in ``several_processes`` (a notebook's launched
    functions), where every finding stays."""
    kept = {r.code: r.several_process_variants for r in all_rules() if r.holds_in_one_process}
    _keep_findings(result, lambda d: d.code in kept and d.tag not in kept[d.code] or d.line in several_processes)


def _keep_findings(result: LintResult, keep: Callable[[Diagnostic], bool]) -> None:
    """Only the findings ``keep`` accepts stay, with their fixes."""
    result.diagnostics = [d for d in result.diagnostics if keep(d)]
    result.fixes = [(d, fix) for d, fix in result.fixes if keep(d)]


# `os.environ["CUDA_VISIBLE_DEVICES"] = "3"` at the top of the module (column 0: unconditional)
_PINS_ONE_GPU = re.compile(rb"""^os\.environ(?:\[\s*["']CUDA_VISIBLE_DEVICES["']\s*\]\s*=|"""
                           rb"""\.setdefault\(\s*["']CUDA_VISIBLE_DEVICES["']\s*,)\s*["']\s*\d+\s*["']""", re.MULTILINE)


def pins_one_gpu(data: bytes) -> bool:
    """The module makes one GPU visible when it is imported, and starts no processes itself: a
    launch of several GPU processes fails in its second process (the device of local rank 1
    does not exist), so it runs as one process."""
    return bool(_PINS_ONE_GPU.search(data)) and not starts_processes(data)


def _apply_launch(result: LintResult, path: str, data: bytes, config: Config) -> None:
    """A file the project runs as one process (``config.single_process_files``) and that is not
    written for several (or that a project with no launch of several processes anywhere runs
    with a plain ``python``: ``config.one_process_project_files``), or a file that pins one
    GPU at import: only the findings of rules whose
    harm exists in one process too (``Rule.holds_in_one_process``) stay, with their fixes. A
    file every launch of which runs under DeepSpeed (``config.deepspeed_files``): no AL501 on
    attribute reads. A project that names no sharding backend (``config.names_sharding_backend``):
    no finding of a variant whose harm needs one. Applied after the cache."""
    one_process = path in config.single_process_files and (
        not written_for_several_processes(data)
        or path in config.one_process_project_files and not starts_processes(data))
    if one_process or pins_one_gpu(data):
        result.one_process = True
        _keep_one_process_findings(result)
    if not config.names_sharding_backend:
        # nothing in the project names FSDP, ZeRO-3 or XLA: a harm that exists only there is not one
        fp16_free = path in config.fp16_free_files
        _keep_findings(result, lambda d: d.tag not in SHARDING_ONLY_VARIANTS.get(d.code, ()) and not (
            fp16_free and d.tag in LAUNCH_PRECISION_VARIANTS.get(d.code, ())))
    if config.strips_module_prefix:
        # the project's loaders drop the `module.` prefix a wrapper's state dict carries
        _keep_findings(result, lambda d: not (d.code == "AL501" and d.tag == "state_dict"))
    if path in config.deepspeed_files:
        # every launch runs it under DeepSpeed, whose engine forwards the attributes it lacks to
        # the model (its `state_dict()` keys still carry the `module.` prefix)
        _keep_findings(result, lambda d: not (d.code == "AL501" and d.tag == "attribute"))


def lint_file(path: Path, config: Config) -> LintResult:
    display = path.as_posix()
    notebook = path.suffix == ".ipynb"
    try:
        size = path.stat().st_size
        if size > config.max_file_size * (NOTEBOOK_SIZE_FACTOR if notebook else 1):
            return LintResult(notices=[_too_large(display, size, config)], files_checked=1)
    except OSError:
        pass  # reading it below gives the precise error
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        return LintResult(errors=[FileError(display, "is a directory, not a file; skipped")], files_checked=1)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return LintResult(errors=[FileError(display, f"cannot read: {reason}; skipped")], files_checked=1)
    if notebook:
        return lint_notebook(data, display, config)
    return lint_source(data, display, config)


def lint_notebook(data: bytes, path: str, config: Config, want_fixes: bool = False, external: dict | None = None,
                  reparser: Reparser | None = None):
    """Lint a notebook's code cells as one module; positions come back as (cell, line).
    With ``want_fixes`` the parsed notebook is returned too: ``(result, notebook)``."""
    from . import notebooks

    try:
        notebook = notebooks.read(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, notebooks.NotebookError) as exc:
        result = LintResult(errors=[FileError(path, f"cannot read notebook: {exc}; skipped")], files_checked=1)
        return (result, None) if want_fixes else result
    code = notebook.module.encode("utf-8")
    result = lint_source(code, path, config, want_fixes=want_fixes, external=external,
                         reparser=reparser)
    # the kernel is one process: top-level cells run once, in cell order; only what a launcher
    # (`notebook_launcher(fn)`, `spawn`) runs is a program of several processes. A `%%writefile`
    # cell is masked here and linted below as the script it writes.
    _keep_one_process_findings(result, notebooks.launched_lines(notebook.module) if starts_processes(code) else set())
    if notebook.broken and config.is_enabled("AL001", path):
        for line, column, message in notebook.broken.values():
            result.diagnostics.append(Diagnostic(path, line, column, line, column, "AL001", "syntax-error", "error",
                                                 f"syntax error: {message}; this cell was not checked (Jupyter "
                                                 "would not run it), the others were"))
    result.diagnostics = sorted((_to_cell(d, notebook) for d in result.diagnostics), key=Diagnostic.sort_key)
    result.fixes = [(_to_cell(d, notebook), fix) for d, fix in result.fixes]
    result.notices = [replace(n, message=_cell_lines(n.message, notebook, None)) for n in result.notices]
    for script in notebooks.written_scripts(notebook):
        _add_written_script(result, script, path, config)
    return (result, notebook) if want_fixes else result


def _add_written_script(result: LintResult, script, path: str, config: Config) -> None:
    """A ``%%writefile train.py`` cell that the notebook runs (``!accelerate launch train.py``)
    is linted as that script, its findings placed in its cell. Its fixes are not offered: the
    cell's first line is the magic, and the file on disk is what runs."""
    one = lint_source(script.view.module.encode("utf-8"), path, config)
    if not script.several_processes:
        _keep_one_process_findings(one)
    result.diagnostics = sorted([*result.diagnostics,
                                 *(replace(_to_cell(d, script.view), fix=None) for d in one.diagnostics)],
                                key=Diagnostic.sort_key)
    result.errors.extend(one.errors)
    result.notices.extend(replace(n, message=f"{script.name} (cell {script.cell.index}): {n.message}")
                          for n in one.notices)


def _to_cell(d: Diagnostic, notebook) -> Diagnostic:
    cell, line = notebook.position(d.line)
    end_cell, end_line = notebook.position(d.end_line)
    if end_cell != cell:
        end_line, end_col = line, d.column
    else:
        end_col = d.end_column
    evidence = []
    for at, fact in d.evidence:  # a fact in another cell names it, placed on the finding's line
        fact_cell, fact_line = notebook.position(at)
        evidence.append((fact_line, fact) if fact_cell == cell else (line, f"cell {fact_cell}, line {fact_line}: {fact}"))
    return replace(d, line=line, end_line=end_line, end_column=end_col, cell=cell,
                   file_line=notebook.file_line(cell, line), message=_cell_lines(d.message, notebook, cell),
                   evidence=tuple(evidence))


_LINE_REFERENCE = re.compile(r"\bline (\d+)\b")


def _cell_lines(message: str, notebook, cell: int | None) -> str:
    """Messages name other lines ("the guard on line 27"): in a notebook, say which cell."""
    def to_cell(match: re.Match) -> str:
        other_cell, other_line = notebook.position(int(match.group(1)))
        return f"line {other_line}" if other_cell == cell else f"cell {other_cell}, line {other_line}"

    return _LINE_REFERENCE.sub(to_cell, message)


PARALLEL_MIN_FILES = 8  # below this, starting worker processes costs more than it saves


def lint_paths(files: list[Path], config: Config, jobs: int = 1,
               progress: Callable[[int, int], None] | None = None) -> LintResult:
    """Lint every file, in ``jobs`` worker processes when there are enough files.
    The result does not depend on ``jobs``: diagnostics and errors come back sorted.
    ``progress(done, total)`` is called as results arrive."""
    if jobs > 1 and len(files) >= PARALLEL_MIN_FILES:
        results = _lint_in_workers(files, config, jobs)
    else:
        results = (lint_file(path, config) for path in files)
    collected: list[LintResult] = []
    for done, one in enumerate(results, 1):
        if progress is not None:
            progress(done, len(files))
        collected.append(one)
    collected = _across_modules(collected, config, jobs)
    total = LintResult()
    for one in collected:
        total.diagnostics.extend(one.diagnostics)
        total.errors.extend(one.errors)
        total.notices.extend(one.notices)
        total.files_checked += one.files_checked
    total.diagnostics.sort(key=Diagnostic.sort_key)
    total.errors.sort(key=lambda e: e.path)
    total.notices.sort(key=lambda n: n.path)
    return total


def _across_modules(results: list[LintResult], config: Config, jobs: int = 1,
                    relint: Callable[[list[LintResult], list[tuple[int, tuple]]], list[LintResult]] | None = None
                    ) -> list[LintResult]:
    """The passes after the first: a file is linted again knowing what the other modules of the
    tree say of it (the collectives and accelerator factories it imports, the prepared objects
    and guards its functions' callers give). What a file says can change once it is linted
    again (a script that only becomes an Accelerate program through an imported accelerator
    factory reports its guarded calls then), so this repeats while some file's context
    changes, at most three times. Only files whose context changed are linted again.
    ``relint(results, [(index, context), ...])``: how a file is linted again with a context
    (default: read from disk; the language server lints the editor's text instead)."""
    out = list(results)
    used: dict[int, tuple] = {}
    paths = [os.path.abspath(r.path) for r in results]
    # the first component of an absolute import must name a linted folder or module
    # (`torch.zeros(...)` calls are recorded too, and there are many)
    local_names = {part.removesuffix(".py") for path in set(os.path.dirname(p) for p in paths) | set(paths)
                   for part in path.split(os.sep)}
    every_rank_seen: set[str] = set()
    for _ in range(3):
        exporting = {path: r.summary for path, r in zip(paths, out) if r.summary}
        _add_helper_facts(out, exporting, set(paths), config.cache_dir, jobs)
        incoming = _incoming_arguments(out, paths, local_names, every_rank_seen)
        if not exporting and not incoming:
            return out
        again = []
        for i, r in enumerate(out):
            external = _imported_ops(r, exporting) if r.imports and exporting else {}
            passed = incoming.get(paths[i], {})
            context = (external, passed)
            if (external or passed or i in used) and used.get(i, ({}, {})) != context:
                again.append((i, context))
        if not again:
            return out
        for i, context in again:
            used[i] = context
        out = relint(out, again) if relint is not None else _relint(out, again, config, jobs)
    return out


def _add_helper_facts(results: list[LintResult], exporting: dict[str, dict], linted: set[str],
                      cache_dir: Path | None = None, jobs: int = 1) -> None:
    """What calling a function or class of a module the first pass did not analyse makes (a
    ``models.py`` with no Accelerate in it): read from that module when a linted file imports a
    name from it and binds the result. The modules are read in ``jobs`` workers first when there
    are enough of them (a large tree imports hundreds)."""
    asked = _asked_of_modules(results, exporting, linted)
    told: dict[tuple[str, frozenset[str], frozenset], bool] = {}  # _may_tell, once per module and question
    if jobs > 1:
        _read_helper_facts_in_workers(results, exporting, linted, cache_dir, jobs, asked)
    for candidate, name, _why in _unexported_imports(results, exporting, linted):
        names, whys = asked.get(candidate, ({name}, _ALL))
        facts = _helper_facts(candidate, cache_dir, names | {name}, whys, told)
        if name not in facts:
            # a package that re-exports a class of one of its modules (`from .modeling import
            # Net` in its __init__.py), or a module that passes on what it star-imports
            # (`from utils import *` in the `model.py` the script star-imports)
            source = _reexported_from(candidate, name) if candidate.endswith("__init__.py") else None
            source = source or _star_source(candidate, name)
            facts = _helper_facts(source, cache_dir, {name}, _ALL, told) if source in linted else {}
        told_of = {key: made for key, made in facts.items() if key == name or key.startswith(name + ".")}
        if told_of:  # (`Class.method`: an alternative constructor of the class)
            exporting[candidate] = {**exporting.get(candidate, {}), **told_of}


def _unexported_imports(results: list[LintResult], exporting: dict[str, dict], linted: set[str]
                        ) -> Iterator[tuple[str, str, str]]:
    """(module file, name, why) for each name a linted file imports from a module of the tree
    whose summary says nothing of that name (yet: the caller may add it while iterating)."""
    for r in results:
        here = os.path.dirname(os.path.abspath(r.path))
        for level, module, name, _local, why in r.imports or ():
            for candidate in _module_files(here, level, module):
                if candidate not in linted:
                    continue
                if name not in exporting.get(candidate, {}):
                    yield candidate, name, why
                break


def _asked_of_modules(results: list[LintResult], exporting: dict[str, dict], linted: set[str]
                      ) -> dict[str, tuple[set[str], frozenset[str]]]:
    """module file -> (the names importers ask it about, why they ask: ``"tested"``, a name only
    read, where a rank or rank predicate is all it can tell; ``"called"``, called with its result
    unused, where a file it writes (or a rank it reads) matters; anything else asks for all)."""
    asked: dict[str, tuple[set[str], set[str]]] = {}
    for candidate, name, why in _unexported_imports(results, exporting, linted):
        names, whys = asked.setdefault(candidate, (set(), set()))
        names.add(name)
        whys.add(why if why in ("tested", "called") else "all")
    return {candidate: (names, frozenset(whys)) for candidate, (names, whys) in asked.items()}


def _read_helper_facts_in_workers(results: list[LintResult], exporting: dict[str, dict], linted: set[str],
                                  cache_dir: Path | None, jobs: int, asked: dict[str, tuple[set[str], frozenset]]) -> None:
    """Fill the per-process memo of ``_helper_facts`` for every module ``_add_helper_facts`` may
    ask about, in worker processes."""
    wanted = {candidate for candidate, (names, whys) in asked.items() if _may_tell(candidate, names, whys)}
    reexported: dict[str, set[str]] = {}
    for candidate, (names, _whys) in asked.items():
        if candidate.endswith("__init__.py"):
            for name in names:
                source = _reexported_from(candidate, name)
                if source in linted:
                    reexported.setdefault(source, set()).add(name)
    wanted |= {source for source, names in reexported.items() if _may_tell(source, names, _ALL)}
    missing = []
    for path in sorted(wanted):
        key = _stat_key(path)
        if key is not None and key not in _HELPER_FACTS:
            missing.append((path, key))
    if len(missing) < PARALLEL_MIN_FILES:
        return
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            found = pool.map(_helper_facts, [p for p, _ in missing], [cache_dir] * len(missing), chunksize=4)
            for (_path, key), facts in zip(missing, found):
                _HELPER_FACTS[key] = facts
    except BrokenProcessPool:
        pass  # what is missing is read here, one module at a time


def _stat_key(path: str) -> tuple[str, int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return path, info.st_mtime_ns, info.st_size


_REEXPORTS: dict[tuple[str, int, int], dict[str, str]] = {}


def _reexported_from(init: str, name: str) -> str | None:
    """The module of the package whose ``__init__.py`` is ``init`` that ``name`` comes from
    (``from .modeling import Net``), or ``None``. Each version of the file is read once (a
    large package's ``__init__.py`` is asked about many names)."""
    import ast

    key = _stat_key(init)
    if key is None:
        return None
    try:
        names = _REEXPORTS.get(key)
        if names is None:
            with open(init, "rb") as f:
                tree = ast.parse(f.read())
            names = {}
            for node in tree.body:
                if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                    module = os.path.join(os.path.dirname(init), *node.module.split(".")) + ".py"
                    for alias in node.names:
                        if alias.name == "*":  # `from .train_utils import *`: what it defines
                            for defined in _defined_names(module):
                                names.setdefault(defined, module)
                        elif alias.asname is None:
                            names.setdefault(alias.name, module)
            if len(_REEXPORTS) > 4096:  # a long editor session: forget old versions
                _REEXPORTS.clear()
            _REEXPORTS[key] = names
    except (OSError, SyntaxError, ValueError):
        return None
    return names.get(name)


def _star_source(module: str, name: str, depth: int = 0) -> str | None:
    """The module a name that ``module`` does not define itself reaches it from, through its
    ``from X import *`` imports (two levels at most), or ``None``."""
    if depth > 1 or name in _defined_names(module):
        return None
    for level, imported in _star_imports(module):
        for candidate in _module_files(os.path.dirname(module), level, imported):
            if not os.path.isfile(candidate):
                continue
            if name in _defined_names(candidate):
                return candidate
            deeper = _star_source(candidate, name, depth + 1)
            if deeper is not None:
                return deeper
            break
    return None


_STAR_IMPORTS: dict[tuple[str, int, int], tuple[tuple[int, str], ...]] = {}


def _star_imports(module: str) -> tuple[tuple[int, str], ...]:
    """(relative level, module) of each ``from X import *`` at the top of ``module``; read once
    per version of the file (a large tree asks about thousands of names)."""
    import ast

    key = _stat_key(module)
    if key is None:
        return ()
    found = _STAR_IMPORTS.get(key)
    if found is None:
        found = ()
        try:
            with open(module, "rb") as f:
                data = f.read()
            if b"import *" in data:
                found = tuple((node.level, node.module or "") for node in ast.parse(data).body
                              if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names))
        except (OSError, SyntaxError, ValueError):
            pass
        if len(_STAR_IMPORTS) > 4096:
            _STAR_IMPORTS.clear()
        _STAR_IMPORTS[key] = found
    return found


_DEFINED: dict[tuple[str, int, int], frozenset[str]] = {}


def _defined_names(module: str) -> frozenset[str]:
    """The public functions and classes a module defines at its top level (what a star import of
    it brings, short of ``__all__``); none for a module that cannot be read. Read once per
    version of the file."""
    import ast

    key = _stat_key(module)
    if key is None:
        return frozenset()
    names = _DEFINED.get(key)
    if names is None:
        try:
            with open(module, "rb") as f:
                tree = ast.parse(f.read())
            names = frozenset(node.name for node in tree.body
                              if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                              and not node.name.startswith("_"))
        except (OSError, SyntaxError, ValueError):
            names = frozenset()
        if len(_DEFINED) > 4096:
            _DEFINED.clear()
        _DEFINED[key] = names
    return names


_HELPER_FACTS: dict[tuple[str, int, int], dict[str, list[tuple[str, str]]]] = {}


_ALL = frozenset({"all"})


@functools.cache
def _write_tokens() -> tuple[bytes, ...]:
    """What a module that writes a file must say: ``open(`` or a write of the library table."""
    from .library import default_library

    library = default_library()
    names = {"open", "save_pretrained"} | {name.rsplit(".", 1)[-1] for name in library.writes} | set(library.write_methods)
    # a download (`DOWNLOADS`): a torchvision dataset's `download=True`, `urlretrieve(`
    return (*(f"{name}(".encode() for name in sorted(names)), b"download=True", b"urlretrieve(")


def _may_tell(path: str, names: set[str], whys: frozenset) -> bool:
    """Whether the module's text can hold a fact about one of ``names``: it defines one of them
    (``def``/``class``/an assignment: every fact is about a function, class or constant of the
    module itself), and, where the importers only read the names (``"tested"``: a rank or rank
    predicate) or only call them (``"called"``: a write), it names a rank source
    (``RANK_SOURCE_NAMES``) or a write. A large tree's imports ask about hundreds of modules
    that define none of what is asked (re-exports, type names)."""
    from .model import RANK_SOURCE_NAMES

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return False
    if "all" not in whys:
        # a rank or rank predicate for names read or called, a write for names called
        tokens = tuple(source.encode() for source in RANK_SOURCE_NAMES)
        if "called" in whys:
            tokens += (*_write_tokens(), b"builtin")  # (a print override: `builtins.print = ...`)
        if not any(token in data for token in tokens):
            return False
    alternatives = b"|".join(re.escape(name.encode()) for name in sorted(names))
    return re.search(rb"^[ \t]*(?:(?:async[ \t]+)?def|class)[ \t]+(?:" + alternatives + rb")\b"
                     rb"|^[ \t]*(?:" + alternatives + rb")[ \t]*(?::[^=\n]*)?=", data, re.MULTILINE) is not None


def _helper_facts(path: str, cache_dir: Path | None = None, names: set[str] | None = None,
                  whys: frozenset = _ALL, told: dict | None = None) -> dict[str, list[tuple[str, str]]]:
    """``FileModel.made_facts`` of a module, parsed once per version of the file in a process,
    and kept in the on-disk cache by content between runs (a warm run parses nothing).
    ``names``/``whys``: what the caller asks about (see ``_may_tell``); a module that
    cannot tell is not parsed, and nothing is remembered for it."""
    try:
        key = _stat_key(path)
        if key is None:
            return {}
        if key in _HELPER_FACTS:
            return _HELPER_FACTS[key]
        if names is not None:
            question = (path, frozenset(names), whys)
            may = told.get(question) if told is not None else None
            if may is None:
                may = _may_tell(path, names, whys)
                if told is not None:
                    told[question] = may
            if not may:
                return {}
        with open(path, "rb") as f:
            data = f.read()
        cache = ResultCache(cache_dir) if cache_dir is not None else None
        disk_key = cache_key(data, ["made-facts"], "") if cache is not None else None
        facts = cache.get_facts(disk_key) if cache is not None else None
        if facts is None:
            facts = _made_facts(data)
            if cache is not None:
                cache.put_facts(disk_key, facts)
    except Exception:  # noqa: BLE001 - a module that cannot be read or analysed tells nothing
        return {}
    if len(_HELPER_FACTS) > 4096:  # a long editor session: forget old versions
        _HELPER_FACTS.clear()
    _HELPER_FACTS[key] = facts
    return facts


def _made_facts(data: bytes) -> dict[str, list[tuple[str, str]]]:
    import libcst as cst

    from .model import FileModel

    return FileModel(cst.parse_module(data)).made_facts() if len(data) < 2_000_000 else {}


def _relint(results: list[LintResult], again: list[tuple[int, tuple]], config: Config, jobs: int) -> list[LintResult]:
    out = list(results)
    if config.cache_dir is not None:  # warm runs: cached passes need no worker
        missing = []
        for i, context in again:
            hit = _lint_file_with(Path(results[i].path), config, context, cache_only=True)
            if hit is None:
                missing.append((i, context))
            else:
                out[i] = hit
        again = missing
        if not again:
            return out
    paths = [Path(results[i].path) for i, _ in again]
    contexts = [context for _, context in again]
    if jobs > 1 and len(again) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=min(jobs, len(again))) as pool:
            redone = list(pool.map(_lint_file_with, paths, [config] * len(paths), contexts))
    else:
        redone = [_lint_file_with(p, config, c) for p, c in zip(paths, contexts)]
    for (i, _), result in zip(again, redone):
        out[i] = result
    return out


def _lint_file_with(path: Path, config: Config, context: tuple, cache_only: bool = False) -> LintResult | None:
    """Lint a file again with what other modules say: (imported functions' collectives,
    prepared objects its functions receive from other modules)."""
    external, incoming = context
    try:
        data = path.read_bytes()
    except OSError as exc:
        return LintResult(errors=[FileError(path.as_posix(), f"cannot read: {exc.strerror or exc}; skipped")],
                          files_checked=1, path=path.as_posix())
    if path.suffix == ".ipynb":
        return None if cache_only else lint_notebook(data, path.as_posix(), config, external=external)
    return lint_source(data, path.as_posix(), config, external=external or None, cache_only=cache_only,
                       incoming=incoming or None)


# the rules whose findings depend on whether code runs on every rank (FileModel.runs_on_every_rank)
_EVERY_RANK_RULES = frozenset({"AL401", "AL402", "AL403", "AL404"})


def _incoming_arguments(results: list[LintResult], paths: list[str], local_names: set[str],
                        every_rank_seen: set[str] | None = None) -> dict[str, dict[str, dict[str, str]]]:
    """file -> module function -> parameter -> kind of the prepared object some caller in another
    module of the tree passes there."""
    linted = set(paths)
    found: dict[str, dict[str, dict[str, str]]] = {}
    for r, path in zip(results, paths):
        if not r.passes:
            continue
        here = os.path.dirname(path)
        for level, module, name, passed in r.passes:
            if not level and module.partition(".")[0] not in local_names:
                continue
            if "@guard" in passed:  # the guard's line, in the caller's file
                line, _, test = passed["@guard"].partition("|")
                passed = {**passed, "@guard": f"{os.path.relpath(path)}:{line}|{test}"}
            if r.one_process:
                # a caller the project runs as one process runs the helper on no several ranks,
                # and what its `prepare` returned is the bare object (no wrapper, no sharding)
                passed = {key: kind for key, kind in passed.items() if key not in ("@runs-it", "@unguarded")
                          and kind not in ("model", "loader", "optimizer", "scheduler")}
            if "@runs-it" in passed:  # the call's line, in the caller's file
                passed = {**passed, "@runs-it": f"{os.path.relpath(path)}:{passed['@runs-it']}"}
            for candidate in _module_files(here, level, module):
                if candidate.endswith("__init__.py"):
                    # a package that re-exports a function of one of its modules: the callers'
                    # arguments reach that module
                    source = _reexported_from(candidate, name)
                    candidate = source if source in linted else candidate
                if candidate in linted:
                    known = found.setdefault(candidate, {}).setdefault(name, {})
                    for key, kind in passed.items():
                        if key in known and known[key] != kind and known[key].startswith(ACCELERATOR) \
                                and kind.startswith(ACCELERATOR):
                            kind = ACCELERATOR  # (one caller's accumulates: what it does there is not known)
                        known[key] = kind
                    break
    # a function every caller guards is "@guarded"; call bookkeeping alone is dropped, so that
    # only what changes a module's findings makes it linted again. Knowing that a helper is
    # guarded can only remove findings of the rules that ask whether code runs on every rank,
    # so a module without such findings gains nothing from it.
    # ``every_rank_seen``: the files that had such findings in an earlier pass, which keep the
    # fact (a module whose findings appear only once a caller passes it the accelerator, and
    # go once it learns the callers guard it, would otherwise alternate between the two)
    every_rank_findings = {path for r, path in zip(results, paths)
                           if any(d.code in _EVERY_RANK_RULES for d in r.diagnostics)}
    if every_rank_seen is not None:
        every_rank_seen |= every_rank_findings
        every_rank_findings = every_rank_seen
    # a helper whose writes wait for its callers (WAITS_FOR_CALLERS): a caller that runs it on
    # every rank makes it run there
    waiting = {path: {name for name, ops in r.summary.items() if any(op[0] == WAITS_FOR_CALLERS for op in ops)}
               for r, path in zip(results, paths) if r.summary}
    for path, functions in found.items():
        for name in list(functions):
            passed = functions[name]
            guarded = "@called" in passed and "@unguarded" not in passed
            passed.pop("@called", None)
            passed.pop("@unguarded", None)
            runs_it = passed.pop("@runs-it", None)
            if runs_it is not None and name in waiting.get(path, ()):
                passed["@every-rank"] = runs_it
            where = passed.pop("@guard", None)
            if guarded and path in every_rank_findings:
                passed["@guarded"] = "yes"
            if guarded and where is not None and "model" in passed.values():
                # a prepared model handed to a helper every caller guards: its forward there is
                # rank-gated (AL305), which only the callers' guard explains
                passed["@guarded"] = where
            if not passed:
                del functions[name]
    return {path: functions for path, functions in found.items() if functions}


def _imported_ops(result: LintResult, exporting: dict[str, dict]) -> dict[str, list[tuple[str, str]]]:
    """local name -> ops, for each name this file imports from a linted module that exports it."""
    here = os.path.dirname(os.path.abspath(result.path))
    found: dict[str, list[tuple[str, str]]] = {}
    for level, module, name, local, why in result.imports:
        for candidate in _module_files(here, level, module):
            summary = exporting.get(candidate)
            if candidate.endswith("__init__.py") and (summary is None or name not in summary):
                # a package that re-exports a function of one of its modules
                # (`from .utils import is_main_process` in its __init__.py)
                owners = [other for other in _by_folder(exporting).get(os.path.dirname(candidate), ()) if name in other]
                if len(owners) == 1:
                    summary = owners[0]
            if summary is not None:
                # (what a helper waits for is said to the engine, not to the importer)
                ops = [tuple(op) for op in summary.get(name, ()) if op[0] != WAITS_FOR_CALLERS]
                if why == "tested":  # in a condition: only a rank predicate matters
                    ops = [op for op in ops if op[0] == RANK_PREDICATE]
                elif why == "called":  # called with its result unused: a write (or a rank) matters
                    # (and what every rank does by calling it: clip the gradients, end training)
                    ops = [op for op in ops if op[0] in (WRITES_FILE, RANK_PREDICATE, DOWNLOADS, STARTS_TRACKER,
                                                        REPLACES_PRINT, CLIPS_GRADIENTS, END)]
                elif why != "guarded":  # only assigned from: what it returns matters (a rank too)
                    ops = [op for op in ops if op[0] in (ACCELERATOR_FACTORY, RANK_PREDICATE, WRITES_FILE)
                           or op[0] in MADE_FACTS]
                if ops:
                    found[local] = ops
                if why != "tested":
                    # a class's alternative constructors (`Encoder.from_pretrained`), by the name called
                    for exported, facts in summary.items():
                        if exported.startswith(name + ".") and "." not in exported[len(name) + 1:]:
                            made = [tuple(op) for op in facts if op[0] == RETURNS_KIND]
                            if made:
                                found[local + exported[len(name):]] = made
                break
    return found


_FOLDERS: dict[int, tuple[dict, dict[str, list[dict]]]] = {}


def _by_folder(exporting: dict[str, dict]) -> dict[str, list[dict]]:
    """The exporting summaries grouped by folder (built once per pass)."""
    held = _FOLDERS.get(id(exporting))
    if held is None or held[0] is not exporting:
        grouped: dict[str, list[dict]] = {}
        for path, summary in exporting.items():
            grouped.setdefault(os.path.dirname(path), []).append(summary)
        _FOLDERS.clear()
        _FOLDERS[id(exporting)] = held = (exporting, grouped)
    return held[1]


@functools.lru_cache(maxsize=65536)
def _module_files(here: str, level: int, module: str) -> tuple[str, ...]:
    """Where ``from <level dots><module> import ...`` can live: relative to the importing file
    for relative imports; for absolute ones, next to it (scripts) or under any folder above it
    (packages)."""
    parts = module.split(".") if module else []
    if level:
        base = here
        for _ in range(level - 1):
            base = os.path.dirname(base)
        bases = [base]
    else:
        bases, folder = [], here
        while True:
            bases.append(folder)
            parent = os.path.dirname(folder)
            if parent == folder:
                break
            folder = parent
    out = []
    for base in bases:
        if not parts:
            continue
        target = os.path.join(base, *parts)
        out.extend([target + ".py", os.path.join(target, "__init__.py")])
    return tuple(out)


def _lint_in_workers(files: list[Path], config: Config, jobs: int) -> Iterator[LintResult]:
    """Results in the order of ``_largest_first(files)``: a big file started last would
    leave the other workers idle at the end of the run."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    ordered = _largest_first(files)
    yielded = 0
    try:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for result in pool.map(lint_file, ordered, [config] * len(ordered), chunksize=4):
                yielded += 1  # map yields in submission order: ordered[:yielded] are done
                yield result
            return
    except BrokenProcessPool:
        pass  # a worker died (a native crash on one file): the rest runs here, where errors are caught per file
    for path in ordered[yielded:]:
        yield lint_file(path, config)


def _largest_first(files: list[Path]) -> list[Path]:
    def size(path: Path) -> int:
        try:
            return path.stat().st_size
        except OSError:
            return 0

    return sorted(files, key=size, reverse=True)


@contextmanager
def _deep_recursion(limit: int = 8000):
    """libcst trees nest several frames per level of source nesting: allow deeper recursion
    while a file is analysed (CPython 3.11+ does not use the C stack for these calls)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


_MOST_BROKEN_LINES = 3


def _stand_in(lines: list[bytes], line: int, message: str) -> tuple[bytes, str]:
    """What line ``line`` (1-based) is checked as, and how the message says so: a block header
    that lacks its colon gets one; a line indented to no enclosing level (or where no indent was
    due) gets the nearest level of the lines before it; any other line is ``pass`` at its
    indentation."""
    text = lines[line - 1].rstrip(b"\r")
    indent = text[: len(text) - len(text.lstrip())]
    if message == "expected ':'" and b"#" not in text and not text.rstrip().endswith(b":"):
        return text.rstrip() + b":", f"line {line} as if it ended with ':'"
    if message in ("unindent does not match any outer indentation level", "unexpected indent"):
        levels = {len(t) - len(t.lstrip()) for t in (l.rstrip(b"\r") for l in lines[: line - 1]) if t.strip()
                  and not t.lstrip().startswith(b"#")}
        if levels and b"\t" not in indent:
            width = min(sorted(levels), key=lambda level: (abs(level - len(indent)), level))
            return b" " * width + text.lstrip(), f"line {line} as if indented by {width}"
    return indent + b"pass", f"line {line} as `pass`"


def _leave_out_broken_lines(data: bytes, first_line: int, first_message: str) -> tuple[bytes, list[str]] | None:
    """The file with each line CPython stops at replaced by a stand-in (``_stand_in``; at most
    three: ``//print(x)`` left in a script, an ``if`` without its colon), and how each was read;
    ``None`` when that does not give a file CPython and libcst both parse (an unclosed bracket,
    a broken ``def`` header)."""
    import libcst as cst

    lines = data.split(b"\n")
    read_as: list[str] = []
    done: set[int] = set()
    line, message = first_line, first_message
    for _ in range(_MOST_BROKEN_LINES):
        if not 1 <= line <= len(lines) or line in done:
            return None
        lines[line - 1], how = _stand_in(lines, line, message)
        done.add(line)
        read_as.append(how)
        candidate = b"\n".join(lines)
        try:
            ast.parse(candidate)
        except SyntaxError as err:
            line, message = err.lineno or 0, err.msg
            continue
        except (ValueError, RecursionError, MemoryError):
            return None
        try:
            cst.parse_module(candidate)
        except Exception:
            return None
        return candidate, read_as
    return None


def _syntax_error_position(data: bytes, exc: cst.ParserSyntaxError) -> tuple[int, int, str] | None:
    """CPython's position and wording when it agrees the file is invalid (libcst's
    position can point past the real error); libcst's when CPython cannot tell; ``None``
    when CPython parses the file: then it is not a syntax error."""
    try:
        ast.parse(data)
        return None
    except SyntaxError as err:
        if err.lineno:
            return err.lineno, max(err.offset or 1, 1), err.msg
    except (ValueError, RecursionError, MemoryError):
        pass
    message = str(exc.message).splitlines()[0] if exc.message else "invalid syntax"
    return exc.editor_line, exc.editor_column, message


def _too_large(path: str, size: int, config: Config) -> Notice:
    return Notice(path, f"skipped: {_human(size)} is over max-file-size ({_human(config.max_file_size)})")


def _human(size: int) -> str:
    return f"{size / 1024**2:.1f} MB" if size >= 1024**2 else f"{size / 1024:.1f} kB"


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def _internal(where: str, exc: BaseException) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {Path(frame.filename).name}:{frame.lineno}" if frame else ""
    return f"internal error in {where}: {type(exc).__name__}: {exc}{at} (please report this)"
