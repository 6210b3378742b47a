"""The syntax children of a libcst node, in source order, without layout tokens.

libcst's own ``children`` (and its visitors) rebuild each node they pass and include
every whitespace, bracket, comma and operator token: most of a tree's nodes. The model
only needs syntax, so this reads a node's fields directly. The field order is the order
in which libcst's ``_visit_and_replace_children`` visits them (source order), read once
per node class from that method's code; ``tests/test_model.py`` checks the result against
libcst's own traversal.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

import libcst as cst

# Layout and token nodes: never a statement, an expression or a binding.
_LAYOUT_BASES: tuple[type, ...] = (
    cst.BaseParenthesizableWhitespace, cst.EmptyLine, cst.TrailingWhitespace, cst.Newline, cst.Comment,
    cst.LeftParen, cst.RightParen, cst.LeftSquareBracket, cst.RightSquareBracket, cst.LeftCurlyBrace,
    cst.RightCurlyBrace, cst.Comma, cst.Semicolon, cst.Colon, cst.Dot, cst.AssignEqual, cst.Asynchronous,
    cst.BaseBinaryOp, cst.BaseBooleanOp, cst.BaseCompOp, cst.BaseUnaryOp, cst.BaseAugOp,
    cst.ParenthesizedWhitespace, cst.ImportStar,
)

_FIELDS: dict[type, tuple[str, ...]] = {}
_IS_SYNTAX: dict[type, bool] = {}  # per value type: a syntax node (not layout, not a plain value)


def syntax_children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """``node``'s children that are syntax (not layout), in source order."""
    kind = type(node)
    fields = _FIELDS.get(kind)
    if fields is None:
        fields = _FIELDS[kind] = _visit_order(kind)
    out: list[cst.CSTNode] = []
    is_syntax = _IS_SYNTAX
    for name in fields:
        value = getattr(node, name)
        value_kind = type(value)
        if value_kind is tuple or value_kind is list:
            for item in value:
                item_kind = type(item)
                keep = is_syntax.get(item_kind)
                if keep is None:
                    keep = _classify(item_kind)
                if keep:
                    out.append(item)
        else:
            keep = is_syntax.get(value_kind)
            if keep is None:
                keep = _classify(value_kind)
            if keep:
                out.append(value)
    return out


def _classify(kind: type) -> bool:
    keep = _IS_SYNTAX[kind] = issubclass(kind, cst.CSTNode) and not issubclass(kind, _LAYOUT_BASES)
    return keep


def _visit_order(kind: type) -> tuple[str, ...]:
    """The dataclass fields of ``kind`` in the order libcst visits them."""
    names = [f.name for f in dataclasses.fields(kind)]
    try:
        source = textwrap.dedent(inspect.getsource(kind._visit_and_replace_children))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):  # no source shipped: declaration order
        return tuple(names)
    # Each child is visited by a call ``visit_<how>(self, "<field>", ...)``; ast.walk is
    # breadth-first, so the calls are sorted by position to get source order.
    visits = sorted(
        (n for n in ast.walk(tree)
         if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.startswith("visit_")
         and len(n.args) > 1 and isinstance(n.args[1], ast.Constant) and isinstance(n.args[1].value, str)),
        key=lambda n: (n.lineno, n.col_offset),
    )
    order: list[str] = []
    for call in visits:
        name = call.args[1].value
        if name in names and name not in order:
            order.append(name)
    return tuple(order)  # fields libcst does not visit hold plain values (strings, flags)
