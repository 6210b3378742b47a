from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import YES, FileModel
from .base import Finding, Rule, describe_guard


class RankGatedForward(Rule):
    """A prepared model run on some ranks only.

    ## What it does
    Flags `model(...)`, `model.forward(...)`, `model.generate(...)` and the model class's own
    methods that call its forward (`def sample(self, x): ... self(x)`, in this module or another
    of the project) on a prepared model inside a rank guard (`if accelerator.is_main_process:`, an early exit, a main-only
    helper): an error. `accelerator.unwrap_model(model)(...)` or `.generate(...)` there is a
    warning: harmless under plain DDP, a hang under FSDP and ZeRO-3 (with
    `--accelerate-config`, the severity follows the backend).
    Not flagged: models never prepared; `model.eval()`, `.train()`, `.parameters()`; forwards
    on every rank followed by main-only logging.

    ## Why is this bad?
    A DDP forward broadcasts the module's buffers (HF models register `position_ids` and
    others), so a forward on rank 0 alone waits for ranks that never come; FSDP and ZeRO-3
    all-gather the parameters on every forward, even through the unwrapped module.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al305_*`): a
    main-only `no_grad` forward after training hung under FSDP1/2 and ZeRO-3; under ZeRO-2
    it completed; under DDP on NCCL the buffer broadcast was paired with the other rank's
    barrier and the run went on (gloo hangs).

    ## Example
    ```python
    if accelerator.is_main_process:
        sample = model.generate(**prompt)
    ```

    ## Use instead
    ```python
    sample = accelerator.unwrap_model(model).generate(**prompt)   # every rank
    if accelerator.is_main_process:
        log_sample(sample)
    ```
    """

    code = "AL305"
    name = "rank-gated-forward"
    severity = "error"
    summary = "a prepared model's forward/generate on some ranks only (DDP buffers, FSDP all-gathers)"

    VALID = [
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model = accelerator.prepare(model)
        outputs = model(**batch)
        if accelerator.is_main_process:
            print(outputs.loss.item())
            model.eval()
            reference(**batch)
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM
        accelerator = Accelerator()
        model = accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"))
        if accelerator.is_main_process:
            outputs = model(**batch)  # expect: AL305
            text = accelerator.unwrap_model(model).generate(**prompt)  # expect: AL305
        """,
        """\
        import torch
        from accelerate import Accelerator

        class Denoiser(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(8, 8)
            def forward(self, x):
                return self.net(x)
            def sample(self, x, steps=4):
                for _ in range(steps):
                    x = self(x)
                return x
            def describe(self):
                return "denoiser"

        accelerator = Accelerator()
        model = accelerator.prepare(Denoiser())
        if accelerator.is_main_process:
            images = accelerator.unwrap_model(model).sample(torch.randn(1, 8))  # expect: AL305
            name = accelerator.unwrap_model(model).describe()
        """,
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM

        class Trainer:
            def __init__(self):
                self.accelerator = Accelerator()
                self.model = self.accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"))

            def validate(self, batch):
                if self.accelerator.is_main_process:
                    return self.model(**batch)  # expect: AL305
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            target, unwrapped = _forward_target(model, call)
            if target is None:
                continue
            guard = model.rank_guard_of(call) or model.callers_guard(model.scope_of(call))
            if guard is None:
                continue
            name = model.code(target)
            evidence = tuple(model.value_evidence(target) + model.guard_evidence(guard))
            if unwrapped:
                yield Finding(call, f"`{model.code(call.func)}(...)` on the unwrapped prepared model `{name}` runs "
                                    f"{describe_guard(model, guard)}: under FSDP and ZeRO-3 the forward all-gathers "
                                    f"parameters on every rank and the others never join", severity="warning",
                              tag="unwrapped", evidence=evidence)
            else:
                yield Finding(call, f"`{model.code(call.func)}(...)` on the prepared model `{name}` runs "
                                    f"{describe_guard(model, guard)}: under FSDP and ZeRO-3 its parameter all-gather "
                                    f"hangs, and under DDP its buffer broadcast is matched with the other ranks' next "
                                    f"collective (a hang on gloo); run it on every rank and keep only the logging "
                                    f"guarded", evidence=evidence)


def _forward_target(model: FileModel, call: cst.Call):
    """(the model expression, whether it was unwrapped) for a forward call (``model(...)``,
    ``unwrap_model(model)(...)``) or a method that runs the forward (``.generate``, or one of
    the model class's own), else (None, False)."""
    func = call.func
    target, unwrapped = _prepared_model(model, func)
    if target is not None:
        return target, unwrapped
    if isinstance(func, cst.Attribute):
        target, unwrapped = _prepared_model(model, func.value)
        if target is not None and model.runs_forward(target, func.attr.value):
            return target, unwrapped
    return None, False


def _prepared_model(model: FileModel, expr: cst.BaseExpression):
    """(the prepared model, whether unwrapped) that ``expr`` is: the wrapper ``prepare``
    returned, or ``accelerator.unwrap_model(<it>)``; else (None, False)."""
    unwrapped = model.is_unwrap_call(expr)
    target = expr.args[0].value if unwrapped else expr
    value = model.value_at(target)
    if value is None or value.kind != "model" or value.prepared != YES or (value.not_wrapped and not unwrapped):
        return None, False
    return target, unwrapped
