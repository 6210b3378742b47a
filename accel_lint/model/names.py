"""Dotted names of expressions and what imported names resolve to.

The model resolves imports itself instead of asking libcst's ``QualifiedNameProvider``:
that provider costs several times the parse on large trees, and the model needs only
"which module does this dotted head come from".
"""

from __future__ import annotations

import builtins

import libcst as cst

# the names Python binds in every module (`len`, `print`, `range`, ...)
BUILTIN_NAMES = frozenset(dir(builtins))


def dotted_name(node: cst.BaseExpression) -> str | None:
    """``a.b.c`` for a chain of ``Name``/``Attribute`` nodes, else ``None``."""
    # exact type tests: isinstance on libcst's ABC-based classes costs several times more
    kind = type(node)
    if kind is cst.Name:
        return node.value
    parts: list[str] = []
    while kind is cst.Attribute:
        parts.append(node.attr.value)
        node = node.value
        kind = type(node)
    if kind is cst.Name:
        parts.append(node.value)
        return ".".join(reversed(parts))
    return None


def bound_targets(target: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions an assignment target binds, through tuples, lists and ``*``: ``a``,
    ``self.x``, ``items[k]``, each of ``a, (b, *c)``."""
    kind = type(target)
    if kind is cst.Tuple or kind is cst.List:
        return [bound for element in target.elements for bound in bound_targets(element.value)]
    if kind is cst.StarredElement:
        return bound_targets(target.value)
    return [target]


def statement_targets(node: cst.CSTNode) -> list[cst.BaseExpression]:
    """The targets an assignment (``Assign``, ``AnnAssign``, ``AugAssign``) or a ``for`` binds."""
    return [t.target for t in node.targets] if type(node) is cst.Assign else [node.target]


def bound_names(target: cst.BaseExpression) -> list[str]:
    """The dotted names an assignment target binds: ``a``, ``self.x``, each name of ``a, (b, *c)``."""
    return [name for bound in bound_targets(target) if (name := dotted_name(bound)) is not None]


def none_comparison(test: cst.BaseExpression) -> tuple[cst.BaseExpression, bool] | None:
    """``(subject, True)`` for ``<subject> is None``, ``(subject, False)`` for ``<subject> is not
    None``; ``None`` for any other test."""
    if type(test) is not cst.Comparison or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    if not (type(target.comparator) is cst.Name and target.comparator.value == "None"):
        return None
    if type(target.operator) is cst.Is:
        return test.left, True
    if type(target.operator) is cst.IsNot:
        return test.left, False
    return None


def last_attr(node: cst.BaseExpression) -> str | None:
    """The final component of an attribute or name: ``c`` for ``a.b.c``."""
    kind = type(node)
    if kind is cst.Attribute:
        return node.attr.value
    if kind is cst.Name:
        return node.value
    return None


def module_name_of(node: cst.BaseExpression) -> str:
    """The dotted module name of an import (``torch.distributed``); empty if not a plain chain."""
    return dotted_name(node) or ""


class ImportMap:
    """Local names bound by ``import``/``from ... import`` anywhere in the file.

    Flow-insensitive on purpose: scripts import inside ``main()`` or under
    ``if is_available():`` and the binding still means the same module.
    """

    def __init__(self) -> None:
        self._aliases: dict[str, str] = {}

    def bindings(self) -> tuple[tuple[str, str], ...]:
        """Every local name and what it imports, sorted."""
        return tuple(sorted(self._aliases.items()))

    def add(self, node: cst.Import | cst.ImportFrom) -> None:
        if isinstance(node, cst.Import):
            for alias in node.names:
                full = module_name_of(alias.name)
                if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                    self._aliases[alias.asname.name.value] = full
                else:
                    head = full.split(".")[0]
                    self._aliases.setdefault(head, head)
            return
        if node.relative or node.module is None or isinstance(node.names, cst.ImportStar):
            return
        module = module_name_of(node.module)
        for alias in node.names:
            name = module_name_of(alias.name)
            local = name
            if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                local = alias.asname.name.value
            self._aliases[local] = f"{module}.{name}"

    def qualify(self, dotted: str | None) -> str | None:
        """The fully qualified name of a dotted local name, when its head was imported."""
        if not dotted:
            return None
        head, _, rest = dotted.partition(".")
        target = self._aliases.get(head)
        if target is None:
            return None
        return f"{target}.{rest}" if rest else target

    def qualify_expr(self, node: cst.BaseExpression) -> str | None:
        return self.qualify(dotted_name(node))

    def imports_module(self, prefix: str) -> bool:
        return any(t == prefix or t.startswith(prefix + ".") for t in self._aliases.values())
