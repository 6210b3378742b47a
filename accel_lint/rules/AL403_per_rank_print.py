from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import MAYBE, YES, FileModel, dotted_name
from ..model.names import BUILTIN_NAMES
from .base import Finding, Fix, Rule

_TQDM = {"tqdm.tqdm", "tqdm.auto.tqdm", "tqdm.notebook.tqdm", "tqdm.trange", "tqdm.auto.trange", "tqdm.std.tqdm"}


class PerRankPrint(Rule):
    """`print` and progress bars that every rank runs.

    ## What it does
    In code that runs on every rank of an Accelerate program (outside rank guards and
    guarded helpers, after an accelerator exists), flags the builtin `print(...)` and
    `tqdm(...)`/`trange(...)` without a `disable=` argument.
    Not flagged: a bar given `**options` (the spread may carry `disable=`: unknown); `accelerator.print`; prints whose arguments mention the rank, this rank's
    device (the accelerator's, or a prepared model's) or this process's own id (`os.getpid()`):
    deliberate per-rank debugging; `print(..., file=...)`; prints before the accelerator is
    created; anything under `if accelerator.is_main_process:`; `print` in a file that rebinds
    `builtins.print` (`builtins.print = lambda *args: None` on the other ranks), or that calls a
    function of another module of the tree that does (torchvision's
    `setup_for_distributed(is_master)`), or after the file binds the name `print` itself
    (`print = accelerator.print`); a print in an `except` whose `try` does this rank's own work
    (a loop over its shard, a forward on its batch, work under a rank test), which reports that
    rank's failure.

    ## Why is this bad?
    Every line is printed once per process and progress bars from N ranks overwrite each
    other, which buries the one line that matters. It is cosmetic (severity info), but it
    is also how users first notice that "the script runs N times".

    ## Example
    ```python
    print(f"epoch {epoch}: loss {loss.item():.3f}")
    for batch in tqdm(train_dl):
        ...
    ```

    ## Use instead
    ```python
    accelerator.print(f"epoch {epoch}: loss {loss.item():.3f}")
    for batch in tqdm(train_dl, disable=not accelerator.is_local_main_process):
        ...
    ```

    ## Fix safety
    Safe: `print(...)` -> `accelerator.print(...)` and `disable=not accelerator.is_local_main_process`
    added to the bar, when exactly one accelerator is in scope.
    It assumes that accelerator is bound on every path that reaches the call: a print before
    `accelerator = Accelerator()`, or after an `if` that binds it in one branch only, gets no
    fix (the replacement would raise `UnboundLocalError`). It also assumes every rank would
    print the same text: where an argument differs between ranks (a loss of this rank's
    batches), only the main process's value is left, so the fix is unsafe there.
    """

    code = "AL403"
    name = "per-rank-print"
    severity = "info"
    summary = "print()/tqdm() that every rank runs: the output repeats once per process"

    VALID = [
        # the index of the accelerator's device is the local rank: each rank says which part it tests
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(build_model())
        held_out = accelerator.device.index
        print(held_out)
        """,
        # a nested function reads its enclosing function's `print`, bound to the accelerator's
        """\
        from accelerate import Accelerator
        def main(args):
            accelerator = Accelerator()
            print = accelerator.print
            model, optimizer, loader = accelerator.prepare(args.model, args.optimizer, args.loader)
            def train_loop(epoch):
                print(f"Epoch {epoch}")
                for batch in loader:
                    accelerator.backward(model(batch))
                    optimizer.step()
            train_loop(0)
        """,
        """\
        from accelerate import Accelerator
        from tqdm import tqdm
        accelerator = Accelerator()
        bar_options = {"desc": "train", "disable": not accelerator.is_local_main_process}
        for batch in tqdm(range(10), **bar_options):
            pass
        """,
        """\
        import os
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        print("process", os.getpid(), "started")  # each process's own id
        print = accelerator.print  # the name, rebound: only the main process prints
        print("ready")
        def report(metrics):
            print(metrics)
        report({"loss": 0.1})
        """,
        """\
        import builtins
        from accelerate import Accelerator
        accelerator = Accelerator()
        if not accelerator.is_main_process:
            builtins.print = lambda *args, **kwargs: None
        print("starting")
        """,
        """\
        from accelerate import Accelerator
        from tqdm import tqdm
        print("starting")
        accelerator = Accelerator()
        accelerator.print("once per node")
        if accelerator.is_main_process:
            print("only on the main process")
        print(f"rank {accelerator.process_index} ready")
        print(f"GPU {accelerator.device} done")
        print(accelerator.state)
        device = accelerator.device
        print("using", device)
        model = accelerator.prepare(model)
        print("model on", model.device)
        for batch in tqdm(dl, disable=not accelerator.is_local_main_process):
            pass
        print("to a file", file=log)
        """,
        """\
        from accelerate import Accelerator
        def main(model):
            print("usage: train.py CONFIG")  # before this function's accelerator exists
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            accelerator.print("ready")
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        try:
            if accelerator.is_main_process:
                sample = environment.step(model)
        except Exception as error:
            print("the environment failed:", error)  # on the main process, whose step raised
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(dataset, batch_size=8)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        try:
            model.train()
            for batch in loader:
                accelerator.backward(model(batch).sum())
                optimizer.step()
        except RuntimeError as error:
            print("training failed:", error)  # the rank whose batch raised (out of memory) says so
            raise
        """,
        """\
        from accelerate import Accelerator
        from tqdm import tqdm
        def evaluate(model, batches):
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            shown = tqdm(batches) if accelerator.is_main_process else batches  # one bar
            for batch in shown:
                model(batch)
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        print("loading")  # expect: AL403
        print = accelerator.print
        print("ready")
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        try:
            state = load_checkpoint(model)
        except Exception:
            print("no checkpoint, starting over")  # expect: AL403
        try:
            if accelerator.is_main_process:
                upload(model)
            record_status(model)  # fails on any rank
        except Exception as error:
            print("status update failed:", error)  # expect: AL403
        """,
        """\
        from accelerate import Accelerator
        from tqdm.auto import tqdm
        accelerator = Accelerator()
        model, dl = accelerator.prepare(model, dl)
        for batch in tqdm(dl):  # expect: AL403
            print(model(**batch).loss.item())  # expect: AL403
        """,
        """\
        import torch
        from accelerate import Accelerator
        from tqdm import tqdm


        class Trainer:
            def __init__(self, model, loader):
                self.accelerator = Accelerator()
                self.model, self.loader = self.accelerator.prepare(model, loader)

            def fit(self):
                for batch in self.loader:
                    self.accelerator.backward(self.model(batch).sum())
                self.evaluate(self.loader)

            @torch.no_grad()
            def evaluate(self, loader):
                for batch in tqdm(loader):  # expect: AL403
                    self.model(batch)

            @staticmethod
            def report(rows):
                for row in tqdm(rows):
                    pass
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        order = model.index.call_order
        # where each scope builds its first accelerator (in source order)
        first_accelerator: dict = {}
        for constructor in model.objects.acc_constructors:
            if constructor in order:
                where = model.scope_of(constructor)
                first_accelerator[where] = min(order[constructor], first_accelerator.get(where, order[constructor]))
        print_replaced = model.replaces_builtin_print
        rebinds = _print_rebinds(model) if "print" in model.index.identifiers else []
        for call in model.index.calls:
            kind = _kind(model, call, rebinds)
            if kind is None or model.rank_guard_of(call) is not None:
                continue
            scope = model.scope_of(call)
            if scope in first_accelerator and order[call] < first_accelerator[scope]:
                continue  # before this scope's accelerator exists (`accelerator.print` would be unbound)
            if not model.runs_on_every_rank(scope) or not model.accelerators_visible_in(scope) or model.single_process_at(call) or model.rank_undecided_at(call):
                continue
            if _mentions_rank(model, call) or _under_rank_test(model, call) or _chosen_by_rank(model, call) \
                    or _in_except_handler(model, call):
                continue
            shown = model.sole_accelerator_in(scope) or "accelerator"
            acc = model.accelerator_for_fix(call)  # None where a path reaches the call with it unbound
            if kind == "print":
                if any(a.keyword is not None and a.keyword.value == "file" for a in call.args):
                    continue
                if print_replaced:
                    continue  # `builtins.print = lambda *a: None` on the other ranks: it is their print
                # a value that differs between ranks: printing only the main one's is not the same
                varies = any(model.rank_data.varies(a.value) for a in call.args)
                fix = Fix("unsafe" if varies else "safe", f"use `{acc}.print`",
                          ((call.func, cst.parse_expression(f"{acc}.print")),)) if acc else None
                yield Finding(call, f"`print()` runs on every rank, so the line appears once per process; use "
                                    f"`{shown}.print()`", fix=fix,
                              evidence=tuple(model.launch_evidence(scope)))
            else:
                if any(a.keyword is not None and a.keyword.value == "disable" for a in call.args):
                    continue
                if any(a.star == "**" for a in call.args):
                    continue  # `tqdm(it, **bar_options)`: the spread may carry `disable=` (unknown)
                fix = None
                if acc and not any(a.star for a in call.args):
                    disable = cst.Arg(cst.parse_expression(f"not {acc}.is_local_main_process"), keyword=cst.Name("disable"),
                                      equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
                    args = [*call.args[:-1], call.args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)] if call.args else []
                    fix = Fix("safe", "disable the bar off the local main process",
                              ((call, call.with_changes(args=[*args, disable])),))
                yield Finding(call, f"`{model.code(call.func)}()` draws a progress bar on every rank and the bars "
                                    f"overwrite each other; pass `disable=not {shown}.is_local_main_process`", fix=fix,
                              evidence=tuple(model.launch_evidence(scope)))


def _kind(model: FileModel, call: cst.Call, rebinds: list[cst.AssignTarget]) -> str | None:
    func = call.func
    if isinstance(func, cst.Name) and func.value == "print" and "print" not in model.index.module_functions:
        if model.index.imports.qualify("print") is None and not _print_rebound(model, call, rebinds):
            return "print"
    qualified = model.index.imports.qualify_expr(func) or ""
    if qualified in _TQDM:
        return "tqdm"
    return None


def _print_rebinds(model: FileModel) -> list[cst.AssignTarget]:
    """The assignments to the name ``print`` in the file (``print = accelerator.print``)."""
    return [node for node in model.index.parents if type(node) is cst.AssignTarget
            and type(node.target) is cst.Name and node.target.value == "print"]


def _print_rebound(model: FileModel, call: cst.Call, rebinds: list[cst.AssignTarget]) -> bool:
    """The name ``print`` is bound by the program where ``call`` reads it (``print =
    accelerator.print`` at module level, before a module-level call or anywhere for a call in a
    function; or in the call's own function or one around it): it is not the builtin there."""
    scope = model.scope_of(call)
    for node in rebinds:
        where = model.scope_of(node)
        if type(where) is cst.FunctionDef and (where is scope or where in model.index.enclosing_scopes(scope)):
            return True  # (a nested function reads its enclosing function's binding)
        if type(where) is cst.Module:
            if type(scope) is not cst.Module:
                return True
            if _before(model, node, call):
                return True
    return False


def _before(model: FileModel, node: cst.CSTNode, call: cst.Call) -> bool:
    """``node``'s statement comes before ``call``'s in the module body."""
    positions = {id(stmt): i for i, stmt in enumerate(model.index.module.body)}

    def top(inner: cst.CSTNode) -> int | None:
        return next((positions[id(a)] for a in [inner, *model.ancestors(inner)] if id(a) in positions), None)

    first, second = top(node), top(call)
    return first is not None and second is not None and first < second


def _chosen_by_rank(model: FileModel, call: cst.Call) -> bool:
    """A branch of a conditional expression on a rank predicate (``tqdm(it) if
    accelerator.is_main_process else it``): only some ranks make the call."""
    child: cst.CSTNode = call
    for parent in model.ancestors(call):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)) or isinstance(parent, cst.BaseStatement):
            return False
        if isinstance(parent, cst.IfExp) and child is not parent.test and model.ranks.is_rank_dependent(parent.test):
            return True
        child = parent
    return False


