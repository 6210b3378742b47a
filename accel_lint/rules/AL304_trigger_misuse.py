from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from .base import Finding, Rule, describe_guard


class TriggerMisuse(Rule):
    """`check_trigger()` on some ranks only, or a `set_trigger()` nothing checks.

    ## What it does
    (A, error) `accelerator.check_trigger()` that only some ranks reach: under a rank guard,
    after a rank-dependent early exit, or in a helper only called so. (B, warning)
    `accelerator.set_trigger()` in a function where no `check_trigger()` follows it: not in
    the same loop, not in an enclosing loop, not later in the function.
    Not flagged: `check_trigger()` under `if accelerator.sync_gradients:` or another uniform
    condition; `set_trigger()` in an inner loop checked in the enclosing loop; `set_trigger()`
    in a function whose every caller in the file checks the trigger (an epoch function that
    sets it and returns, called from the loop over epochs that checks it).

    ## Why is this bad?
    `check_trigger()` is an all-reduce: called on a subset of ranks it deadlocks. A
    `set_trigger()` that is never checked leaves the flag set until some unrelated, later
    `check_trigger()` fires and ends training at the wrong moment.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al304_*`): a
    main-only `check_trigger()` hung every multi-process backend.

    ## Example
    ```python
    if accelerator.is_main_process:
        if accelerator.check_trigger():
            break
    ```

    ## Use instead
    ```python
    if accelerator.check_trigger():   # every rank, every step
        break
    ```
    """

    code = "AL304"
    name = "trigger-misuse"
    severity = "error"
    summary = "check_trigger() on some ranks only (deadlock), or set_trigger() that nothing checks"

    VALID = [
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        for epoch in range(10):
            for batch in dl:
                if loss_is_nan(batch):
                    accelerator.set_trigger()
            if accelerator.check_trigger():
                break
        """,
        # the epoch function sets the trigger and leaves; the loop over epochs that calls it checks
        """\
        from accelerate import Accelerator
        class Runner:
            def __init__(self):
                self.accelerator = Accelerator()
            def train_epoch(self, loader):
                for batch in loader:
                    self.step += 1
                    if self.step >= self.max_steps:
                        self.accelerator.set_trigger()
                        break
            def train(self, loader):
                for _ in range(self.epochs):
                    self.train_epoch(loader)
                    if self.accelerator.check_trigger():
                        break
        """,
    ]
    INVALID = [
        # a caller that never checks it is no better
        """\
        from accelerate import Accelerator
        def epoch(accelerator, dl):
            for batch in dl:
                if bad(batch):
                    accelerator.set_trigger()  # expect: AL304
                    break
        def train(accelerator, dl):
            for _ in range(10):
                epoch(accelerator, dl)
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        for step in range(100):
            if accelerator.is_main_process:
                if accelerator.check_trigger():  # expect: AL304
                    break
        """,
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        for step in range(100):
            # `and` evaluates check_trigger() only where is_main_process is true
            if accelerator.is_main_process and accelerator.check_trigger():  # expect: AL304
                break
        """,
        """\
        from accelerate import Accelerator
        def train(accelerator, dl):
            for batch in dl:
                if bad(batch):
                    accelerator.set_trigger()  # expect: AL304
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for divergence in model.divergences:
            op = divergence.op
            func = op.origin.func
            if isinstance(func, cst.Attribute) and func.attr.value == "check_trigger":
                yield Finding(op.node, f"`check_trigger()` is an all-reduce and runs {describe_guard(model, op.guard)}; "
                                       f"the other ranks never join it and the job deadlocks; call it on every rank "
                                       f"at the same point", evidence=tuple(model.guard_evidence(op.guard)))
        for call in model.index.calls:
            func = call.func
            if not (isinstance(func, cst.Attribute) and func.attr.value == "set_trigger"
                    and model.is_accelerator(func.value)):
                continue
            scope = model.scope_of(call)
            if not any(_is_check(model, c) for c in model.calls_in(scope)) and not _checked_by_callers(model, scope):
                yield Finding(call, "`set_trigger()` has no `check_trigger()` after it in this function: the flag "
                                    "stays set and fires at some later, unrelated `check_trigger()`; check it in "
                                    "the loop (`if accelerator.check_trigger(): break`)", severity="warning",
                              evidence=((scope, "no `check_trigger()` runs in this function after it"),))


def _checked_by_callers(model: FileModel, scope) -> bool:
    """The function is called (in this file) only from functions that check the trigger: the
    epoch function sets it and ``break``s, and the loop over epochs that calls it checks."""
    if not isinstance(scope, cst.FunctionDef):
        return False
    sites = model.ops.call_sites(scope)
    return bool(sites) and all(any(_is_check(model, c) for c in model.calls_in(model.scope_of(site))) for site in sites)


def _is_check(model: FileModel, call: cst.Call) -> bool:
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == "check_trigger":
        return True
    return model.performs(call, "ALLREDUCE") and model.index.resolve_call(call) is not None
