"""Jupyter notebooks: code cells as one module, positions back to cells, fixes back into the JSON.

The code cells are joined into one Python module, so that a ``prepare`` in cell 3 and a
``loss.backward()`` in cell 7 are one program for the model. Between two cells the module has a
separator comment line; IPython syntax that is not Python (``%timeit``, ``!pip install``,
``obj?``, ``x = !ls``, cell magics such as ``%%bash``) is replaced line by line with ``pass`` at
the same indentation, so it neither breaks the parse nor shifts any other line.

Positions: module line -> (cell number, line in the cell); the cell number counts every cell of
the notebook from 1, as Jupyter shows them. Columns are unchanged.

Fixes: the fixed module is split at the separators; only cells whose code changed are written,
by replacing the text of their ``"source"`` array in the file and nothing else, so the rest of
the notebook (metadata, outputs, formatting) stays byte for byte. A cell with masked IPython
lines is fixed only when the fix keeps its line count (the masked lines are put back); a notebook
whose ``source`` arrays cannot be located in the text is not fixed, with a notice.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

SEPARATOR = "# --- accel-lint cell boundary ---"  # a plain comment: no directive, no code
# cell magics whose body is Python
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug", "pypy", "python", "python3"}
_LINE_MAGIC = re.compile(r"^\s*(%|!)")
_ASSIGNED_MAGIC = re.compile(r"^\s*[\w.\[\], ]+=\s*(%|!)")
_HELP = re.compile(r"^\s*[\w.]*\?\??\s*$|^\s*\?\??[\w.]+\s*$")
# line magics and shell aliases IPython runs without `%` (automagic) when the line is not Python:
# `pip install -q accelerate`, `cd ..`, `ls data/`
_AUTOMAGIC = re.compile(r"^\s*(?:pip|conda|mamba|cd|ls|pwd|cat|cp|mv|rm|mkdir|rmdir|env|load_ext|reload_ext|"
                        r"autoreload|matplotlib|run|time|timeit|who|whos)[ \t]+(?:-|\.\.|\./|/|~|[\w\"'])")


class NotebookError(Exception):
    """The file is not a notebook this tool can read."""


@dataclass
class Cell:
    index: int  # 1-based position among all cells
    lines: list[str]  # source lines, without line ends
    masked: set[int] = field(default_factory=set)  # 0-based lines replaced by `pass`
    continuation: set[int] = field(default_factory=set)  # masked lines that continue the one above (blank)
    ends_with_newline: bool = False


@dataclass
class Notebook:
    text: str
    data: dict
    cells: list[Cell]  # code cells only
    module: str = ""
    line_map: list[tuple[int, int]] = field(default_factory=list)  # module line - 1 -> (cell index, cell line)
    # cells that do not parse (blank in ``module``): cell index -> (module line, column, CPython's message)
    broken: dict[int, tuple[int, int, str]] = field(default_factory=dict)
    _spans: dict | None = None

    def file_line(self, cell: int, line: int) -> int | None:
        """The line of the notebook's JSON text holding ``line`` of ``cell`` (for SARIF and
        GitHub annotations), when the file has the usual layout."""
        if self._spans is None:
            self._spans = source_spans(self.text) or {}
        span = self._spans.get(cell)
        if span is None:
            return None
        start, _, layout = span
        first = self.text.count("\n", 0, start) + 1
        return first + line if layout is not None else first

    def position(self, line: int) -> tuple[int, int]:
        """(cell number, line in the cell) of a 1-based module line."""
        if 1 <= line <= len(self.line_map):
            return self.line_map[line - 1]
        return (self.cells[-1].index if self.cells else 1, line)


def read(text: str) -> Notebook:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise NotebookError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list):
        raise NotebookError("not a notebook (no cells list)")
    language = ((data.get("metadata") or {}).get("kernelspec") or {}).get("language") or \
        ((data.get("metadata") or {}).get("language_info") or {}).get("name") or "python"
    if language.lower() != "python":
        raise NotebookError(f"a {language} notebook, not Python")
    cells = []
    for index, raw in enumerate(data["cells"], 1):
        if not isinstance(raw, dict) or raw.get("cell_type") != "code":
            continue
        source = raw.get("source", "")
        text_source = "".join(source) if isinstance(source, list) else str(source)
        cells.append(Cell(index, text_source.splitlines(), ends_with_newline=text_source.endswith("\n")))
    notebook = Notebook(text, data, cells)
    _build_module(notebook)
    _leave_out_broken_cells(notebook)
    return notebook


def _build_module(notebook: Notebook) -> None:
    out: list[str] = []
    line_map: list[tuple[int, int]] = []
    for number, cell in enumerate(notebook.cells):
        if number:
            out.append(SEPARATOR)
            line_map.append((cell.index, 0))
        whole_cell = bool(cell.lines) and cell.lines[0].lstrip().startswith("%%") and \
            cell.lines[0].lstrip()[2:].split(" ")[0].strip() not in _PYTHON_CELL_MAGICS
        continued = False  # the previous line was IPython syntax ending in a backslash
        for i, line in enumerate(cell.lines):
            if continued:
                # `!python prep.py --a 1 \` and its continuation lines are one shell command
                cell.masked.add(i)
                cell.continuation.add(i)
                out.append("")
                continued = line.rstrip().endswith("\\")
            elif whole_cell or (i == 0 and line.lstrip().startswith("%%")) or _is_ipython(line):
                cell.masked.add(i)
                indent = line[: len(line) - len(line.lstrip())] if not whole_cell else ""
                out.append(f"{indent}pass")
                continued = not whole_cell and line.rstrip().endswith("\\")
            else:
                out.append(line)
            line_map.append((cell.index, i + 1))
    notebook.module = "\n".join(out) + "\n"
    notebook.line_map = line_map


def _is_ipython(line: str) -> bool:
    stripped = line.strip()
    if not stripped or stripped.startswith("#"):
        return False
    return bool(_LINE_MAGIC.match(line) or _ASSIGNED_MAGIC.match(line) or _HELP.match(line)
                or (_AUTOMAGIC.match(line) and not _parses(stripped)))


def _parses(statement: str) -> bool:
    try:
        ast.parse(statement)
    except (SyntaxError, ValueError):
        return False
    return True


# -- cells Jupyter would not run, and scripts a cell writes -----------------------------------------

def _leave_out_broken_cells(notebook: Notebook) -> None:
    """Jupyter compiles each cell on its own: a cell that does not parse raises ``SyntaxError``
    and the others still run. Blank the module lines of each such cell (no line moves) and keep,
    per cell, the module line, column and CPython's message of its error (``Notebook.broken``), so
    that linting, ``--fix`` and the language server's fixes all see the cells Jupyter would run."""
    lines_of: dict[int, list[int]] = {}
    for module_line, (cell, cell_line) in enumerate(notebook.line_map, 1):
        if cell_line:
            lines_of.setdefault(cell, []).append(module_line)
    module_lines = notebook.module.split("\n")
    broken: dict[int, tuple[int, int, str]] = {}
    for cell, numbers in lines_of.items():
        source = "\n".join(module_lines[n - 1] for n in numbers) + "\n"
        try:  # top-level `await` is valid in IPython
            compile(source, f"cell {cell}", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        except SyntaxError as err:
            if _newer_python_parses(source):
                continue  # e.g. PEP 701's nested f-string quotes: valid in the kernel's newer Python
            at = min(max(err.lineno or 1, 1), len(numbers))
            # "(detected at line 5)" counts in the cell's own source: the position says it already;
            # "after 'for' statement on line 3" is made a module line, as the engine's messages are
            message = re.sub(r"\s*\(detected at line \d+\)", "", err.msg)
            message = re.sub(r"\bline (\d+)\b", lambda m: f"line {numbers[int(m.group(1)) - 1]}"
                             if 1 <= int(m.group(1)) <= len(numbers) else m.group(0), message)
            broken[cell] = (numbers[at - 1], max(err.offset or 1, 1), message)
            for n in numbers:
                module_lines[n - 1] = ""
        except (ValueError, RecursionError, MemoryError):
            continue  # CPython cannot tell: the joined parse decides, as before
    if broken:
        notebook.module = "\n".join(module_lines)
        notebook.broken = broken


def _newer_python_parses(source: str) -> bool:
    """libcst's grammar (the engine's parser) knows the syntax of Pythons newer than the one
    running: a cell CPython rejects here but libcst parses is valid for some kernel."""
    import libcst

    try:
        libcst.parse_module(source)
    except Exception:  # libcst's ParserSyntaxError, or anything its parser cannot handle
        return False
    return True


_WRITEFILE = re.compile(r"^\s*%%writefile(?:\s+(?:-a|--append))?\s+[\"']?([^\s\"']+\.py)[\"']?\s*$")
# a shell line that starts ranks: `!accelerate launch --num_processes 2 train.py`, `!torchrun ...`
_LAUNCHER = re.compile(r"^\s*!\s*(?:accelerate\s+launch|torchrun|deepspeed|"
                       r"python3?\s+-m\s+(?:torch\.distributed\.(?:run|launch)|accelerate\.commands\.launch))\b(.*)$")
_ONE_PROCESS_RUN = re.compile(r"^\s*(?:!\s*python3?|%run)\s+(.*)$")


@dataclass
class WrittenScript:
    """A ``%%writefile NAME.py`` cell, the script it writes, and how the notebook runs it."""

    cell: Cell
    name: str
    several_processes: bool  # started by a launcher of ranks (else run as one process)
    view: Notebook  # the script as a module, positions mapped back to its cell


def written_scripts(notebook: Notebook) -> list[WrittenScript]:
    """The ``%%writefile`` scripts that a code cell of the notebook runs: with a launcher of
    ranks (``!accelerate launch train.py``) or as one process (``!python train.py``, ``%run``).
    A script the notebook never runs is not linted here: how it is launched is unknown."""
    launched: dict[str, bool] = {}
    for cell in notebook.cells:
        for line in cell.lines:
            for pattern, several in ((_LAUNCHER, True), (_ONE_PROCESS_RUN, False)):
                match = pattern.match(line)
                if match:
                    for word in re.findall(r"[^\s\"']+\.py\b", match.group(1)):
                        name = word.rsplit("/", 1)[-1]
                        launched[name] = launched.get(name, False) or several
    scripts = []
    for cell in notebook.cells:
        match = _WRITEFILE.match(cell.lines[0]) if cell.lines else None
        if match is None:
            continue
        name = match.group(1).rsplit("/", 1)[-1]
        if name not in launched:
            continue
        body = cell.lines[1:]
        view = Notebook(notebook.text, notebook.data, [cell], "\n".join(body) + "\n",
                        [(cell.index, i + 2) for i in range(len(body))])
        scripts.append(WrittenScript(cell, match.group(1), launched[name], view))
    return scripts


# -- what runs on several processes ---------------------------------------------------------------

_LAUNCHERS = {"notebook_launcher", "debug_launcher", "notebook_launch", "spawn", "start_processes"}
_TARGET_KEYWORDS = ("function", "fn", "func", "target")


def launched_lines(module: str) -> set[int]:
    """The module lines that run on several processes in a notebook that starts them: the bodies
    of the functions handed to a launcher (``notebook_launcher(fn, ...)``, through
    ``functools.partial`` or a lambda) and of the top-level functions and classes they use.
    Top-level statements run once, in the kernel. When a launcher's function is not one this
    notebook defines (imported, or bound by assignment), any function may run on several."""
    try:
        tree = ast.parse(module)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    definitions = {node.name: node for node in tree.body
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    pending: list[ast.AST] = []
    for node in ast.walk(tree):
        target = _launch_target(node) if isinstance(node, ast.Call) else None
        if target is None or _one_process(node):
            continue
        resolved = isinstance(target, ast.Lambda) or (isinstance(target, ast.Name) and target.id in definitions)
        if not resolved:
            pending = list(definitions.values())
            break
        pending.extend(definitions[name] for name in _names_used(target) if name in definitions)
    lines: set[int] = set()
    seen: set[str] = set()
    while pending:
        definition = pending.pop()
        if definition.name in seen:
            continue
        seen.add(definition.name)
        first = min([definition.lineno, *(d.lineno for d in definition.decorator_list)])
        lines.update(range(first, (definition.end_lineno or definition.lineno) + 1))
        pending.extend(definitions[name] for name in _names_used(definition) if name in definitions)
    return lines


def _launch_target(call: ast.Call) -> ast.expr | None:
    """The function a launcher call runs on several processes, unwrapped from ``partial``."""
    name = _called_name(call)
    if isinstance(call.func, ast.Call) and _called_name(call.func) == "elastic_launch":
        target = call.args[0] if call.args else None  # elastic_launch(config)(fn, *args)
    elif name in _LAUNCHERS or name == "Process":
        keyword = next((k.value for k in call.keywords if k.arg in _TARGET_KEYWORDS), None)
        target = keyword if keyword is not None or name == "Process" else (call.args[0] if call.args else None)
    else:
        return None
    while isinstance(target, ast.Call) and _called_name(target) == "partial" and target.args:
        target = target.args[0]
    return target


def _one_process(call: ast.Call) -> bool:
    """A launch of one process, by a literal: ``notebook_launcher(fn, args, num_processes=1)``
    (or its third positional argument), ``mp.spawn(fn, nprocs=1)``. That function runs in one
    process, as the kernel's own code does."""
    count = next((k.value for k in call.keywords if k.arg in ("num_processes", "nprocs")), None)
    if count is None and _called_name(call) in ("notebook_launcher", "notebook_launch") and len(call.args) >= 3:
        count = call.args[2]
    return isinstance(count, ast.Constant) and count.value == 1


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


# -- writing fixes back --------------------------------------------------------------------------

def apply_fixed_module(notebook: Notebook, fixed_module: str) -> tuple[str, list[str], set[int]]:
    """The notebook text with the fixed cells written back, notices for cells not written, and
    the cells written."""
    parts = fixed_module.rstrip("\n").split("\n" + SEPARATOR + "\n") if notebook.cells else []
    if len(parts) != len(notebook.cells):
        return notebook.text, ["not fixed: a fix crossed a cell boundary"], set()
    notices: list[str] = []
    replacements: dict[int, list[str]] = {}
    for cell, part in zip(notebook.cells, parts):
        if cell.index in notebook.broken:
            continue  # blank in the module: it does not parse, and no fix touches it
        new_lines = part.split("\n") if part else []
        if new_lines == [line if i not in cell.masked else ("" if i in cell.continuation else _masked(cell.lines[i]))
                         for i, line in enumerate(cell.lines)]:
            continue  # unchanged
        if cell.masked:
            if len(new_lines) != len(cell.lines):
                notices.append(f"cell {cell.index}: not fixed: the fix moves lines in a cell with IPython magics")
                continue
            new_lines = [cell.lines[i] if i in cell.masked else line for i, line in enumerate(new_lines)]
        replacements[cell.index] = new_lines
    if not replacements:
        return notebook.text, notices, set()
    spans = source_spans(notebook.text)
    if spans is None:
        return notebook.text, notices + ["not fixed: the cells' source arrays could not be located in the file "
                                         "(unusual JSON formatting)"], set()
    out, cursor = [], 0
    for index in sorted(replacements):
        start, end, indent = spans[index]
        cell = next(c for c in notebook.cells if c.index == index)
        out.append(notebook.text[cursor:start])
        out.append(_render_source(replacements[index], cell.ends_with_newline, indent))
        cursor = end
    out.append(notebook.text[cursor:])
    return "".join(out), notices, set(replacements)


def _masked(line: str) -> str:
    return line[: len(line) - len(line.lstrip())] + "pass"


def _render_source(lines: list[str], ends_with_newline: bool, layout: tuple[str, str] | None) -> str:
    """A ``source`` array as nbformat writes it: one string per line, each ending in a newline
    except the last (unless the cell's code did), in the layout the file already uses."""
    items = [line + "\n" for line in lines]
    if items and not ends_with_newline:
        items[-1] = items[-1][:-1]
    if layout is None or not items:  # the array was on one line (or is empty now)
        return json.dumps(items, ensure_ascii=False)
    closing, inner = layout
    body = ",\n".join(inner + json.dumps(item, ensure_ascii=False) for item in items)
    return "[\n" + body + "\n" + closing + "]"


_SOURCE_KEY = re.compile(r'"source"\s*:\s*')


def source_spans(text: str) -> dict[int, tuple[int, int, tuple[str, str] | None]] | None:
    """For each cell (1-based, all cells), the text span of its ``source`` value and its layout
    (the indentation of the closing bracket and of the items; ``None``: the array is inline).
    ``None`` when the file's text cannot be matched with its parsed cells."""
    data = json.loads(text)
    decoder = json.JSONDecoder()
    spans: dict[int, tuple[int, int, tuple[str, str] | None]] = {}
    cursor = text.find('"cells"')
    if cursor < 0:
        return None
    for index, cell in enumerate(data["cells"], 1):
        while True:  # an output can hold a "source" key of its own: the cell's is the one that matches
            match = _SOURCE_KEY.search(text, cursor)
            if match is None:
                return None
            start = match.end()
            try:
                value, end = decoder.raw_decode(text, start)
            except ValueError:
                return None
            cursor = end
            if value == cell.get("source"):
                break
        if not isinstance(value, list):
            return None  # a single string: nbformat never writes that; do not guess
        layout = None
        if "\n" in text[start:end]:
            closing_start = text.rfind("\n", start, end) + 1
            closing = text[closing_start:end - 1]
            first_item = re.match(r"\[\n([ \t]*)", text[start:end])
            if closing.strip() or first_item is None:
                return None
            layout = (closing, first_item.group(1))
        spans[index] = (start, end, layout)
    return spans
