from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst

from ..model import NO, FileModel
from .base import Finding, Rule


_LOADER_NAME = re.compile(r"(loader|(^|_)dl($|_)|dataloader)", re.IGNORECASE)


class StepsFromUnpreparedLength(Rule):
    """Loop bounds computed from a loader's length before `prepare` shortened it.

    ## What it does
    Flags the use, as a loop bound or progress total, of a value computed from `len(loader)`
    while the loader was still unprepared and is prepared afterwards: `range(...)` of a loop,
    `tqdm(total=...)`, or a loop-exit comparison (`if step >= max_steps: break`). Values
    derived from it in one more assignment (`max_steps = epochs * steps_per_epoch`) count too.
    Not flagged: a scheduler sized from the pre-`prepare` length (that is right: the prepared
    scheduler steps `num_processes` times per step); values recomputed from `len(loader)`
    after `prepare`; `len(dataset)`.

    ## Why is this bad?
    A prepared loader is about `num_processes` times shorter (`ceil(len / num_processes)`).
    Bounds computed before `prepare` are N times too large: epoch counts derived from them
    overrun, progress bars never complete and step-based checkpoints and evaluations shift.

    ## Example
    ```python
    steps_per_epoch = len(train_dl)
    model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
    for step in tqdm(range(steps_per_epoch * epochs)):
        ...
    ```

    ## Use instead
    ```python
    model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
    steps_per_epoch = len(train_dl)          # recomputed after prepare()
    for step in tqdm(range(steps_per_epoch * epochs)):
        ...
    ```
    """

    code = "AL202"
    name = "steps-from-unprepared-length"
    severity = "warning"
    summary = "a loop bound computed from len(loader) before prepare() made the loader N times shorter"

    VALID = [
        """\
        from accelerate import Accelerator
        from transformers import get_scheduler
        accelerator = Accelerator()
        steps = len(train_dl) * epochs
        scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=steps)
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        steps_per_epoch = len(train_dl)
        for step in range(steps_per_epoch * epochs):
            pass
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        from tqdm import tqdm
        accelerator = Accelerator()
        steps_per_epoch = len(train_dl)
        max_steps = steps_per_epoch * epochs
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        progress = tqdm(total=max_steps)  # expect: AL202
        for step in range(steps_per_epoch):  # expect: AL202
            if step >= max_steps:  # expect: AL202
                break
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            if not (isinstance(call.func, cst.Name) and call.func.value == "len" and len(call.args) == 1):
                continue
            loader = call.args[0].value
            value = model.value_at(loader)
            if value is not None and (value.kind != "loader" or value.prepared != NO):
                continue
            if value is None and not _LOADER_NAME.search(model.code(loader).rsplit(".", 1)[-1]):
                continue  # a name bound elsewhere: only a loader's name makes it one
            if not _prepared_later(model, loader):
                continue
            names = _bound_from(model, call)
            if not names:
                continue
            scope = model.scope_of(call)
            derived = set(names)
            for name in list(names):
                derived |= _derived_names(model, name, scope)
            for use, how in _bound_uses(model, derived, scope, call):
                yield Finding(use, f"`{model.code(use)}` {how} comes from `len({model.code(loader)})` taken before "
                                   f"`prepare()`, which makes the loader about num_processes times shorter; "
                                   f"recompute it from `len({model.code(loader)})` after `prepare()`")


def _prepared_later(model: FileModel, loader: cst.BaseExpression) -> bool:
    name = model.code(loader)
    order = model.index.call_order
    here = order.get(next(iter(model.calls_in(model.statement_of(loader))), None), -1)
    for prepare in model.objects.prepare_calls:
        if order.get(prepare, -1) > here and any(model.code(a.value) == name for a in prepare.args):
            return True
    return False


def _bound_from(model: FileModel, call: cst.Call) -> set[str]:
    statement = model.statement_of(call)
    names = set()
    if isinstance(statement, cst.SimpleStatementLine):
        for small in statement.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    if isinstance(target.target, cst.Name):
                        names.add(target.target.value)
    return names


def _assignments(model: FileModel, scope) -> list[cst.Assign]:
    return [n for n in model.index.walk(scope) if isinstance(n, cst.Assign)]


def _derived_names(model: FileModel, name: str, scope) -> set[str]:
    out = set()
    for assign in _assignments(model, scope):
        reads = {n.value for n in model.index.loads_in(assign.value) if isinstance(n, cst.Name)}
        if name in reads and not any(isinstance(c.func, cst.Name) and c.func.value == "len"
                                     for c in model.calls_in(assign.value)):
            out.update(t.target.value for t in assign.targets if isinstance(t.target, cst.Name))
    return out


def _bound_uses(model: FileModel, names: set[str], scope, after: cst.Call):
    """(node, how) for reads of ``names`` used as a loop bound or progress total, while the
    name still holds the pre-prepare value (no reassignment between)."""
    reassigned_after_prepare = set()
    order = model.index.call_order
    last_prepare = max((order.get(p, -1) for p in model.objects.prepare_calls), default=-1)
    for assign in _assignments(model, scope):
        calls = model.calls_in(assign.value)
        if calls and min(order.get(c, -1) for c in calls) > last_prepare:
            reassigned_after_prepare.update(t.target.value for t in assign.targets if isinstance(t.target, cst.Name))
    live = names - reassigned_after_prepare
    for node in model.index.walk(scope):
        if isinstance(node, cst.For) and isinstance(node.iter, cst.Call) and model.code(node.iter.func) == "range":
            if any(isinstance(n, cst.Name) and n.value in live for a in node.iter.args for n in model.index.loads_in(a.value)):
                yield node.iter, "(a loop bound)"
        elif isinstance(node, cst.Call) and model.code(node.func).rsplit(".", 1)[-1] in ("tqdm", "trange"):
            for a in node.args:
                if a.keyword is not None and a.keyword.value == "total" and \
                        any(isinstance(n, cst.Name) and n.value in live for n in model.index.loads_in(a.value)):
                    yield node, "(a progress total)"
        elif isinstance(node, cst.If) and isinstance(node.test, cst.Comparison) and model.enclosing_loop(node) is not None and \
                any(isinstance(n, cst.Name) and n.value in live for n in model.index.loads_in(node.test)) and \
                any(isinstance(s, cst.Break) for s in model.index.walk(node.body)):
            yield node.test, "(a loop exit)"

