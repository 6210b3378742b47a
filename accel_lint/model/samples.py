"""Whether a value inside a loop over a prepared loader has one row per sample of the batch.

``gather_for_metrics`` drops the padding of the last batch by counting rows along the first
dimension of what it gathers. That is right for a value whose first dimension is the batch's
(labels, logits, per-sample errors) and wrong for anything else: a per-rank scalar loss
gathers to one row per rank, so the cut drops whole ranks' values. A fix that swaps ``gather``
for ``gather_for_metrics`` is safe only where this module can show the first case.

Shown per sample: the loop's own target and its fields (``batch``, ``batch["labels"]``,
``inputs`` of ``for inputs, targets in loader``), the output of a forward of a prepared model
(and its fields other than ``loss``), and what element-wise operations, ``argmax``/``softmax``
over a dimension other than the first, and tuples of such values make of them. Everything
else (a reduction, ``.item()``, an index, an unknown call) is not shown.
"""

from __future__ import annotations

import libcst as cst

from .names import bound_names
from .objects import NO

# methods that keep every row (element-wise, type or device changes)
_ROW_PRESERVING = frozenset({
    "float", "half", "double", "long", "int", "bool", "detach", "cpu", "cuda", "to", "contiguous", "clone",
    "abs", "sigmoid", "exp", "log", "round", "neg", "sqrt", "clamp", "float16", "type", "tolist", "numpy",
})
# methods that keep the rows when they act on a dimension other than the first
_DIM_PRESERVING = frozenset({"argmax", "argmin", "softmax", "log_softmax", "squeeze", "max", "min"})
# methods that reduce over the dimensions they are given (only `dim=` for `norm`)
_DIM_REDUCING = frozenset({"sum", "mean", "norm", "prod", "std", "var", "amax", "amin", "logsumexp", "all", "any"})
_REDUCED_FIELDS = frozenset({"loss", "losses"})
_BRANCHING = (cst.If, cst.Else, cst.Try, cst.ExceptHandler, cst.Finally, cst.For, cst.While, cst.IfExp)


def per_sample(model, expr: cst.BaseExpression, loop: cst.For, depth: int = 0) -> bool:
    """Whether ``expr``, evaluated in the body of ``loop``, has the batch's first dimension."""
    if depth > 8:
        return False
    kind = type(expr)
    if kind in (cst.Tuple, cst.List):
        return bool(expr.elements) and all(per_sample(model, e.value, loop, depth + 1) for e in expr.elements)
    if kind is cst.Dict:
        return bool(expr.elements) and all(
            type(e) is cst.DictElement and per_sample(model, e.value, loop, depth + 1) for e in expr.elements)
    if kind is cst.Name:
        if _is_loop_target(expr, loop):
            return True
        value = _assigned_in_loop(model, expr.value, loop, expr)
        return value is not None and per_sample(model, value, loop, depth + 1)
    if kind is cst.Subscript:
        if _is_loop_target(expr.value, loop):
            return True
        field = _string_key(expr)
        if field is not None:
            # a field of a dict-like value (`outputs["logits"]`), never a row index of a tensor
            if field in _REDUCED_FIELDS:
                return False
            held = _dict_display_in_loop(model, expr.value, loop)
            if held is not None:
                item = next((e.value for e in held.elements if type(e) is cst.DictElement
                             and type(e.key) is cst.SimpleString and e.key.evaluated_value == field), None)
                return item is not None and per_sample(model, item, loop, depth + 1)
            return per_sample(model, expr.value, loop, depth + 1)
        return per_sample(model, expr.value, loop, depth + 1) and _keeps_first_dimension(expr)
    if kind is cst.Attribute:
        if expr.attr.value in _REDUCED_FIELDS:
            return False
        return per_sample(model, expr.value, loop, depth + 1)
    if kind is cst.BinaryOperation:
        sides = [per_sample(model, side, loop, depth + 1) for side in (expr.left, expr.right)]
        return all(sides) or (any(sides) and any(_is_number(side) for side in (expr.left, expr.right)))
    if kind is cst.UnaryOperation:
        return per_sample(model, expr.expression, loop, depth + 1)
    if kind is cst.Call:
        return _call_per_sample(model, expr, loop, depth)
    return False


def _call_per_sample(model, call: cst.Call, loop: cst.For, depth: int) -> bool:
    func = call.func
    if type(func) is cst.Attribute and func.attr.value in ("forward", "generate"):
        func = func.value
    if _prepared_module(model, func):
        return any(per_sample(model, a.value, loop, depth + 1) for a in call.args)
    if type(func) is cst.Attribute:
        method = func.attr.value
        if method == "pad_across_processes" and model.is_accelerator(func.value) and call.args:
            return per_sample(model, call.args[0].value, loop, depth + 1)
        if method in _ROW_PRESERVING:
            return per_sample(model, func.value, loop, depth + 1)
        if method in _DIM_PRESERVING:
            return _dimension_not_first(call) and per_sample(model, func.value, loop, depth + 1)
        if method in _DIM_REDUCING:
            # a reduction over another dimension keeps the rows; with no `dim` it is a scalar
            # (`norm`'s first positional parameter is `p`, so only `dim=` counts there)
            dims = [a for a in call.args if a.keyword is not None and a.keyword.value == "dim"]
            if method != "norm":
                dims += [a for a in call.args[:1] if a.keyword is None]
            return len(dims) == 1 and _dimension_not_first(cst.Call(func, [dims[0].with_changes(keyword=None, equal=cst.MaybeSentinel.DEFAULT)])) \
                and per_sample(model, func.value, loop, depth + 1)
    return False


