"""Tests the model cannot decide: a number it knows nothing about compared with the index of the
first process.

``if args.rank == 0:`` where ``args.rank`` was unpacked from a helper of a package the linter
never reads, or ``if self.rank == 0:`` where the rank came in as a parameter, looks to the rank
model like any other test on a value that is the same everywhere. It may equally be the
program's own rank guard. A rule that says "every rank runs this" rests on knowing that no
such guard stands around the code, so under a test of this shape the answer is unknown and
those rules stay silent (rules that report a collective *under* a rank guard still need the
rank model to know the guard, and are not touched).

The shape is a comparison of an opaque value with ``0`` or ``-1`` (``== 0``, ``!= 0``, ``<= 0``,
``in (-1, 0)``); a value is opaque when nothing in the file says what it holds: a parameter no
call of this file fills, an attribute of one, a name unpacked from (or bound to) the result of
a function the linter cannot read. Loop counters, constants, sizes and what an argument parser
returned are known and stay decided.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst

from .names import BUILTIN_NAMES, bound_targets, dotted_name
from .objects import arguments_by_parameter

if TYPE_CHECKING:
    from . import FileModel

def undecided_rank_test(model: FileModel, test: cst.BaseExpression) -> bool:
    """Whether ``test`` (through ``and``/``or``/``not``) compares an opaque value with the index
    of the first process the way a rank guard does: ``== 0``, ``!= 0``, ``== -1``, ``<= 0``,
    ``< 1``, ``in (-1, 0)``. (``> 0`` is left out: it is how a configured count says "enabled",
    ``if args.keep_checkpoints > 0:``, far more often than how a rank says "not the first".)"""
    kind = type(test)
    if kind is cst.BooleanOperation:
        return undecided_rank_test(model, test.left) or undecided_rank_test(model, test.right)
    if kind is cst.UnaryOperation and type(test.operator) is cst.Not:
        return undecided_rank_test(model, test.expression)
    if kind is not cst.Comparison or len(test.comparisons) != 1:
        return False
    target = test.comparisons[0]
    left, right, operator = test.left, target.comparator, type(target.operator)
    if operator in (cst.In, cst.NotIn):
        if type(right) not in (cst.Tuple, cst.List, cst.Set) or not right.elements \
                or not all(_literal(e.value) in (0, -1) for e in right.elements):
            return False
        return _opaque(model, left, 0)
    if _literal(left) is not None and _literal(right) is None:  # `0 == rank`: read it as `rank == 0`
        left, right, operator = right, left, _MIRRORED.get(operator, operator)
    if (operator, _literal(right)) not in _RANK_TESTS:
        return False
    return _opaque(model, left, 0)


# (operator, literal) pairs a rank guard is written with
_RANK_TESTS = frozenset({(cst.Equal, 0), (cst.NotEqual, 0), (cst.Equal, -1), (cst.NotEqual, -1),
                         (cst.LessThanEqual, 0), (cst.LessThan, 1)})
_MIRRORED = {cst.LessThan: cst.GreaterThan, cst.GreaterThan: cst.LessThan,
             cst.LessThanEqual: cst.GreaterThanEqual, cst.GreaterThanEqual: cst.LessThanEqual}


def _literal(expr: cst.BaseExpression) -> int | None:
    if type(expr) is cst.Integer:
        return int(expr.evaluated_value)
    if type(expr) is cst.UnaryOperation and type(expr.operator) is cst.Minus and type(expr.expression) is cst.Integer:
        return -int(expr.expression.evaluated_value)
    return None


def _opaque(model: FileModel, expr: cst.BaseExpression, depth: int) -> bool:
    """Nothing in the file says what ``expr`` holds (see the module's docstring)."""
    if depth > 6:
        return False
    kind = type(expr)
    if kind is cst.Call:
        return _unreadable_call(model, expr)
    if kind not in (cst.Name, cst.Attribute):
        return False
    if model.ranks.is_rank_dependent(expr):
        return False  # a rank the model knows: the test is decided
    value = model.value_at(expr)
    origins = value.origins() if value is not None else frozenset()
    if origins:
        return all(_opaque_origin(model, origin, depth) for origin in origins)
    key = dotted_name(expr)
    return key is not None and _opaque_key(model, model.scope_of(expr), key, depth)


def _opaque_key(model: FileModel, scope: cst.CSTNode, key: str, depth: int) -> bool:
    """What ``key`` (``rank``, ``args.rank``) holds in ``scope`` is opaque: every binding of it
    there is, or nothing binds it and it hangs off a parameter that is."""
    if depth > 6:
        return False
    bindings = _bindings(model, scope, key)
    if bindings:
        return all(_opaque_binding(model, binding, depth) for binding in bindings)
    root, _, rest = key.partition(".")
    if root in ("self", "cls"):
        # an attribute no method of the class binds: set by a base class the linter cannot read
        cls = model.index.class_of(scope) if isinstance(scope, cst.FunctionDef) else None
        return bool(rest) and cls is not None and key not in model.objects.class_attrs.get(cls.name, {}) \
            and not _bound_anywhere(model, key)
    if rest and _bindings(model, scope, root):
        # `args.lpips_layer` of `args = parse_args()` (a function of another package): the
        # fields of a configuration object, the same on every rank, unless the key itself
        # was bound opaquely (above)
        return False
    return _opaque_parameter(model, scope, root, rest, depth)


def _opaque_origin(model: FileModel, origin: cst.CSTNode, depth: int) -> bool:
    if type(origin) is cst.Call:
        return _unreadable_call(model, origin)
    if type(origin) in (cst.Name, cst.Attribute):
        key = dotted_name(origin)
        return key is not None and _opaque_key(model, model.scope_of(origin), key, depth + 1)
    return False


def _unreadable_call(model: FileModel, call: cst.Call) -> bool:
    """A call without arguments of a function whose result the model cannot know: not a builtin,
    not defined in this file, not summarised by another module of the tree."""
    if call.args or model.index.resolve_call(call) is not None:
        return False
    name = dotted_name(call.func)
    if name is None or name in BUILTIN_NAMES or name in model.external:
        return False
    root = name.split(".")[0]
    if type(call.func) is cst.Attribute:
        # a function of an imported module (`utils.get_rank()`), not a method of a local object
        return model.index.imports.qualify(root) is not None and model.value_at(call.func.value) is None
    return model.index.imports.qualify(name) is not None


def _bindings(model: FileModel, scope: cst.CSTNode, key: str) -> list[tuple[cst.CSTNode, cst.CSTNode, bool]]:
    """Every statement of ``scope`` (not of nested functions) that binds ``key``, as (the bound
    target, the assigned value, whether the target is one element of an unpacked tuple); the
    value is the target itself for a loop, ``with`` or augmented assignment (which say nothing
    opaque)."""
    out = []
    for node in model.index.walk(scope):
        if node is scope or model.index.scope_of(node) is not scope:
            continue
        if type(node) is cst.Assign:
            for target in node.targets:
                elements = bound_targets(target.target)
                for element in elements:
                    if dotted_name(element) == key:
                        out.append((element, node.value, element is not target.target))
        elif type(node) in (cst.AnnAssign, cst.AugAssign) and dotted_name(node.target) == key:
            value = node.value if type(node) is cst.AnnAssign and node.value is not None else node.target
            out.append((node.target, value, False))
        elif type(node) in (cst.For, cst.CompFor) and any(dotted_name(t) == key for t in bound_targets(node.target)):
            out.append((node.target, node.target, False))
        elif type(node) is cst.AsName and dotted_name(node.name) == key:
            out.append((node.name, node.name, False))
    return out


def _opaque_binding(model: FileModel, binding: tuple[cst.CSTNode, cst.CSTNode, bool], depth: int) -> bool:
    target, value, unpacked = binding
    if value is target:
        return False  # a loop, `with` or augmented assignment: a counter or a resource
    if type(value) is cst.Call:
        if not unpacked:
            return _unreadable_call(model, value)
        # `args.local_rank, args.rank, args.world = world_info()`: an item of what a function
        # returns that neither this file nor another module of the tree says anything about
        name = dotted_name(value.func)
        function = model.index.resolve_call(value)
        if function is not None:
            return _returned_item_unknown(model, function, target, depth)
        return name is not None and name not in BUILTIN_NAMES and name not in model.external \
            and model.value_at(value.func) is None
    if type(value) in (cst.Name, cst.Attribute) and not unpacked:
        key = dotted_name(value)
        return key is not None and _opaque_key(model, model.scope_of(value), key, depth + 1)
    return False


def _returned_item_unknown(model: FileModel, function: cst.FunctionDef, target: cst.CSTNode, depth: int) -> bool:
    """``target``, unpacked from what ``function`` of this file returns, gets an item the rank
    model reads as a rank or cannot read on some ``return``."""
    parent = model.index.parents.get(target)
    element = parent if type(parent) is cst.Element else None
    tuple_target = model.index.parents.get(element) if element is not None else None
    if type(tuple_target) not in (cst.Tuple, cst.List):
        return False
    position = list(tuple_target.elements).index(element)
    for returned in model.objects.summaries[function].return_exprs:
        if type(returned) is not cst.Tuple or len(returned.elements) != len(tuple_target.elements):
            continue
        item = returned.elements[position].value
        if model.ranks.is_rank_dependent(item) or _opaque(model, item, depth + 1):
            return True
    return False


def _opaque_parameter(model: FileModel, scope: cst.CSTNode, name: str, rest: str, depth: int) -> bool:
    """``name`` (with attribute path ``rest``) is a parameter of ``scope`` that no call of this
    file fills (called from another module, a launcher or a framework), or that every call of
    this file fills with something opaque."""
    if not isinstance(scope, cst.FunctionDef):
        return False
    info = model.index.functions.get(scope)
    if info is None or name not in {p.name.value for p in info.params} or name in ("self", "cls"):
        return False
    sites = model.index.call_sites(scope)
    if not sites:
        return True
    bound_first = info.class_name is not None
    for site in sites:
        passed = next((arg.value for pname, arg in arguments_by_parameter(site, scope, bound_first) if pname == name),
                      None)
        key = dotted_name(passed) if passed is not None else None
        if key is None or not _opaque_key(model, model.scope_of(site), f"{key}.{rest}" if rest else key, depth + 1):
            return False
    return True


def _bound_anywhere(model: FileModel, key: str) -> bool:
    return any(dotted_name(t) == key for node in model.index.parents if type(node) is cst.Assign
               for target in node.targets for t in bound_targets(target.target))
