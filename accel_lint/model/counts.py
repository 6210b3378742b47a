"""Which numbers count the items of a collection: ``len(x)``, and names that hold one.

A gathered evaluation result cut to ``[:n]`` removes the samples a prepared loader repeated to
even out its last batch when ``n`` is the number of samples. ``n`` is often not written as
``len(...)`` in the slice: it is a local (``n = len(ds)``, ``n_train, n_test = len(a), len(b)``)
or a parameter that every call of this file fills with such a count
(``evaluate(model, loader, len(test_set))``). This module follows those bindings. A name bound
to anything else, or a parameter that some call leaves to its default or fills with something
else, is not a count: the answer is "no", and the rule that asks stays as strict as before.
"""

from __future__ import annotations

import libcst as cst

from .index import FileIndex
from .names import bound_targets
from .objects import arguments_by_parameter

_MAX_DEPTH = 3


def counts_items(index: FileIndex, expr: cst.BaseExpression, _depth: int = 0) -> bool:
    """``expr`` is the number of items of a collection on every path the file shows."""
    if type(expr) is cst.Call:
        return type(expr.func) is cst.Name and expr.func.value == "len" and len(expr.args) == 1
    if type(expr) is not cst.Name or _depth > _MAX_DEPTH:
        return False
    scope = index.scope_of(expr)
    bound = _values_bound(index, scope, expr.value)
    if bound is None:
        return False
    if bound:
        return all(counts_items(index, value, _depth + 1) for value in bound)
    # never assigned in its function: a parameter that every call of this file fills with a count
    if not isinstance(scope, cst.FunctionDef):
        return False
    info = index.functions[scope]
    sites = index.call_sites(scope)
    if not sites or expr.value not in {p.name.value for p in info.params}:
        return False
    for site in sites:
        bound_first = isinstance(site.func, cst.Attribute) and info.class_name is not None
        passed = dict(arguments_by_parameter(site, scope, bound_first))
        arg = passed.get(expr.value)
        if arg is None or not counts_items(index, arg.value, _depth + 1):
            return False
    return True


def _values_bound(index: FileIndex, scope, name: str) -> list[cst.BaseExpression] | None:
    """The expressions ``name`` is assigned in ``scope`` (``[]`` when it never is); ``None``
    when some binding's value cannot be paired with it (``+=``, a loop target, ``a, b = f()``)."""
    out: list[cst.BaseExpression] = []
    for node in index.walk(scope):
        if type(node) is cst.Assign:
            for target in node.targets:
                paired = _paired(target.target, node.value, name)
                if paired is False:
                    return None
                if paired is not None:
                    out.append(paired)
        elif type(node) in (cst.AugAssign, cst.AnnAssign) and type(node.target) is cst.Name \
                and node.target.value == name:
            return None
        elif type(node) in (cst.For, cst.CompFor) and _binds(node.target, name):
            return None
        elif type(node) is cst.NamedExpr and _binds(node.target, name):
            return None
        elif type(node) is cst.WithItem and node.asname is not None and _binds(node.asname.name, name):
            return None
    return out


def _paired(target: cst.BaseExpression, value: cst.BaseExpression, name: str):
    """The part of ``value`` that ``target`` binds to ``name``; ``None`` when it binds no
    ``name``; ``False`` when it binds it to something that cannot be singled out."""
    if type(target) is cst.Name:
        return value if target.value == name else None
    if type(target) in (cst.Tuple, cst.List):
        if not _binds(target, name):
            return None
        if type(value) not in (cst.Tuple, cst.List) or len(value.elements) != len(target.elements) \
                or any(type(e) is cst.StarredElement for e in (*target.elements, *value.elements)):
            return False
        for t, v in zip(target.elements, value.elements):
            found = _paired(t.value, v.value, name)
            if found is not None:
                return found
    return None


def _binds(target: cst.BaseExpression, name: str) -> bool:
    return any(type(bound) is cst.Name and bound.value == name for bound in bound_targets(target))
