from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import YES, FileModel, last_attr
from ..model.names import statement_targets
from .base import Finding, Rule

_HORIZONS = ("num_training_steps", "num_warmup_steps", "T_max", "total_steps")


class StepsFromUnpreparedLength(Rule):
    """Loop bounds computed from a loader's length before `prepare` shortened it.

    ## What it does
    Flags the use, as a loop bound or progress total, of a value computed from `len(loader)`
    while the loader was still unprepared and is prepared afterwards: `range(...)` of a loop,
    `tqdm(total=...)`, or a loop-exit comparison (`if step >= max_steps: break`). The value is
    followed through every assignment (`max_steps = epochs * steps_per_epoch`,
    `args.num_train_epochs = ceil(args.max_train_steps / steps_per_epoch)`); a reassignment
    after `prepare` replaces it on every path that runs it, and a flag set together with a
    value (`overrode_max_train_steps = True`) keeps them together, so the canonical script that
    recomputes its step counts after `prepare` is not flagged.
    The same uses are flagged when they divide the length of the *prepared* loader, already
    this rank's share, by `num_processes` again (N times too few epochs), or multiply it by
    `num_processes`; and a step period (`if step % save_every == 0`) built from such a count.
    Also flags (variant B1) a prepared scheduler whose horizon is, on every path, a count of
    this rank's steps computed from a loader's length (`len(train_dl) * epochs` after `prepare`,
    or a pre-`prepare` length divided by `num_processes`): the prepared scheduler steps
    `num_processes` times per optimizer step, so the schedule ends after 1/N of training.
    Also flags (variant B3) a prepared scheduler whose horizon is the very count that ends the
    loop stepping it (`num_training_steps=args.max_steps` and `if step >= args.max_steps:
    break`): that count is this rank's steps, and the prepared scheduler steps `num_processes`
    times per step, so the schedule ends after 1/N of training. The horizon may be that count
    less a constant (`T_max=TOTAL_STEPS - warmup_steps`), and the scheduler one of those a
    prepared `SequentialLR`/`ChainedScheduler` runs.
    Also flags (variant B2) a prepared scheduler whose horizon multiplies such a pre-`prepare`
    step count by `num_processes`: the prepared scheduler already steps `num_processes` times
    per optimizer step, so the horizon is N times too long.
    Also flags (variant B4) a prepared scheduler whose horizon multiplies by the gradient
    accumulation steps the accelerator is built with (`Accelerator(gradient_accumulation_steps=
    args.ga)`, `num_training_steps=max_steps * args.ga`) in a file that trains inside
    `accelerator.accumulate()`: the prepared scheduler skips the micro-steps that do not sync,
    so it counts optimizer steps already.
    Also flags (variant B5) such a prepared scheduler whose horizon is, on every path, a count
    of the loader's batches taken before `prepare` (`len(train_dl) * epochs`) with the
    accumulation steps nowhere in its making: the prepared scheduler steps `num_processes` times
    per optimizer step, so only 1/GA of the horizon passes.
    Also flags (variant B6) a prepared scheduler stepped once per epoch: its `step()` follows a
    whole training pass in the same function (a loop that runs a backward or an optimizer step,
    or a call that trains or is handed the prepared loader) and sits in no loop over a prepared
    loader. The prepared scheduler steps `num_processes` times per call, so step sizes,
    milestones and plateau patience counted in epochs pass N times too fast (not `step(epoch)`,
    which sets the same epoch on each of the N steps).
    Not flagged: the horizon of a scheduler that a file with a training step never steps (it
    keeps its first learning rate); a loop exit on a count N times too large inside `for` loops that end on their
    own (the epoch loop ends first: the exit never fires); a scheduler sized from the
    pre-`prepare` length alone (that is right); a
    post-sharding count (`ceil(len(loader) / num_processes)`) times `num_processes`;
    `step_scheduler_with_optimizer=False` for B2; `len(dataset)`. Neither variant is flagged
    where the accelerator splits batches (`split_batches=True`, given to `Accelerator` or to the
    `DataLoaderConfiguration` it is given): a prepared loader then keeps its length and the
    scheduler steps once per optimizer step.

    ## Why is this bad?
    A prepared loader is about `num_processes` times shorter (`ceil(len / num_processes)`).
    Bounds computed before `prepare` are N times too large: epoch counts derived from them
    overrun, progress bars never complete and step-based checkpoints and evaluations shift.
    With B1 and B3, the learning rate reaches its final value after 1/N of training (a linear
    decay to 0 stops the training for the rest); with B2, the learning-rate schedule reaches
    only 1/N of its horizon (it never decays); with B4 and B5, only 1/GA of it (a warmup lasts
    GA times longer); with B6, a `StepLR(step_size=30)` decays every 30/N epochs (measured on 2
    CPU ranks: `AcceleratedScheduler.step()` calls the scheduler's `step()` twice per call).

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
        # the epoch passed to step(): the N steps of the prepared scheduler all set the same one
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30)
        loader = DataLoader(train_set, batch_size=8, shuffle=True)
        model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
        for epoch in range(90):
            for batch in loader:
                accelerator.backward(model(batch).mean())
                optimizer.step()
                optimizer.zero_grad()
            scheduler.step(epoch)
        """,
        # an accumulation loop, then one optimizer step and one scheduler step: per step
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1000, gamma=0.5)
        model, optimizer, scheduler = accelerator.prepare(net, optimizer, scheduler)
        def train_step(batches):
            for batch in batches:
                accelerator.backward(model(batch).mean())
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        """,
        # stepped with each training step (a helper runs one), and a step schedule sized in steps
        # stepped per epoch (another question than the prepared wrapper's)
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import get_scheduler
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.999)
        model, optimizer, scheduler = accelerator.prepare(net, optimizer, scheduler)
        def train_step(batch):
            accelerator.backward(model(batch).mean())
            optimizer.step()
            optimizer.zero_grad()
        for epoch in range(3):
            for batch in make_batches():
                train_step(batch)
                scheduler.step()
        """,
        # the same epoch schedule kept out of prepare(): one step per epoch
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[60, 80], gamma=0.1)
        model, optimizer, train_dl = accelerator.prepare(net, optimizer, DataLoader(train_set, batch_size=8))
        for epoch in range(90):
            for batch in train_dl:
                accelerator.backward(model(batch).mean())
                optimizer.step()
                optimizer.zero_grad()
            scheduler.step()
        """,
        """
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator
from transformers import get_scheduler
accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters())
train_dl = DataLoader(dataset, batch_size=8, shuffle=True)
model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
total = len(train_dl) * epochs * accelerator.num_processes  # this rank's steps, times the scheduler's per-step count
lr_scheduler = accelerator.prepare(get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=total))
for epoch in range(epochs):
    for batch in train_dl:
        accelerator.backward(model(batch).sum())
        optimizer.step()
        lr_scheduler.step()
