"""Parsing again only the statement an edit touched (for the language server).

An editor sends the whole file on every keystroke, and libcst parses a 5,000-line file in a
quarter of a second. Most edits stay inside one statement of the module or of a top-level
class body (a method): :class:`Reparser` keeps each file's last tree, parses only the
enclosing statement of the changed lines, and puts the new statement in place of the old
one. Every other statement of the new tree is the very node of the old tree.

The result is the tree a full parse gives, or the full parse is done: the statement is parsed
in a stand-in for its context (a bare module, or a ``class`` with the same indentation), must
give exactly one statement with nothing around it, and the file's indentation and newline
conventions must match the stand-in's. Anything else (a change across statements, in the
module's header or a class's trailing comments, a syntax error) parses the whole file,
which raises what it raises.

:class:`Layout` tells where those statements start, from how many lines each one spans; the
model resolves a node's position inside its statement only (:meth:`Layout.position_of`),
not over the whole file.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

_CLASS_STAND_IN = b"class _:\n"
_MODULE_STAND_IN = b"pass\n"


def _lines(node: cst.CSTNode) -> int:
    """How many lines a statement spans, its comments and blank lines before it included:
    its code's newlines (indentation adds columns, never lines)."""
    return cst.Module([]).code_for_node(node).count("\n")


class Layout:
    """The first line of every statement of the module and of every top-level class body.

    ``counts`` (node -> lines) carries what an earlier layout measured for the nodes a
    re-parse kept, so that only new statements are measured again."""

    def __init__(self, module: cst.Module, counts: dict[cst.CSTNode, int] | None = None) -> None:
        self.module = module
        self.counts: dict[cst.CSTNode, int] = {}
        self.starts: dict[cst.CSTNode, int] = {}  # statement -> 1-based first line (its leading lines)
        self.blocks: dict[cst.CSTNode, cst.ClassDef] = {}  # statement of a class body -> its class
        known = counts or {}
        line = 1 + len(module.header)
        for stmt in module.body:
            self.starts[stmt] = line
            lines = self._count(stmt, known)
            if type(stmt) is cst.ClassDef and type(stmt.body) is cst.IndentedBlock:
                inner = line + lines - len(stmt.body.footer) - sum(self._count(s, known) for s in stmt.body.body)
                for child in stmt.body.body:
                    self.starts[child] = inner
                    self.blocks[child] = stmt
                    inner += self._count(child, known)
            line += lines
        self._positions: dict[cst.CSTNode, dict] = {}

    def _count(self, node: cst.CSTNode, known: dict[cst.CSTNode, int]) -> int:
        count = self.counts.get(node)
        if count is None:
            count = known.get(node)
            if count is None:
                count = _lines(node)
            self.counts[node] = count
        return count

    def span(self, stmt: cst.CSTNode) -> tuple[int, int]:
        """0-based first line and end line (exclusive) of a statement, leading lines included."""
        start = self.starts[stmt] - 1
        return start, start + self.counts[stmt]

    def position_of(self, node: cst.CSTNode, unit: cst.CSTNode) -> cst.metadata.CodeRange:
        """``node``'s range in the file; ``unit`` is the statement of this layout that holds it."""
        positions = self._positions.get(unit)
        if positions is None:
            positions = self._positions[unit] = self._resolve(unit)
        return positions[node]

    def _resolve(self, unit: cst.CSTNode) -> dict:
        """Positions of a statement's nodes, as a module of that statement alone gives them,
        shifted to the statement's first line. A statement of a class body is resolved inside a
        stand-in class with the same indentation, so that columns are the file's too."""
        module = self.module
        cls = self.blocks.get(unit)
        if cls is None:
            stand_in = module.with_changes(header=(), body=(unit,), footer=())
            shift = self.starts[unit] - 1
        else:
            block = cls.body.with_changes(body=(unit,), footer=(), header=cst.TrailingWhitespace())
            holder = cst.ClassDef(name=cst.Name("_"), body=block)
            stand_in = module.with_changes(header=(), body=(holder,), footer=())
            shift = self.starts[unit] - 2  # the stand-in's `class _:` line
        wrapper = cst.metadata.MetadataWrapper(stand_in, unsafe_skip_copy=True)
        resolved = wrapper.resolve(cst.metadata.PositionProvider)
        return _Shifted(resolved, shift)


@dataclass
class _Shifted:
    """Positions of a stand-in module, read as the file's lines."""

    positions: object
    shift: int

    def __getitem__(self, node: cst.CSTNode) -> cst.metadata.CodeRange:
        rng = self.positions[node]
        return cst.metadata.CodeRange(
            cst.metadata.CodePosition(rng.start.line + self.shift, rng.start.column),
            cst.metadata.CodePosition(rng.end.line + self.shift, rng.end.column),
        )


@dataclass
class _Last:
    data: bytes
    lines: list[bytes]
    module: cst.Module
    layout: Layout
    walks: object = None  # the model's flow walks of this tree (accel_lint.model.objects.WalkState)