def _prepared_module(model, func: cst.BaseExpression) -> bool:
    """What ``prepare`` returned and the program calls: of what ``prepare`` returns, only a
    module is callable (an optimizer, loader or scheduler is not)."""
    if model.prepared_kind(func) == "model":
        return True
    value = model.value_at(func)
    return value is not None and value.prepared != NO and value.prepared_at is not None and value.kind in (
        None, "model", "unknown")


def _string_key(sub: cst.Subscript) -> str | None:
    """The key of ``x["name"]``: one string index."""
    if len(sub.slice) != 1 or type(sub.slice[0].slice) is not cst.Index:
        return None
    key = sub.slice[0].slice.value
    return key.evaluated_value if type(key) is cst.SimpleString else None


def _dict_display_in_loop(model, expr: cst.BaseExpression, loop: cst.For) -> cst.Dict | None:
    """The dict display a name is bound to in the loop body (``targets = {"box": batch["box"]}``)."""
    if type(expr) is not cst.Name:
        return None
    value = _assigned_in_loop(model, expr.value, loop, expr)
    return value if type(value) is cst.Dict else None


def _dimension_not_first(call: cst.Call) -> bool:
    dims = [a.value for a in call.args if a.keyword is None or a.keyword.value == "dim"]
    if len(dims) != 1:
        return False
    dim = dims[0]
    if type(dim) is cst.UnaryOperation and type(dim.operator) is cst.Minus and type(dim.expression) is cst.Integer:
        return True
    return type(dim) is cst.Integer and dim.value != "0"


def _keeps_first_dimension(sub: cst.Subscript) -> bool:
    """``x[:, 0]``, ``x[..., 1]``: the first index is a full slice or an ellipsis."""
    first = sub.slice[0].slice if sub.slice else None
    if type(first) is cst.Slice:
        return first.lower is None and first.upper is None and first.step is None and len(sub.slice) > 1
    return type(first) is cst.Index and type(first.value) is cst.Ellipsis


def _is_loop_target(expr: cst.BaseExpression, loop: cst.For) -> bool:
    """The loop's own target (``batch``; ``batch["labels"]`` is a field of it)."""
    return type(expr) is cst.Name and expr.value in _loop_targets(loop)


def _is_number(expr: cst.BaseExpression) -> bool:
    return type(expr) in (cst.Integer, cst.Float)


def _loop_targets(loop: cst.For) -> set[str]:
    """The names bound from the loader's items (``batch``; ``inputs, targets``; the second of
    ``step, batch`` under ``enumerate``)."""
    target = loop.target
    it = loop.iter
    if type(it) is cst.Call and type(it.func) is cst.Name and it.func.value == "enumerate" \
            and type(target) is cst.Tuple and len(target.elements) == 2:
        target = target.elements[1].value
    return {name for name in bound_names(target) if "." not in name}


def _assigned_in_loop(model, name: str, loop: cst.For, read: cst.CSTNode) -> cst.BaseExpression | None:
    """The value of the last binding of ``name`` in the loop body before ``read``, when it is a
    plain ``name = value`` that runs on every pass (not under an ``if``, a ``try`` or an inner
    loop): that value is what the read sees. Bindings after the read are overwritten by it."""
    read_line = model.line_of(read)
    last: cst.CSTNode | None = None
    for node in model.index.walk(loop.body):
        if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.NamedExpr, cst.With):
            targets = ([t.target for t in node.targets] if type(node) is cst.Assign else
                       [i.asname.name for i in node.items if i.asname is not None] if type(node) is cst.With else
                       [node.target])
            if any(name in bound_names(t) for t in targets) and model.line_of(node) < read_line:
                if last is None or model.line_of(node) >= model.line_of(last):
                    last = node
    if type(last) is not cst.Assign or len(last.targets) != 1 or type(last.targets[0].target) is not cst.Name:
        return None
    around_read = set(model.index.ancestors(read))
    for ancestor in model.index.ancestors(last):
        if ancestor is loop:
            return last.value
        # a binding under an `if` (or `try`, inner loop) is what a read in the same block sees
        # (the block of a branch too: the `then` block of an `if` is not its `else`)
        branching = ancestor if type(ancestor) is not cst.IndentedBlock else model.index.parents.get(ancestor)
        if type(branching) in _BRANCHING and ancestor not in around_read:
            return None
    return None