""",
        """\
        import math
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import get_cosine_schedule_with_warmup
        accelerator = Accelerator(gradient_accumulation_steps=args.grad_steps)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=8, shuffle=True)
        total_steps = math.ceil(len(train_dl) / args.grad_steps) * args.epochs  # optimizer steps
        scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=100, num_training_steps=total_steps)
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        for epoch in range(args.epochs):
            for batch in train_dl:
                with accelerator.accumulate(model):
                    accelerator.backward(model(batch).sum())
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
        """,
        """\
        import math
        from accelerate import Accelerator, DataLoaderConfiguration
        from torch.utils.data import DataLoader
        config = DataLoaderConfiguration(split_batches=True)
        accelerator = Accelerator(dataloader_config=config)
        train_dl = DataLoader(dataset, batch_size=16 * accelerator.num_processes)
        epochs = math.ceil(max_steps / len(train_dl))
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        for epoch in range(epochs):
            for batch in train_dl:
                accelerator.backward(model(batch).loss)
        """,
        """\
        import math
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=16, shuffle=True)
        overrode = False
        steps_per_epoch = math.ceil(len(train_dl) / ga)
        if max_steps is None:
            max_steps = epochs * steps_per_epoch
            overrode = True
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        steps_per_epoch = math.ceil(len(train_dl) / ga)
        if overrode:
            max_steps = epochs * steps_per_epoch
        epochs = math.ceil(max_steps / steps_per_epoch)
        for epoch in range(epochs):
            pass
        """,
        """\
        import math
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification, get_scheduler
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=16, shuffle=True)
        per_rank = math.ceil(len(train_dl) / accelerator.num_processes)
        total = epochs * per_rank * accelerator.num_processes
        scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=total)
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification, get_scheduler
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=16, shuffle=True)
        steps = len(train_dl) * epochs
        scheduler = get_scheduler("linear", optimizer, num_warmup_steps=0, num_training_steps=steps)
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        steps_per_epoch = len(train_dl)
        for step in range(steps_per_epoch * epochs):
            pass
        """,
        """\
        import math
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_dl = DataLoader(dataset, batch_size=8)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        epochs = math.ceil(max_steps / len(train_dl))
        save_every = save_epochs * len(train_dl)
        step = 0
        for epoch in range(epochs):
            for batch in train_dl:
                accelerator.backward(model(batch).sum())
                step += 1
                if step % save_every == 0:
                    accelerator.save_state(f"ckpt-{step}")
        """,
    ]
    INVALID = [
        # a plateau scheduler's argument is the metric: each of the N steps counts the epoch again
        """
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.Adam(model.parameters())
scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=10)
loader = DataLoader(train_set, batch_size=8, shuffle=True)
model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
for epoch in range(100):
    for batch in loader:
        accelerator.backward(model(batch).mean())
        optimizer.step()
        optimizer.zero_grad()
    scheduler.step(evaluate(model))  # expect: AL202
""",
        # a warmup then a cosine, chained and prepared: the cosine's horizon is the loop's count
        """
import torch
from accelerate import Accelerator
TOTAL_STEPS = 100_000
accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters())
warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.01, total_iters=1_000)
cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=TOTAL_STEPS - 1_000)  # expect: AL202
scheduler = torch.optim.lr_scheduler.SequentialLR(optimizer, schedulers=[warmup, cosine], milestones=[1_000])
model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
batches = iter(loader)
for step in range(TOTAL_STEPS):
    accelerator.backward(model(next(batches)).mean())
    optimizer.step()
    scheduler.step()
