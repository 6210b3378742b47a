from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import MAYBE, NO, YES, FileModel, dotted_name, shorten
from ..model.objects import MODULE_ONLY_METHODS, SELF_RETURNING
from .base import Finding, Rule


class TrainOnUnwrapped(Rule):
    """A training loop that runs the bare module instead of the wrapper `prepare` returned.

    ## What it does
    Flags `model = accelerator.unwrap_model(model)` or `model = model.module` (the bare module
    bound to the name that holds the prepared, wrapped model) on every rank, when a training loop (one that runs a backward
    pass) calls that name's forward, or passes it to a call, afterwards: later in the function,
    or in the next pass of a loop around the rebinding (also through a method of the class that
    the loop calls: `self.model = accelerator.unwrap_model(self.model)` after each epoch's
    `self.train_one_epoch()`).
    Also flags the forward, in a training loop, of the module that was given to `prepare`
    when the wrapped result was bound to another name (`ddp_model = accelerator.prepare(model)`
    then `model(batch)`), unless the forward runs under `torch.no_grad()` or the module has no
    trainable parameter (`prepare` does not wrap it then). And the forward of a model when
    `prepare` was given a module made from that model's parts instead
    (`lora_layers = AttnProcsLayers(unet.attn_processors)`) and nothing ever calls that module
    or its wrapper. And a loss computed only through the module inside the wrapper
    (`loss = model.module.loss_fn(batch)` then `accelerator.backward(loss)`) in a training
    loop, when nothing in the file calls the prepared model itself.
    Also flags a class handed the prepared model that keeps only its bare module
    (`self.model = accelerator.unwrap_model(model)`, the wrapper kept nowhere) when a method of
    the class runs `self.model` (its forward, a method of it, or a call given it) before the
    accelerator's backward.
    Not flagged: a function that all-reduces the gradients itself (it reads `.grad` and runs
    `torch.distributed.all_reduce` or `accelerator.reduce`); a new name for the unwrapped model while the wrapper is kept and trained; a rebinding after the last training use;
    a rebinding under a rank guard (that is AL502); a model `prepare` did not wrap.

    ## Why is this bad?
    From that point on the forward bypasses the DDP wrapper: its reducer never averages the
    gradients, so each rank trains its own copy and the replicas drift apart. Nothing fails.
    Under FSDP and ZeRO-3 the bare module holds only this rank's shards of the parameters.

    Measured on 2 CPU ranks (gloo, `fixtures/matrix/al506_*_bad.py`, one per shape, five shapes): the two
    ranks end with different parameters; the `_good` twins end with the same.

    ## Example
    ```python
    for epoch in range(epochs):
        for batch in loader:
            accelerator.backward(loss_fn(model(batch)))
        model = accelerator.unwrap_model(model)
        model.save_pretrained(out)
    ```

    ## Use instead
    ```python
    for epoch in range(epochs):
        for batch in loader:
            accelerator.backward(loss_fn(model(batch)))
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained(out)
    ```
    """

    code = "AL506"
    name = "train-on-unwrapped"
    severity = "error"
    summary = "a training forward on the bare module, not the wrapper prepare() returned: gradients are not synchronised"

    VALID = [
        # the bare module trained, its gradients all-reduced by hand (cleanrl's multi-GPU PPO)
        """\
        import torch
        import torch.distributed as dist
        from accelerate import Accelerator
        accelerator = Accelerator()
        agent = torch.nn.Linear(4, 2)
        optimizer = torch.optim.Adam(agent.parameters(), lr=1e-3)
        agent, optimizer = accelerator.prepare(agent, optimizer)
        agent = agent.module
        for update in range(100):
            for batch in rollouts():
                loss = agent(batch).sum()
                optimizer.zero_grad()
                loss.backward()
                grads = torch.cat([p.grad.view(-1) for p in agent.parameters()])
                dist.all_reduce(grads, op=dist.ReduceOp.SUM)
                offset = 0
                for p in agent.parameters():
                    p.grad.copy_(grads[offset:offset + p.numel()].view_as(p.grad) / accelerator.num_processes)
                    offset += p.numel()
                optimizer.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        student = torch.nn.Linear(4, 1)
        teacher = torch.nn.Linear(4, 1)
        for p in teacher.parameters():
            p.requires_grad = False
        optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
        student, prepared_teacher, optimizer = accelerator.prepare(student, teacher, optimizer)
        for x, y in loader:
            target = teacher(x)  # no trainable parameter: prepare wrapped nothing
            with torch.no_grad():
                hint = teacher(x)
            accelerator.backward((student(x) - target - hint).pow(2).mean())
            optimizer.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for epoch in range(2):
            for x in torch.ones(8, 4):
                accelerator.backward(model(x).sum())
                optimizer.step()
            unwrapped = accelerator.unwrap_model(model)
            torch.save(unwrapped.state_dict(), "model.pt")
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for x in torch.ones(8, 4):
            accelerator.backward(model(x).sum())
            optimizer.step()
        model = accelerator.unwrap_model(model)
        model.eval()
        print(model(torch.ones(4)))
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for step, x in enumerate(torch.ones(8, 4)):
            accelerator.backward(model(x).sum())
            optimizer.step()
            if step == 7:
                model = accelerator.unwrap_model(model)
                torch.save(model.state_dict(), "final.pt")
                break
        """,
    ]
    INVALID = [
        # a trainer handed the prepared model keeps only its bare module and trains it
        """\
        import torch
        from accelerate import Accelerator
        class Trainer:
            def __init__(self, model, optimizer, accelerator):
                self.model = accelerator.unwrap_model(model)  # expect: AL506
                self.optimizer = optimizer
                self.accelerator = accelerator
            def step(self, batch):
                loss = self.model(batch).sum()
                self.accelerator.backward(loss)
                self.optimizer.step()
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        trainer = Trainer(model, optimizer, accelerator)
        """,
        # the loss computed by a method of the module inside the wrapper, the only source of a backward
        """\
        import torch
        from accelerate import Accelerator
        class Scorer(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.net = torch.nn.Linear(4, 1)
            def regression_loss(self, batch):
                return self.net(batch).pow(2).mean()
        accelerator = Accelerator()
        scorer = Scorer()
        opt = torch.optim.SGD(scorer.parameters(), lr=0.1)
        scorer, opt, loader = accelerator.prepare(scorer, opt, loader)
        for batch in loader:
            loss = scorer.module.regression_loss(batch)  # expect: AL501, AL506
            accelerator.backward(loss)
            opt.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        from diffusers import UNet2DConditionModel
        from diffusers.loaders import AttnProcsLayers
        accelerator = Accelerator()
        unet = UNet2DConditionModel.from_pretrained("stable-diffusion", subfolder="unet")
        lora_layers = AttnProcsLayers(unet.attn_processors)
        optimizer = torch.optim.AdamW(lora_layers.parameters(), lr=1e-4)
        lora_layers, optimizer, loader = accelerator.prepare(lora_layers, optimizer, loader)
        for batch in loader:
            noise_pred = unet(batch["latents"], batch["timesteps"], batch["text"]).sample  # expect: AL506
            accelerator.backward(noise_pred.pow(2).mean())
            optimizer.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ddp_model, optimizer = accelerator.prepare(model, optimizer)
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()  # expect: AL506
            accelerator.backward(loss)
            optimizer.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for epoch in range(2):
            for x in torch.ones(8, 4):
                accelerator.backward(model(x).sum())
                optimizer.step()
            model = accelerator.unwrap_model(model)  # expect: AL506
            torch.save(model.state_dict(), "model.pt")
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module  # expect: AL506
        for x in torch.ones(8, 4):
            accelerator.backward(model(x).sum())
            optimizer.step()
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for assign, inner in _unwrapping_rebinds(model):
            name = dotted_name(assign.targets[0].target)
            if name is None or name != dotted_name(inner) or model.rank_guard_of(assign) is not None \
                    or model.under_rank_condition(assign):
                continue  # under a rank guard: AL502
            held = model.value_at(inner)
            # MAYBE: in a loop, the next pass holds what this rebinding made
            if held is None or held.kind != "model" or held.prepared not in (YES, MAYBE) or held.not_wrapped:
                continue
            forward = _trained_after(model, name, assign)
            if forward is None or _reduces_gradients_by_hand(model, model.scope_of(assign)):
                continue
            yield Finding(assign.targets[0].target,
                          f"`{name}` held the prepared model and now holds the bare module on every rank; the "
                          f"training forward `{model.code(forward)}` (line {model.line_of(forward)}) then bypasses the "
                          f"DDP wrapper: gradients are no longer averaged and the replicas drift apart; bind the "
                          f"unwrapped model to a new name",
                          evidence=tuple(model.value_evidence(inner)
                                         + [(forward, "trained here after the rebinding")]))
        for assign, step, backward in _kept_only_bare(model):
            name = model.code(assign.targets[0].target)
            wrapper = model.code(assign.value.args[0].value)
            yield Finding(assign.targets[0].target,
                          f"`{name}` keeps only the bare module inside the prepared `{wrapper}`, which is not kept "
                          f"anywhere; the training step `{shorten(model.code(step))}` (line {model.line_of(step)}) "
                          f"then bypasses the DDP wrapper: gradients are no longer averaged and the replicas drift "
                          f"apart; keep the wrapper for training and unwrap only to save or inspect",
                          evidence=tuple(model.value_evidence(assign.value.args[0].value)
                                         + [(step, "trained here through the bare module"),
                                            (backward, "the backward pass of that step")]))
        # one finding per forward: a container prepared in both branches of an `if` is one mistake
        by_forward: dict[cst.Call, list] = {}
        for forward, prepare, container, owner in _bypassed_containers(model):
            by_forward.setdefault(forward, []).append((prepare, container, owner))
        for forward, found in by_forward.items():
            prepare, container, owner = found[0]
            yield Finding(forward.func,
                          f"`{model.code(prepare.func)}()` (line {model.line_of(prepare)}) wrapped `{container}`, made "
                          f"from `{owner}`'s modules, but nothing calls it: this training forward runs `{owner}` "
                          f"directly, so the wrapper never arms the gradient all-reduce and each rank trains its own "
                          f"copy; prepare `{owner}` itself",
                          evidence=tuple(model.value_evidence(forward.func)
                                         + [(p, f"`{c}` is prepared here and never called") for p, c, _ in found]))
        for call, wrapped in _inner_module_calls(model):
            name = model.code(wrapped)
            yield Finding(call.func,
                          f"`{shorten(model.code(call.func))}` runs the module inside the prepared `{name}` in a "
                          f"training loop, and nothing calls `{name}` itself: the DDP wrapper's forward never runs, so "
                          f"its reducer never averages the gradients and the replicas drift apart; call `{name}(...)` "
                          f"(put the computation in `forward`)",
                          evidence=tuple(model.value_evidence(wrapped)
                                         + [(call, "trained here through `.module`, bypassing the wrapper")]))
        for forward, prepare, result in _bypassed_wrappers(model):
            name = model.code(forward.func)
            yield Finding(forward.func,
                          f"`{name}` is the module given to `{model.code(prepare.func)}()` (line "
                          f"{model.line_of(prepare)}), not the wrapper it returned (`{result}`); this training forward "
                          f"bypasses the wrapper, so gradients are not averaged and the replicas drift apart; call "
                          f"`{result}`",
                          evidence=tuple(model.value_evidence(forward.func)
                                         + [(prepare, f"the wrapped result is bound to `{result}`")]))


def _inner_module_calls(model: FileModel) -> Iterable[tuple[cst.Call, cst.BaseExpression]]:
    """``(call, prepared model)``: ``model.module.method(...)`` (or ``model.module(...)``) in a
    training loop, not under ``torch.no_grad()``, on a prepared, wrapped model whose wrapper the
    file never calls: every forward of it bypasses the wrapper."""
    if "module" not in model.index.identifiers:
        return
    wrappers_called: set = set()
    candidates = []
    for call in model.index.calls:
        func = call.func
        inner = func.value if type(func) is cst.Attribute and func.attr.value != "module" else func
        if type(inner) is cst.Attribute and inner.attr.value == "module":
            candidates.append((call, inner.value))
        elif type(func) in (cst.Name, cst.Attribute):
            value = model.value_at(func)
            if value is not None and value.kind == "model" and value.prepared in (YES, MAYBE):
                wrappers_called |= value.origins()
    for call, wrapped in candidates:
        value = model.value_at(wrapped)
        if value is None or value.kind != "model" or value.prepared != YES or value.not_wrapped or value.frozen:
            continue
        if value.origins() & wrappers_called:
            continue  # the wrapper's own forward runs too: its reducer is armed
        loop = model.enclosing_loop(call)
        if loop is None or not model.loop_trains(loop) or model.under_no_grad(call):
            continue
        if _sole_source_of_a_backward(model, call, loop):
            yield call, wrapped


def _sole_source_of_a_backward(model: FileModel, call: cst.Call, loop: cst.CSTNode) -> bool:
    """``loss = model.module.loss_fn(...) * w`` then ``accelerator.backward(loss)`` in the same
    loop, with no other model's forward in ``loss``: the gradients that backward computes come
    through that module (a call whose parameters get no gradient, because it runs under
    ``no_grad`` inside, is then not the only source of a loss)."""
    statement = model.index.parents.get(call)
    while statement is not None and not isinstance(statement, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
        statement = model.index.parents.get(statement)
    if not isinstance(statement, cst.Assign) or len(statement.targets) != 1 \
            or type(statement.targets[0].target) is not cst.Name:
        return False
    loss = statement.targets[0].target.value
    for other in model.calls_in(statement.value):
        if other is call or type(other.func) not in (cst.Name, cst.Attribute):
            continue
        value = model.value_at(other.func)
        if value is not None and value.kind == "model":
            return False  # another model's forward also feeds this loss
    return any(model.performs(c, "BACKWARD") and c.args and type(c.args[0].value) is cst.Name
               and c.args[0].value.value == loss and model.line_of(c) > model.line_of(statement)
               for c in model.calls_in(loop))


def _reduces_gradients_by_hand(model: FileModel, scope) -> bool:
    """``scope`` all-reduces gradients itself (``dist.all_reduce(torch.cat([p.grad.view(-1) for
    ...]))``, cleanrl's multi-GPU PPO): it reads ``.grad`` and runs an all-reduce, so training
    the bare module does not leave the replicas unsynchronised."""
    reads_grads = any(type(node) is cst.Attribute and node.attr.value == "grad" for node in model.index.walk(scope))
    return reads_grads and any(
        (model.index.imports.qualify_expr(call.func) or "") in ("torch.distributed.all_reduce",
                                                             "torch.distributed.all_reduce_coalesced")
        or (isinstance(call.func, cst.Attribute) and call.func.attr.value == "reduce"
            and model.is_accelerator(call.func.value))
        for call in model.calls_in(scope))


def _kept_only_bare(model: FileModel) -> Iterable[tuple[cst.Assign, cst.Call, cst.Call]]:
    """``(assignment, training call, backward)``: ``self.model = accelerator.unwrap_model(model)``
    on every rank, where ``model`` is a parameter holding a prepared, wrapped model that the
    method does nothing else with (the wrapper is dropped), and a method of the class runs
    ``self.model`` (its forward, or a method of it) and then the accelerator's backward."""
    for call in model.index.calls:
        if not model.is_unwrap_call(call):
            continue
        assign = model.index.parents.get(call)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            continue
        target = dotted_name(assign.targets[0].target)
        inner = call.args[0].value
        scope = model.scope_of(assign)
        if target is None or not target.startswith("self.") or type(inner) is not cst.Name \
                or not isinstance(scope, cst.FunctionDef) or model.rank_guard_of(assign) is not None \
                or model.under_rank_condition(assign):
            continue
        if inner.value not in {p.name.value for p in scope.params.params}:
            continue
        held = model.value_at(inner)
        if held is None or held.kind != "model" or held.prepared != YES or held.not_wrapped:
            continue
        if any(type(n) is cst.Name and n.value == inner.value and n is not inner for n in model.index.loads_in(scope.body)):
            continue  # the wrapper is used (or kept) elsewhere in the method
        cls = model.index.class_of(scope)
        if cls is None or any(s is not scope and _binds_attr(model, s, target) for s in cls.methods.values()):
            continue  # bound elsewhere too: which object trains is not known
        found = _trains_through(model, cls, target)
        if found is not None:
            yield (assign, *found)


# methods of a module that run no forward
_NO_FORWARD = MODULE_ONLY_METHODS | SELF_RETURNING | {"state_dict", "load_state_dict", "zero_grad", "apply",
                                                    "named_buffers", "buffers", "save_pretrained"}


def _binds_attr(model: FileModel, method: cst.FunctionDef, target: str) -> bool:
    return any(type(n) is cst.AssignTarget and dotted_name(n.target) == target for n in model.index.walk(method))


def _trains_through(model: FileModel, cls, target: str) -> tuple[cst.Call, cst.Call] | None:
    """A method of ``cls`` that calls ``target`` (``self.model(x)`` or ``self.model.step(x)``) and,
    after it, the accelerator's backward."""
    order = model.index.call_order
    for method in cls.methods.values():
        calls = [c for c in model.index.walk(method) if isinstance(c, cst.Call)]
        backward = next((c for c in calls if model.performs(c, "BACKWARD")), None)
        if backward is None:
            continue
        for c in calls:
            func = c.func
            owner = func.value if isinstance(func, cst.Attribute) else None
            method_name = func.attr.value if isinstance(func, cst.Attribute) else None
            if method_name in _NO_FORWARD:
                continue  # (a mode switch, a move, its parameters: no forward)
            given = any(dotted_name(a.value) == target for a in c.args) and not (
                owner is not None and model.is_accelerator(owner))  # `loss_of(self.model, batch)`
            if (dotted_name(func) == target or (owner is not None and dotted_name(owner) == target) or given) \
                    and order.get(c, 0) < order.get(backward, 0) and not model.under_no_grad(c):
                return c, backward
    return None


def _unwrapping_rebinds(model: FileModel) -> Iterable[tuple[cst.Assign, cst.BaseExpression]]:
    """``(assignment, what it unwraps)`` for ``x = accelerator.unwrap_model(x)`` and
    ``x = x.module`` (the wrapper's inner module, under DDP and DeepSpeed alike)."""
    for call in model.index.calls:
        if model.is_unwrap_call(call):
            assign = model.index.parents.get(call)
            if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
                yield assign, call.args[0].value
    if "module" not in model.index.identifiers:
        return
    for node in model.index.parents:
        if type(node) is cst.Assign and len(node.targets) == 1 and type(node.value) is cst.Attribute \
                and node.value.attr.value == "module":
            yield node, node.value.value


def _bypassed_wrappers(model: FileModel) -> Iterable[tuple[cst.Call, cst.Call, str]]:
    """``(forward, prepare call, name of its result)``: a training loop calls the module that was
    given to ``prepare``, whose wrapped result another name holds."""
    seen: set[cst.CSTNode] = set()
    for forward in model.index.calls:
        func = forward.func
        if not isinstance(func, (cst.Name, cst.Attribute)) or func in seen:
            continue
        value = model.value_at(func)
        # kind unknown here is enough when what it holds went to `prepare` as a model (checked below)
        if value is None or value.kind not in ("model", None) or value.prepared != NO or value.frozen \
                or value.not_wrapped or value.unwrapped:
            continue
        origins = value.origins()
        if not origins or not all(model.was_prepared(o) for o in origins):
            continue
        loop = model.enclosing_loop(forward)
        if loop is None or not model.loop_trains(loop) or model.under_no_grad(forward):
            continue
        found = _wrapping_prepare(model, origins, forward)
        if found is not None:
            seen.add(func)
            yield forward, *found


def _bypassed_containers(model: FileModel) -> Iterable[tuple[cst.Call, cst.Call, str, str]]:
    """``(forward, prepare call, container, owner)``: ``prepare`` was given a module made from
    another model's parts (``lora_layers = AttnProcsLayers(unet.attn_processors)``), nothing ever
    calls that module or its wrapper, and a training loop runs the owner's forward (``unet(...)``)
    instead: the wrapper's forward, which arms the gradient all-reduce, never runs."""
    called: set[str] | None = None  # what the file calls, built at the first candidate only
    for prepare in model.objects.prepare_calls:
        positional, targets = _given_and_bound(model, prepare)
        for i, given in enumerate(positional):
            held = model.value_at(given)
            origin = held.origin if held is not None else None
            if held is None or held.kind != "model" or not isinstance(origin, cst.Call) or held.frozen:
                continue
            owner = _owner_of_parts(model, origin)
            if owner is None:
                continue
            if called is None:
                called = {model.code(c.func) for c in model.index.calls}
            result = model.code(targets[i]) if i < len(targets) else None
            if model.code(given) in called or (result is not None and result in called):
                continue
            forward = _owner_trained_after(model, owner, prepare)
            if forward is not None:
                yield forward, prepare, model.code(given), owner


def _owner_of_parts(model: FileModel, made: cst.Call) -> str | None:
    """``unet`` for ``AttnProcsLayers(unet.attn_processors)``: the one argument is an attribute of a
    model the file knows (its modules become the new module's), not the model itself."""
    if len(made.args) != 1 or not isinstance(made.args[0].value, cst.Attribute):
        return None
    base = made.args[0].value.value
    value = model.value_at(base)
    if value is None or value.kind != "model" or value.prepared != NO:
        return None
    return model.code(base)


def _owner_trained_after(model: FileModel, owner: str, prepare: cst.Call) -> cst.Call | None:
    for call in model.index.calls:
        if model.code(call.func) != owner or model.line_of(call) <= model.line_of(prepare) \
                or model.scope_of(call) is not model.scope_of(prepare) or model.under_no_grad(call):
            continue
        loop = model.enclosing_loop(call)
        if loop is not None and model.loop_trains(loop):
            return call
    return None


def _given_and_bound(model: FileModel, prepare: cst.Call) -> tuple[list, list]:
    """``prepare``'s positional arguments, and the targets its result is unpacked into (none when
    the result is not assigned)."""
    positional = [a.value for a in prepare.args if a.keyword is None]
    assign = model.index.parents.get(prepare)
    if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
        return positional, []
    target = assign.targets[0].target
    return positional, [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]


def _wrapping_prepare(model: FileModel, origins: frozenset, forward: cst.Call) -> tuple[cst.Call, str] | None:
    """The ``prepare`` call, before ``forward`` in the same function, that was given the object and
    bound its wrapped result to a name that still holds it."""
    for call in model.objects.prepare_calls:
        if model.scope_of(call) is not model.scope_of(forward) or model.line_of(call) >= model.line_of(forward):
            continue
        positional, targets = _given_and_bound(model, call)
        if len(targets) != len(positional):
            continue
        for given, bound in zip(positional, targets):
            held = model.value_at(given)
            if held is None or not (held.origins() & origins) or not isinstance(bound, cst.Name):
                continue
            if model.kind_given_to_prepare(call, given) == "model" and not held.frozen and not held.not_wrapped \
                    and not any(a.keyword is not None and a.keyword.value == "evaluation_mode" for a in call.args):
                return call, bound.value
    return None


def _trained_after(model: FileModel, name: str, assign: cst.Assign) -> cst.Call | None:
    """A forward ``name(...)`` (or a call given ``name``) in a training loop that runs after ``assign``: later in the
    function, or anywhere in a loop that encloses ``assign`` (its next pass), unless the name is
    rebound first."""
    exit_kind = _exit_after(model, assign)
    if exit_kind in (cst.Return, cst.Raise):
        return None  # the function ends after the rebinding: nothing trains on it
    candidates = model.nodes_after(assign)
    loop = next((p for p in model.ancestors(assign) if isinstance(p, (cst.For, cst.While, cst.FunctionDef))), None)
    if isinstance(loop, (cst.For, cst.While)) and exit_kind is None:
        candidates += list(model.index.walk(loop.body))  # the loop's next pass
    own = {id(n) for n in model.index.walk(assign)}
    given: cst.Call | None = None  # the first call the name is given to, when no forward comes
    for node in candidates:
        if id(node) in own or (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
                               and node.func.attr.value == "unwrap_model"):
            continue  # unwrapping again is no training use
        if isinstance(node, cst.AssignTarget) and dotted_name(node.target) == name and node is not assign.targets[0]:
            break  # rebound on every path that follows: the name no longer holds the bare module
        if name.startswith("self.") and isinstance(node, cst.Call):
            inner = _method_trains_on(model, node, name)
            if inner is not None:
                return inner  # `self.train_one_epoch()`, whose training loop runs `self.model(batch)`
        if not isinstance(node, cst.Call) or not any(isinstance(p, (cst.For, cst.While)) and model.loop_trains(p)
                                                     for p in model.ancestors(node)):
            continue
        if dotted_name(node.func) == name:
            return node  # `model(batch)` in a loop that runs a backward pass
        # `loss_of(model, batch)`; the accelerator's own methods (`accumulate(model)`) run no forward
        if given is None and any(dotted_name(a.value) == name for a in node.args) and not (
                isinstance(node.func, cst.Attribute) and model.is_accelerator(node.func.value)):
            given = node
    return given


def _method_trains_on(model: FileModel, call: cst.Call, name: str) -> cst.Call | None:
    """The forward ``self.<attr>(...)`` in a training loop of the method of this class that
    ``call`` runs (``self.train_one_epoch()``), if any."""
    target = model.index.resolve_call(call)
    if target is None or target is model.scope_of(call):
        return None
    for inner in model.index.walk(target):
        if isinstance(inner, cst.Call) and dotted_name(inner.func) == name and any(
                isinstance(p, (cst.For, cst.While)) and model.loop_trains(p) for p in model.ancestors(inner)):
            return inner
    return None


def _exit_after(model: FileModel, assign: cst.Assign) -> type | None:
    """``break``, ``return`` or ``raise`` among the statements that follow the rebinding in its
    own block: the loop around it has no next pass after it (or the function ends)."""
    statement = model.statement_of(assign)
    block = model.index.parents.get(statement)
    if not isinstance(block, (cst.IndentedBlock, cst.Module)):
        return None
    siblings = list(block.body)
    for later in siblings[siblings.index(statement):]:
        if isinstance(later, cst.SimpleStatementLine):
            for small in later.body:
                if isinstance(small, (cst.Break, cst.Return, cst.Raise)):
                    return type(small)
    return None
