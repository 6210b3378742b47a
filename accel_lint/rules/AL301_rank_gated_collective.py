from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..collectives import CKPT, DL_ITER, END
from ..model import FileModel
from .base import Finding, Rule, describe_guard, quote


class RankGatedCollective(Rule):
    """A collective that only some ranks reach.

    ## What it does
    Counts, per rank class (main, local main, other ranks, last, `process_index == k`),
    the collectives each function executes along every path -- `wait_for_everyone`,
    `gather`, `gather_for_metrics`, `gather_object`, `reduce`, `broadcast`,
    `pad_across_processes`, `check_trigger`, `accelerator.backward`, the
    `torch.distributed` primitives, and same-file helpers that perform them -- and flags
    the first op some classes execute and others do not: a collective under
    `if accelerator.is_main_process:`, after `if not accelerator.is_main_process: return`,
    inside an `@accelerator.on_main_process` function, or in one branch only. A loop whose
    last statement leaves it on a rank-dependent test (`if accelerator.is_main_process and
    early_stop(...): break` at the end of the epoch, or a main-process block that ends in
    `if patience >= 5: break` on a counter only that block keeps) is flagged at the first
    collective of its body: the ranks that stay run the next pass and wait there for the ones
    that left.
    Iterating a prepared loader built with `DataLoader(..., shuffle=True)` (a `for` over it,
    or `next(iter(loader))` for a sample batch) counts: each `iter()` broadcasts rank 0's
    sampler generator, on every backend.
    Balanced branches (`if main: work(); wait() else: wait()`) and uniform conditions
    (`sync_gradients`, step counters, `num_processes`, CLI arguments, gathered values) pass,
    and so do turns (`for i in range(dist.get_world_size()): if i == dist.get_rank(): ...`),
    where every rank takes the branch once.

    ## Why is this bad?
    A collective completes only when every rank calls it. The ranks that skip it run on
    into the next collective, or exit, while the others wait until the process-group
    timeout: 10 minutes on NCCL, 30 on gloo, with a watchdog message that names neither
    the line nor the missing rank.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al301_*`):
    the main-only gather hung under DDP, FSDP1/2 and ZeRO-2/3, also without the guard.

    ## Example
    ```python
    if accelerator.is_main_process:
        preds = accelerator.gather_for_metrics(preds)
        metric.add_batch(predictions=preds, references=refs)
    ```

    ## Use instead
    ```python
    preds = accelerator.gather_for_metrics(preds)
    if accelerator.is_main_process:
        metric.add_batch(predictions=preds, references=refs)
    ```
    """

    code = "AL301"
    name = "rank-gated-collective"
    severity = "error"
    summary = "a collective runs on some ranks only; the other ranks never reach it and the job hangs"
    scope = "distributed"

    VALID = [
        # each rank takes its turn: `i == rank` holds once per rank in a loop over the process
        # count, so the barrier in the helper is matched by the other ranks' turns
        """\
        import torch.distributed as dist
        from accelerate import Accelerator
        accelerator = Accelerator()
        def rebuild_loader(epoch):
            loader = make_loader(epoch)
            accelerator.wait_for_everyone()
            return loader
        for epoch in range(3):
            for i in range(dist.get_world_size()):
                if i == dist.get_rank():
                    loader = rebuild_loader(epoch)
        """,
        # rank 0 fails the job when the data is missing: the launcher stops the ranks at the barrier
        """\
        import os
        import torch.distributed as dist
        def check_inputs(folder):
            if not os.path.isdir(folder):
                if dist.get_rank() == 0:
                    raise FileNotFoundError(folder)
                dist.barrier()
        """,
        # an unshuffled loader synchronizes no generator: the main process may iterate it alone
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        val_dl = DataLoader(val_set, batch_size=8, shuffle=False)
        model, val_dl = accelerator.prepare(model, val_dl)
        if accelerator.is_main_process:
            preview = next(iter(val_dl))
        """,
        """
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(10):
    for batch in loader:
        accelerator.backward(model(batch).sum())
        optimizer.step()
    if accelerator.is_main_process and stopper(epoch):
        accelerator.set_trigger()  # the main process decides; every rank leaves together
    if accelerator.check_trigger():
        break
""",
        # the main process fills each partition's cache first, then the others read it: each
        # rank runs `setup()` (a barrier per partition) and the barrier between, in another order
        """\
        from accelerate import Accelerator
        class Cells:
            def __init__(self, accelerator, partitions):
                self.accelerator = accelerator
                self.partitions = partitions
                if accelerator.is_main_process:
                    self.setup()
                accelerator.wait_for_everyone()
                if not accelerator.is_main_process:
                    self.setup()
            def setup(self):
                for partition in range(self.partitions):
                    if self.accelerator.is_main_process:
                        self.load(partition)
                    self.accelerator.wait_for_everyone()
                    if not self.accelerator.is_main_process:
                        self.load(partition)
            def load(self, partition):
                self.close()
                self.current = partition
                if partition is not None:
                    print("opening", partition)
                    return True
                return False
            def close(self):
                self.current = None
        Cells(Accelerator(), 4)
        """,
        # a split barrier (rank 0 first, the others after it) with a check between the halves
        # that raises: the barriers go unmatched only on the way to the crash, which ends the job
        """\
        import torch.distributed as dist
        def load_index(path, cache=None):
            if dist.get_rank() != 0:
                dist.barrier()
            index = build_index(path)
            if cache is not None:
                index = index.restricted_to(cache)
            if len(index) < 2:
                raise ValueError(f"{path}: too few entries")
            if dist.get_rank() == 0:
                dist.barrier()
            return index
        """,
        # balanced barriers (docs/source/concept_guides/deferring_execution.md)
        """
from accelerate import Accelerator
accelerator = Accelerator()
if accelerator.is_main_process:
    load()
else:
    accelerator.wait_for_everyone()
if not accelerator.is_main_process:
    load()
else:
    accelerator.wait_for_everyone()
""",
        # collective after the guarded block; uniform conditions
        """
from accelerate import Accelerator
accelerator = Accelerator()
for step, batch in enumerate(dl):
    if accelerator.sync_gradients and step % 10 == 0:
        accelerator.wait_for_everyone()
    if accelerator.num_processes > 1:
        losses = accelerator.gather(loss)
if accelerator.is_main_process:
    print("done")
preds = accelerator.gather_for_metrics(preds)
""",
        # a condition on a gathered value is uniform
        """
from accelerate import Accelerator
accelerator = Accelerator()
ppl = accelerator.gather_for_metrics(loss).mean()
if best > ppl:
    accelerator.wait_for_everyone()
""",
    ]
    INVALID = [
        # the main process's block ends in an early stop on a counter only it keeps: it leaves the
        # epoch loop, the others wait in the next epoch's backward
        """\
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        patience, best = 0, 0.0
        for epoch in range(100):
            for batch in loader:
                accelerator.backward(model(batch).sum())  # expect: AL301
                optimizer.step()
            score = evaluate(model)
            if accelerator.is_main_process:
                if score > best:
                    best, patience = score, 0
                else:
                    patience += 1
                if patience >= 5:
                    break
        """,
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        val_dl = DataLoader(val_set, batch_size=8, shuffle=True)
        model, val_dl = accelerator.prepare(model, val_dl)
        if accelerator.is_main_process:
            preview = next(iter(val_dl))  # expect: AL301
            for batch in val_dl:  # expect: AL301
                log_images(model(batch))
        """,
        """
from accelerate import Accelerator
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(10):
    for batch in loader:
        accelerator.backward(model(batch).sum())  # expect: AL301
        optimizer.step()
    if accelerator.is_main_process and stopper(epoch):
        break  # the main process leaves; the others wait in the next epoch's backward
""",
        # a gating decorator on an accelerator a function is handed: known by that use
        """\
        def train(acc, model, loader):
            @acc.on_main_process
            def report(metrics):
                acc.wait_for_everyone()  # expect: AL301
                print(metrics)
            for batch in loader:
                acc.backward(model(batch).sum())
            report({"done": True})
        """,
        """
from accelerate import Accelerator
accelerator = Accelerator()
if accelerator.is_main_process:
    preds = accelerator.gather_for_metrics(preds)  # expect: AL301
""",
        # early exit, and a helper under a guard
        """
import torch.distributed as dist
def evaluate(model):
    return dist.all_reduce(model.loss)
def main(accelerator):
    if dist.get_rank() == 0:
        evaluate(model)  # expect: AL301
    if not accelerator.is_main_process:
        return
    accelerator.wait_for_everyone()  # expect: AL301
""",
        # `or` with a uniform term still diverges
        """
from accelerate import Accelerator
accelerator = Accelerator()
@accelerator.on_main_process
def log_all(x):
    return accelerator.gather(x)  # expect: AL301
""",
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for divergence in model.divergences:
            op = divergence.op
            if op.kind in (CKPT, END) or _is_check_trigger(op):
                continue  # checkpoints: AL302; end_training: AL306; check_trigger: AL304
            yield Finding(
                op.node,
                f"{describe_op(model, op)} runs {describe_guard(model, op.guard)}; the other ranks never reach it "
                f"and the job hangs until the process-group timeout",
                evidence=tuple(model.guard_evidence(op.guard)),
            )


def _is_check_trigger(op) -> bool:
    func = op.origin.func
    return isinstance(func, cst.Attribute) and func.attr.value == "check_trigger"


def describe_op(model: FileModel, op) -> str:
    if op.kind == DL_ITER:
        # the loop or iter() starts a shuffled prepared loader: rank 0 broadcasts its sampler seed
        loader = f" `{model.code(op.origin.args[0].value)}`" if op.origin.args else ""
        how = f"iterating the shuffled prepared loader{loader} (it broadcasts rank 0's sampler seed)"
        if not op.chain:
            return how
        return f"`{' → '.join(name.split('.')[-1] + '()' for name in op.chain)}`, {how},"
    origin = model.code(op.origin.func) + "()"
    if not op.chain:
        return quote(model.code(op.node), 70)
    chain = " → ".join(f"{name.split('.')[-1]}()" for name in op.chain)
    return f"`{chain} → {origin}`"
