"""Gradient clipping: which calls clip, and which helpers clip on every call (AL104 and the
module summary other modules read)."""

from __future__ import annotations

import libcst as cst

from ..collectives import CLIPS_GRADIENTS
from .names import dotted_name

TORCH_CLIPS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_",
                         "torch.nn.utils.clip_grad.clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_value_"})
ACCELERATOR_CLIPS = frozenset({"clip_grad_norm_", "clip_grad_value_"})


def clip_accelerator(model, call: cst.Call):
    """The call is a clip (Accelerate's or torch's): its accelerator expression or None; False if not a clip."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in ACCELERATOR_CLIPS and model.is_accelerator(func.value):
        return func.value
    if (model.index.imports.qualify_expr(func) or "") in TORCH_CLIPS:
        return None
    return False


def requires_sync(model, test: cst.BaseExpression, depth: int = 0) -> bool:
    """``test`` is true only where ``sync_gradients`` is: it mentions it, or it is a flag
    assigned from such a test (``should_clip = accelerator.sync_gradients and max_norm > 0``),
    alone or as one part of an ``and``."""
    if "sync_gradients" in model.code(test):
        return True
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return requires_sync(model, test.left, depth) or requires_sync(model, test.right, depth)
    if depth < 3 and type(test) in (cst.Name, cst.Attribute):
        value = model.value_at(test)
        origins = value.origins() if value is not None else frozenset()
        return len(origins) == 1 and isinstance(next(iter(origins)), cst.BaseExpression) \
            and requires_sync(model, next(iter(origins)), depth + 1)
    return False


def under_sync_gradients(model, call: cst.Call) -> bool:
    """The clip runs only where the gradients are synced: under a test on ``sync_gradients``, or
    in the branch of an ``if`` that also steps an optimizer (``if (step + 1) % ga == 0: clip;
    optimizer.step()``: once per update, on the accumulated gradients)."""
    child: cst.CSTNode = call
    for parent in model.ancestors(call):
        if isinstance(parent, cst.If) and child is parent.body and (
                requires_sync(model, parent.test) or _steps_an_optimizer(model, parent.body)):
            return True
        if isinstance(parent, cst.FunctionDef):
            return False
        child = parent
    return False


def _steps_an_optimizer(model, block: cst.CSTNode) -> bool:
    """``block`` calls ``.step()`` of an object the model knows as an optimizer."""
    for inner in model.calls_in(block):
        func = inner.func
        if isinstance(func, cst.Attribute) and func.attr.value == "step":
            value = model.value_at(func.value)
            if value is not None and value.kind == "optimizer":
                return True
    return False


def helper_clip(model, fn: cst.FunctionDef, depth: int = 0) -> str | None:
    """How ``fn`` clips the gradients on every call: ``"<clip as written>|<parameter>|<position>"``
    where the clip is a method of a parameter (``accelerator.clip_grad_norm_`` with
    ``accelerator`` a parameter: a clip wherever the caller passes an accelerator there), else
    ``"<clip as written>||"``; directly or through a helper of this module, outside any test on
    ``sync_gradients``; ``None`` when it makes none."""
    params = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
    for call in model.calls_in(fn.body):
        if under_sync_gradients(model, call):
            continue
        func = call.func
        owner = func.value.value if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) else ""
        through_parameter = owner in params and func.attr.value in ACCELERATOR_CLIPS
        if through_parameter or clip_accelerator(model, call) is not False:
            return f"{model.code(func)}|{owner}|{params.index(owner)}" if owner in params else f"{model.code(func)}||"
        if depth < 2:
            target = model.index.resolve_call(call)
            inner = helper_clip(model, target, depth + 1) if target is not None else None
            if inner is not None and not inner.split("|")[1]:
                return inner  # (a parameter of the inner helper is not one of this one's)
    return None


def clip_in_helper(model, call: cst.Call) -> str | None:
    """The clip (as written) that ``call`` makes through a function of this module, or of another
    module of the tree that says it clips (``CLIPS_GRADIENTS``), on every call; where that clip
    is a method of a parameter, only when ``call`` passes an accelerator there. ``None``
    otherwise."""
    target = model.index.resolve_call(call)
    if target is not None:
        detail = helper_clip(model, target)
    else:
        name = dotted_name(call.func)
        detail = None if name is None else next(
            (d for kind, d in model.external.get(name, ()) if kind == CLIPS_GRADIENTS), None)
    if detail is None:
        return None
    clip, parameter, position = detail.split("|")
    if not parameter:
        return clip
    passed = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == parameter), None)
    if passed is None:
        # `self.clip(accelerator)`: the bound call passes no `self`
        offset = 1 if target is not None and isinstance(call.func, cst.Attribute) \
            and model.index.functions[target].class_name is not None else 0
        positional = [a.value for a in call.args if a.keyword is None and not a.star]
        index = int(position) - offset
        passed = positional[index] if 0 <= index < len(positional) else None
    return clip if passed is not None and model.is_accelerator(passed) else None
