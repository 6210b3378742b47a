from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from ._examples import FLAG_GATED_ACCELERATOR
from .base import Finding, Fix, Rule

_CLIPS = {
    "torch.nn.utils.clip_grad_norm_": "clip_grad_norm_", "torch.nn.utils.clip_grad.clip_grad_norm_": "clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_": "clip_grad_value_",
    "torch.nn.utils.clip_grad.clip_grad_value_": "clip_grad_value_",
}
_UNSAFE_KEYWORDS = {"error_if_nonfinite", "foreach"}


class RawClipGradNorm(Rule):
    """`torch.nn.utils.clip_grad_norm_` on the parameters of a prepared model.

    ## What it does
    Flags `torch.nn.utils.clip_grad_norm_(...)` and `clip_grad_value_(...)` (any import
    form) whose parameters come from a prepared model (`model.parameters()`) or a prepared
    optimizer (`optimizer.param_groups`).
    Not flagged: `accelerator.clip_grad_norm_`; parameters of modules that were never
    prepared; a torch clip that follows `accelerator.unscale_gradients()` in the same
    function; a torch clip where every `Accelerator(...)` of the file fixes
    `mixed_precision="bf16"` or `"no"` (the launch config cannot turn on fp16 then), or where
    every launch of the file that the project writes gives bf16 or none
    (`accelerate launch --mixed_precision bf16`, a config file's `mixed_precision: bf16`, a
    plain `python`), in a project whose files name no FSDP, DeepSpeed ZeRO-3 or XLA; code where no accelerator
    exists (the `else:` of `if accelerator:`, or of a flag every `Accelerator(...)` is built
    under).

    ## Why is this bad?
    The torch function clips what it is given. Under fp16 the gradients are still scaled by
    the loss scaler, so the norm is compared against `max_norm x scale` and nothing is ever
    clipped. Under FSDP each rank clips by the norm of its own shard. Under DeepSpeed
    clipping belongs to the engine. `accelerator.clip_grad_norm_` unscales first and does
    the right thing per backend.

    ## Example
    ```python
    accelerator.backward(loss)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    ```

    ## Use instead
    ```python
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    ```

    ## Fix safety
    Safe: the call becomes `accelerator.clip_grad_norm_(...)` (or `clip_grad_value_`) with the
    same arguments (the signatures match), when exactly one accelerator is in scope. Unsafe when
    `error_if_nonfinite` or `foreach` is passed (Accelerate's version does not take them).
    It assumes the clipped parameters belong to a model that accelerator prepared (the fix
    also unscales fp16 gradients first, which is what a correct clip needs), and that the
    accelerator is bound on every path to the call; otherwise no fix is offered.
    """

    code = "AL103"
    holds_in_one_process = True
    # (no constructor asks for fp16; "fixed-precision": every one fixes bf16 or fp32, which the
    # launch config cannot change, so only FSDP's shards and XLA's cores are left)
    several_process_variants = frozenset({"backend", "fixed-precision"})
    sharding_only_variants = frozenset({"fixed-precision"})
    launch_precision_variants = frozenset({"backend"})
    name = "raw-clip-grad-norm"
    severity = "warning"
    summary = "torch's clip_grad_norm_ on a prepared model ignores fp16 loss scaling and FSDP sharding"

    VALID = [
        FLAG_GATED_ACCELERATOR,
        """\
        import torch
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        torch.nn.utils.clip_grad_norm_(frozen_encoder.parameters(), 1.0)
        accelerator.unscale_gradients()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        """,
    ]
    INVALID = [
        """\
        import torch
        from torch.nn.utils import clip_grad_value_
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator(mixed_precision="fp16")
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dl = DataLoader(dataset, batch_size=8)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            accelerator.backward(model(**batch).loss)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # expect: AL103
            clip_grad_value_(model.parameters(), 0.5)  # expect: AL103
            optimizer.step()
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            fn = _CLIPS.get(model.index.imports.qualify_expr(call.func) or "")
            if fn is None or not call.args or not _from_prepared(model, call.args[0].value):
                continue
            if _unscaled_before(model, call):
                continue
            acc = model.accelerator_for_fix(call)
            fix = None
            if acc is not None:
                unsafe = any(a.keyword is not None and a.keyword.value in _UNSAFE_KEYWORDS for a in call.args)
                fix = Fix("unsafe" if unsafe else "safe", f"use `{acc}.{fn}`",
                          ((call.func, cst.parse_expression(f"{acc}.{fn}")),))
            clipped = call.args[0].value
            owner = clipped.func.value if isinstance(clipped, cst.Call) and isinstance(clipped.func, cst.Attribute) \
                else clipped
            yield Finding(call, f"`torch.nn.utils.{fn}` on a prepared model clips the still-scaled gradients under "
                                f"fp16 (so it never clips), each rank's own shard under FSDP, and each core's gradients before "
                                f"they are averaged on TPU (XLA); use "
                                f"`{acc or 'accelerator'}.{fn}(...)`", fix=fix,
                          evidence=tuple(model.value_evidence(owner)),
                          tag="fp16" if model.may_scale_fp16(None)
                          else "fixed-precision" if model.precision_fixed_without_fp16() else "backend")


def _from_prepared(model: FileModel, expr: cst.BaseExpression) -> bool:
    """``model.parameters()`` of a prepared model, or anything reading a prepared optimizer."""
    for call in model.calls_in(expr) + ([expr] if isinstance(expr, cst.Call) else []):
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "parameters" \
                and model.is_prepared_module(call.func.value):
            return True
    return any(model.prepared_kind(n) == "optimizer" for n in model.index.loads_in(expr))


def _unscaled_before(model: FileModel, clip: cst.Call) -> bool:
    for call in model.calls_in(model.scope_of(clip)):
        if call is clip:
            return False
        if isinstance(call.func, cst.Attribute) and call.func.attr.value == "unscale_gradients" \
                and model.is_accelerator(call.func.value):
            return True
    return False
