from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from .base import Finding, Rule, guard_statement_fix

class UnguardedTracker(Rule):
    """Experiment-tracker calls that every rank makes.

    ## What it does
    In code that runs on every rank of an Accelerate program (outside rank guards and guarded
    helpers), flags `wandb.init/log/config.update`, `SummaryWriter(...)` (torch or
    tensorboardX) and its `add_*` methods, `mlflow.start_run/log_*`, `comet_ml.Experiment`,
    `neptune.init_run`, `aim.Run`, `clearml.Task.init` and `swanlab.init`, and calls of functions
    and classes of other modules of the project that start such a run whenever they run (a
    `WandbLogger` class whose `__init__` calls `wandb.init`).
    Not flagged: `accelerator.init_trackers/log/get_tracker` (main-process only by design);
    calls under `if accelerator.is_main_process:` or in `@accelerator.on_main_process`
    functions; calls under `if self.writer is not None:` where every binding of `self.writer`
    that the other ranks run is `None` (the writer is made under a main-process test); W&B runs that log per rank on purpose (`mode="shared"`, or `group=` with the
    rank in `name=`); logging under a test of the tracker's current run (`if wandb.run is not
    None:`, `if mlflow.active_run():`), which holds only where a run was started (HF's
    `WandbCallback` starts it on the main process); `wandb.finish()` and `mlflow.end_run()`, which
    end the rank's own run or do nothing where none was started.

    ## Why is this bad?
    Every rank creates its own run or event file (N duplicate runs in the dashboard), an
    interactive W&B login prompt can block the non-main ranks forever, and rank-local values
    are logged as if they were the global metric.

    ## Example
    ```python
    wandb.init(project="finetune")
    for step, batch in enumerate(train_dl):
        ...
        wandb.log({"loss": loss.item()})
    ```

    ## Use instead
    ```python
    accelerator = Accelerator(log_with="wandb")
    accelerator.init_trackers("finetune")
    for step, batch in enumerate(train_dl):
        ...
        accelerator.log({"loss": loss.item()}, step=step)
    ```

    ## Fix safety
    Unsafe: a call that is a statement of its own is wrapped in `if accelerator.is_main_process:`
    (a logged value may then be computed on every rank for nothing, and a run object assigned
    to a name would be unbound elsewhere, so assignments get no fix).
    It assumes the other ranks need no result of the call; the accelerator it names must be
    bound on every path to the call.
    """

    code = "AL402"
    name = "unguarded-tracker"
    severity = "warning"
    summary = "a wandb/tensorboard/mlflow call that every rank makes (duplicate runs, blocked logins)"

    VALID = [
        # the flag is switched off by hand in every function that reads it: those calls never run
        """\
        import wandb
        from accelerate import Accelerator
        def main(args):
            accelerator = Accelerator()
            use_wandb = False  # args.use_wandb
            if accelerator.is_main_process and use_wandb:
                wandb.init(project="p")
            use_wandb = False
            def save():
                if args.save_model and use_wandb:
                    wandb.save("model.pt")
            for step in range(10):
                save()
        """,
        # the writer exists only on the main process (the else branch binds None there), so a
        # method's `is not None` test is a rank guard
        """\
        from accelerate import Accelerator
        from torch.utils.tensorboard import SummaryWriter
        class Trainer:
            def __init__(self, model, use_tb):
                self.accelerator = Accelerator()
                self.model = self.accelerator.prepare(model)
                if use_tb and self.accelerator.is_main_process:
                    self.writer = SummaryWriter("runs")
                else:
                    self.writer = None
            def train(self, loader):
                for step, batch in enumerate(loader):
                    loss = self.model(batch)
                    self.accelerator.backward(loss)
                    if self.writer is not None:
                        self.writer.add_scalar("loss", loss.item(), step)
        """,
        # one caller logs from the main process only, the other never logs
        """\
        import wandb
        from accelerate import Accelerator
        def evaluate(model, loader, log_flag=True):
            score = sum(model(batch).mean().item() for batch in loader)
            if log_flag:
                wandb.log({"score": score})
            return score
        accelerator = Accelerator()
        model, loader = accelerator.prepare(build_model(), loader)
        if accelerator.is_main_process:
            wandb.init(project="demo")
        evaluate(model, loader, log_flag=False)
        evaluate(model, loader, log_flag=True if accelerator.is_main_process else False)
        """,
        # the flag the caller passes is a rank predicate, spelled as a conditional expression
        """\
        import wandb
        from accelerate import Accelerator
        def train(model, loader, log_flag):
            for batch in loader:
                loss = model(batch)
                if log_flag:
                    wandb.log({"loss": loss.item()})
        accelerator = Accelerator()
        if accelerator.is_main_process:
            wandb.init(project="demo")
        model, loader = accelerator.prepare(make_model(), make_loader())
        train(model, loader, log_flag=True if accelerator.is_main_process else False)
        """,
        # logs only where a run exists: the trainer's callback started one on the main process
        """\
        import wandb
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        if wandb.run is not None:
            wandb.log({"samples": table})
        """,
        # one W&B run per rank in a group: the run's name is extended with the process index
        """\
        import wandb
        from accelerate import Accelerator
        accelerator = Accelerator()
        run_name = settings.name
        run_name += "_" + str(accelerator.process_index)
        wandb.init(project="runs", group=settings.name, name=run_name)
        """,
        # the main-process flag written as a call: a test of the flag all the same
        """\
        import wandb
        from accelerate import Accelerator
        accelerator = Accelerator()
        if accelerator.is_local_main_process():
            wandb.init(project="runs")
        """,
        """\
        import wandb
        from accelerate import Accelerator
        accelerator = Accelerator(log_with="wandb")
        accelerator.init_trackers("finetune")
        if accelerator.is_main_process:
            wandb.init(project="finetune")
            wandb.log({"loss": 1.0})
        accelerator.log({"loss": 1.0}, step=0)
        wandb.init(project="finetune", mode="shared")
        """,
    ]
    INVALID = [
        """\
        import wandb
        from torch.utils.tensorboard import SummaryWriter
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, dl = accelerator.prepare(model, dl)
        wandb.init(project="finetune")  # expect: AL402
        writer = SummaryWriter("runs")  # expect: AL402
        for step, batch in enumerate(dl):
            loss = model(**batch).loss
            wandb.log({"loss": loss.item()})  # expect: AL402
            writer.add_scalar("loss", loss.item(), step)  # expect: AL402
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            what, made_by = _tracker_call(model, call), ()
            if what is None:
                # a function or class of another module that starts a run: `WandbLogger(...)`
                start = model.imported_tracker_start(call)
                if start is not None:
                    what = f"{model.code(call.func)}()"
                    made_by = ((call, f"`{what}` starts a tracker's run whenever it runs: {start}"),)
            if what is None or model.under_rank_condition(call):
                continue
            if what in model.library.tracker_ends:
                continue  # `wandb.finish()`: ends this rank's own run, or does nothing without one
            if what not in model.library.tracker_starts and _only_where_a_run_exists(model, call):
                continue  # `if wandb.run is not None: wandb.log(...)`: logs only where a run was started
            scope = model.scope_of(call)
            if not model.runs_on_every_rank(scope) or _per_rank_on_purpose(model, call) or model.single_process_at(call) or model.rank_undecided_at(call):
                continue
            sole = model.sole_accelerator_in(scope)
            acc = sole or "accelerator"
            yield Finding(call, f"`{what}` runs on every rank: N duplicate runs or event files, and a login prompt "
                                f"can block the other ranks; use `{acc}.init_trackers()`/`{acc}.log()` or guard it "
                                f"with `if {acc}.is_main_process:`",
                          fix=guard_statement_fix(model, call, model.accelerator_for_fix(call), "is_main_process",
                                                  "unsafe"),
                          evidence=(*made_by, (call, "no rank guard around it: every rank runs it")))


def _tracker_call(model: FileModel, call: cst.Call) -> str | None:
    qualified = model.index.imports.qualify_expr(call.func) or ""
    if qualified in model.library.trackers:
        return qualified
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value.startswith("add_"):
        value = model.value_at(func.value)
        origin = value.origin if value is not None else None
        if isinstance(origin, cst.Call) and (model.index.imports.qualify_expr(origin.func) or "") in model.library.tracker_writers:
            return f"{model.code(func.value)}.{func.attr.value}"
    return None


def _only_where_a_run_exists(model: FileModel, call: cst.Call) -> bool:
    """``call`` is in the body of an ``if`` that tests a tracker's current run (``wandb.run is
    not None``, ``if wandb.run:``; the library table's ``tracker-runs``)."""
    child: cst.CSTNode = call
    for parent in model.ancestors(call):
        inside, child = child, parent
        if not (isinstance(parent, cst.If) and inside is parent.body):
            continue
        test = parent.test
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 \
                and isinstance(test.comparisons[0].operator, cst.IsNot) and model.code(test.comparisons[0].comparator) == "None":
            test = test.left
        if isinstance(test, cst.Call) and not test.args:
            test = test.func  # `mlflow.active_run()`
        if (model.index.imports.qualify_expr(test) or "") in model.library.tracker_runs:
            return True
    return False


def _per_rank_on_purpose(model: FileModel, call: cst.Call) -> bool:
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    mode = keywords.get("mode")
    if isinstance(mode, cst.SimpleString) and mode.evaluated_value == "shared":
        return True
    # a run per rank in one group: the run's name is computed from the rank (directly, or
    # through a name built from it: `name += str(accelerator.process_index)`)
    name = keywords.get("name")
    return "group" in keywords and name is not None and (model.reads_rank(name) or model.rank_data.varies(name))
