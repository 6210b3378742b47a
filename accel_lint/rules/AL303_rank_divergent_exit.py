from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import YES, FileModel, shorten
from .base import Finding, Rule



class RankDivergentExit(Rule):
    """Leaving a loop with collectives on a condition computed from rank-local data.

    ## What it does
    Flags a collective (on every backend: `backward`, a gather or reduce, a barrier) that one
    branch of an `if` runs and the other does not, in code every rank runs, where the test depends on
    rank-local data (`if not torch.isnan(loss): accelerator.backward(loss)`): the same as a
    `continue` before it. Only tests that read values count (an ordering comparison, a NaN/Inf
    check): tests on the shape of the data (`labels is not None`, `"mask" in batch`, a list's
    truthiness) agree across ranks. Also flags `break` and `return` (and `continue` when a collective follows it in the loop, or,
    in an `except` handler, when its `try` body runs one: the rank that raised skipped it)
    inside a loop that runs collectives (a `backward`, a gather or reduce, a
    forward of a prepared model), when the condition that leads to it depends on rank-local
    data, or an `except` handler (`except torch.cuda.OutOfMemoryError: continue`). Rank-local
    is a fact of the model's data flow, not of names: a value computed from a batch (the loop
    variable over a loader), from a model's forward or `generate` (`loss.item() < threshold`,
    `torch.isnan(loss)`), from the clock, returned by a same-file helper that computes it
    so (`val_loss, metrics = evaluate(model, val_loader)`: each item of a returned tuple on its
    own), an attribute that a method of its object's class (of this file or another module)
    sets under a rank predicate (`trainer.should_stop`, set under
    `if self.accelerator.is_main_process:`), put into a list (`val_losses.append(val_loss)`; the list's `len()` stays uniform), or assigned under a
    condition that is itself rank-local (a patience counter on un-reduced metrics), or after a
    `continue` that only some ranks take (`except RuntimeError: continue` before `step += 1`:
    the failing rank's step counter falls behind, so it stops one pass later; where that
    earlier exit is reported itself, a step counter behind it adds no finding: one cause, one
    finding). Exits on a
    rank predicate (`if accelerator.is_main_process: break`) are reported by AL301 at the
    collective the other ranks then wait in.
    Not flagged: uniform counters (`if completed_steps >= max_train_steps: break`); what a
    collective returns (`gather`, `reduce`, `broadcast`, `check_trigger()`, `torch.distributed`'s
    `all_gather` into a list, and a helper of another module that returns such a value) and
    values computed where only one process runs (`if accelerator.num_processes > 1:` not taken),
    and the gradient norm
    an accelerator's `clip_grad_norm_` returns (computed from gradients already all-reduced),
    whatever went into them; values the model cannot trace (a parameter); random draws (the
    same on every rank after `set_seed`) and file-system listings (the same on a shared file
    system); a `continue` with no
    collective after it; `raise` and `sys.exit()` (the rank fails and the launcher stops the
    others).

    ## Why is this bad?
    Each rank computes its own loss on its own batch: one rank sees a NaN or reaches the
    threshold first, leaves the loop, and stops calling collectives; the other ranks block in
    the next all-reduce or barrier until the process-group timeout.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al303_*`):
    one rank leaving on its own loss hung every multi-process backend.

    ## Example
    ```python
    for batch in train_dl:
        loss = model(**batch).loss
        if loss.item() < 0.01:
            break
        accelerator.backward(loss)
    ```

    ## Use instead
    ```python
    for batch in train_dl:
        loss = model(**batch).loss
        if loss.item() < 0.01:
            accelerator.set_trigger()
        if accelerator.check_trigger():
            break
        accelerator.backward(loss)
    ```
    """

    code = "AL303"
    name = "rank-divergent-exit"
    severity = "warning"
    summary = "a loop with collectives left on a rank-local loss/metric or exception: the other ranks hang"

    VALID = [
        # the parameter holds a class: calling it builds the model, it is not a forward on data
        """\
        import os
        import torch
        from accelerate import Accelerator
        def main(model, config, loader):
            accelerator = Accelerator()
            rank = int(os.environ["RANK"])
            model = model(config, process_rank=rank)
            optimizer = torch.optim.AdamW(model.parameters())
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            global_step = scheduler.last_epoch
            for batch in loader:
                accelerator.backward(model(batch))
                optimizer.step()
                global_step += 1
                if global_step >= config.max_steps:
                    break
        """,
        # the nested evaluation's own loop counter is not the training loop's clock-derived one
        """\
        import time
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        model, val_dl, train_dl = accelerator.prepare(net, DataLoader(val_set, batch_size=4),
                                                      DataLoader(train_set, batch_size=4))
        def main():
            i = time.time()
            def evaluate():
                total = 0.0
                with torch.no_grad():
                    for i, batch in enumerate(val_dl):
                        total += accelerator.reduce(model(batch).mean())
                        if i == 10:
                            break
                return total
            evaluate()
        """,
        # whether the batch has labels is the same on every rank (one collate function)
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        model, loader = accelerator.prepare(net, DataLoader(eval_set, batch_size=4))
        model.eval()
        for batch in loader:
            labels = batch.get("labels")
            if labels is not None:
                labels = accelerator.gather_for_metrics(labels)
        """,
        # both branches run the backward: every rank joins the all-reduce
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        model, optimizer, loader = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1),
                                                       DataLoader(train_set, batch_size=4))
        for batch in loader:
            loss = model(batch).mean()
            if torch.isnan(loss):
                accelerator.backward(loss.nan_to_num() * 0.0)
            else:
                accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        """,
        # the flag is what every rank agrees on: check_trigger() all-reduces the main's decision
        """\
        from accelerate import Accelerator
        class Trainer:
            def __init__(self, accelerator, model, optimizer):
                self.accelerator = accelerator
                self.model, self.optimizer = accelerator.prepare(model, optimizer)
                self.should_stop = False
            def step(self, batch):
                loss = self.model(batch).mean()
                self.accelerator.backward(loss)
                self.optimizer.step()
                if self.accelerator.is_main_process and loss.item() > 10:
                    self.accelerator.set_trigger()
                self.should_stop = self.accelerator.check_trigger()
        accelerator = Accelerator()
        trainer = Trainer(accelerator, make_model(), make_optimizer())
        for batch in batches():
            trainer.step(batch)
            if trainer.should_stop:
                break
        """,
        """\
        import torch
        from accelerate import Accelerator
        def evaluate(model, loader, metric):
            total = 0.0
            with torch.no_grad():
                for batch in loader:
                    logits = model(batch)
                    total += logits.sum().item()
                    metric(logits, batch)
            return total / len(loader), metric.compute()  # a loss of this rank's shard; a metric it syncs
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(train_set, batch_size=8)
        val_loader = torch.utils.data.DataLoader(val_set, batch_size=8)
        model, optimizer, loader, val_loader = accelerator.prepare(model, optimizer, loader, val_loader)
        losses, scores = [], []
        for epoch in range(100):
            for batch in loader:
                accelerator.backward(model(batch).sum())
                optimizer.step()
            val_loss, score = evaluate(model, val_loader, metric)
            losses.append(val_loss)
            scores.append(score)
            if len(scores) - scores.index(max(scores)) > 5:  # the synced metric: the same everywhere
                break
            if len(losses) >= 50:  # one item per epoch on every rank
                break
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
        completed_steps = 0
        for batch in dl:
            loss = model(**batch).loss
            accelerator.backward(loss)
            completed_steps += 1
            if completed_steps >= max_train_steps:
                break
            mean_loss = accelerator.reduce(loss.detach(), "mean")
            if mean_loss.item() < 0.01:
                break
        """,
    ]
    INVALID = [
        # the skip is the cause; the step counter it leaves behind adds no second finding
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(torch.nn.Linear(4, 1), optimizer, loader)
        step = 0
        for batch in loader:
            loss = model(batch).mean()
            if torch.isnan(loss):
                continue  # expect: AL303
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            if step % 100 == 0:
                accelerator.wait_for_everyone()
            if step >= 1000:
                break
        """,
        # a rank with a NaN loss skips the backward (the gradient all-reduce) the others run
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        model, optimizer, loader = accelerator.prepare(net, torch.optim.SGD(net.parameters(), lr=0.1),
                                                       DataLoader(train_set, batch_size=4))
        for batch in loader:
            loss = model(batch).mean()
            if not torch.isnan(loss):
                accelerator.backward(loss)  # expect: AL303
            optimizer.step()
            optimizer.zero_grad()
        """,
        # the trainer sets its flag on the main process only: the main process leaves the loop
        """\
        from accelerate import Accelerator
        class Trainer:
            def __init__(self, accelerator, model, optimizer):
                self.accelerator = accelerator
                self.model, self.optimizer = accelerator.prepare(model, optimizer)
                self.should_stop = False
            def step(self, batch):
                loss = self.model(batch).mean()
                self.accelerator.backward(loss)
                self.optimizer.step()
                if self.accelerator.is_main_process and loss.item() > 10:
                    self.should_stop = True
        accelerator = Accelerator()
        trainer = Trainer(accelerator, make_model(), make_optimizer())
        for batch in batches():
            trainer.step(batch)
            if trainer.should_stop:
                break  # expect: AL303
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.AdamW(model.parameters())
        dl = DataLoader(train_ds, batch_size=8, shuffle=True)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            try:
                accelerator.backward(model(batch).sum())  # skipped by the rank that raised
                optimizer.step()
            except RuntimeError:
                optimizer.zero_grad()
                continue  # expect: AL303
        """,
        """\
        import torch
        from accelerate import Accelerator
        def evaluate(model, loader, metric):
            total = 0.0
            with torch.no_grad():
                for batch in loader:
                    logits = model(batch)
                    total += logits.sum().item()
                    metric(logits, batch)
            return total / len(loader), metric.compute()  # a loss of this rank's shard; a metric it syncs
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = torch.utils.data.DataLoader(train_set, batch_size=8)
        val_loader = torch.utils.data.DataLoader(val_set, batch_size=8)
        model, optimizer, loader, val_loader = accelerator.prepare(model, optimizer, loader, val_loader)
        losses, scores = [], []
        for epoch in range(100):
            for batch in loader:
                accelerator.backward(model(batch).sum())
                optimizer.step()
            val_loss, score = evaluate(model, val_loader, metric)
            losses.append(val_loss)
            scores.append(score)
            if len(losses) - losses.index(min(losses)) > 5:
                break  # expect: AL303
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        step = 0
        for batch in loader:
            loss = model(**batch).loss
            try:
                accelerator.backward(loss)
                optimizer.step()
            except RuntimeError:
                continue  # expect: AL303
            step += 1
            if step >= max_steps:
                break  # (the counter behind that exit: the same cause, reported there)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        dl = DataLoader(train_ds, batch_size=8, shuffle=True)
        model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
        for batch in dl:
            try:
                loss = model(**batch).loss
            except torch.cuda.OutOfMemoryError:
                continue  # expect: AL303
            if torch.isnan(loss):
                break  # expect: AL303
            accelerator.backward(loss)
        """,
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        def make_loader():
            return DataLoader(train_ds, batch_size=8, shuffle=True)
        # prepare() of a call's result: the kind of what the function returns (`make_loader()`: a loader)
        model, optimizer, loader = accelerator.prepare(build(), make_optimizer(), make_loader())
        for batch in loader:
            loss = loss_of(model, batch)
            if loss.item() > 1e4:
                break  # expect: AL303
            accelerator.backward(loss)
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        yield from _skipped_collectives(model)
        looped = {model.enclosing_loop(node) for node in model.index.exits}
        for loop in model.index.loops:
            if loop not in looped:
                continue  # no exit statement: nothing to walk
            body = list(model.index.walk(loop.body))  # source order
            exits = [(i, n, k) for i, n in enumerate(body) if (k := _exit_kind(model, n)) is not None
                     and model.enclosing_loop(n) is loop]
            if not exits or not _has_collectives(model, loop):
                continue  # cheap test first: most loops have no exit statement
            if model.rank_guard_of(loop) is not None or not model.runs_on_every_rank(model.scope_of(loop)):
                # a loop only some ranks run (an evaluation on the main process): its collectives
                # are already unmatched, which AL301/AL305 report; its exits diverge nothing more
                continue
            for index, node, exit_kind in exits:
                if exit_kind == "continue" and not any(
                        isinstance(later, cst.Call) and _is_collective(model, later) for later in body[index + 1:]) \
                        and not _skipped_by_the_exception(model, node, loop):
                    continue
                yield from self._report(model, node, loop, exit_kind)

    def _report(self, model: FileModel, node: cst.CSTNode, loop, exit_kind: str) -> Iterable[Finding]:
        reason = _rank_local_reason(model, node, loop)
        if reason is not None:
            where, why = reason
            evidence = [(where, f"the exit depends on {why}")]
            collective = next((c for c in model.calls_in(loop.body) if _is_collective(model, c)), None)
            if collective is not None:
                evidence.append((collective, f"`{shorten(model.code(collective.func))}(...)`: a collective every "
                                             f"rank must join on each pass"))
            yield Finding(node, f"`{exit_kind}` depends on {why} and may run on some ranks only; the others block in "
                                f"the loop's next collective until the timeout. Decide together: "
                                f"`accelerator.set_trigger()` here and `if accelerator.check_trigger(): break` on "
                                f"every rank", evidence=tuple(evidence))


_BACKEND_DEPENDENT = frozenset({"CKPT", "END"})


def _skipped_collectives(model: FileModel) -> Iterable[Finding]:
    """``if not torch.isnan(loss): accelerator.backward(loss)`` in code every rank runs: the
    branch holds a collective (on every backend) the other branch does not, under a test on
    rank-local data. A rank that skips it is one collective behind the others, as after a
    ``continue`` before it. Branches that leave the loop are the exits the rule already reads."""
    for branch in model.index.branches:
        if type(branch) is not cst.If or model.ranks.is_rank_dependent(branch.test):
            continue
        if _leaves(model, branch):
            continue  # `continue`/`break`/`return`/`raise` in a branch: an exit, read as one
        # (checkpoint calls communicate only under some backends: AL302 reads them)
        then_kinds = _every_backend_collectives(model, branch.body) - _BACKEND_DEPENDENT
        other_kinds = (_every_backend_collectives(model, branch.orelse) if branch.orelse is not None else set()) \
            - _BACKEND_DEPENDENT
        if then_kinds == other_kinds or not (then_kinds or other_kinds):
            continue
        if not model.rank_data.varies(branch.test) or _structural(branch.test) or not _reads_values(model, branch.test):
            continue
        behind = model.rank_data.exit_behind(branch.test)
        if behind is not None and _counter(model, behind[0], branch.test) and _reported_exit(model, behind[1]):
            continue  # a counter behind an earlier exit this rule reports: one cause, one finding
        if model.under_rank_condition(branch) or not model.runs_on_every_rank(model.scope_of(branch)):
            continue  # code only some ranks run: its collectives are AL301's
        side, kinds = (branch.body, then_kinds - other_kinds) if then_kinds - other_kinds \
            else (branch.orelse, other_kinds - then_kinds)
        collective = next((c for c in model.calls_in(side) if _every_backend_collectives(model, c) & kinds), None)
        if collective is None:
            continue
        held = "holds" if side is branch.body else "does not hold"
        why = f"`{model.code(branch.test)}`, computed from this rank's own data"
        yield Finding(collective, f"`{shorten(model.code(collective.func))}(...)` runs only where {why}, {held}; a rank "
                                  f"that skips it is one collective behind the others, which block or pair it with "
                                  f"the wrong call. Decide together (`accelerator.reduce`/`gather` the test) or run "
                                  f"it on every rank",
                      evidence=((branch.test, f"the branch depends on {why}"),
                                (collective, f"`{shorten(model.code(collective.func))}(...)`: a collective every rank "
                                             f"must join")))


def _structural(test: cst.BaseExpression) -> bool:
    """A test on the shape of rank-local data, not its values: ``labels is not None``,
    ``"mask" in batch``, ``isinstance(out, tuple)``, ``hasattr(out, "logits")``. Every rank's
    batches come from the same collate function and its model's outputs from the same code, so
    such tests agree across ranks (unknown, at least: no finding)."""
    if type(test) is cst.BooleanOperation:
        return _structural(test.left) and _structural(test.right)
    if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        return _structural(test.expression)
    if type(test) is cst.Comparison and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if type(target.operator) in (cst.Is, cst.IsNot):
            return type(target.comparator) is cst.Name and target.comparator.value == "None"
        if type(target.operator) in (cst.In, cst.NotIn):
            return type(test.left) is cst.SimpleString
    if type(test) is cst.Call and type(test.func) is cst.Name:
        return test.func.value in ("isinstance", "hasattr", "callable")
    return False


_VALUE_CHECKS = frozenset({"torch.isnan", "torch.isinf", "torch.isfinite", "math.isnan", "math.isinf",
                           "math.isfinite", "numpy.isnan", "numpy.isinf", "numpy.isfinite"})


def _reads_values(model: FileModel, test: cst.BaseExpression) -> bool:
    """The test reads the values of rank-local data, not only whether it is there: an ordering
    comparison (`loss.item() > 10`) or a NaN/Inf check (`torch.isnan(loss)`, `loss.isnan()`). A
    list's truthiness or a key test (`if errors:`, `"xyz" in outputs`) follows the shape of what
    every rank computes alike."""
    for node in model.index.walk(test):
        if type(node) is cst.ComparisonTarget and type(node.operator) in (
                cst.LessThan, cst.LessThanEqual, cst.GreaterThan, cst.GreaterThanEqual):
            return True
        if type(node) is cst.Call:
            if (model.index.imports.qualify_expr(node.func) or "") in _VALUE_CHECKS:
                return True
            if type(node.func) is cst.Attribute and node.func.attr.value in ("isnan", "isinf", "isfinite"):
                return True
    return False


def _leaves(model: FileModel, branch: cst.If) -> bool:
    """A ``break``/``continue``/``return``/``raise`` (or exit call) anywhere in the ``if``'s
    branches, outside nested loops and functions."""
    for node in model.index.walk(branch):
        if isinstance(node, (cst.Break, cst.Continue)) and model.enclosing_loop(node) is model.enclosing_loop(branch):
            return True
        if isinstance(node, (cst.Return, cst.Raise)) and model.scope_of(node) is model.scope_of(branch):
            return True
    return False


def _skipped_by_the_exception(model: FileModel, node: cst.CSTNode, loop) -> bool:
    """``node`` is in an ``except`` handler (inside ``loop``) whose ``try`` body runs a collective:
    the rank that raised skipped what of that body was left (``try: loss = model(batch);
    accelerator.backward(loss) except RuntimeError: continue``), the others run it."""
    for parent in model.ancestors(node):
        if parent is loop:
            return False
        if isinstance(parent, cst.ExceptHandler):
            tried = model.index.parents.get(parent)
            if not isinstance(tried, cst.Try):
                return False
            # collectives on every backend (a forward alone is one under FSDP and ZeRO-3, but
            # under DDP only its first call in `no_grad` syncs the buffers); a handler that runs
            # them itself (`except ...: broadcast(flag); continue`) keeps the ranks in step
            skipped, replayed = _every_backend_collectives(model, tried.body), _every_backend_collectives(model, parent)
            return bool(skipped) and not skipped <= replayed
    return False


def _every_backend_collectives(model: FileModel, node: cst.CSTNode) -> set[str]:
    kinds = set()
    for call in model.calls_in(node):
        kind = model.op_kind(call) or ("BACKWARD" if model.performs(call, "BACKWARD") else None)
        if kind is not None:
            kinds.add(kind)
    return kinds


def _exit_kind(model: FileModel, node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Break):
        return "break"
    if isinstance(node, cst.Continue):
        return "continue"
    if isinstance(node, cst.Return):
        return "return"
    return None  # raise / sys.exit end the rank with an error: the launcher tears the others down


def _is_collective(model: FileModel, call: cst.Call) -> bool:
    if model.op_kind(call) is not None or model.performs(call, "BACKWARD"):
        return True
    value = model.value_at(call.func)
    return value is not None and value.kind == "model" and value.prepared == YES


def _counter(model: FileModel, name: str, where: cst.CSTNode) -> bool:
    """``name`` is a step counter in ``where``'s function: every rank advances it by the same
    constant (``step += 1``) and it is bound otherwise only to a literal (``step = 0``), so it
    differs between ranks only by the passes a rank left early, not by its data."""
    scope = model.scope_of(where)
    root = scope.body if isinstance(scope, cst.FunctionDef) else scope
    advanced = False
    for node in model.index.walk(root):
        if isinstance(node, cst.AugAssign) and model.code(node.target) == name:
            if not isinstance(node.value, cst.Integer):
                return False
            advanced = True
        elif isinstance(node, (cst.Assign, cst.AnnAssign)) and any(model.code(t) == name for t in (
                [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target])):
            if not isinstance(node.value, cst.Integer):
                return False
    return advanced


def _reported_exit(model: FileModel, exit_node: cst.CSTNode, depth: int = 0) -> bool:
    """``exit_node`` (a ``continue``/``break`` some ranks take) is one the rule reports itself:
    in a loop with collectives that every rank runs, on a rank-local reason. A value that falls
    behind because of it adds no second cause: on the passes that skip no collective the
    counters still agree at every collective the ranks pair."""
    loop = model.enclosing_loop(exit_node)
    if loop is None or depth > 3 or not _has_collectives(model, loop):
        return False
    if model.rank_guard_of(loop) is not None or not model.runs_on_every_rank(model.scope_of(loop)):
        return False
    if isinstance(exit_node, cst.Continue):
        body = list(model.index.walk(loop.body))
        index = next((i for i, n in enumerate(body) if n is exit_node), None)
        if index is None or not (any(isinstance(later, cst.Call) and _is_collective(model, later)
                                     for later in body[index + 1:]) or _skipped_by_the_exception(model, exit_node, loop)):
            return False
    return _rank_local_reason(model, exit_node, loop, depth + 1) is not None


def _has_collectives(model: FileModel, loop) -> bool:
    return any(_is_collective(model, c) for c in model.calls_in(loop.body))


def _rank_local_reason(model: FileModel, node: cst.CSTNode, loop, depth: int = 0) -> tuple[cst.CSTNode, str] | None:
    """Why the exit is rank-local: the ``if`` test or ``except`` clause that leads to it, and
    what makes it differ between ranks."""
    for parent in model.ancestors(node):
        if parent is loop:
            return None
        if isinstance(parent, cst.ExceptHandler):
            kind = model.code(parent.type) if parent.type is not None else "any exception"
            return parent, f"an exception (`except {kind}`) on this rank"
        if isinstance(parent, (cst.If, cst.While)) and parent is not loop:
            test = parent.test
            if model.ranks.is_rank_dependent(test):
                return None  # a rank predicate: AL301 reports where the other ranks then wait
            if model.rank_data.varies(test):
                behind = model.rank_data.exit_behind(test)
                attribute = model.rank_data.attribute_behind(test)
                if attribute is not None and behind is None:
                    through = "" if model.code(test) == attribute else f" (through `{attribute}`)"
                    return test, (f"`{model.code(test)}`{through}, which a method of its class sets on some ranks "
                                  f"only,")
                if behind is not None:
                    name, left = behind
                    if _counter(model, name, test) and _reported_exit(model, left, depth):
                        return None  # one cause, reported where it is: that earlier exit
                    return test, (f"`{model.code(test)}`, and `{name}` falls behind on a rank that left an "
                                  f"earlier pass early (line {model.line_of(left)})")
                return test, f"`{model.code(test)}`, computed from this rank's own data"
    return None