""",
        # an epoch schedule, prepared and stepped once per epoch: num_processes epochs per epoch
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(8, 1)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[60, 80], gamma=0.1)
        model, optimizer, train_dl, scheduler = accelerator.prepare(
            net, optimizer, DataLoader(train_set, batch_size=8), scheduler)
        for epoch in range(90):
            for batch in train_dl:
                accelerator.backward(model(batch).mean())
                optimizer.step()
                optimizer.zero_grad()
            scheduler.step()  # expect: AL202
        """,
        """
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator
from transformers import get_scheduler
accelerator = Accelerator()
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters())
train_dl = DataLoader(dataset, batch_size=8, shuffle=True)
model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
total = len(train_dl) * epochs  # this rank's steps
lr_scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0, num_training_steps=total)  # expect: AL202
lr_scheduler = accelerator.prepare(lr_scheduler)
for epoch in range(epochs):
    for batch in train_dl:
        accelerator.backward(model(batch).sum())
        optimizer.step()
        lr_scheduler.step()
""",
        """\
        import math
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import get_cosine_schedule_with_warmup
        accelerator = Accelerator(gradient_accumulation_steps=args.grad_steps)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=8, shuffle=True)
        total_steps = len(train_dl) * args.epochs
        scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=100,
                                                    num_training_steps=total_steps)  # expect: AL202
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        for epoch in range(args.epochs):
            for batch in train_dl:
                with accelerator.accumulate(model):
                    accelerator.backward(model(batch).sum())
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
        """,
        # B3 where the loop runs over a progress bar bound to a name (the last binding before it)
        """\
        import torch
        from accelerate import Accelerator
        from tqdm import tqdm
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=cfg.total_steps)  # expect: AL202
        net, opt, sched, batches = accelerator.prepare(net, opt, sched, batches)
        stream = iter(batches)
        bar = tqdm(range(cfg.total_steps), disable=not accelerator.is_local_main_process)
        for step in bar:
            accelerator.backward(net(next(stream)).sum())
            opt.step()
            sched.step()
        bar = tqdm(range(cfg.finetune_steps))
        """,
        # B3 with the horizon given by position (the library table names which argument it is)
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import get_linear_schedule_with_warmup
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.AdamW(net.parameters())
        net, opt, loader = accelerator.prepare(net, opt, DataLoader(data, batch_size=8))
        sched = get_linear_schedule_with_warmup(opt, 100, max_updates)  # expect: AL202
        sched = accelerator.prepare(sched)
        done = 0
        for epoch in range(epochs):
            for batch in loader:
                accelerator.backward(net(batch).sum())
                opt.step()
                sched.step()
                done += 1
                if done >= max_updates:
                    break
        """,
        """\
        import torch
        from accelerate import Accelerator
        from transformers import get_scheduler
        accelerator = Accelerator(gradient_accumulation_steps=args.ga)
        optimizer = torch.optim.AdamW(model.parameters())
        scheduler = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                                  num_training_steps=args.max_steps * args.ga)  # expect: AL202
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        for batch in train_dl:
            with accelerator.accumulate(model):
                accelerator.backward(model(batch).loss)
                optimizer.step()
                scheduler.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import get_linear_schedule_with_warmup
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=8)
        scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=100,
                                                    num_training_steps=args.max_steps)  # expect: AL202
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        step = 0
        while True:
            for batch in train_dl:
                accelerator.backward(model(batch).sum())
                optimizer.step()
                scheduler.step()
                step += 1
                if step >= args.max_steps:
                    break
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from tqdm import tqdm
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=8)
        steps_per_epoch = len(train_dl)
        max_steps = steps_per_epoch * epochs
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        progress = tqdm(total=max_steps)  # expect: AL202
        for step in range(steps_per_epoch):  # expect: AL202
            if step >= max_steps:  # the range ends first: this exit never fires
                break
        for step in itertools.count():
            if step >= max_steps:  # expect: AL202
                break
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification, get_scheduler
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=16, shuffle=True)
        max_steps = epochs * len(train_dl)
        scheduler = get_scheduler(
            "linear", optimizer, num_warmup_steps=0,
            num_training_steps=max_steps * accelerator.num_processes,  # expect: AL202
        )
        model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
        """,
        """\
        import math
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_dl = DataLoader(dataset, batch_size=8)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        epochs = math.ceil(max_steps / len(train_dl) / accelerator.num_processes)
        for epoch in range(epochs):  # expect: AL202
            for batch in train_dl:
                accelerator.backward(model(batch).sum())
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_dl = DataLoader(dataset, batch_size=8)
        save_every = save_epochs * len(train_dl)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        step = 0
        for epoch in range(epochs):
            for batch in train_dl:
                accelerator.backward(model(batch).sum())
                step += 1
                if step % save_every == 0:  # expect: AL202
                    accelerator.save_state(f"ckpt-{step}")
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        if not model.objects.prepare_calls or model.splits_batches() is not None:
            return  # with split batches a prepared loader is as long as the unprepared one
        for use, how, source, scale in _bound_uses(model):
            loader = model.code(source.args[0].value)
            if model.is_pre_prepare_length(source):
                message = (f"`{model.code(use)}` {how} comes from `len({loader})` taken before `prepare()`, which "
                           f"makes the loader about num_processes times shorter; recompute it from `len({loader})` "
                           f"after `prepare()`")
            else:
                how_many = "divides" if scale < 0 else "multiplies"
                message = (f"`{model.code(use)}` {how} {how_many} `len({loader})`, already this rank's share of "
                           f"the batches after `prepare()`, by `num_processes`, so it is about num_processes times "
                           f"too {'small' if scale < 0 else 'large'}; use `len({loader})` as it is")
            yield Finding(use, message, evidence=tuple(model.length_evidence(source)))
        if _scheduler_steps_per_process(model):
            bounded = list(_loop_bound_horizons(model))
            for horizon, source in _per_rank_horizons(model, {id(h) for h, _ in bounded}):
                loader = model.code(source.args[0].value)
                yield Finding(horizon, f"scheduler horizon `{model.code(horizon)}` counts this rank's steps "
                                       f"(`len({loader})` after `prepare()`, or divided by `num_processes`), but "
                                       f"the prepared scheduler steps num_processes times per optimizer step, so "
                                       f"the schedule ends after 1/num_processes of training; multiply it by "
                                       f"`num_processes`",
                              evidence=(*model.length_evidence(source),
                                        (horizon, "the horizon of a scheduler `prepare()` returns")))
            for horizon, bound in bounded:
                counted = horizon.left if type(horizon) is cst.BinaryOperation else horizon
                shared = "is" if counted is horizon else f"counts `{model.code(counted)}`,"
                yield Finding(horizon, f"scheduler horizon `{model.code(horizon)}` {shared} also the training loop's bound "
                                       f"(line {model.line_of(bound)}), a count of this rank's steps; the prepared "
                                       f"scheduler steps num_processes times per step, so the schedule ends after "
                                       f"1/num_processes of training; multiply it by `num_processes`",
                              evidence=((bound, f"the loop ends when its step count reaches "
                                                f"`{model.code(counted)}`"),
                                        (horizon, "the horizon of a scheduler `prepare()` returns")))
            for horizon, factor, setting in _accumulated_horizons(model):
                yield Finding(horizon, f"scheduler horizon `{model.code(horizon)}` is multiplied by "
                                       f"`{model.code(factor)}`, the accelerator's gradient accumulation steps; the "
                                       f"prepared scheduler does not step on accumulation micro-steps (it counts "
                                       f"optimizer steps), so this horizon lasts `{model.code(factor)}` times longer "
                                       f"than meant; drop the factor",
                              evidence=((setting, "the accelerator accumulates gradients over this many micro-steps"),
                                        (factor, "the horizon multiplies by it"),
                                        (horizon, "the horizon of a scheduler `prepare()` returns")))
            for horizon, source, setting in _micro_batch_horizons(model):
                loader = model.code(source.args[0].value)
                yield Finding(horizon, f"scheduler horizon `{model.code(horizon)}` counts every batch of `len({loader})` "
                                       f"before `prepare()`, but the accelerator accumulates `{model.code(setting)}` "
                                       f"batches per optimizer step and the prepared scheduler steps only on those: the "
                                       f"schedule reaches about 1/`{model.code(setting)}` of its horizon; divide the "
                                       f"count by the accumulation steps",
                              evidence=(*model.length_evidence(source),
                                        (setting, "the accelerator accumulates gradients over this many batches"),
                                        (horizon, "the horizon of a scheduler `prepare()` returns")))
            for step, pass_over, loader in _epoch_stepped(model):
                yield Finding(step, f"`{model.code(step.func)}()` steps a prepared scheduler once per training pass "
                                    f"(`{loader}`, line {model.line_of(pass_over)}), but the prepared scheduler steps "
                                    f"num_processes times per call: an epoch schedule (step sizes, milestones, "
                                    f"plateau patience in epochs) runs num_processes times too fast; keep this "
                                    f"scheduler out of `prepare()` or give it a horizon in optimizer steps and step "
                                    f"it with the optimizer",
                              evidence=((pass_over, "a whole training pass (backward and optimizer steps) comes first"),
                                        (step, "a scheduler `prepare()` returned, stepped once per pass")))
            for horizon, source in _inflated_horizons(model):
                loader = model.code(source.args[0].value)
                yield Finding(horizon, f"scheduler horizon `{model.code(horizon)}` multiplies a step count from "
                                       f"`len({loader})` before `prepare()` by `num_processes`; the prepared "
                                       f"scheduler already steps num_processes times per optimizer step, so the "
                                       f"schedule only reaches 1/num_processes of it; drop the `* num_processes`",
                              evidence=tuple(model.length_evidence(source)))


