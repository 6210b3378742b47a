from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel, shorten
from .base import Finding, Rule

_GATHERS = {"gather", "gather_for_metrics", "reduce", "broadcast"}


class GatherVariableShape(Rule):
    """Gathering `generate()` output, whose length differs from rank to rank.

    ## What it does
    Flags `accelerator.gather(...)`, `gather_for_metrics(...)`, `reduce(...)` or
    `broadcast(...)` of the output of `.generate(...)` (directly, or through the name it was
    assigned to), or of a model method that returns its own `generate()` output (`def
    my_generate(self, ids): ...; return self.generate(ids, ...)`, in a class of this module or of
    another of the tree), when it was not passed through `accelerator.pad_across_processes` first and
    `use_gather_object=True` is not set. This is a heuristic: only `generate()` output is
    recognized as variable-length (sequence tensors of dynamically padded batches are not yet).
    Also flags `gather`/`gather_for_metrics` of a Python list filled item by item where an item
    is added only when a test on the rank's own data holds (`if ...: continue` before the
    `append`): the list's length differs between ranks, and a list is gathered one collective
    per item. Not flagged: padded tensors; `gather_object`; lists every rank fills alike.

    ## Why is this bad?
    Every rank stops generating at a different length, and a collective needs the same shape
    everywhere: on gloo rank 0 aborts, on NCCL the job hangs or returns truncated data. Debug
    mode (which `runtime_checks` turns on) reports it at run time; this catches it before.

    ## Example
    ```python
    tokens = model.generate(**batch, max_new_tokens=64)
    tokens = accelerator.gather_for_metrics(tokens)
    ```

    ## Use instead
    ```python
    tokens = model.generate(**batch, max_new_tokens=64)
    tokens = accelerator.pad_across_processes(tokens, dim=1, pad_index=tokenizer.pad_token_id)
    tokens = accelerator.gather_for_metrics(tokens)
    ```
    """

    code = "AL204"
    name = "gather-variable-shape"
    severity = "warning"
    summary = "gathering generate() output without pad_across_processes: shapes differ across ranks"

    VALID = [
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model = accelerator.prepare(model)
        tokens = accelerator.unwrap_model(model).generate(**batch)
        tokens = accelerator.pad_across_processes(tokens, dim=1, pad_index=0)
        tokens = accelerator.gather_for_metrics(tokens)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(make_model(), DataLoader(dataset, batch_size=8))
        errors = []
        for batch in loader:
            preds = model(batch["x"])
            for i in range(preds.shape[0]):
                errors.append(((preds[i] - batch["y"][i]) ** 2).mean())
        errors = accelerator.gather(errors)
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model = accelerator.prepare(model)
        tokens = accelerator.unwrap_model(model).generate(**batch)
        gathered = accelerator.gather_for_metrics(tokens)  # expect: AL204
        all_tokens = accelerator.gather(model.generate(**batch))  # expect: AL204
        """,
        # a method of the model class that returns its own generate() output
        """\
        from accelerate import Accelerator
        from transformers import T5ForConditionalGeneration
        class Chat(T5ForConditionalGeneration):
            def reply(self, ids):
                out = self.generate(inputs=ids, max_new_tokens=32)
                return out
        accelerator = Accelerator()
        model = accelerator.prepare(Chat(config))
        tokens = accelerator.gather_for_metrics(accelerator.unwrap_model(model).reply(ids))  # expect: AL204
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(make_model(), DataLoader(dataset, batch_size=8))
        errors = []
        for batch in loader:
            preds = model(batch["x"])
            for i in range(preds.shape[0]):
                if batch["length"][i] > 500:
                    continue
                errors.append(((preds[i] - batch["y"][i]) ** 2).mean())
        errors = accelerator.gather(errors)  # expect: AL204
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value in _GATHERS and call.args
                    and model.is_accelerator(func.value)):
                continue
            if any(a.keyword is not None and a.keyword.value == "use_gather_object" for a in call.args):
                continue
            tensor = call.args[0].value
            ragged = _ragged_list(model, tensor) if func.attr.value in ("gather", "gather_for_metrics") else None
            if ragged is not None:
                append, test = ragged
                yield Finding(call, f"`{model.code(tensor)}` is a list whose length differs from rank to rank; "
                                    f"`{func.attr.value}` runs one collective per item, so the ranks make different "
                                    f"numbers of collectives and hang; gather one padded tensor, or use "
                                    f"`gather_object`",
                              evidence=((append, f"whether `{shorten(model.code(append))}` runs depends on "
                                                 f"`{shorten(model.code(test))}`, which reads this rank's data"),))
                continue
            made = _generate_call(model, tensor)
            if made is not None:
                acc = model.code(func.value)
                yield Finding(call, f"`{model.code(tensor)}` comes from `{made.func.attr.value}()`, whose length differs from rank "
                                    f"to rank; `{func.attr.value}` needs the same shape everywhere (gloo aborts, NCCL "
                                    f"hangs or truncates); call `{acc}.pad_across_processes(..., dim=1)` first",
                              evidence=((made, f"made by `{shorten(model.code(made))}`: generated sequences, "
                                               f"whose length depends on this rank's batch" + (
                                                   "" if made.func.attr.value == "generate" else
                                                   f" (`{made.func.attr.value}` returns its model's own "
                                                   f"`generate()` output)")),))


def _generate_call(model: FileModel, expr: cst.BaseExpression) -> cst.Call | None:
    """The ``generate()`` call whose output ``expr`` is, directly or through a name; or the call
    of a model method that returns its own ``generate()``'s output (``model.my_generate(...)``)."""
    if isinstance(expr, cst.Name):
        value = model.value_at(expr)
        expr = value.origin if value is not None else None
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and (
            expr.func.attr.value == "generate" or model.generates(expr)):
        return expr
    return None


def _ragged_list(model: FileModel, expr: cst.BaseExpression) -> tuple[cst.Call, cst.BaseExpression] | None:
    """``(append, test)`` where ``expr`` names a list made empty (``[]``) and filled by
    ``append``/``extend`` calls in its function, one of which runs only when a test on this
    rank's data holds: the ``if`` around it, or an ``if ...: continue``/``break`` before it in
    its loop. The list's length then differs between ranks."""
    if type(expr) is not cst.Name:
        return None
    value = model.value_at(expr)
    origin = value.origin if value is not None else None
    if not (type(origin) is cst.List and not origin.elements):
        return None
    scope = model.scope_of(origin)
    for call in model.calls_in(scope):
        func = call.func
        if not (type(func) is cst.Attribute and func.attr.value in ("append", "extend")
                and type(func.value) is cst.Name and func.value.value == expr.value
                and model.scope_of(call) is scope):
            continue
        test = _data_test_around(model, call, scope)
        if test is not None:
            return call, test
    return None


def _data_test_around(model: FileModel, node: cst.CSTNode, scope: cst.CSTNode) -> cst.BaseExpression | None:
    """The test on this rank's data that decides whether ``node`` runs in its loop iteration."""
    for ancestor in model.index.ancestors(node):
        if ancestor is scope:
            return None
        if type(ancestor) is cst.If and model.rank_data.varies(ancestor.test):
            return ancestor.test
        if type(ancestor) in (cst.For, cst.While):
            for inner in model.index.walk(ancestor.body):
                if type(inner) is cst.If and model.rank_data.varies(inner.test) and any(
                        type(n) in (cst.Continue, cst.Break) for n in model.index.walk(inner.body)):
                    return inner.test
            return None
    return None
