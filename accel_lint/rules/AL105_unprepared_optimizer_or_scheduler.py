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
    A scheduler kept out of `prepare` is flagged only where that is known to be wrong: its
    horizon is a multiple of a loader's length taken before `prepare` (all ranks' batches).
    One sized in this rank's steps (the prepared loader's length) and stepped once per such
    step is right as it is (preparing it would step it N times); one whose horizon is unknown
    is not reported.
    Not flagged: objects prepared in a separate `prepare` call; objects from other files
    (unknown); DeepSpeed's `DummyOptim`/`DummyScheduler`; `ReduceLROnPlateau`; schedulers
    stepped once per epoch outside the batch loop.

    ## Why is this bad?
    A prepared optimizer skips `step()` and `zero_grad()` on the micro-steps of gradient
    accumulation and checks for inf/NaN under fp16; an unprepared one steps on every
    micro-step, so nothing accumulates (the effective learning rate drops by the accumulation
    factor), and under fp16 it steps on gradients nobody unscaled. A prepared scheduler steps
    once per process per update, to match a horizon counted in all ranks' batches; an
    unprepared one sized that way reaches only 1/N of its schedule.

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
    holds_in_one_process = True
    several_process_variants = frozenset({"horizon"})  # (a horizon in all ranks' batches is right in one process)
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
        """\
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification, get_scheduler
        from accelerate import Accelerator
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        train_dl = DataLoader(train_ds, batch_size=16, shuffle=True)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        updates = 3 * len(train_dl) // 4
        lr_scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=updates)
        for epoch in range(3):
            for batch in train_dl:
                with accelerator.accumulate(model):
                    accelerator.backward(model(**batch).loss)
                    optimizer.step()
                    if accelerator.sync_gradients:
                        lr_scheduler.step()  # sized in this rank's updates, stepped once per update
        """,
    ]
    INVALID = [
        """\
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification, get_scheduler
        from accelerate import Accelerator
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        train_dl = DataLoader(train_ds, batch_size=16, shuffle=True)
        model, train_dl = accelerator.prepare(model, train_dl)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        lr_scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=1000)
        for batch in train_dl:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                optimizer.step()  # expect: AL105
                lr_scheduler.step()
        """,
        """\
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification, get_scheduler
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        train_dl = DataLoader(train_ds, batch_size=16, shuffle=True)
        lr_scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=3 * len(train_dl))
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        for epoch in range(3):
            for batch in train_dl:
                accelerator.backward(model(**batch).loss)
                optimizer.step()
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
            evidence = model.value_evidence(func.value)
            if value.kind == "scheduler":
                # kept out of `prepare` on purpose is right when its horizon counts the steps it
                # is stepped (this rank's updates, or its micro-steps): only a horizon counted in
                # all ranks' batches is known to be wrong
                length = _pre_prepare_horizon(model, origin)
                if length is not None:
                    loader = model.code(length.args[0].value)
                    yield Finding(call, f"`{name}` is sized from `len({loader})` before `prepare()` (all ranks' "
                                        f"batches) but never prepared, so it steps once per update on each rank and "
                                        f"reaches only 1/num_processes of its schedule; prepare it with the model",
                                  evidence=tuple(evidence + model.length_evidence(length)), tag="horizon")
                continue
            yield Finding(call, f"`{name}` ({value.kind}) is stepped in the training loop but never passed to "
                                f"`{acc}.prepare()`: it steps on every accumulation micro-step and skips the fp16 "
                                f"checks; prepare it with the model", evidence=tuple(evidence))


_HORIZONS = ("num_training_steps", "T_max", "total_steps", "total_iters", "num_cycles_steps")


def _pre_prepare_horizon(model: FileModel, scheduler: cst.Call) -> cst.Call | None:
    """The pre-``prepare`` ``len(loader)`` the scheduler's horizon is a multiple of (all ranks'
    batches), if any."""
    for arg in scheduler.args:
        if arg.keyword is not None and arg.keyword.value in _HORIZONS:
            lengths = [c for scale, c in model.step_scales_of(arg.value) if scale >= 1 and c is not None
                       and model.is_pre_prepare_length(c)]
            if lengths:
                return min(lengths, key=model.line_of)
    return None


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