def _epoch_stepped(model: FileModel):
    """``scheduler.step()`` of a prepared scheduler after a whole training pass in the same function
    (a ``for`` whose body runs a backward or an optimizer step, or a call that trains or is handed
    a prepared loader), and inside no loop over a prepared loader: the scheduler is stepped once
    per epoch. (step, the pass, what it iterates or calls, as written)"""
    for call in model.index.calls:
        if type(call.func) is not cst.Attribute or call.func.attr.value != "step":
            continue
        value = model.value_at(call.func.value)
        if value is None or value.kind != "scheduler" or value.prepared != YES or value.container:
            continue
        if _sets_the_epoch(model, call, value):
            continue  # `scheduler.step(epoch)`: each of the N steps sets the same epoch
        if any(type(o) is cst.Call and (model.code(o.func)).rsplit(".", 1)[-1] == "DummyScheduler"
               for o in value.origins()):
            continue  # DeepSpeed's engine steps its own scheduler; the wrapper's step() does nothing
        if model.under_rank_condition(call):
            continue  # a main-only step: AL307
        around = []
        for ancestor in model.ancestors(call):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                break
            around.append(ancestor)
        if any(type(a) is cst.For and (model.prepared_kind(model.iterated_source(a.iter)) == "loader" or _trains(model, a, True))
               for a in around) or any(type(a) is cst.While for a in around):
            continue  # per batch (or a step loop the model does not follow): not an epoch step
        if any(type(o) is cst.Call and any(model.step_scales_of(h) for h in _horizons(model, o))
               for o in value.origins()):
            continue  # a horizon in steps (`len(loader) * epochs`) stepped per epoch: another question
        if _steps_optimizer_beside(model, call, set(around)):
            continue  # an optimizer step at the scheduler's own level: one step per optimizer step
        found = _pass_before(model, call, set(around))
        if found is not None:
            yield call, *found


