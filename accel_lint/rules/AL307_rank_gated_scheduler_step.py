from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from .base import Finding, Rule, describe_guard

# DeepSpeed's placeholder: the engine steps the learning rate, its own `step()` does nothing
_NOT_FLAGGED = {"DummyScheduler"}


class RankGatedSchedulerStep(Rule):
    """A learning-rate scheduler stepped on some ranks only.

    ## What it does
    Flags `<scheduler>.step()` that runs only where a rank-dependent condition is true
    (`if accelerator.is_main_process:`, `if rank == 0:`, or in a function called only there),
    when `<scheduler>` is a learning-rate scheduler (made by `torch.optim.lr_scheduler`,
    `transformers`' or `diffusers`' `get_scheduler`, ..., prepared or not).
    Not flagged: a scheduler stepped on every rank; DeepSpeed's `DummyScheduler` (the engine
    steps it); a scheduler whose kind the analysis cannot tell.

    ## Why is this bad?
    Gradient synchronisation averages gradients, not learning rates: each rank's optimizer
    applies its own. When only the main process steps the scheduler, the other ranks keep the
    initial learning rate (or the warmup's first one), so the ranks apply the same averaged
    gradients with different step sizes. Under DDP the replicas drift apart silently and the
    checkpoint saved from rank 0 is not the model the other ranks train; under FSDP each rank's
    shard of the model is updated with its own learning rate. Nothing fails.

    ## Example
    ```python
    for batch in train_dl:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()
        if accelerator.is_main_process:
            lr_scheduler.step()
            wandb.log({"lr": lr_scheduler.get_last_lr()[0]})
    ```

    ## Use instead
    ```python
    for batch in train_dl:
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()
        lr_scheduler.step()
        if accelerator.is_main_process:
            wandb.log({"lr": lr_scheduler.get_last_lr()[0]})
    ```
    """

    code = "AL307"
    name = "rank-gated-scheduler-step"
    severity = "error"
    summary = "a learning-rate scheduler stepped on some ranks only: the ranks train with different learning rates"
    VALID = [
        """\
        import torch
        from accelerate import Accelerator
        from torch.optim.lr_scheduler import CosineAnnealingLR
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = CosineAnnealingLR(optimizer, T_max=100)
        model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
        for x in batches:
            accelerator.backward(model(x).sum())
            optimizer.step()
            scheduler.step()
            if accelerator.is_main_process:
                print(scheduler.get_last_lr())
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        if accelerator.is_main_process:
            stepper.step()
        """,
    ]
    INVALID = [
        """\
        import torch
        from accelerate import Accelerator
        from torch.optim.lr_scheduler import CosineAnnealingLR
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        scheduler = CosineAnnealingLR(optimizer, T_max=100)
        model, optimizer = accelerator.prepare(model, optimizer)
        for x in batches:
            accelerator.backward(model(x).sum())
            optimizer.step()
            if accelerator.is_main_process:
                scheduler.step()  # expect: AL307
        """,
        """\
        from accelerate import Accelerator
        from transformers import get_scheduler
        class Trainer:
            def __init__(self, model, optimizer):
                self.accelerator = Accelerator()
                self.scheduler = get_scheduler("linear", optimizer, num_warmup_steps=10, num_training_steps=100)
                self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, self.scheduler)
            def after_step(self):
                if self.accelerator.is_main_process:
                    self.scheduler.step()  # expect: AL307
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "step"):
                continue
            value = model.value_at(func.value)
            if value is None or value.kind != "scheduler":
                continue
            origin = value.origin
            if isinstance(origin, cst.Call) and model.code(origin.func).rsplit(".", 1)[-1] in _NOT_FLAGGED:
                continue
            guard = model.rank_guard_of(call)
            if guard is None:
                continue
            name = model.code(func.value)
            yield Finding(call, f"`{name}.step()` runs {describe_guard(model, guard)}: the other ranks keep their "
                                f"learning rate, so under DDP the replicas drift apart and under FSDP the shards are "
                                f"updated with different learning rates; step it on every rank",
                          evidence=tuple(model.value_evidence(func.value) + model.guard_evidence(guard)))