class Reparser:
    """Each file's last tree, to parse an edit of it by re-parsing one statement.

    ``parse(path, data)`` returns the module and its :class:`Layout`; ``full_parse(data)``
    is how a whole file is parsed (the engine's parser, which raises on a syntax error)."""

    def __init__(self, full_parse) -> None:
        self._full_parse = full_parse
        self._last: dict[str, _Last] = {}
        self._before: dict[str, object] = {}  # path -> the walks of the tree the last parse started from
        self.reparsed = 0  # edits served by re-parsing one statement (for tests and benches)

    def forget(self, keep: set[str]) -> None:
        for path in [p for p in self._last if p not in keep]:
            del self._last[path]
            self._before.pop(path, None)

    def walks_before(self, path: str):
        """The flow walks of the tree that the last :meth:`parse` of ``path`` started from."""
        return self._before.get(path)

    def keep_walks(self, path: str, module: cst.Module, walks) -> None:
        """Remember the flow walks of ``module``, the last tree parsed for ``path``."""
        last = self._last.get(path)
        if last is not None and last.module is module:
            last.walks = walks

    def parse(self, path: str, data: bytes) -> tuple[cst.Module, Layout]:
        last = self._last.get(path)
        self._before[path] = last.walks if last is not None else None
        if last is not None and last.data == data:
            return last.module, last.layout
        lines = data.splitlines(keepends=True)
        spliced = self._splice(last, data, lines) if last is not None else None
        if spliced is not None:
            self.reparsed += 1
            module, layout = spliced
        else:
            module = self._full_parse(data)
            layout = Layout(module)
        self._last[path] = _Last(data, lines, module, layout)
        if spliced is None:
            self._before[path] = None  # no node in common with the last tree
        return module, layout

    def _splice(self, last: _Last, data: bytes, lines: list[bytes]) -> tuple[cst.Module, Layout] | None:
        old = last.lines
        same_start = 0
        limit = min(len(old), len(lines))
        while same_start < limit and old[same_start] == lines[same_start]:
            same_start += 1
        same_end = 0
        while same_end < limit - same_start and old[-1 - same_end] == lines[-1 - same_end]:
            same_end += 1
        changed = (same_start, len(old) - same_end)  # 0-based old lines [first, end)
        unit = self._enclosing(last.layout, changed)
        if unit is None:
            return None
        first, end = last.layout.span(unit)
        grown = len(lines) - len(old)
        text = b"".join(lines[first:end + grown])
        cls = last.layout.blocks.get(unit)
        node = self._parse_statement(last.module, cls, text)
        if node is None:
            return None
        module, new_cls = _replace_statement(last.module, cls, unit, node)
        counts = dict(last.layout.counts)
        counts[node] = text.count(b"\n")
        if cls is not None:  # the class grew by what its statement grew (measuring it would cost a codegen)
            counts[new_cls] = counts[cls] + counts[node] - counts[unit]
        return module, Layout(module, counts)

    @staticmethod
    def _enclosing(layout: Layout, changed: tuple[int, int]) -> cst.CSTNode | None:
        """The innermost statement of the layout whose lines hold every changed line (and, for
        lines only inserted, the place they were inserted at, strictly inside it)."""
        first, end = changed
        around = None
        for stmt, start in layout.starts.items():
            lo, hi = start - 1, start - 1 + layout.counts[stmt]
            if lo <= first and end <= hi if end > first else lo < first < hi:
                if stmt in layout.blocks:
                    return stmt  # statements of a class body do not overlap
                around = stmt
        return around

    def _parse_statement(self, module: cst.Module, cls: cst.ClassDef | None, text: bytes) -> cst.CSTNode | None:
        """``text`` parsed in a stand-in for its context, or ``None`` where that could differ from
        what the whole file gives."""
        # a statement before it, so that its leading comments and blank lines stay its own (the
        # first statement of a file gives them to the module's header)
        source = (_MODULE_STAND_IN if cls is None else _CLASS_STAND_IN) + text
        try:
            stand_in = self._full_parse(source)
        except Exception:  # a syntax error mid-typing: the whole file says where
            return None
        if (stand_in.header or stand_in.footer or len(stand_in.body) != (2 if cls is None else 1)
                or stand_in.encoding != module.encoding or stand_in.default_newline != module.default_newline
                or stand_in.has_trailing_newline != module.has_trailing_newline):
            return None
        # the statement's nested blocks leave their indentation to the module's default when it
        # is the same: the stand-in's and the file's must agree
        if stand_in.default_indent != module.default_indent:
            return None
        if cls is None:
            return stand_in.body[1]
        holder = stand_in.body[0]
        block = holder.body
        if type(holder) is not cst.ClassDef or type(block) is not cst.IndentedBlock or len(block.body) != 1 or block.footer:
            return None
        # and so must the class's own
        if (block.indent or stand_in.default_indent) != (cls.body.indent or module.default_indent):
            return None
        return block.body[0]


def _replace_statement(module: cst.Module, cls: cst.ClassDef | None, old: cst.CSTNode,
                       new: cst.CSTNode) -> tuple[cst.Module, cst.ClassDef | None]:
    """The module with ``new`` for ``old``, and the class that holds it now."""
    if cls is None:
        return module.with_changes(body=tuple(new if s is old else s for s in module.body)), None
    body = cls.body.with_changes(body=tuple(new if s is old else s for s in cls.body.body))
    new_cls = cls.with_changes(body=body)
    return module.with_changes(body=tuple(new_cls if s is cls else s for s in module.body)), new_cls