def _sets_the_epoch(model: FileModel, call: cst.Call, value) -> bool:
    """``scheduler.step(epoch)``: the call names the epoch, so repeating it changes nothing. A
    ``ReduceLROnPlateau``'s first argument is the metric (``step(val_loss)``), which each of the
    N steps counts again; only its ``epoch=`` (or second argument) names the epoch."""
    plateau = any(isinstance(o, cst.Call) and (model.index.imports.qualify_expr(o.func) or model.code(o.func))
                  .endswith("ReduceLROnPlateau") for o in value.origins())
    positional = [a for a in call.args if a.keyword is None]
    named = any(a.keyword is not None and a.keyword.value == "epoch" for a in call.args)
    return named or len(positional) >= (2 if plateau else 1)


def _optimizer_step(model: FileModel, call: cst.Call) -> bool:
    if type(call.func) is not cst.Attribute or call.func.attr.value != "step":
        return False
    value = model.value_at(call.func.value)
    return value is not None and value.kind == "optimizer"


def _steps_optimizer_beside(model: FileModel, step: cst.Call, around: set) -> bool:
    """An optimizer ``step()`` in ``step``'s function outside any loop the scheduler's step is not
    in (``for _ in range(accum): backward(...)``, then ``optim.step(); scheduler.step()``)."""
    scope = model.scope_of(step)
    for call in model.index.calls:
        if model.scope_of(call) is not scope or not _optimizer_step(model, call):
            continue
        loops = [a for a in model.ancestors(call) if isinstance(a, (cst.For, cst.While)) and model.scope_of(a) is scope]
        if all(a in around for a in loops):
            return True
    return False


def _pass_before(model: FileModel, step: cst.Call, around: set) -> tuple[cst.CSTNode, str] | None:
    """A pass over a prepared loader earlier in ``step``'s function, in a block the step also runs
    in: a ``for`` over it, or a call of a function it is handed to (``train_epoch(model,
    train_loader, ...)``)."""
    scope = model.scope_of(step)
    line = model.line_of(step)
    for loop in model.index.loops:
        if type(loop) is not cst.For or model.scope_of(loop) is not scope or model.line_of(loop) >= line:
            continue
        if loop in around or not any(_optimizer_step(model, c) for c in model.calls_in(loop.body)):
            continue  # (a pass steps the optimizer each batch: not an accumulation loop)
        loops_around = [a for a in model.ancestors(loop) if isinstance(a, (cst.For, cst.While))
                        and model.scope_of(a) is scope]
        if all(a in around for a in loops_around):
            return loop, model.code(model.iterated_source(loop.iter))
    for call in model.index.calls:
        if model.scope_of(call) is not scope or model.line_of(call) >= line or call is step:
            continue
        handed = [a.value for a in call.args if a.keyword is None and model.prepared_kind(a.value) == "loader"]
        if not (handed or _trains_a_pass(model, call)) \
                or (type(call.func) is cst.Attribute and model.is_accelerator(call.func.value)) \
                or model.code(call.func) in ("len", "iter", "next", "enumerate", "tqdm"):
            continue
        loops_around = [a for a in model.ancestors(call) if isinstance(a, (cst.For, cst.While))
                        and model.scope_of(a) is scope]
        if all(a in around for a in loops_around):
            return call, model.code(handed[0] if handed else call.func)
    return None


def _trains_a_pass(model: FileModel, call: cst.Call) -> bool:
    """``call`` runs a same-file function (or method of an instance made here) with a loop that
    trains: a whole pass (``train_epoch(...)``), not one step (``train_step(batch)``)."""
    target = model.index.resolve_call(call) or model.instance_method(call)
    return target is not None and any(
        type(loop) is cst.For and model.scope_of(loop) is target and _trains(model, loop) for loop in model.index.loops)


def _trains(model: FileModel, loop: cst.For, directly: bool = False) -> bool:
    """A loop whose passes train: a backward (through same-file helpers too) or an optimizer's
    ``step()`` in its body (``directly``: each pass one step -- not in a loop nested in it, and not
    through a helper that runs a whole pass)."""
    for call in model.calls_in(loop.body):
        if directly and (model.enclosing_loop(call) is not loop or _trains_a_pass(model, call)):
            continue
        if model.performs(call, "BACKWARD") or _optimizer_step(model, call):
            return True
    return False


