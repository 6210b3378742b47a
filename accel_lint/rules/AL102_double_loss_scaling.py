from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from .base import Finding, Fix, Rule, quote


class DoubleLossScaling(Rule):
    """A loss divided by the gradient-accumulation count, then passed to `accelerator.backward`.

    ## What it does
    Flags a division of the loss by a gradient-accumulation count -- `loss / ga` in the
    `backward` argument, `loss = model(**batch).loss / ga`, `loss /= ga` before it in the
    same function -- when the loss then goes to `accelerator.backward(...)` and either the
    accelerator was built with `gradient_accumulation_steps` (or a plugin) other than a
    literal 1, or the division sits inside `with accelerator.accumulate(...)`. A divisor
    counts as an accumulation count when it is the expression given to the constructor,
    `<acc>.gradient_accumulation_steps`, or a name like `grad_accum_steps`,
    `accumulation_steps` or `ga_steps`.
    Not flagged: `Accelerator()` without accumulation plus a manual division outside
    `accumulate()` (that is the correct manual pattern of Accelerate's own examples),
    multiplications, and other divisors (`num_items_in_batch`).

    ## Why is this bad?
    `accelerator.backward` already divides the loss by `gradient_accumulation_steps` (and
    under DeepSpeed the engine scales by its own count). Dividing by hand as well scales the
    gradients by 1/GA²: the effective learning rate is GA times too small. Training runs,
    the loss goes down slowly, nothing fails.

    ## Example
    ```python
    accelerator = Accelerator(gradient_accumulation_steps=4)
    with accelerator.accumulate(model):
        loss = model(**batch).loss / 4
        accelerator.backward(loss)
    ```

    ## Use instead
    ```python
    accelerator = Accelerator(gradient_accumulation_steps=4)
    with accelerator.accumulate(model):
        loss = model(**batch).loss
        accelerator.backward(loss)
    ```

    ## Fix safety
    Unsafe: the division is removed (or the `loss /= ga` statement); if the division was
    intended to compensate something else, the gradients change scale.
    It assumes the division exists only to average over accumulation steps, which
    `accelerator.backward` already does; the model cannot show that, hence unsafe.
    """

    code = "AL102"
    holds_in_one_process = True
    name = "double-loss-scaling"
    severity = "warning"
    summary = "the loss is divided by the accumulation steps and accelerator.backward() divides again (1/GA²)"

    VALID = [
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for step, batch in enumerate(dl):
            loss = model(**batch).loss / gradient_accumulation_steps
            accelerator.backward(loss)
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            with accelerator.accumulate(model):
                loss = model(**batch).loss / num_items_in_batch
                accelerator.backward(loss * accelerator.num_processes)
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss / 4)  # expect: AL102
        """,
        """\
        from accelerate import Accelerator
        def train(args):
            accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum)
            model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
            for batch in dl:
                loss = model(**batch).loss
                loss = loss / args.grad_accum  # expect: AL102
                accelerator.backward(loss)
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                loss /= accelerator.gradient_accumulation_steps  # expect: AL102
                accelerator.backward(loss)
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "backward" and call.args
                    and model.is_accelerator(func.value)):
                continue
            configured, accumulates = model.gradient_accumulation(func.value)
            if not (accumulates or model.inside_accumulate(call)):
                continue
            found = _division_of(model, call, call.args[0].value, configured)
            if found is None:
                continue
            node, divisor, fix = found
            acc = model.code(func.value)
            yield Finding(
                node,
                f"{quote(model.code(node))} divides the loss by {quote(divisor)} and `{acc}.backward()` divides by "
                f"gradient_accumulation_steps again: the gradients are scaled by 1/GA² and the effective learning rate "
                f"is GA times too small; drop the manual division",
                fix=fix,
                evidence=tuple(model.accumulation_evidence(call)),
            )


def _is_accumulation_count(model: FileModel, expr: cst.BaseExpression, configured: set[str]) -> bool:
    """``expr`` is the accelerator's accumulation count: the expression its constructor was given,
    or its ``gradient_accumulation_steps`` attribute."""
    text = model.code(expr)
    if text.isdigit():
        return text in configured and text != "1"
    if text in configured:
        return True
    return isinstance(expr, cst.Attribute) and expr.attr.value == "gradient_accumulation_steps" \
        and model.is_accelerator(expr.value)


def _is_ga_division(model: FileModel, expr: cst.CSTNode, configured: set[str]) -> bool:
    return isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide) \
        and _is_accumulation_count(model, expr.right, configured)


def _division_of(model: FileModel, call: cst.Call, loss: cst.BaseExpression, configured: set[str]):
    """(node to report, divisor text, fix) for a GA division that reaches ``loss``, else None."""
    if _is_ga_division(model, loss, configured):
        return loss, model.code(loss.right), Fix("unsafe", "remove the manual division", ((loss, loss.left),))
    if not isinstance(loss, cst.Name):
        return None
    # the last binding of the name before the backward call, in the same function
    scope = model.scope_of(call)
    latest = None
    for node in model.index.walk(scope):
        if node is call:
            break
        if isinstance(node, cst.Assign) and any(
                isinstance(t.target, cst.Name) and t.target.value == loss.value for t in node.targets):
            latest = node
        elif isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) and node.target.value == loss.value:
            latest = node
    if latest is None:
        return None
    statement = model.index.parents.get(latest)
    removable = isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1
    if isinstance(latest, cst.AugAssign):
        if isinstance(latest.operator, cst.DivideAssign) and _is_accumulation_count(model, latest.value, configured):
            fix = Fix("unsafe", "remove the manual division", ((statement, cst.RemoveFromParent()),)) if removable else None
            return latest, model.code(latest.value), fix
        return None
    value = latest.value
    if not _is_ga_division(model, value, configured):
        return None
    if isinstance(value.left, cst.Name) and value.left.value == loss.value and removable:
        fix = Fix("unsafe", "remove the manual division", ((statement, cst.RemoveFromParent()),))
    else:
        fix = Fix("unsafe", "remove the manual division", ((value, value.left),))
    return value, model.code(value.right), fix
