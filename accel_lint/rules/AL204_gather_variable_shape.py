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
    assigned to) when it was not passed through `accelerator.pad_across_processes` first and
    `use_gather_object=True` is not set. This is a heuristic: only `generate()` output is
    recognized as variable-length (sequence tensors of dynamically padded batches are not yet).
    Not flagged: padded tensors; `gather_object`.

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
            made = _generate_call(model, tensor)
            if made is not None:
                acc = model.code(func.value)
                yield Finding(call, f"`{model.code(tensor)}` comes from `generate()`, whose length differs from rank "
                                    f"to rank; `{func.attr.value}` needs the same shape everywhere (gloo aborts, NCCL "
                                    f"hangs or truncates); call `{acc}.pad_across_processes(..., dim=1)` first",
                              evidence=((made, f"made by `{shorten(model.code(made))}`: generated sequences, "
                                               f"whose length depends on this rank's batch"),))


def _generate_call(model: FileModel, expr: cst.BaseExpression) -> cst.Call | None:
    """The ``generate()`` call whose output ``expr`` is, directly or through a name."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "generate":
        return expr
    if isinstance(expr, cst.Name):
        value = model.value_at(expr)
        origin = value.origin if value is not None else None
        if isinstance(origin, cst.Call) and isinstance(origin.func, cst.Attribute) \
                and origin.func.attr.value == "generate":
            return origin
    return None