def _first_len(model: FileModel, scales: frozenset, wanted) -> cst.Call | None:
    """The earliest ``len()`` call among the possibilities whose scale is wanted."""
    calls = [call for scale, call in scales if call is not None and wanted(scale)]
    return min(calls, key=lambda c: model.index.call_order.get(c, 0)) if calls else None


def _bound_uses(model: FileModel):
    """(node, how, len call, scale) for loop bounds, progress totals, loop exits and step periods
    that may be a pre-prepare loader length (scale above 0), or a prepared loader's length
    divided (below 0) or multiplied by ``num_processes``."""
    def off(expr):
        scales = model.step_scales_of(expr)
        for wanted in (lambda scale: scale > 0, lambda scale: scale < 0):
            source = _first_len(model, scales, wanted)
            if source is not None:
                return source, next(s for s, c in scales if c is source and wanted(s))
        return None

    exits: list[cst.If] = []  # an `if <comparison>: ... break` inside a loop
    periods: list[cst.BinaryOperation] = []  # `step % every` in a test inside a loop
    for loop in model.index.loops:
        if type(loop) is cst.For and type(loop.iter) is cst.Call and last_attr(loop.iter.func) == "range" \
                and model.code(loop.iter.func) == "range":
            found = off(loop.iter)
            if found is not None:
                yield loop.iter, "(a loop bound)", *found
        for node in model.index.walk(loop):
            if type(node) is cst.If and model.enclosing_loop(node) is loop:
                if type(node.test) is cst.Comparison:
                    exits.append(node)
                periods.extend(n for n in model.index.walk(node.test)
                               if type(n) is cst.BinaryOperation and type(n.operator) is cst.Modulo)
    for call in model.index.calls:
        if last_attr(call.func) in ("tqdm", "trange"):
            for position, arg in enumerate(call.args):
                if arg.keyword is not None and arg.keyword.value == "total":
                    total = arg.value
                elif position == 0 and arg.keyword is None and last_attr(call.func) == "trange":
                    total = arg.value  # `trange(max_steps)`
                elif position == 0 and arg.keyword is None and type(arg.value) is cst.Call \
                        and model.code(arg.value.func) == "range" and arg.value.args:
                    total = arg.value.args[-1].value  # `tqdm(range(max_steps))`
                else:
                    continue
                found = off(total)
                if found is not None:
                    yield call, "(a progress total)", *found
    for node in exits:
        if any(type(s) is cst.Break for s in model.index.walk(node.body)):
            # the bound, not the loop's own counter (`step += 1`), which may start anywhere
            loop = model.enclosing_loop(node)
            counters = {model.code(n.target) for n in model.index.walk(loop) if type(n) is cst.AugAssign}
            sides = [node.test.left, *(c.comparator for c in node.test.comparisons)]
            bounds = [side for side in sides if model.code(side) not in counters]
            for side in bounds if len(bounds) < len(sides) else [node.test]:
                found = off(side)
                if found is not None and found[1] > 0 and _bounded_without(model, loop):
                    # N times too large, it ends the loop later than meant; where a `for` loop around
                    # it ends anyway (the epoch loop), it never fires and does no harm
                    break
                if found is not None:
                    yield node.test, "(a loop exit)", *found
                    break
    for period in dict.fromkeys(periods):  # nested loops walk the same test twice
        found = off(period.right)
        if found is not None:
            yield period.right, "(a step period)", *found


def _scheduler_steps_per_process(model: FileModel) -> bool:
    """The prepared scheduler steps once per process per optimizer step (Accelerate's default),
    unless an accelerator is built with ``step_scheduler_with_optimizer=False`` (split batches
    are ruled out by the caller)."""
    return all(model.code(value) == "True" for value in model.accelerator_settings("step_scheduler_with_optimizer"))


def _loop_bound_horizons(model: FileModel):
    """``(horizon, loop bound)``: a prepared scheduler's horizon that is a plain name
    (``num_training_steps=args.max_steps``), not a pre-``prepare`` count, and that also ends a
    loop that steps the scheduler (``range(args.max_steps)``, ``while step < args.max_steps``,
    ``if step >= args.max_steps: break``), with no assignment to it after the scheduler."""
    for prepared in model.index.calls:
        if prepared not in model.objects.prepared_origins:
            continue
        for call, horizon in [(c, h) for c in [prepared, *_chained(model, prepared)] for h in _horizons(model, c)]:
            counted = horizon
            if type(horizon) is cst.BinaryOperation and type(horizon.operator) in (cst.Subtract, cst.Add) \
                    and type(horizon.right) is cst.Integer:
                counted = horizon.left  # `T_max=NUM_STEPS - warmup_steps`: the rest of the same count
            if type(counted) not in (cst.Name, cst.Attribute):
                continue
            if any(scale != 0 for scale, _ in model.step_scales_of(counted)):
                continue  # a count of all ranks' batches, or already scaled: the other variants
            name = model.code(counted)
            scope = model.scope_of(call)
            if any(type(n) in (cst.Assign, cst.AugAssign) and model.line_of(n) > model.line_of(call)
                   and model.scope_of(n) is scope and any(model.code(t) == name for t in statement_targets(n))
                   for n in model.index.walk(scope)):
                continue
            bound = _ends_scheduler_loop(model, prepared, name)
            if bound is not None:
                yield horizon, bound


