from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import NO, YES, FileModel
from ..model.names import dotted_name
from ._examples import FLAG_GATED_ACCELERATOR
from .base import Finding, Fix, Rule

# nn.Module API (and DistributedDataParallel's own attributes) that the wrapper forwards or has
# the DDP wrapper's own members: deliberate where a branch tested for the wrapper
_WRAPPER_API = frozenset({"_set_static_graph", "_get_ddp_logging_data", "reducer", "process_group", "static_graph",
                          "find_unused_parameters", "broadcast_buffers", "gradient_as_bucket_view", "join_hook",
                          "_register_builtin_comm_hook", "_register_fused_optim",
                          # DeepSpeed's engine, inside a `distributed_type == DEEPSPEED` branch
                          "get_global_grad_norm", "save_checkpoint", "load_checkpoint", "zero_optimization_stage",
                          "is_gradient_accumulation_boundary", "set_gradient_accumulation_boundary",
                          "global_steps", "global_samples", "get_lr", "train_micro_batch_size_per_gpu",
                          "empty_partition_cache", "optimizer", "lr_scheduler",
                          # the engine's own DeepSpeed configuration, read where the code tested
                          # for the engine (`type(m).__name__ == "DeepSpeedEngine"`) to keep it
                          "config"})
# what only DeepSpeed's engine has (a model never does): called on the prepared model, the
# program means the engine
_ENGINE_ONLY = frozenset({"save_checkpoint", "load_checkpoint"})


def _a_class_here_defines(model: FileModel, method: str) -> bool:
    """Some class of this file defines ``method`` (a model with its own ``save_checkpoint``)."""
    return any(method in cls.methods for cls in model.index.classes.values())


_MODULE_API = frozenset({
    "train", "eval", "parameters", "named_parameters", "buffers", "named_buffers", "children",
    "named_children", "modules", "named_modules", "zero_grad", "requires_grad_", "to", "cpu", "cuda",
    "half", "float", "double", "bfloat16", "type", "apply", "forward", "load_state_dict", "add_module",
    "register_module", "register_buffer", "register_parameter", "register_forward_hook",
    "register_forward_pre_hook", "register_full_backward_hook", "register_backward_hook",
    "register_full_backward_pre_hook", "register_load_state_dict_post_hook", "register_state_dict_pre_hook",
    "get_submodule", "get_parameter", "get_buffer", "extra_repr", "training", "share_memory", "xpu",
    "to_empty", "compile", "no_sync", "join", "register_comm_hook", "device", "device_ids",
    "output_device", "process_group", "backward", "step", "_get_name",
})
_EFFECTS = {
    "state_dict": "prefixes every key with `module.` under DDP (loading it later fails with unexpected keys) and "
    "under FSDP/ZeRO-3 may return sharded or empty weights",
    "module": "exists only when the model is wrapped, so the same code crashes on one process",
    # DeepSpeedEngine sets its own `config` (the DeepSpeed config dict) instead of forwarding it
    "config": "has no `config` under DDP (AttributeError), and under DeepSpeed `config` is the engine's own "
    "DeepSpeed configuration, not the model's (FSDP1 forwards it, FSDP2 adds no wrapper)",
    "_orig_mod": "exists only when the model is compiled and unwrapped",
}


