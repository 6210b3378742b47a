from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import YES, FileModel
from .base import Finding, Rule



_STACKED = "stacked wrappers duplicate gradient hooks and save `module.module.` keys"
_CONSEQUENCE = {
    # DataParallel needs its module on device_ids[0] (cuda:0) while prepare() places each rank's copy on its own
    # GPU: a RuntimeError under DDP, FSDP and DeepSpeed on 2 GPUs
    "DataParallel": "DataParallel wants the module on the first GPU while `prepare()` puts each rank's copy on its own "
    "(RuntimeError on several GPUs)",
    "DistributedDataParallel": "gradients are all-reduced twice, ZeRO-3 and a single process fail, and keys are saved "
    "as `module.module.`",
}


class DoubleWrap(Rule):
    """A model wrapped by hand and also prepared, or prepared again in a loop.

    ## What it does
    (A, error) `torch.nn.DataParallel`, `DistributedDataParallel`, `FullyShardedDataParallel`
    / `fully_shard` or `deepspeed.initialize` applied to a model that is also passed to
    `accelerator.prepare` (in either order). (B, warning) `accelerator.prepare(...)` inside a
    loop, which wraps the same module again on every pass.
    Not flagged: a manual wrapper and `prepare` in different branches of the same `if`
    (`if args.use_accelerate: ... else: DataParallel(...)`); a loop that calls
    `accelerator.free_memory()` or `clear()` before preparing again (the
    `find_executable_batch_size` pattern).

    ## Why is this bad?
    `prepare` already distributes the model. DataParallel inside an Accelerate process spreads
    each forward over every GPU the process sees; stacked DDP/FSDP wrappers register duplicate
    gradient hooks and save keys as `module.module.`; the outer wrapper hides `generate`,
    `save_pretrained` and friends.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al503_*`):
    `DataParallel` then `prepare` raised RuntimeError under DDP, FSDP and DeepSpeed (it ran
    with one process); DDP by hand then `prepare` ran under DDP, FSDP and ZeRO-2 (gradients
    all-reduced twice) and failed under ZeRO-3 and with one process.

    ## Example
    ```python
    model = torch.nn.DataParallel(model)
    model, optimizer = accelerator.prepare(model, optimizer)
    ```

    ## Use instead
    ```python
    model, optimizer = accelerator.prepare(model, optimizer)
    ```
    """

    code = "AL503"
    holds_in_one_process = True
    name = "double-wrap"
    severity = "error"
    summary = "a model wrapped by DataParallel/DDP/FSDP by hand and also prepared (or prepared in a loop)"

    VALID = [
        """\
        import torch
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        def build_model():
            return AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        accelerator = Accelerator()
        model = build_model()
        if args.use_accelerate:
            model = accelerator.prepare(model)
        else:
            model = torch.nn.DataParallel(model)
        for batch_size in (64, 32, 16):
            accelerator.free_memory()
            trainer_model = accelerator.prepare(build_model())
        """,
    ]
    INVALID = [
        """\
        import torch
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        model = torch.nn.DataParallel(model)  # expect: AL503
        model, optimizer = accelerator.prepare(model, optimizer)
        for fold in range(5):
            fold_model = accelerator.prepare(model)  # expect: AL503
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        prepares = list(model.objects.prepare_calls)
        for call in model.index.calls:
            wrapper = model.manual_wrapper(call)
            if wrapper is None or not call.args:
                continue
            wrapped = call.args[0].value
            for a in call.args:
                if a.keyword is not None and a.keyword.value == "model":
                    wrapped = a.value
            value = model.value_at(wrapped)
            already = value is not None and value.prepared == YES
            origin = value.origin if value is not None else None
            later = model.was_prepared(call) or (origin is not None and model.was_prepared(origin)) or \
                model.was_prepared(wrapped) or _bound_then_prepared(model, call, prepares)
            if not (already or later):
                continue
            if any(_exclusive_branches(model, call, p) for p in prepares):
                continue
            acc = model.accelerator_name_in(model.scope_of(call))
            yield Finding(call, f"`{model.code(wrapped)}` is wrapped by `{wrapper}` and also passed to `{acc}.prepare()`, "
                                f"which already distributes it: {_CONSEQUENCE.get(wrapper, _STACKED)}; drop the "
                                f"manual wrapper", tag=wrapper, evidence=tuple(model.value_evidence(wrapped)))
        for call in prepares:
            loop = model.enclosing_loop(call)
            if loop is None or _frees_memory(model, loop) or not _same_objects_each_pass(model, call, loop):
                continue
            yield Finding(call, f"`{model.code(call.func)}()` inside a loop wraps the same module again on every pass "
                                f"(another DDP wrapper each time); prepare once before the loop, or call "
                                f"`free_memory()` first", severity="warning",
                          evidence=((loop, "a loop: the call runs again on every pass"),
                                    *(fact for arg in call.args for fact in model.value_evidence(arg.value))))


def _bound_then_prepared(model: FileModel, wrapper: cst.Call, prepares: list[cst.Call]) -> bool:
    """``m = DataParallel(m)`` and a later ``prepare(m, ...)`` in the same function (the name may
    hold the wrapper on some paths only, which the flow analysis merges)."""
    assign = model.index.parents.get(wrapper)
    if not isinstance(assign, cst.Assign) or assign.value is not wrapper:
        return False
    names = {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}
    order = model.index.call_order
    scope = model.scope_of(wrapper)
    return any(model.scope_of(p) is scope and order.get(p, -1) > order.get(wrapper, 0)
               and any(isinstance(a.value, cst.Name) and a.value.value in names for a in p.args)
               for p in prepares)


def _same_objects_each_pass(model: FileModel, call: cst.Call, loop) -> bool:
    """Every argument is a name the loop neither iterates over nor rebinds: the same raw
    object goes to prepare() on every pass (a new loader or the i-th reward model per pass is fine)."""
    if not call.args:
        return False
    rebound = set()
    if isinstance(loop, cst.For):
        rebound.update(model.code(n) for n in model.index.loads_in(loop.target))
    for node in model.index.walk(loop.body):
        if isinstance(node, (cst.AssignTarget, cst.AnnAssign, cst.AugAssign)):
            target = node.target
            rebound.update(model.code(n) for n in model.index.loads_in(target))
    return all(isinstance(a.value, (cst.Name, cst.Attribute)) and model.code(a.value) not in rebound
               for a in call.args if a.keyword is None)


def _frees_memory(model: FileModel, loop) -> bool:
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value in ("free_memory", "clear")
               for c in model.calls_in(loop.body))


def _exclusive_branches(model: FileModel, a: cst.CSTNode, b: cst.CSTNode) -> bool:
    """``a`` and ``b`` sit in different branches of one ``if``."""
    chain_a = {id(p): p for p in model.ancestors(a)}
    child = b
    for parent in model.ancestors(b):
        if id(parent) in chain_a and isinstance(parent, cst.If):
            branch_b = child
            branch_a = next((c for c in (parent.body, parent.orelse) if c is not None and
                             any(p is c for p in model.ancestors(a))), None)
            return branch_a is not None and branch_a is not branch_b
        child = parent
    return False