_CHAINING_SCHEDULERS = ("torch.optim.lr_scheduler.SequentialLR", "torch.optim.lr_scheduler.ChainedScheduler")


def _chained(model: FileModel, scheduler: cst.Call) -> list[cst.Call]:
    """The schedulers a ``SequentialLR``/``ChainedScheduler`` runs (its ``schedulers`` list, as
    made in this file): preparing it makes each of their steps happen num_processes times."""
    if (model.index.imports.qualify_expr(scheduler.func) or "") not in _CHAINING_SCHEDULERS:
        return []
    given = next((a.value for a in scheduler.args if a.keyword is not None and a.keyword.value == "schedulers"), None)
    if given is None:
        positional = [a for a in scheduler.args if a.keyword is None]
        index = 1 if model.index.imports.qualify_expr(scheduler.func).endswith("SequentialLR") else 0
        given = positional[index].value if len(positional) > index else None
    if not isinstance(given, (cst.List, cst.Tuple)):
        return []
    made = []
    for element in given.elements:
        value = model.value_at(element.value) if type(element.value) in (cst.Name, cst.Attribute) else None
        origin = element.value if isinstance(element.value, cst.Call) else value.origin if value is not None else None
        if isinstance(origin, cst.Call):
            made.append(origin)
    return made


def _per_rank_horizons(model: FileModel, reported: set[int]):
    """``(horizon, len call)`` (variant B1): a prepared scheduler that may be stepped, whose
    horizon is on every path a count of this rank's steps computed from a loader's length (the
    prepared loader's ``len()``, or a pre-``prepare`` one divided by ``num_processes``).
    Horizons B3 reports (they also end the loop) are left to it."""
    for horizon in _stepped_horizons(model):
        if id(horizon) in reported:
            continue
        scales = model.step_scales_of(horizon)
        if scales and all(scale == 0 and source is not None for scale, source in scales):
            yield horizon, _first_len(model, scales, lambda scale: scale == 0)


def _ends_scheduler_loop(model: FileModel, scheduler: cst.Call, name: str) -> cst.CSTNode | None:
    """A test or ``range`` that bounds, by ``name``, a loop in which the scheduler ``scheduler``
    made is stepped."""
    for loop in model.index.loops:
        if model.scope_of(loop) is not model.scope_of(scheduler) or model.line_of(loop) < model.line_of(scheduler):
            continue
        steps = any(type(c.func) is cst.Attribute and c.func.attr.value == "step"
                    and (v := model.value_at(c.func.value)) is not None and scheduler in v.origins()
                    for c in model.calls_in(loop))
        if not steps:
            continue
        tests = [model.iterated_source(loop.iter)] if type(loop) is cst.For else [loop.test]
        tests += [n.test for n in model.index.walk(loop) if type(n) is cst.If and any(
            type(e) in (cst.Break, cst.Return) for e in model.index.walk(n.body))]
        for test in tests:
            if type(test) is cst.Comparison or (type(test) is cst.Call and model.code(test.func) == "range"):
                if any(model.code(n) == name for n in model.index.walk(test)
                       if type(n) in (cst.Name, cst.Attribute)):
                    return test
    return None