class MissingUnwrap(Rule):
    """An attribute of the model on the DDP/FSDP/DeepSpeed wrapper that `prepare` returned.

    ## What it does
    On a prepared model, flags `.generate`, `.save_pretrained`, `.push_to_hub`, `.config`,
    `.get_input_embeddings`, `.resize_token_embeddings`, `.gradient_checkpointing_enable`
    and any other name outside the `nn.Module` API; `.state_dict()`; `.module` and
    `._orig_mod`. Forward calls and `nn.Module` methods (`train`, `eval`, `parameters`,
    ...) are fine, and so are models prepared with `evaluation_mode=True` or frozen
    before `prepare`. Also flags a prepared model handed as a component to a diffusers
    pipeline (`StableDiffusionPipeline.from_pretrained(path, unet=unet)`,
    `StableDiffusionPipeline(vae=vae, unet=unet, ...)`; the library table's
    `bare-model-consumers`).
    Not flagged: `.state_dict()` inside `with FSDP.state_dict_type(...)`; `.state_dict()` where
    the linted code drops the `module.` prefix when it loads state dicts
    (`{k.replace("module.", ""): v ...}`, `k[7:]` after `k.startswith("module")`,
    `consume_prefix_in_state_dict_if_present`); reads where no
    accelerator exists (the other side of a flag bound once that every `Accelerator(...)` of the
    file is built under: `... if self.use_accelerator else self.model.state_dict()`); attributes read in a
    branch that tests for the wrapper (`isinstance(m, DDP)`, `hasattr(m, "module")`,
    `num_processes > 1`, the script's `torch.cuda.device_count() > 1`), each on its side;
    attributes other than `state_dict` and `module` of a model prepared where the program runs
    only under DeepSpeed (`deepspeed_plugin=` given to `Accelerator`, or the function reads
    `accelerator.state.deepspeed_plugin.<...>` on every path before `prepare`, which raises on
    any other backend): DeepSpeed's engine forwards them to the model; a `.state_dict()` kept
    in a name (`best = copy.deepcopy(model.state_dict())`) that is only ever loaded back into
    the same wrapper (`model.load_state_dict(best)`).

    Also flags a test of a prepared model's parameter names on its own prefix
    (`for n, p in model.named_parameters(): if n.startswith("backbone."):`): the wrapper's names
    start with `module.`, so the test never holds and the parameter groups it builds are empty.

    ## Why is this bad?
    Under DDP the wrapper has none of the model's own attributes:
    `AttributeError: 'DistributedDataParallel' object has no attribute 'generate'`.
    FSDP1's wrapper and DeepSpeed's engine forward unknown attributes to the model, and
    FSDP2, XLA and a single process add no wrapper at all, so there the attribute works and
    the risk is what `state_dict()` returns: under DDP its keys carry a `module.` prefix, so
    loading fails with `Unexpected key(s) in state_dict`; under FSDP or ZeRO-3 the weights
    may be sharded or empty. Under a single process `prepare` returns the bare model, so
    tests pass. Code that only runs where there is no wrapper is not flagged: the `else` of
    `hasattr(model, "module")` or `isinstance(model, DistributedDataParallel)`, and branches
    under `distributed_type == DistributedType.XLA` (or `NO`) or `num_processes == 1`; nor is
    `.module` inside the branch that tested for it (also `num_processes > 1`,
    `parallel_mode.value == "distributed"`), DeepSpeed's engine API (`get_global_grad_norm`,
    `save_checkpoint`, ...) under `distributed_type == DistributedType.DEEPSPEED`, the engine's
    `save_checkpoint`/`load_checkpoint` anywhere (no model has them: the program is written for
    DeepSpeed) unless a class of the file defines one, `._orig_mod`
    under the script's own compile flag, `m.attr` after `hasattr(m, "attr")`, nor a model prepared by an accelerator
    built with an FSDP1 plugin (`Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...))`).
    Checked against accelerate 1.15 and
    torch 2.13 sources for DDP, FSDP1, FSDP2 and DeepSpeed. A diffusers pipeline checks each
    component it is given: `from_pretrained(..., unet=wrapper)` raises `ValueError: ... is of
    type DistributedDataParallel, but should be ModelMixin` (diffusers 0.42,
    `maybe_raise_or_warn`) under every wrapper, and a pipeline built directly reads
    `unet.config`, which DDP's wrapper lacks.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al501_*`):
    `model.config`/`model.generate` raised AttributeError under DDP; under DeepSpeed
    `model.config` is the engine's own DeepSpeed config (KeyError); under FSDP1 `generate`
    failed on sharded parameters through the wrapper and through `unwrap_model` alike (wrap
    it in `FullyShardedDataParallel.summon_full_params(model)`); under FSDP2 both worked.
    `state_dict()` gave `module.` keys under DDP and DeepSpeed, DTensor shards under FSDP2,
    empty tensors under ZeRO-3, and the full state dict under FSDP1.

    ## Example
    ```python
    model = accelerator.prepare(model)
    out = model.generate(**inputs)
    torch.save(model.state_dict(), "w.pt")
    ```

    ## Use instead
    ```python
    model = accelerator.prepare(model)
    out = accelerator.unwrap_model(model).generate(**inputs)
    accelerator.save(accelerator.get_state_dict(model), "w.pt")
    ```

    ## Fix safety
    Safe: `model.attr` -> `accelerator.unwrap_model(model).attr`, `model.module` ->
    `accelerator.unwrap_model(model)`, `model.state_dict()` -> `accelerator.get_state_dict(model)`
    outside rank guards. Unsafe inside a rank guard: `get_state_dict` is a collective under
    FSDP/ZeRO-3, so the fix would create AL302. No fix when several accelerators are in scope.
    It assumes the object is what that accelerator prepared (`unwrap_model` of anything
    else returns it unchanged, so the fix is harmless there too) and that the accelerator is
    bound on every path to the line; otherwise no fix is offered. Unsafe in a loop that runs a
    backward pass, or before a backward pass of the same function, outside `no_grad` (a custom
    training forward such as
    `model.forward_process(batch)`, or a submodule whose output becomes a loss term): the bare
    module skips the wrapper, so under DDP those gradients would no longer be synchronised.
    A model handed to a pipeline -> `accelerator.unwrap_model(model)`: safe, since the wrapper
    makes that call fail wherever there is one; it assumes the same accelerator binding as
    above.
    """

    code = "AL501"
    name = "missing-unwrap"
    severity = "warning"
    summary = "a model attribute is used on the wrapper `prepare` returned; unwrap it first"

    VALID = [
        FLAG_GATED_ACCELERATOR,
        # the best weights kept in memory and loaded back into the same wrapper: the keys match
        """\
        import copy
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(torch.nn.Linear(4, 1), optimizer, loader)
        best_weights = copy.deepcopy(model.state_dict())
        best = float("inf")
        for batch in loader:
            loss = model(batch).mean()
            accelerator.backward(loss)
            optimizer.step()
            if loss.item() < best:
                best = loss.item()
                best_weights = copy.deepcopy(model.state_dict())
        model.load_state_dict(best_weights)
        """,
        """
import torch
from accelerate import Accelerator
from transformers import AutoModel
accelerator = Accelerator()
model = AutoModel.from_pretrained("facebook/wav2vec2-base")
model = accelerator.prepare(model)
backbone = [p for n, p in accelerator.unwrap_model(model).named_parameters() if n.startswith("encoder.")]
""",
        """
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM
accelerator = Accelerator()
# the plugin is None on every other backend: past this line the program runs under DeepSpeed
accelerator.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = 4
model = AutoModelForCausalLM.from_pretrained("gpt2")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
out = model.generate(**inputs)  # DeepSpeed's engine forwards `generate` to the model
""",
        # DeepSpeed's engine's own checkpointing: a program written for DeepSpeed
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM
        accelerator = Accelerator()
        model = accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"))
        accelerator.wait_for_everyone()
        model.save_checkpoint("ckpt/epoch-1")
        """,
        # FSDP's full state dict, taken on every rank inside its own context manager
        """\
        import torch
        from accelerate import Accelerator
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, StateDictType
        accelerator = Accelerator()
        net = accelerator.prepare(torch.nn.Linear(4, 4))
        with FSDP.state_dict_type(net, StateDictType.FULL_STATE_DICT):
            weights = net.state_dict()
        if accelerator.is_main_process:
            torch.save(weights, "net.pt")
        """,
        # the script's own test of the machine: several GPUs, one process each (wrapped); else one
        """\
        import torch
        from accelerate import Accelerator
        class Critic(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(4, 1)
            def score(self, batch):
                return self.head(batch).mean()
        accelerator = Accelerator()
        critic = accelerator.prepare(Critic())
        for batch in loader:
            if torch.cuda.device_count() > 1:
                loss = critic.module.score(batch)
            else:
                loss = critic.score(batch)
            accelerator.backward(loss)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from diffusers import StableDiffusionPipeline, UNet2DConditionModel
        accelerator = Accelerator()
        unet = UNet2DConditionModel.from_pretrained("sd", subfolder="unet")
        optimizer = torch.optim.AdamW(unet.parameters())
        unet, optimizer = accelerator.prepare(unet, optimizer)
        for batch in loader:
            accelerator.backward(unet(batch).loss)
        if accelerator.is_main_process:
            pipeline = StableDiffusionPipeline.from_pretrained("sd", unet=accelerator.unwrap_model(unet))
            pipeline.save_pretrained("out")
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.nn import Module
        class Policy(Module):
            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(4, 2)
            def head_parameters(self):
                return self.head.parameters()
        accelerator = Accelerator()
        policy = accelerator.prepare(Policy())
        # the class defines no `value_parameters`: an AttributeError on every backend, not the wrapper's
        params = policy.value_parameters()
        """,
        """\
        from accelerate import Accelerator, DistributedType
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model = accelerator.prepare(model)
        if hasattr(model, "module"):
            model.module.config.total_step = 10
        else:
            model.config.total_step = 10
        if accelerator.distributed_type == DistributedType.XLA:
            model.tie_weights()
        """,
        """
from accelerate import Accelerator
from transformers import AutoModelForSequenceClassification
accelerator = Accelerator()
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
model = accelerator.prepare(model)
model.train()
out = model(**batch)
accelerator.unwrap_model(model).generate(**inputs)
inner = getattr(model, "module", model)
if accelerator.distributed_type == "MULTI_GPU":
    inner = model.module
""",
        # preparing under a new name leaves the old name unwrapped
        """
from accelerate import Accelerator
from transformers import AutoModelForSequenceClassification
accelerator = Accelerator()
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
ddp_model = accelerator.prepare(model)
model.save_pretrained("out")
""",
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 4)
        net = accelerator.prepare(net)
        def validate(net):
            is_engine = type(net).__name__ == "DeepSpeedEngine"
            if is_engine:
                saved = net.config  # the engine's own configuration, kept on purpose
                net.config = accelerator.unwrap_model(net).config
        validate(net)
        """,
        """\
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP
        from accelerate import Accelerator
        from mylib import Net, update_ema
        accelerator = Accelerator()
        model = DDP(Net().to(accelerator.device), device_ids=[accelerator.local_process_index])
        ema = Net()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model, optimizer = accelerator.prepare(model, optimizer)
        update_ema(ema, model.module)  # the script's own DDP has `.module` on every launch (AL503 reports the double wrap)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from diffusers import UNet2DConditionModel
        accelerator = Accelerator()
        unet = UNet2DConditionModel.from_pretrained("runwayml/stable-diffusion-v1-5", subfolder="unet")
        optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-4)
        unet, optimizer = accelerator.prepare(unet, optimizer)
        if isinstance(unet, UNet2DConditionModel):  # bare: one process
            unet.enable_gradient_checkpointing()
        else:  # not the model's own class: the script asserts the wrapper
            unet.module.enable_gradient_checkpointing()
        """,
        """\
        import torch
        from accelerate import Accelerator
        class Trainer:
            def __init__(self, model, optimizer):
                self.accelerator = Accelerator()
                self.model = model
                self.check_attention()  # before prepare: the bare model
                self.model, self.optimizer = self.accelerator.prepare(self.model, optimizer)
            def check_attention(self):
                return self.model.encoder.uses_flash
        net = torch.nn.Transformer()
        Trainer(net, torch.optim.SGD(net.parameters(), lr=0.1))
        """,
    ]
    INVALID = [
        """
import torch
from accelerate import Accelerator
from transformers import AutoModel
accelerator = Accelerator()
model = AutoModel.from_pretrained("facebook/wav2vec2-base")
model = accelerator.prepare(model)
backbone = [p for n, p in model.named_parameters() if n.startswith("encoder.")]  # expect: AL501
""",
        """
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM
accelerator = Accelerator()
# read only where the plugin exists: the program still runs on every backend
use_ds_optimizer = accelerator.state.deepspeed_plugin is not None and "optimizer" in accelerator.state.deepspeed_plugin.deepspeed_config
model = AutoModelForCausalLM.from_pretrained("gpt2")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
out = model.generate(**inputs)  # expect: AL501
""",
        """\
        import torch
        from accelerate import Accelerator
        from diffusers import StableDiffusionPipeline, UNet2DConditionModel
        accelerator = Accelerator()
        unet = UNet2DConditionModel.from_pretrained("sd", subfolder="unet")
        optimizer = torch.optim.AdamW(unet.parameters())
        unet, optimizer = accelerator.prepare(unet, optimizer)
        for batch in loader:
            accelerator.backward(unet(batch).loss)
        if accelerator.is_main_process:
            pipeline = StableDiffusionPipeline.from_pretrained("sd", unet=unet)  # expect: AL501
            pipeline.save_pretrained("out")
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.nn import Module
        class Policy(Module):
            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(4, 2)
            def head_parameters(self):
                return self.head.parameters()
        accelerator = Accelerator()
        policy = accelerator.prepare(Policy())
        params = policy.head_parameters()  # expect: AL501
        """,
        """
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM
accelerator = Accelerator()
model = AutoModelForCausalLM.from_pretrained("gpt2")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
out = model.generate(**inputs)  # expect: AL501
torch.save(model.state_dict(), "w.pt")  # expect: AL501
""",
        """
import accelerate
from transformers import AutoModelForCausalLM
class Runner:
    def __init__(self, model_name):
        self.accelerator = accelerate.Accelerator()
        self.model = self.accelerator.prepare(AutoModelForCausalLM.from_pretrained(model_name))
    def export(self):
        return self.model.config  # expect: AL501
""",
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        yield from _handed_to_library_classes(model)
        yield from _prefixed_names(model)
        for base_node, base in list(model.objects.values.items()):
            node = model.index.parents.get(base_node)
            if not isinstance(node, cst.Attribute) or node.value is not base_node:
                continue
            if base is None or base.prepared != YES or base.kind != "model" or base.not_wrapped or base.container:
                continue
            attr = node.attr.value
            if attr in _MODULE_API or attr.startswith("__"):
                continue
            if model.always_wrapped(base):
                continue  # wrapped by hand before prepare (AL503): the wrapper is there on every launch
            if attr in _ENGINE_ONLY and not _a_class_here_defines(model, attr):
                # DeepSpeed's engine's own checkpointing, which no model has: a program written
                # for DeepSpeed (unwrapping would lose the method)
                continue
            backend = model.prepared_backend(base)
            if backend == "deepspeed" and attr not in ("state_dict", "module"):
                continue  # DeepSpeed's engine forwards what it lacks to the model, and the program
                # runs only under DeepSpeed (`deepspeed_plugin=`, or it reads the plugin on every path)
            if backend == "fsdp1":
                # FSDP1's wrapper forwards attributes to the model, and its state_dict() is the
                # full, unprefixed one on every rank (a collective: AL302 covers it under a guard)
                continue
            if _attested(model, node):
                continue  # `hasattr(m, "config") and m.config...`: the script checked for it
            if _branch_picks_the_wrapper(model, node):
                continue  # `if args.multi_gpu: m.module.x else: m.x`: the script's own flag decides (unknown)
            if attr == "state_dict" and _in_fsdp_state_dict_context(model, node):
                continue  # FSDP's own way to a full, unprefixed state dict (every rank takes part)
            if attr == "state_dict" and _restored_into_itself(model, node):
                continue  # `best = deepcopy(model.state_dict())` ... `model.load_state_dict(best)`: same keys
            if attr == "_orig_mod" and model.compiled_at(node):
                continue  # read where the script's compile flag holds
            wrapped = model.wrapped_at(node, node.value)
            if wrapped == NO or (wrapped == YES and (attr in ("module", "_orig_mod") or attr in _WRAPPER_API)):
                continue  # the branch only runs where the model is bare, or uses the wrapper it tested for
            if _is_assignment_target(model, node):
                continue
            if _missing_on_the_model_too(model, base, attr):
                continue  # the model's own class has no such attribute: another bug, not the wrapper's
            acc = model.accelerator_name_in(model.scope_of(node))
            name = model.code(node.value)
            effect = _EFFECTS.get(attr, f"has no `{attr}` under DDP (AttributeError; FSDP1 and DeepSpeed's engine "
                                        f"forward it to the model, FSDP2 adds no wrapper)")
            if attr == "state_dict":
                fix = f"`{acc}.get_state_dict({name})`"
            elif attr == "module":
                fix = f"`{acc}.unwrap_model({name})`"
            else:
                fix = f"`{acc}.unwrap_model({name}).{attr}`"
            yield Finding(node, f"`{name}.{attr}` on a prepared model: the wrapper {effect}; use {fix}",
                          fix=_fix(model, node), tag="state_dict" if attr == "state_dict" else "attribute",
                          evidence=tuple(model.value_evidence(node.value)))


_NAMED = frozenset({"named_parameters", "named_modules", "named_buffers"})


def _restored_into_itself(model: FileModel, node: cst.Attribute) -> bool:
    """``best = copy.deepcopy(model.state_dict())`` (or without the copy) whose every read is
    ``model.load_state_dict(best)`` of the same wrapper: the prefixed keys go back where they
    came from, and nothing else sees them."""
    call = model.index.parents.get(node)
    if not (isinstance(call, cst.Call) and call.func is node):
        return False
    held: cst.CSTNode = call
    outer = model.index.parents.get(model.index.parents.get(call))
    if isinstance(outer, cst.Call) and (model.index.imports.qualify_expr(outer.func) or "") == "copy.deepcopy":
        held = outer
    assign = model.index.parents.get(held)
    if not (isinstance(assign, cst.Assign) and assign.value is held and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)):
        return False
    name, owner = assign.targets[0].target.value, model.code(node.value)
    scope = model.scope_of(node)
    reads = [n for n in model.index.loads_in(scope.body if isinstance(scope, cst.FunctionDef) else scope)
             if isinstance(n, cst.Name) and n.value == name
             and not isinstance(model.index.parents.get(n), cst.AssignTarget)]
    if not reads:
        return False
    for read in reads:
        arg = model.index.parents.get(read)
        restore = model.index.parents.get(arg)
        if not (isinstance(arg, cst.Arg) and isinstance(restore, cst.Call) and isinstance(restore.func, cst.Attribute)
                and restore.func.attr.value == "load_state_dict" and model.code(restore.func.value) == owner):
            return False
    return True


def _prefixed_names(model: FileModel) -> Iterable[Finding]:
    """``for n, p in model.named_parameters(): if n.startswith("backbone."):`` on a model ``prepare``
    wrapped: under DDP (and DeepSpeed's engine) every name starts with ``module.``, so a test on
    the model's own prefix never holds and the parameter groups it builds come out empty."""
    for named in model.index.calls:
        node = model.index.parents.get(named)
        if type(named.func) is not cst.Attribute or named.func.attr.value not in _NAMED \
                or getattr(node, "iter", None) is not named:
            continue
        if type(node) is cst.For:
            iterable, target, tests = node.iter, node.target, [node.body]
        elif type(node) is cst.CompFor:
            iterable, target, tests = node.iter, node.target, [i.test for i in node.ifs]
            parent = model.index.parents.get(node)
            if isinstance(parent, (cst.ListComp, cst.SetComp, cst.GeneratorExp)):
                tests.append(parent.elt)
            elif isinstance(parent, cst.DictComp):
                tests += [parent.key, parent.value]
        else:
            continue
        if not (type(iterable) is cst.Call and type(iterable.func) is cst.Attribute
                and iterable.func.attr.value in _NAMED and not iterable.args):
            continue
        if type(target) is not cst.Tuple or not target.elements or type(target.elements[0].value) is not cst.Name:
            continue
        base = model.value_at(iterable.func.value)
        if base is None or base.prepared != YES or base.kind != "model" or base.not_wrapped or base.container:
            continue
        if model.prepared_backend(base) in ("fsdp1", "fsdp2"):
            continue  # FSDP names carry its own prefixes (FSDP1) or none (FSDP2): another question
        name = target.elements[0].value.value
        for test in tests:
            for call in model.calls_in(test):
                if not (type(call.func) is cst.Attribute and call.func.attr.value == "startswith"
                        and type(call.func.value) is cst.Name and call.func.value.value == name and call.args):
                    continue
                prefix = call.args[0].value
                if type(prefix) is not cst.SimpleString or not isinstance(prefix.evaluated_value, str) \
                        or prefix.evaluated_value.startswith("module") or not prefix.evaluated_value:
                    continue
                owner = model.code(iterable.func.value)
                acc = model.accelerator_name_in(model.scope_of(call))
                yield Finding(call, f"`{model.code(call)}` on the names of `{owner}.{iterable.func.attr.value}()`: "
                                    f"`{owner}` is the model `prepare()` wrapped, whose names all start with "
                                    f"`module.` under DDP (and DeepSpeed's engine), so this never holds; iterate "
                                    f"`{acc}.unwrap_model({owner}).{iterable.func.attr.value}()`",
                              evidence=tuple(model.value_evidence(iterable.func.value)))


def _handed_to_library_classes(model: FileModel) -> Iterable[Finding]:
    """A prepared model given as a component to a library class that takes its own model classes
    (a diffusers pipeline, built directly or by ``from_pretrained``): the wrapper is no such
    class, so ``from_pretrained`` raises ValueError and a pipeline built directly fails at its
    first ``unet.config``."""
    for call in model.index.calls:
        consumer = model.bare_model_consumer(call)
        if consumer is None:
            continue
        for arg in call.args:
            value = model.value_at(arg.value)
            if value is None or value.prepared != YES or value.kind != "model" or value.not_wrapped:
                continue
            if model.wrapped_at(call, arg.value) == NO:
                continue  # a branch where the model is bare
            acc = model.accelerator_name_in(model.scope_of(call))
            name = model.code(arg.value)
            short = model.code(call.func)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "from_pretrained":
                effect = ("under DDP, FSDP1 and DeepSpeed it is the wrapper, not the library's model class, and "
                          "`from_pretrained` raises ValueError")
            else:
                effect = "under DDP it is the wrapper, which has no `config` (AttributeError where the pipeline reads it)"
            yield Finding(arg.value, f"`{name}` is a prepared model handed to `{short}()`: {effect}; "
                                     f"pass `{acc}.unwrap_model({name})`",
                          fix=_unwrap_argument_fix(model, arg.value), tag="attribute",
                          evidence=tuple(model.value_evidence(arg.value)))


def _unwrap_argument_fix(model: FileModel, expr: cst.BaseExpression) -> Fix | None:
    """``Pipeline(unet=unet)`` -> ``Pipeline(unet=acc.unwrap_model(unet))``: the pipeline gets
    the model itself; unsafe where the program trains after it (the pipeline's forwards would
    skip the wrapper)."""
    acc = model.accelerator_for_fix(expr)
    if acc is None:
        return None
    unwrapped = cst.parse_expression(f"{acc}.unwrap_model()").with_changes(args=[cst.Arg(expr)])
    return Fix("safe", f"use `{acc}.unwrap_model(...)`", ((expr, unwrapped),))


def _missing_on_the_model_too(model: FileModel, value, attr: str) -> bool:
    """Every object the value may hold was made by a class of this file whose whole hierarchy is
    known (its bases are this file's classes or ``torch.nn.Module``) and defines no ``attr``."""
    origins = value.origins()
    if not origins:
        return False
    for origin in origins:
        if not (isinstance(origin, cst.Call) and isinstance(origin.func, cst.Name)
                and origin.func.value in model.index.classes):
            return False
        if _class_defines(model, origin.func.value, attr, frozenset()) is not False:
            return False
    return True


def _class_defines(model: FileModel, name: str, attr: str, seen: frozenset) -> bool | None:
    """Whether the class (or a base) defines ``attr``: a method, a class attribute, or a
    ``self.<attr> = ...`` in one of its methods. ``None`` when a base is not known."""
    info = model.index.classes.get(name)
    if info is None or name in seen:
        return None
    if attr in info.methods or any(isinstance(n, (cst.FunctionDef, cst.ClassDef)) and n.name.value == attr
                                   for n in info.node.body.body):
        return True
    for node in model.index.walk(info.node.body):
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)) and node.name.value == attr:
            return True
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)):
            target = node.target
            if isinstance(target, cst.Name) and target.value == attr:
                return True
            if isinstance(target, cst.Attribute) and target.attr.value == attr:
                return True
    for method in info.methods.values():
        for node in model.index.walk(method):
            if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)) and \
                    isinstance(node.target, cst.Attribute) and node.target.attr.value == attr:
                return True
    for base in info.bases:
        if base in model.index.classes:
            found = _class_defines(model, base, attr, seen | {name})
            if found is not False:
                return found
        elif (model.index.imports.qualify(base.split(".")[0]) or "") + base[len(base.split(".")[0]):] \
                not in ("torch.nn.Module", "torch.nn.modules.module.Module"):
            return None
        elif attr in _NN_MODULE_ATTRIBUTES or attr.startswith("_"):
            return True
    return False