def _in_except_handler(model: FileModel, call: cst.Call) -> bool:
    """In an ``except`` block whose ``try`` does work that is the rank's own: under a rank test
    (``if accelerator.is_main_process: env.reset()``), or on values that differ between ranks
    (a forward on this rank's batch, a loop over its shard): the failure it reports is that
    rank's own, which ``accelerator.print`` would drop. (A ``try`` whose work is the same on
    every rank, ``load_checkpoint(model)``, fails alike on every rank, and its message is
    printed once per process.)"""
    for parent in model.ancestors(call):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if isinstance(parent, cst.ExceptHandler):
            attempt = model.index.parents.get(parent)
            return isinstance(attempt, cst.Try) and _fails_on_one_rank(model, attempt.body)
    return False


def _fails_on_one_rank(model: FileModel, body: cst.CSTNode) -> bool:
    if _works_on_rank_local_data(model, body):
        return True  # (this rank's batch, its forward: what fails there fails on that rank)
    guarded = False
    stack = [body]
    while stack:
        node = stack.pop()
        if type(node) is cst.If and model.ranks.is_rank_dependent(node.test):
            guarded = True
            continue  # (what it runs is one rank's)
        if type(node) is cst.ExceptHandler or isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue  # (runs only after a failure, or not here)
        if type(node) is cst.Call and not _fails_alike(model, node):
            return False
        stack.extend(model.index.children.get(node, ()))
    return guarded


