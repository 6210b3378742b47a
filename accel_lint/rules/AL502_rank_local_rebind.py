from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import MAYBE, YES, FileModel, shorten
from .base import Finding, Rule, quote


class RankLocalRebind(Rule):
    """A prepared object's name rebound on some ranks only, then used on all.

    ## What it does
    Flags an assignment inside a rank guard (`if accelerator.is_main_process:`) to a name
    that held a prepared object (`model = accelerator.unwrap_model(model)`), when the name is
    read again after the guard.
    Not flagged: new names inside the guard; names never read after it; the same rebinding
    in both branches; a rebinding to the same object (`pbar = tqdm(pbar)`: a progress bar
    over the prepared loader yields its batches).

    ## Why is this bad?
    After the block the main process holds the bare module and the other ranks the wrapper:
    a later forward or backward on the main process bypasses DDP's gradient reducer (the
    others hang in the all-reduce, or main trains unsynchronized), and under FSDP/ZeRO-3 the
    main process's module is no longer gathered.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al502_*`):
    the main process training its unwrapped model hung under DDP, raised under FSDP1, and
    ran under FSDP2 (no wrapper) and ZeRO-2/3.

    ## Example
    ```python
    if accelerator.is_main_process:
        model = accelerator.unwrap_model(model)
        model.save_pretrained("out")
    outputs = model(**batch)
    ```

    ## Use instead
    ```python
    if accelerator.is_main_process:
        unwrapped = accelerator.unwrap_model(model)
        unwrapped.save_pretrained("out")
    outputs = model(**batch)
    ```
    """

    code = "AL502"
    name = "rank-local-rebind"
    severity = "warning"
    summary = "a prepared object's name rebound under a rank guard and used after it: ranks hold different objects"

    VALID = [
        # a progress bar on the main process only, over the same prepared loader
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from tqdm import tqdm
        accelerator = Accelerator()
        model, loader = accelerator.prepare(build_model(), DataLoader(dataset, batch_size=8, shuffle=True))
        batches = loader
        if accelerator.is_main_process:
            batches = tqdm(batches, desc="training")
        for batch in batches:
            accelerator.backward(model(batch).loss)
        """,
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model = accelerator.prepare(model)
        if accelerator.is_main_process:
            unwrapped = accelerator.unwrap_model(model)
            unwrapped.save_pretrained("out")
        outputs = model(**batch)
        """,
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 4)
        model = accelerator.prepare(model)
        if accelerator.is_main_process:
            model = accelerator.unwrap_model(model)
            model.save_pretrained("out")
        model = accelerator.prepare(torch.nn.Linear(4, 4))  # every rank binds it again before reading
        outputs = model(batch)
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = accelerator.prepare(AutoModelForSequenceClassification.from_pretrained("bert-base-uncased"))
        if accelerator.is_main_process:
            model = accelerator.unwrap_model(model)  # expect: AL502
            model.save_pretrained("out")
        outputs = model(**batch)
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        # a name being rebound has, at that point, the value it held: start from prepared ones
        for node, held in list(model.objects.values.items()):
            parent = model.index.parents.get(node)
            if not (isinstance(parent, cst.AssignTarget) and isinstance(node, cst.Name)) or \
                    held.prepared not in (YES, MAYBE) or held.kind is None:  # an unknown object: no finding
                continue
            assign = model.index.parents.get(parent)
            guard = _rank_if(model, assign) if isinstance(assign, cst.Assign) else None
            if guard is None:
                continue
            name = node.value
            scope = model.scope_of(node)
            held_read = _held_prepared_before(model, name, scope, assign)
            later_read = _read_after(model, name, guard) if held_read is not None else None
            if held_read is None or later_read is None or _same_object(model, assign, held_read):
                continue
            evidence = [*model.value_evidence(held_read),
                        (guard, f"runs only where `{shorten(model.code(guard.test))}`, which differs "
                                f"between ranks"),
                        (later_read, f"`{name}` is read here, after the block, on every rank")]
            yield Finding(node, f"`{name}` held a prepared object and is rebound only where "
                                f"{quote(model.code(guard.test))} (line {model.line_of(guard)}) is true; after that "
                                f"block it refers to different objects on different ranks (the bare module on some, "
                                f"the wrapper on others); use a new name inside the guard", evidence=tuple(evidence))


