from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel, dotted_name
from .base import Finding, Rule

# what `prepare` returns for each kind, and what using the argument instead does
_HARM = {
    "model": "trains the bare module: no gradient all-reduce, and each rank's replica drifts apart",
    "optimizer": "steps the bare optimizer: it ignores gradient accumulation and mixed-precision scaling",
    "loader": "iterates the whole dataset on every rank instead of each rank's shard",
    "scheduler": "steps the bare scheduler: its horizon ignores the number of processes",
}


class PrepareResultDiscarded(Rule):
    """`accelerator.prepare(x)` as a bare statement, then `x` used.

    ## What it does
    Flags an expression statement `accelerator.prepare(...)` (or `prepare_model`,
    `prepare_optimizer`, `prepare_data_loader`, `prepare_scheduler`) whose result is thrown
    away, when an argument of a known kind (a module, an optimizer, a loader or a scheduler,
    from how it was made) is read again after the statement in the same function.
    Not flagged: an argument of unknown kind (`prepare` returns anything else unchanged); an
    argument never read again.

    ## Why is this bad?
    `prepare` returns the wrapped object and leaves its argument as it was. The code that
    follows trains the bare module, so DDP's reducer never averages the gradients and each
    rank's replica drifts apart; a bare loader feeds every rank the whole dataset. Nothing
    fails: the job runs and the result is wrong.

    Measured on 2 CPU ranks (gloo, `fixtures/matrix/al505_prepare_result_discarded_bad.py`):
    after eight steps the two ranks' parameters differ.

    ## Example
    ```python
    accelerator.prepare_model(model)
    for batch in loader:
        accelerator.backward(loss_fn(model(batch)))
    ```

    ## Use instead
    ```python
    model = accelerator.prepare_model(model)
    for batch in loader:
        accelerator.backward(loss_fn(model(batch)))
    ```
    """

    code = "AL505"
    name = "prepare-result-discarded"
    severity = "error"
    summary = "prepare()'s result thrown away and its argument used: the bare object trains on every rank"

    VALID = [
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        model = accelerator.prepare_model(model)
        print(model(torch.ones(4)))
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        models = {"g": make_generator(), "d": make_discriminator()}
        accelerator.prepare(models)
        print(models)
        """,
    ]
    INVALID = [
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        accelerator.prepare(model, optimizer)  # expect: AL505
        for x in torch.ones(8, 4):
            accelerator.backward(model(x).sum())
            optimizer.step()
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.objects.prepare_calls:
            statement = model.index.parents.get(call)
            if not isinstance(statement, cst.Expr):
                continue
            used = [(arg.value, kind) for arg in call.args if arg.keyword is None and not arg.star
                    if (kind := model.kind_given_to_prepare(call, arg.value)) is not None
                    and _read_after(model, arg.value, statement)]
            if not used:
                continue
            names = ", ".join(f"`{model.code(expr)}`" for expr, _ in used) + (" are" if len(used) > 1 else " is")
            harm = "; ".join(f"`{model.code(expr)}` {_HARM[kind]}" for expr, kind in used)
            evidence = [item for expr, _ in used for item in model.value_evidence(expr)]
            yield Finding(call, f"the result of `{model.code(call.func)}(...)` is thrown away and {names} used "
                                f"after it unchanged: {harm}; bind the result (`x = {model.code(call.func)}(x)`)",
                          evidence=tuple(evidence))


def _read_after(model: FileModel, expr: cst.BaseExpression, statement: cst.CSTNode) -> bool:
    """The object ``expr`` names is read after ``statement`` in the same function (source order)."""
    key = dotted_name(expr)
    if key is None:
        return False
    for node in model.nodes_after(statement):
        if not isinstance(node, (cst.Name, cst.Attribute)) or dotted_name(node) != key:
            continue
        parent = model.index.parents.get(node)
        if isinstance(parent, cst.AssignTarget):
            return False  # rebound before any read: the old object is gone
        if isinstance(parent, cst.Attribute) and parent.attr is node:
            continue
        return True
    return False