def _works_on_rank_local_data(model: FileModel, body: cst.CSTNode) -> bool:
    """``body`` loops over this rank's shard, or calls something on a value that differs between
    ranks (an argument, or the object whose method it calls: a batch, a forward's output)."""
    stack = [body]
    while stack:
        node = stack.pop()
        if type(node) is cst.ExceptHandler or isinstance(node, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            continue
        if type(node) is cst.For and model.rank_data.varies(node.target):
            return True
        if type(node) is cst.Call:
            receiver = [node.func.value] if isinstance(node.func, cst.Attribute) else []
            if any(model.rank_data.varies(expr) for expr in [*receiver, *(a.value for a in node.args)]):
                return True
        stack.extend(model.index.children.get(node, ()))
    return False


def _fails_alike(model: FileModel, call: cst.Call) -> bool:
    """A call that raises on every rank or on none: a collective, a builtin, a tensor made by
    torch, a move to a device."""
    if model.op_kind(call) is not None:
        return True
    qualified = model.index.imports.qualify_expr(call.func) or dotted_name(call.func) or ""
    if qualified in BUILTIN_NAMES or qualified.startswith(("torch.", "accelerate.utils.")):
        return True
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in ("to", "unsqueeze", "cpu")


def _under_rank_test(model: FileModel, call: cst.Call) -> bool:
    """Under an ``if`` whose test reads a rank somewhere (``if rank == 0 and verbose:``), even
    where the guard as a whole is not decided: for a cosmetic rule, a likely guard is enough
    to stay quiet."""
    for parent in model.ancestors(call):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(parent, (cst.If, cst.While)) and model.reads_rank(parent.test):
            return True
    return False


def _mentions_rank(model: FileModel, call: cst.Call) -> bool:
    """Deliberate per-rank output: the arguments mention the rank or print an accelerator
    object (whose text includes the process index)."""
    for arg in call.args:
        if model.is_accelerator(arg.value) or (isinstance(arg.value, cst.Attribute) and arg.value.attr.value == "state"
                                               and model.is_accelerator(arg.value.value)):
            return True  # (an accelerator's text, and its state's, name the process index and device)
        if model.reads_rank(arg.value) or model.made_by_rank_unique_source(arg.value):
            return True  # (the rank, or this process's own id: `os.getpid()`)
        if any(isinstance(n, (cst.Name, cst.Attribute)) and _is_rank_device(model, n) for n in model.index.walk(arg.value)):
            return True  # each rank has its own device: the line says which rank it is
    return False


def _is_rank_device(model: FileModel, expr: cst.BaseExpression) -> bool:
    """The device of this rank: the accelerator's (``accelerator.device``, a name bound to it), or
    the ``.device`` of a model ``prepare`` placed on it."""
    if model.is_accelerator_device(expr):
        return True
    if isinstance(expr, cst.Attribute) and expr.attr.value == "device":
        # (a result of `prepare` whose kind is not known and that has a device: a module prepare
        # placed; for a cosmetic rule, possibly this rank's device is enough to stay quiet)
        value = model.value_at(expr.value)
        return value is not None and value.prepared in (YES, MAYBE) and value.kind in ("model", None)
    return False