# what torch.nn.Module itself defines, beyond what the wrapper also has (_MODULE_API)
_NN_MODULE_ATTRIBUTES = _MODULE_API | {"state_dict", "get_extra_state", "set_extra_state", "ipu", "mtia",
                                       "register_forward_pre_hook", "call_super_init", "dump_patches"}


def _conjuncts(test: cst.BaseExpression) -> list[cst.BaseExpression]:
    if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
        return _conjuncts(test.left) + _conjuncts(test.right)
    return [test]


def _checks_for(test: cst.BaseExpression, base: str, attr: str) -> bool:
    """``test`` is ``hasattr(<base>, "<attr>")``."""
    return (type(test) is cst.Call and dotted_name(test.func) == "hasattr" and len(test.args) == 2
            and dotted_name(test.args[0].value) == base and type(test.args[1].value) is cst.SimpleString
            and test.args[1].value.evaluated_value == attr)


def _branch_picks_the_wrapper(model: FileModel, node: cst.Attribute) -> bool:
    """``m.module.x`` in one arm of an ``if`` whose other arm reads ``m.x`` (or the reverse): the
    script chooses between the wrapper and the bare model by a test of its own (a launch flag),
    which the model cannot match to the launch: unknown, so no finding."""
    base = dotted_name(node.value)
    if base is None:
        return False
    if node.attr.value == "module":
        outer = model.index.parents.get(node)
        if not isinstance(outer, cst.Attribute) or outer.value is not node:
            return False
        wanted, attr = base, outer.attr.value
    elif base.endswith(".module"):
        return False
    else:
        wanted, attr = base + ".module", node.attr.value
    child: cst.CSTNode = node
    for parent in model.ancestors(node):
        if type(parent) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return False
        if type(parent) in (cst.If, cst.IfExp) and child is not parent.test and parent.orelse is not None:
            other = parent.orelse if child is parent.body else parent.body
            return any(type(n) is cst.Attribute and n.attr.value == attr and dotted_name(n.value) == wanted
                       for n in model.index.walk(other))
        child = parent
    return False