def _rank_if(model: FileModel, node: cst.CSTNode) -> cst.If | None:
    """The innermost ``if`` on a rank predicate whose body holds ``node``."""
    child = node
    for parent in model.ancestors(node):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return None
        if isinstance(parent, cst.If) and child is parent.body and model.ranks.is_rank_dependent(parent.test):
            return parent
        child = parent
    return None


def _reads(model: FileModel, name: str, scope) -> list[cst.Name]:
    return [n for n in model.index.loads_in(scope.body if isinstance(scope, cst.FunctionDef) else scope)
            if isinstance(n, cst.Name) and n.value == name
            and not isinstance(model.index.parents.get(n), cst.AssignTarget)]


def _held_prepared_before(model: FileModel, name: str, scope, assign: cst.Assign) -> cst.Name | None:
    """A read of ``name`` in the guarded assignment that still holds the prepared object."""
    for read in _reads(model, name, scope):
        if any(p is assign for p in model.ancestors(read)):
            value = model.value_at(read)
            if value is not None and value.prepared in (YES, MAYBE):  # MAYBE: the loop's next pass sees the rebinding
                return read
    return None


def _same_object(model: FileModel, assign: cst.Assign, held_read: cst.Name) -> bool:
    """The guarded assignment binds the object the name already held: ``pbar = tqdm(pbar)``
    (a bar yields the loader's own batches) or another call of the library table's identity
    calls on it."""
    value = assign.value
    if not isinstance(value, cst.Call):
        return False
    position = model.library.identity_calls.get(model.index.imports.qualify_expr(value.func) or "")
    positional = [arg for arg in value.args if arg.keyword is None and not arg.star]
    return position is not None and position < len(positional) and positional[position].value is held_read


def _read_after(model: FileModel, name: str, block: cst.If) -> cst.CSTNode | None:
    """A read of ``name`` after the ``if`` in source order (pre-order walk), outside it, or
    anywhere in a loop around it (the next pass reads it after the block), on ranks where the
    rebinding did not run (a read under a guard that implies the block's is consistent)."""
    inside = {id(n) for n in model.index.walk(block)}
    for n in model.nodes_after(block):
        if _rebinds_on_every_rank(model, n, name, block):
            return None  # every rank binds the name again before reading it: the rank-local object is dead
        if _is_read_of(model, n, name) and not model.runs_only_where(n, block.test):
            return n
    loop = next((p for p in model.ancestors(block) if isinstance(p, (cst.For, cst.While))), None)
    if loop is None:
        return None
    return next((n for n in model.index.walk(loop.body) if _is_read_of(model, n, name) and id(n) not in inside), None)


def _rebinds_on_every_rank(model: FileModel, node: cst.CSTNode, name: str, block: cst.If) -> bool:
    """``node`` assigns ``name`` in the same block as the guard (not inside a branch or loop of
    its own), so every rank runs it after the guarded rebinding."""
    if not (isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Name) and node.target.value == name):
        return False
    statement = model.statement_of(node)
    return model.index.parents.get(statement) is model.index.parents.get(block)


def _is_read_of(model: FileModel, node: cst.CSTNode, name: str) -> bool:
    """``node`` reads the variable ``name``: not an assignment target, and not the attribute of
    another object (``pipeline.unet`` is not the local ``unet``)."""
    if not (isinstance(node, cst.Name) and node.value == name):
        return False
    parent = model.index.parents.get(node)
    return not isinstance(parent, cst.AssignTarget) and not (isinstance(parent, cst.Attribute) and parent.attr is node)
