"""Classes that iterate the objects they were built from (a loader that mixes two loaders).

``prepare`` wraps only modules, optimizers, DataLoaders and schedulers; an object of any other
class comes back unchanged. A class of the tree that keeps constructor arguments and iterates
them in ``__iter__``/``__next__`` therefore iterates exactly what it was given: when that is a
DataLoader nobody prepared, every rank reads the whole dataset even though the composite object
was passed to ``prepare``.
"""

from __future__ import annotations

import libcst as cst

from .index import ClassInfo

# the methods through which a `for` loop reads an object
_ITERATION_METHODS = ("__iter__", "__next__")
# builtins whose iteration iterates each positional argument
_ITERATING_CALLS = frozenset({"iter", "zip", "enumerate", "cycle", "chain"})


def iterated_parameters(cls: ClassInfo) -> tuple[tuple[int, str], ...]:
    """``(position, name)`` of the ``__init__`` parameters whose objects the class's iteration
    methods iterate: ``self.a = a`` (or ``self.loaders = [a, b]``) in ``__init__``, then
    ``iter(self.a)``, ``for x in self.a`` or ``yield from self.a`` in ``__iter__``/``__next__``.
    Empty for a class that iterates nothing it was given."""
    init = cls.methods.get("__init__")
    if init is None or not any(m in cls.methods for m in _ITERATION_METHODS):
        return ()
    params = [p.name.value for p in init.params.params]
    positions = {name: i - 1 for i, name in enumerate(params) if i > 0}  # (the first is `self`)
    stored: dict[str, set[str]] = {}  # attribute -> the parameters it holds
    for node in _walk(init.body):
        if isinstance(node, cst.Assign) and len(node.targets) == 1:
            attribute = _self_attribute(node.targets[0].target)
            held = _parameters_in(node.value, positions)
            if attribute is not None and held:
                stored.setdefault(attribute, set()).update(held)
    iterated: set[str] = set()
    for method in _ITERATION_METHODS:
        fn = cls.methods.get(method)
        if fn is None:
            continue
        for node in _walk(fn.body):
            for source in _iterated_expressions(node):
                attribute = _self_attribute(source)
                if attribute in stored:
                    iterated |= stored[attribute]
    return tuple(sorted((positions[name], name) for name in iterated))


def _iterated_expressions(node: cst.CSTNode) -> list[cst.BaseExpression]:
    if isinstance(node, (cst.For, cst.CompFor)):
        return [node.iter]
    if isinstance(node, cst.Yield) and isinstance(node.value, cst.From):
        return [node.value.item]
    if isinstance(node, cst.Call):
        func = node.func
        name = func.value if isinstance(func, cst.Name) else func.attr.value if isinstance(func, cst.Attribute) else None
        if name in _ITERATING_CALLS:
            return [a.value for a in node.args if a.keyword is None and not a.star]
    return []


def _parameters_in(expr: cst.BaseExpression, positions: dict[str, int]) -> set[str]:
    if isinstance(expr, cst.Name) and expr.value in positions:
        return {expr.value}
    if isinstance(expr, (cst.List, cst.Tuple)):
        return {e.value.value for e in expr.elements if isinstance(e.value, cst.Name) and e.value.value in positions}
    return set()


def _self_attribute(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        return expr.attr.value
    return None


def _walk(body: cst.CSTNode):
    stack = [body]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) and node is not body:
            continue  # (a nested function's loops are not this method's)
        stack.extend(reversed(node.children))


def encode(parameters: tuple[tuple[int, str], ...]) -> str:
    """The fact other modules read: ``"0:loader1 1:loader2"``."""
    return " ".join(f"{position}:{name}" for position, name in parameters)


def decode(detail: str) -> tuple[tuple[int, str], ...]:
    out = []
    for item in detail.split():
        position, _, name = item.partition(":")
        out.append((int(position), name))
    return tuple(out)


def arguments_for(call: cst.Call, parameters: tuple[tuple[int, str], ...]) -> list[cst.BaseExpression]:
    """The arguments of a constructor call that bind the iterated ``parameters``."""
    positional = [a for a in call.args if a.keyword is None and not a.star]
    by_keyword = {a.keyword.value: a for a in call.args if a.keyword is not None}
    out = []
    for position, name in parameters:
        arg = by_keyword.get(name) or (positional[position] if position < len(positional) else None)
        if arg is None:
            continue
        if isinstance(arg.value, (cst.List, cst.Tuple)):
            out.extend(e.value for e in arg.value.elements if not isinstance(e, cst.StarredElement))
        else:
            out.append(arg.value)
    return out