def _attested(model: FileModel, node: cst.Attribute) -> bool:
    """``m.attr`` where the script tested ``hasattr(m, "attr")`` first: in the body of an
    ``if``/``while``/conditional expression whose test (or one of its ``and`` parts) is that
    test, or to the right of it in an ``and``."""
    base, attr = dotted_name(node.value), node.attr.value
    if base is None:
        return False
    child: cst.CSTNode = node
    for parent in model.ancestors(node):
        kind = type(parent)
        if kind in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return False
        if kind in (cst.If, cst.While, cst.IfExp) and child is parent.body:
            if any(_checks_for(part, base, attr) for part in _conjuncts(parent.test)):
                return True
        if kind is cst.BooleanOperation and type(parent.operator) is cst.And and child is parent.right:
            if any(_checks_for(part, base, attr) for part in _conjuncts(parent.left)):
                return True
        child = parent
    return False


def _fix(model: FileModel, node: cst.Attribute) -> Fix | None:
    """``m.attr`` -> ``acc.unwrap_model(m).attr``; ``m.module`` -> ``acc.unwrap_model(m)``;
    ``m.state_dict()`` -> ``acc.get_state_dict(m)``, unsafe under a rank guard (it is a
    collective under FSDP/ZeRO-3: the fix would create AL302)."""
    acc = model.accelerator_for_fix(node)
    if acc is None:
        return None
    base = node.value
    attr = node.attr.value
    if attr == "state_dict":
        call = model.index.parents.get(node)
        if not isinstance(call, cst.Call) or call.func is not node or call.args:
            return None
        new = cst.parse_expression(f"{acc}.get_state_dict()").with_changes(args=[cst.Arg(base)])
        safe = model.rank_guard_of(call) is None
        return Fix("safe" if safe else "unsafe", f"use `{acc}.get_state_dict(...)`", ((call, new),))
    unwrapped = cst.parse_expression(f"{acc}.unwrap_model()").with_changes(args=[cst.Arg(base)])
    # the bare module used where the program trains may compute a loss term outside the wrapper:
    # under DDP its gradients are then never synchronised (worse than the AttributeError)
    safety = "unsafe" if model.may_train_after(node) else "safe"
    if attr in ("module", "_orig_mod"):
        return Fix(safety, f"use `{acc}.unwrap_model(...)`", ((node, unwrapped),))
    return Fix(safety, f"use `{acc}.unwrap_model(...)`", ((base, unwrapped),))


_FSDP_STATE_DICT_CONTEXTS = frozenset({
    "torch.distributed.fsdp.FullyShardedDataParallel.state_dict_type",
    "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel.state_dict_type",
})


def _in_fsdp_state_dict_context(model: FileModel, node: cst.CSTNode) -> bool:
    """Inside ``with FSDP.state_dict_type(m, StateDictType.FULL_STATE_DICT, ...):``."""
    for parent in model.ancestors(node):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(parent, cst.With) and any(
                isinstance(item.item, cst.Call)
                and (model.index.imports.qualify_expr(item.item.func) or "") in _FSDP_STATE_DICT_CONTEXTS
                for item in parent.items):
            return True
    return False


def _is_assignment_target(model: FileModel, node: cst.CSTNode) -> bool:
    parent = model.index.parents.get(node)
    return isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AnnAssign, cst.AugAssign)) and parent.target is node)