def _factors(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The factors of a product (``a * b * c``), or the expression itself."""
    if type(expr) is cst.BinaryOperation and type(expr.operator) is cst.Multiply:
        return _factors(expr.left) + _factors(expr.right)
    return [expr]


def _accumulated_horizons(model: FileModel):
    """``(horizon, factor, setting)``: a prepared scheduler's horizon multiplied by the gradient
    accumulation steps the file's accelerator is built with (``Accelerator(
    gradient_accumulation_steps=args.ga)``, ``num_training_steps=max_steps * args.ga``), in a
    file that accumulates through ``accelerator.accumulate()``: the prepared scheduler skips
    the micro-steps that do not sync, so its steps are optimizer steps already."""
    settings = model.accelerator_settings("gradient_accumulation_steps")
    if not settings or any(type(v) is cst.Integer and v.value == "1" for v in settings):
        return
    spelled = {model.code(v): v for v in settings if type(v) in (cst.Name, cst.Attribute)}
    if not spelled or not _accumulates(model):
        return
    for call in model.index.calls:
        if call not in model.objects.prepared_origins or not _may_be_stepped(model, call):
            continue
        for horizon in _horizons(model, call):
            for factor in _factors(horizon):
                if factor is not horizon and model.code(factor) in spelled:
                    yield horizon, factor, spelled[model.code(factor)]
                    break


def _micro_batch_horizons(model: FileModel):
    """``(horizon, len call, setting)`` (variant B5): a prepared scheduler, stepped inside
    ``accelerator.accumulate()`` of an accelerator built with accumulation steps other than 1,
    whose horizon is on every path a count of the loader's batches taken before ``prepare``
    (``len(train_dl) * epochs``) with the accumulation steps nowhere in its making: the prepared
    scheduler steps ``num_processes`` times per optimizer step, so it counts optimizer steps, and
    only ``1/GA`` of the horizon passes."""
    settings = model.accelerator_settings("gradient_accumulation_steps")
    if not settings or any(type(v) is not cst.Integer and type(v) not in (cst.Name, cst.Attribute) for v in settings) \
            or any(type(v) is cst.Integer and v.value in ("0", "1") for v in settings) or not _accumulates(model):
        return
    spelled = {model.code(v) for v in settings}
    for call in model.index.calls:
        if call not in model.objects.prepared_origins or not _may_be_stepped(model, call):
            continue
        for horizon in _horizons(model, call):
            keyword = model.index.parents.get(horizon)
            if isinstance(keyword, cst.Arg) and keyword.keyword is not None and "warmup" in keyword.keyword.value:
                continue  # (one finding per scheduler: its length; the warmup stretches alike)
            scales = model.step_scales_of(horizon)
            if not scales or any(scale != 1 or source is None for scale, source in scales):
                continue
            if _made_with(model, horizon, spelled):
                continue
            source = _first_len(model, scales, lambda scale: scale == 1)
            if source is not None:
                yield horizon, source, settings[0]
                break


def _made_with(model: FileModel, expr: cst.BaseExpression, spelled: set[str], depth: int = 0) -> bool:
    """``expr``, or what the names it reads were assigned from, mentions the accumulation steps:
    one of ``spelled`` (how the accelerator's setting is written), or the accelerator's own
    ``gradient_accumulation_steps`` / ``gradient_state.num_steps``."""
    if depth > 6:
        return False
    for node in model.index.walk(expr):
        if type(node) in (cst.Name, cst.Attribute) and (
                model.code(node) in spelled or (type(node) is cst.Attribute and node.attr.value in (
                    "gradient_accumulation_steps", "num_steps"))):
            return True
    for name in model.index.loads_in(expr):
        value = model.value_at(name)
        origins = value.origins() if value is not None else frozenset()
        for origin in origins or ([value.origin] if value is not None and value.origin is not None else []):
            if isinstance(origin, cst.BaseExpression) and origin is not name and _made_with(model, origin, spelled, depth + 1):
                return True
    return False


def _accumulates(model: FileModel) -> bool:
    """Some training step runs inside ``accelerator.accumulate(...)`` (which keeps
    ``sync_gradients`` False on the micro-steps that do not sync)."""
    return any(type(call.func) is cst.Attribute and call.func.attr.value == "accumulate"
               and model.is_accelerator(call.func.value) for call in model.index.calls)


def _inflated_horizons(model: FileModel):
    """Horizons of prepared schedulers that may be a pre-prepare count times ``num_processes``
    (scale 2): the prepared scheduler's steps are already scale 1."""
    for horizon in _stepped_horizons(model):
        source = _first_len(model, model.step_scales_of(horizon), lambda scale: scale >= 2)
        if source is not None:
            yield horizon, source


def _stepped_horizons(model: FileModel):
    """The horizons of every scheduler that ``prepare`` returns and that may be stepped."""
    for call in model.index.calls:
        if call in model.objects.prepared_origins and _may_be_stepped(model, call):
            yield from _horizons(model, call)


def _may_be_stepped(model: FileModel, scheduler: cst.Call) -> bool:
    """Some ``.step()`` call may step the scheduler ``scheduler`` makes: one on an object made by
    it, or on an object the model cannot name (a parameter, an attribute). A scheduler that a
    file with a training step (an optimizer's ``step()``) never steps keeps its first learning
    rate, whatever its horizon. A file with no optimizer step shows no training loop: unknown."""
    stepped = [model.value_at(call.func.value) for call in model.index.calls
               if type(call.func) is cst.Attribute and call.func.attr.value == "step"]
    if not any(value is not None and value.kind == "optimizer" for value in stepped):
        return True
    for value in stepped:
        origins = value.origins() if value is not None else frozenset()
        if not origins or scheduler in origins or any(isinstance(o, cst.Param) for o in origins):
            return True
    return False


def _horizons(model: FileModel, call: cst.Call) -> list[cst.BaseExpression]:
    """The step counts a scheduler is built with: its horizon keywords (``num_training_steps=``,
    ``T_max=``), and the positional arguments the library table's ``scheduler-horizons`` names
    for its factory (``get_linear_schedule_with_warmup(opt, warmup, total)``). None for
    DeepSpeed's ``DummyScheduler``: the engine steps the scheduler of its config once per
    optimizer step, and the prepared wrapper's ``step()`` does nothing."""
    if (model.index.imports.qualify_expr(call.func) or model.code(call.func)).rsplit(".", 1)[-1] == "DummyScheduler":
        return []
    out = [arg.value for arg in call.args if arg.keyword is not None and arg.keyword.value in _HORIZONS]
    positions = model.library.scheduler_horizons.get(model.index.imports.qualify_expr(call.func) or "")
    if positions:
        positional = [arg for arg in call.args if arg.keyword is None]
        if not any(arg.star for arg in positional):
            out += [positional[i].value for i in sorted(positions) if i < len(positional)]
    return out


def _bounded_without(model: FileModel, loop: cst.For | cst.While) -> bool:
    """Every loop from ``loop`` out to its function's outermost one is a ``for``: the loops end on
    their own, without the exit inside them."""
    current: cst.CSTNode | None = loop
    while current is not None:
        if type(current) is not cst.For or (type(current.iter) is cst.Call and last_attr(current.iter.func) in
                                                ("count", "cycle", "repeat")):
            return False  # `while True:`, `for step in itertools.count():`
        current = model.enclosing_loop(current)
    return True
