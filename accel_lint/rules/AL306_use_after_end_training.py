from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..collectives import CKPT, NOT_OPS
from ..model import FileModel, last_attr
from ..model.names import dotted_name
from .base import Finding, Rule


class UseAfterEndTraining(Rule):
    """A collective after `accelerator.end_training()` or `destroy_process_group()`.

    ## What it does
    Flags a collective (`wait_for_everyone`, `gather`, `save_state`, `reduce`, the
    `torch.distributed` primitives, helpers that perform them) that runs after
    `accelerator.end_training()` or `torch.distributed.destroy_process_group()` later in the
    same function: in the statements that follow it in its block and in the enclosing blocks.
    A call that ends training counts too: a function whose last collective is `end_training()`,
    and a method of a class (of this module or another of the tree) whose last collective is
    (`trainer.train()` of a trainer class that ends the run). Not flagged: work that does not communicate (`accelerator.print`, `accelerator.save`,
    plain file I/O); a collective in a different branch of the same `if`.

    ## Why is this bad?
    `end_training()` destroys the calling rank's process group; the next collective raises
    `ValueError: Default process group has not been initialized` after the whole training
    run (Accelerate's official `no_trainer` examples shipped with this order). A checkpoint
    call (`save_state`, `get_state_dict`) communicates only under FSDP and DeepSpeed, and
    `save_state` also with automatic checkpoint naming (it waits for the other ranks): under
    plain DDP it saves without the process group, and the message says so.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al306_*`): a
    gather after `end_training()` raised `ValueError: Default process group has not been
    initialized` on every multi-process backend.

    ## Example
    ```python
    accelerator.end_training()
    accelerator.wait_for_everyone()
    accelerator.save_state("final")
    ```

    ## Use instead
    ```python
    accelerator.wait_for_everyone()
    accelerator.save_state("final")
    accelerator.end_training()
    ```
    """

    code = "AL306"
    name = "use-after-end-training"
    severity = "error"
    summary = "a collective after end_training()/destroy_process_group(): the process group is gone"
    scope = "distributed"

    VALID = [
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        def mean_loss(total, count, ready):
            if not ready:
                accelerator.end_training()
                raise RuntimeError("nothing to report")
            return accelerator.reduce(total / count, reduction="mean")
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        accelerator.wait_for_everyone()
        accelerator.end_training()
        accelerator.print("done")
        accelerator.save(state, "final.pt")
        """,
    ]
    INVALID = [
        # a helper of this file, and a method of an object made here, that wait for the others
        """\
        from accelerate import Accelerator
        class Evaluator:
            def __init__(self, accelerator):
                self.accelerator = accelerator
            def run(self):
                self.accelerator.wait_for_everyone()
        def report(accelerator):
            accelerator.wait_for_everyone()
        accelerator = Accelerator()
        evaluator = Evaluator(accelerator)
        accelerator.end_training()
        report(accelerator)  # expect: AL306
        evaluator.run()  # expect: AL306
        """,
        """\
        from accelerate import Accelerator
        def main():
            accelerator = Accelerator()
            for epoch in range(3):
                train(accelerator)
            accelerator.end_training()
            accelerator.wait_for_everyone()  # expect: AL306
            if accelerator.is_main_process:
                print("saving")
            accelerator.save_state("final")  # expect: AL306
        """,
        """\
        import torch.distributed as dist
        def run():
            dist.init_process_group("gloo")
            dist.destroy_process_group()
            dist.barrier()  # expect: AL306
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for end in model.index.calls:
            direct = (last_attr(end.func) or "") in ("end_training", "destroy_process_group") and \
                model.op_kind(end) == "END"
            if not direct and not _helper_ends_training(model, end):
                continue
            statement = model.statement_of(end)
            what = model.code(end.func)
            for later in _statements_after(model, statement):
                for call in model.calls_in(later):
                    kind = _collective_of(model, call)
                    if kind is None or kind == "END":
                        continue
                    # a checkpoint call communicates only under FSDP and DeepSpeed (and, for
                    # `save_state`, with automatic checkpoint naming): under DDP it saves alone
                    effect = ("under FSDP and DeepSpeed (and with automatic checkpoint naming) it needs the other "
                              "ranks and raises" if kind == CKPT else "it raises")
                    yield Finding(call, f"`{model.code(call.func)}()` runs after `{what}()` (line {model.line_of(end)}), which "
                                        f"destroyed the process group: {effect} `Default process group has not "
                                        f"been initialized`; move `{what}()` after the last collective",
                                  evidence=((end, f"`{what}()` destroys the process group here" if direct else
                                                  f"`{what}()` ends with `end_training()`, which destroys the process "
                                                  f"group"),))


def _collective_of(model: FileModel, call: cst.Call) -> str | None:
    """The op kind of ``call``, or of the first collective of the function it runs: of this
    module (a function, or a method of an instance made here), or of another module of the tree
    that says so."""
    kind = model.op_kind(call)
    if kind is not None:
        return kind
    performed = _collectives_run_by(model, call, model.index.resolve_call(call) or model.instance_method(call))
    return performed[0] if performed else None


def _collectives_run_by(model: FileModel, call: cst.Call, target: cst.FunctionDef | None) -> list[str]:
    """The collective kinds, in order, of the function ``call`` runs: ``target`` of this module,
    else what another module of the tree says of the name called."""
    if target is not None:
        performed = model.ops.exported_ops(target)
    else:
        name = dotted_name(call.func)
        performed = model.external.get(name, ()) if name is not None else ()
    return [kind for kind, _ in performed if kind not in NOT_OPS]


def _helper_ends_training(model: FileModel, call: cst.Call) -> bool:
    """``call`` runs a function (of this module, or of another of the tree that says so) whose
    last collective destroys the process group (``def finish(acc): acc.log(...);
    acc.end_training()``)."""
    if model.ending_method_called(call):
        return True  # `trainer.train()` of a trainer class whose `train` ends the run
    kinds = _collectives_run_by(model, call, model.index.resolve_call(call))
    return bool(kinds) and kinds[-1] == "END"


def _statements_after(model: FileModel, statement: cst.CSTNode):
    """The statements that run after ``statement``: its later siblings, then those after each
    enclosing compound statement, up to the function. A loop stops the walk (its next
    iteration is another story), and the other branch of an ``if`` is never "after"."""
    current = statement
    while True:
        parent = model.index.parents.get(current)
        if parent is None:
            return
        if isinstance(parent, (cst.Module, cst.IndentedBlock)):
            siblings = list(parent.body)
            if current in siblings:
                for later in siblings[siblings.index(current) + 1:]:
                    yield later
                    if _leaves_block(later):
                        return  # `raise`/`return`/`break`/`continue`: nothing after this block runs next
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.For, cst.While)):
            return
        current = parent


def _leaves_block(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and any(
        isinstance(small, (cst.Raise, cst.Return, cst.Break, cst.Continue)) for small in statement.body)
