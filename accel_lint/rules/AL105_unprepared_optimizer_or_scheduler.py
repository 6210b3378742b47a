from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import NO, FileModel
from .base import Finding, Rule

_NOT_FLAGGED = {"DummyOptim", "DummyScheduler", "ReduceLROnPlateau"}


class UnpreparedOptimizerOrScheduler(Rule):
    """An optimizer or scheduler stepped in the training loop but never prepared.

    ## What it does
    Flags `<x>.step()` inside a loop over batches when `<x>` is an optimizer or a learning-
    rate scheduler created in this file (`torch.optim.AdamW(...)`, `get_scheduler(...)`), the
    file prepares a model or a loader, and `<x>` was not passed to `prepare` on every path
    before the loop.
    Not flagged: objects prepared in a separate `prepare` call; objects from other files
    (unknown); DeepSpeed's `DummyOptim`/`DummyScheduler`; `ReduceLROnPlateau`; schedulers
    stepped once per epoch outside the batch loop.

    ## Why is this bad?
    A prepared optimizer skips `step()` and `zero_grad()` on the micro-steps of gradient
    accumulation and checks for inf/NaN under fp16; an unprepared one steps on every
    micro-step, so nothing accumulates (the effective learning rate drops by the accumulation
    factor). A prepared scheduler steps once per process to match the sharded loader; an
    unprepared one follows a different horizon than the one it was sized for.

    ## Example
    ```python
    model, train_dl = accelerator.prepare(model, train_dl)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    for batch in train_dl:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
    ```

    ## Use instead
    ```python
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
    for batch in train_dl:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
    ```
    """

    code = "AL105"
    name = "unprepared-optimizer-or-scheduler"
    severity = "warning"
    summary = "an optimizer/scheduler stepped in the batch loop but never passed to prepare()"

    VALID = [
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        for epoch in range(3):
            for batch in train_dl:
                accelerator.backward(model(**batch).loss)
                optimizer.step()
            scheduler.step(val_loss)
        """,
    ]
    INVALID = [
        """\
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification, get_scheduler
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        train_dl = DataLoader(train_ds, batch_size=16, shuffle=True)
        model, train_dl = accelerator.prepare(model, train_dl)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        lr_scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=1000)
        for batch in train_dl:
            accelerator.backward(model(**batch).loss)
            optimizer.step()  # expect: AL105
            lr_scheduler.step()  # expect: AL105
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        if not model.objects.prepare_calls:
            return
        for call in model.index.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
                continue
            value = model.value_at(func.value)
            if value is None or value.kind not in ("optimizer", "scheduler") or value.prepared != NO:
                continue
            origin = value.origin
            if not isinstance(origin, cst.Call) or model.was_prepared(origin):
                continue
            created_by = model.code(origin.func).rsplit(".", 1)[-1]
            if created_by in _NOT_FLAGGED or not _in_batch_loop(model, call):
                continue
            name = model.code(func.value)
            acc = model.accelerator_name_in(model.scope_of(call))
            yield Finding(call, f"`{name}` ({value.kind}) is stepped in the training loop but never passed to "
                                f"`{acc}.prepare()`: it steps on every accumulation micro-step and skips the fp16 "
                                f"checks; prepare it with the model", evidence=tuple(model.value_evidence(func.value)))


def _in_batch_loop(model: FileModel, call: cst.Call) -> bool:
    for parent in model.ancestors(call):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(parent, cst.For):
            it = parent.iter
            while isinstance(it, cst.Call) and it.args:
                it = it.args[0].value
            if model.prepared_kind(it) == "loader":
                return True
    return False
