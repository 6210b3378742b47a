from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from ..model.clips import clip_accelerator, clip_in_helper, under_sync_gradients
from .base import Finding, Rule, guard_statement_fix



class ClipOutsideSyncGradients(Rule):
    """Gradient clipping on every accumulation micro-step.

    ## What it does
    Flags a clip call (`accelerator.clip_grad_norm_/clip_grad_value_` or torch's) that is not
    under a condition on `accelerator.sync_gradients`, when it is inside
    `with accelerator.accumulate(...)`, or in a loop that calls `accelerator.backward` while
    the accelerator accumulates gradients (`gradient_accumulation_steps` other than 1).
    Not flagged: clips under `if accelerator.sync_gradients:` (also `... and ...`); loops without
    accumulation, also inside the `accumulate()` of an accelerator whose constructor sets none
    (no `gradient_accumulation_steps`, plugin or `**kwargs`: every step is a sync step), also
    one handed in from another module where every caller builds it so;
    `optimizer.step()`/`zero_grad()` on every micro-step (the prepared optimizer skips them
    itself); the accelerator's clip where its constructor is given a `DeepSpeedPlugin` (there
    the method clips nothing and returns the engine's norm: DeepSpeed clips at its own step).

    ## Why is this bad?
    On the micro-steps in between, the gradients are partial sums, so clipping them clips the
    wrong norm. Under fp16 `clip_grad_norm_` unscales the gradients: twice before the
    optimizer's update raises `unscale_() has already been called on this optimizer since the
    last update()`, or NaNs later (accelerate#641). Under FSDP every micro-step pays for a
    collective norm.

    ## Example
    ```python
    with accelerator.accumulate(model):
        accelerator.backward(loss)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    ```

    ## Use instead
    ```python
    with accelerator.accumulate(model):
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
    ```

    ## Fix safety
    Safe: a clip that is a statement of its own is wrapped in `if accelerator.sync_gradients:`.
    No fix when its result is assigned (the name would be unbound on the other micro-steps).
    It assumes nothing else in the statement has to run on every micro-step (a clip returns
    a norm and changes only the gradients, which the next micro-step overwrites or adds to),
    and that the accelerator it names is bound on every path to the call.
    """

    code = "AL104"
    holds_in_one_process = True
    name = "clip-outside-sync-gradients"
    severity = "warning"
    summary = "gradient clipping inside accumulate() runs on every micro-step; guard it with sync_gradients"

    VALID = [
        # under DeepSpeed the accelerator's clip only reads the engine's norm
        """\
        from accelerate import Accelerator, DeepSpeedPlugin
        plugin = DeepSpeedPlugin(gradient_accumulation_steps=4, gradient_clipping=1.0)
        accelerator = Accelerator(deepspeed_plugin=plugin)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for batch in loader:
            with accelerator.accumulate(model):
                accelerator.backward(model(batch).loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                optimizer.zero_grad()
        """,
        """\
        from accelerate import Accelerator
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dl = DataLoader(dataset, batch_size=8)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                if accelerator.sync_gradients and max_grad_norm:
                    accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
                optimizer.step()
        """,
        """\
        from accelerate import Accelerator
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dl = DataLoader(dataset, batch_size=8)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            accelerator.backward(model(**batch).loss)
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        """,
        """\
        from accelerate import Accelerator
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator(mixed_precision="bf16")
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dl = DataLoader(dataset, batch_size=8)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            with accelerator.accumulate(model):  # no accumulation set: every step is a sync step
                accelerator.backward(model(**batch).loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator(gradient_accumulation_steps=4)
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dl = DataLoader(dataset, batch_size=8)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            with accelerator.accumulate(model):
                accelerator.backward(model(**batch).loss)
                accelerator.clip_grad_norm_(model.parameters(), 1.0)  # expect: AL104
                optimizer.step()
        """,
        """\
        from accelerate import Accelerator
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator(gradient_accumulation_steps=8)
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dl = DataLoader(dataset, batch_size=8)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            accelerator.backward(model(**batch).loss)
            norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)  # expect: AL104
            optimizer.step()
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            helper = None
            accelerator = clip_accelerator(model, call)
            if accelerator is not None and accelerator is not False and model.built_for_deepspeed(accelerator):
                continue  # DeepSpeed's engine clips at its own boundary: this call only reads the norm
            if accelerator is False:
                # `maybe_clip(accelerator, model, max_norm)`: a helper (of this module or another
                # of the tree) that clips on every call
                helper = clip_in_helper(model, call)
                if helper is None:
                    continue
            if under_sync_gradients(model, call):
                continue
            accumulating = model.accumulate_accelerator(call)
            if accumulating is not None and model.never_accumulates(accumulating):
                continue  # `accumulate()` of an accelerator built without accumulation: every step syncs
            if accumulating is None and not _accumulating_backward_loop(model, call):
                continue
            acc = model.sole_accelerator_in(model.scope_of(call))
            what = f"`{model.code(call.func)}()`" if helper is None else \
                f"`{model.code(call.func)}()`, which clips the gradients (`{helper}`),"
            evidence = tuple(model.accumulation_evidence(call))
            if helper is not None:
                evidence = ((call, f"calls `{helper}` on every call"), *evidence)
            yield Finding(call, f"{what} runs on every gradient-accumulation micro-step, on "
                                f"partial gradients (and under fp16 unscales twice before the update); guard it "
                                f"with `if {acc or 'accelerator'}.sync_gradients:`",
                          fix=guard_statement_fix(model, call, model.accelerator_for_fix(call), "sync_gradients",
                                                  "safe"),
                          evidence=evidence)


def _accumulating_backward_loop(model: FileModel, call: cst.Call) -> bool:
    for parent in model.ancestors(call):
        if isinstance(parent, cst.FunctionDef):
            return False
        if isinstance(parent, (cst.For, cst.While)):
            for inner in model.calls_in(parent.body):
                func = inner.func
                # a backward in a loop of its own inside this one (the micro-batches of one
                # update, looped by hand) runs to the end before the clip: it clips once per update
                if isinstance(func, cst.Attribute) and func.attr.value == "backward" and \
                        model.is_accelerator(func.value) and model.gradient_accumulation(func.value)[1] and \
                        model.enclosing_loop(inner) is parent:
                    return True
            return False
    return False
