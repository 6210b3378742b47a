from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import YES, FileModel
from .base import Finding, Rule

_HALF = ("casts the parameters to half precision under the wrapper: training runs without fp32 master weights or "
         "loss scaling, and ZeRO-3's forward fails on mixed dtypes")
_EFFECTS = {
    "cuda": "moves the parameters the wrapper placed (and fails where the job runs on CPU)",
    "half": _HALF,
    "bfloat16": _HALF,
    "float": "casts the parameters under the wrapper after `prepare()` set up their precision",
    "double": "casts the parameters under the wrapper after `prepare()` set up their precision",
}
_CHANGES_PARAMETERS = set(_EFFECTS)


class DeviceMoveOnPrepared(Rule):
    """Moving or casting a model after `prepare` placed (and wrapped) it.

    ## What it does
    Flags, on a model returned by `prepare`: `.cuda()`, `.half()`, `.bfloat16()`,
    `.float()`, `.double()` and `.to(...)` with another device or a dtype (a warning: the
    parameters change under the wrapper); `.to(accelerator.device)` (info: a no-op).
    Not flagged: `model.to(accelerator.device)` before `prepare`; modules that were never
    prepared (a frozen VAE moved with `.to(accelerator.device, dtype=weight_dtype)`);
    a warning-variant move after the training of its function (a backward pass runs earlier in
    the function and none later: `unet = unet.to(torch.float32)` before saving the weights, where
    no wrapper hook runs again); a cast to float32 (`.float()`, `.to(torch.float32)`) of a model
    whose parameters are float32 already (not made with another `torch_dtype=`, not cast to half
    before `prepare`, not prepared by an accelerator given a DeepSpeed plugin); batches (not
    tracked yet).

    ## Why is this bad?
    DDP registers its gradient hooks on the parameters it wrapped; torch's DDP documentation
    says never to change a model's parameters after wrapping it. FSDP and DeepSpeed own
    placement and offloading. `.cuda()` also breaks `ACCELERATE_USE_CPU` runs and non-CUDA
    devices. Casting for mixed precision is what `Accelerator(mixed_precision=...)` does.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al504_*`):
    `.half()` after `prepare` made ZeRO-3's forward fail on mixed dtypes; under DDP, FSDP
    and ZeRO-2 it ran, in pure half precision.

    ## Example
    ```python
    model = accelerator.prepare(model)
    model = model.half().cuda()
    ```

    ## Use instead
    ```python
    accelerator = Accelerator(mixed_precision="fp16")
    model = accelerator.prepare(model)   # placed on accelerator.device, autocast in forward
    ```
    """

    code = "AL504"
    holds_in_one_process = True
    name = "device-move-on-prepared"
    severity = "warning"
    summary = ".cuda()/.half()/.to(...) on a prepared model: the wrapper already placed it"

    VALID = [
        # float32 parameters cast to float32: nothing changes
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator(mixed_precision="bf16")
        model, optimizer, loader = accelerator.prepare(torch.nn.Linear(4, 1), optimizer, loader)
        model = model.to(torch.float32)
        for batch in loader:
            accelerator.backward(model(batch).mean())
            optimizer.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        from diffusers import UNet2DConditionModel
        accelerator = Accelerator()
        unet = UNet2DConditionModel.from_pretrained("sd", subfolder="unet")
        optimizer = torch.optim.AdamW(unet.parameters())
        unet, optimizer, loader = accelerator.prepare(unet, optimizer, loader)
        for batch in loader:
            accelerator.backward(unet(batch).loss)
            optimizer.step()
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            unet = unet.to(torch.float32)  # after training: cast the weights for saving
            accelerator.unwrap_model(unet).save_pretrained("out")
        """,
        """\
        import torch
        from accelerate import Accelerator
        from diffusers import AutoencoderKL, UNet2DConditionModel
        accelerator = Accelerator()
        model = UNet2DConditionModel.from_pretrained("runwayml/stable-diffusion-v1-5", subfolder="unet")
        vae = AutoencoderKL.from_pretrained("runwayml/stable-diffusion-v1-5", subfolder="vae")
        model = model.to(accelerator.device)
        model = accelerator.prepare(model)
        vae.to(accelerator.device, dtype=torch.float16)
        """,
    ]
    INVALID = [
        """
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM
accelerator = Accelerator()
model = AutoModelForCausalLM.from_pretrained("gpt2", torch_dtype=torch.bfloat16)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
model.float()  # expect: AL504
for batch in loader:
    accelerator.backward(model(**batch).loss)
    optimizer.step()
""",
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        critic = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(critic.parameters(), lr=0.1)
        critic, optimizer = accelerator.prepare(critic, optimizer)
        def step(batch, low_memory):
            if low_memory:
                critic.to("cpu")  # expect: AL504
                batch = batch.to(accelerator.device)
                critic.to(accelerator.device)  # brings back what was offloaded above: no no-op
            return critic(batch).sum()
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        blocks = torch.nn.Linear(4, 4)
        optimizer = torch.optim.SGD(blocks.parameters(), lr=0.1)
        blocks, optimizer = accelerator.prepare(blocks, optimizer)
        def place(module, device):
            module.to(device)  # expect: AL504 (the accelerator's device, passed below)
        place(blocks, device=accelerator.device)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM
        accelerator = Accelerator()
        model = AutoModelForCausalLM.from_pretrained("gpt2")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
        model.cuda()  # expect: AL504
        model.to(torch.bfloat16)  # expect: AL504
        model.to(accelerator.device)  # expect: AL504
        """,
        """\
        import torch
        from accelerate import Accelerator
        from transformers import AutoModel
        class Trainer:
            def __init__(self):
                self.accelerator = Accelerator()
                self.model = self.accelerator.prepare(AutoModel.from_pretrained("bert-base-uncased"))
                self.model.to(self.device)  # expect: AL504
            @property
            def device(self):
                return self.accelerator.device
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            func = call.func
            if not isinstance(func, cst.Attribute):
                continue
            value = model.value_at(func.value)
            if value is None or value.kind != "model" or value.prepared != YES or value.not_wrapped:
                continue
            method = func.attr.value
            name = model.code(func.value)
            evidence = tuple(model.value_evidence(func.value))
            if method in _CHANGES_PARAMETERS and model.after_training(call):
                continue  # after the last training step (a cast before saving): no wrapper hook runs again
            if _to_float32_only(model, call) and not _may_hold_reduced_precision(model, value):
                continue  # `.float()` of parameters already in float32: nothing changes
            if method in _CHANGES_PARAMETERS:
                effect = _EFFECTS[method]
                yield Finding(call, f"`{name}.{method}()` on a prepared model {effect}; `prepare()` already placed it "
                                    f"(use `mixed_precision=` for dtypes)",
                              tag="half" if method in ("half", "bfloat16") else method, evidence=evidence)
            elif method == "to" and call.args:
                targets = [model.code(a.value) for a in call.args]
                if len(call.args) == 1 and call.args[0].keyword is None and \
                        model.is_accelerator_device(call.args[0].value):
                    if _moved_elsewhere(model, call):
                        continue  # brings back a model the code offloads (`.to("cpu")` elsewhere): no no-op
                    yield Finding(call, f"`{name}.to({targets[0]})` on a prepared model does nothing: `prepare()` "
                                        f"already placed it on the accelerator's device", severity="info", evidence=evidence)
                elif not model.after_training(call):
                    yield Finding(call, f"`{name}.to({', '.join(targets)})` on a prepared model changes the parameters "
                                        f"under the wrapper, whose hooks and placement then no longer match; "
                                        f"`prepare()` already placed it", evidence=evidence)


_FLOAT32 = frozenset({"torch.float32", "torch.float"})


def _to_float32_only(model: FileModel, call: cst.Call) -> bool:
    """``m.float()``, ``m.to(torch.float32)`` or ``m.to(accelerator.device, dtype=torch.float32)``:
    a cast to float32 and at most a move to the accelerator's own device."""
    if call.func.attr.value == "float":
        return True
    if call.func.attr.value != "to" or not call.args:
        return False
    dtypes = [a for a in call.args if (model.index.imports.qualify_expr(a.value) or model.code(a.value)) in _FLOAT32]
    others = [a for a in call.args if a not in dtypes]
    return bool(dtypes) and all(a.keyword is None and model.is_accelerator_device(a.value) for a in others)


def _may_hold_reduced_precision(model: FileModel, value) -> bool:
    """The prepared model's parameters may be in another precision than float32: it was made
    with a ``torch_dtype=``/``dtype=`` other than float32, cast to half before ``prepare``
    (``unwrapped`` or not), or DeepSpeed's engine (given a plugin) holds it in its own."""
    for origin in value.origins():
        if isinstance(origin, cst.Call):
            for arg in origin.args:
                if arg.keyword is not None and arg.keyword.value in ("torch_dtype", "dtype") and \
                        (model.index.imports.qualify_expr(arg.value) or model.code(arg.value)) not in _FLOAT32:
                    return True
            if isinstance(origin.func, cst.Attribute) and origin.func.attr.value in ("half", "bfloat16"):
                return True
    prepare = value.prepared_at
    return isinstance(prepare, cst.Call) and isinstance(prepare.func, cst.Attribute) and \
        model.built_for_deepspeed(prepare.func.value)


def _moved_elsewhere(model: FileModel, call: cst.Call) -> bool:
    """Earlier in the same function the same model went to another device (``.to("cpu")``,
    ``.cpu()``) and nothing brought it back before ``call``: ``call`` restores it, no no-op."""
    name = model.code(call.func.value)
    line = model.line_of(call)
    moves = []  # (line, is an offload) of the same model, before `call`
    for other in model.calls_in(model.scope_of(call)):
        if other is call or not isinstance(other.func, cst.Attribute) or model.code(other.func.value) != name \
                or model.line_of(other) >= line:
            continue
        target = other.args[0].value if other.func.attr.value == "to" and other.args else None
        if other.func.attr.value == "cpu" or (target is not None and (isinstance(target, cst.SimpleString) or (
                isinstance(target, cst.Call) and model.code(target.func) == "torch.device"))
                and not model.is_accelerator_device(target)):
            moves.append((model.line_of(other), True))
        elif target is not None and model.is_accelerator_device(target):
            moves.append((model.line_of(other), False))
    return bool(moves) and max(moves)[1]
