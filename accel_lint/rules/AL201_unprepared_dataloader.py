from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import NO, YES, MAYBE, FileModel, dotted_name, shorten
from ..model import composites
from ..model.objects import COMPOSITE, Value, item_of
from .base import Finding, Rule



class UnpreparedDataloader(Rule):
    """A `DataLoader` built in the file, iterated in a training or evaluation loop, never prepared.

    ## What it does
    Flags a loop over a `DataLoader(...)` created in this file (directly or through
    `enumerate`, `tqdm`, `iter`; or a step loop that draws its batches with `next(iter(dl))`,
    or `next(it)` of an `it = iter(dl)`) when the loop calls `accelerator.backward` (training,
    an error) or runs a prepared model (evaluation, a warning), the loader is unprepared
    on every path to the loop: the object iterated is not a result of `prepare`. That
    includes the loader that was passed to `prepare` when the loop iterates it instead of
    what `prepare` returned (`prepare` leaves its argument unsharded), a loader a helper
    receives as a parameter from every caller and iterates, a loader kept in a dict (also
    read by a loop over literal keys, `for phase in ["train", "dev"]: ... loaders[phase]`), a
    loader rebuilt after `prepare`, each loader of a `zip(...)`, and loaders read through an
    object of a class of the tree that iterates the objects it was built from (a loader that
    mixes two loaders): `prepare` returns such an object unchanged, since it is no DataLoader.

    ## Why is this bad?
    `prepare` is what shards a loader across processes. Unprepared, every rank trains on
    the whole dataset and the gradient all-reduce averages identical batches: N GPUs do
    one GPU's work. In evaluation every rank evaluates everything, so
    `gather_for_metrics` counts each sample N times. Nothing fails.
    Not flagged: loops in a function that uses no accelerator and that nothing in the file
    calls (a plain PyTorch trainer method beside the Accelerate one: who runs it is unknown);
    loaders with a `DistributedSampler` (torch's, or a class of the file derived
    from it or reading the rank) or a sampler of unknown behaviour (a class of another
    module), loaders over data already sharded
    per rank (`split_between_processes`, `.shard(...)`), loaders over a buffer the function
    fills only inside loops over a prepared loader (an RL trainer's rollouts of this rank's
    prompts), loaders prepared in a same-file helper, loaders from other files (unknown), and
    evaluation loops that only some ranks run (main-only evaluation under
    `if accelerator.is_main_process:`, which must see the whole set and gathers nothing), and
    loops after the program stops unless it runs as one process (`if torch.cuda.device_count() >
    1: raise ...`, `assert accelerator.num_processes == 1`).

    ## Example
    ```python
    train_dl = DataLoader(ds, batch_size=16, shuffle=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in train_dl:
        accelerator.backward(model(**batch).loss)
    ```

    ## Use instead
    ```python
    train_dl = DataLoader(ds, batch_size=16, shuffle=True)
    model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
    for batch in train_dl:
        accelerator.backward(model(**batch).loss)
    ```
    """

    code = "AL201"
    name = "unprepared-dataloader"
    severity = "error"
    summary = "a DataLoader iterated in a training/eval loop is never prepared; every rank sees the full dataset"

    VALID = [
        # a plain PyTorch trainer method beside the Accelerate one: it uses no accelerator and
        # nothing in the file calls it, so on which ranks it runs is unknown
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        class Learner:
            def fit(self, accelerator: Accelerator, model, loader):
                model, loader = accelerator.prepare(model, loader)
                for batch in loader:
                    accelerator.backward(model(batch).sum())
            def fit_without_accelerate(self, model, optimizer, samples):
                loader = DataLoader(samples, batch_size=16, shuffle=True)
                for batch in loader:
                    model(batch).sum().backward()
                    optimizer.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train_dl = DataLoader(embeddings, batch_size=64, shuffle=True)  # one process: the whole set
        world_size = torch.cuda.device_count()
        if world_size > 1:
            raise SystemExit("run this probe on one GPU")
        for batch in train_dl:
            accelerator.backward(model(batch).sum())
            optimizer.step()
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        policy = torch.nn.Linear(4, 4)
        optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-5)
        prompts = DataLoader(prompt_set, batch_size=8, shuffle=True)
        policy, optimizer, prompts = accelerator.prepare(policy, optimizer, prompts)
        for batch in prompts:
            buffer = []
            with torch.no_grad():
                for prompt in batch:
                    buffer.append(rollout(policy, prompt))  # this rank's share of the prompts
            sampler = DataLoader(buffer, batch_size=4, shuffle=True)
            for experience in sampler:
                accelerator.backward(policy(experience).sum())
                optimizer.step()
        """,
        """
from accelerate import Accelerator
import torch
from transformers import AutoModelForSequenceClassification
from torch.utils.data import DataLoader
accelerator = Accelerator()
train_dl = DataLoader(ds, batch_size=16, shuffle=True)
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
for batch in train_dl:
    accelerator.backward(model(**batch).loss)
""",
        # prepared inside a same-file helper
        """
from accelerate import Accelerator
import torch
from transformers import AutoModelForSequenceClassification
from torch.utils.data import DataLoader
accelerator = Accelerator()
def build():
    return accelerator.prepare(DataLoader(ds, shuffle=True))
train_dl = build()
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
for batch in train_dl:
    accelerator.backward(model(**batch).loss)
""",
        # a DistributedSampler already shards the data
        """
from accelerate import Accelerator
import torch
from transformers import AutoModelForSequenceClassification
from torch.utils.data import DataLoader, DistributedSampler
accelerator = Accelerator()
train_dl = DataLoader(ds, sampler=DistributedSampler(ds))
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
for batch in train_dl:
    accelerator.backward(model(**batch).loss)
""",
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        policy = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
        prompts = DataLoader(dataset, batch_size=8)
        policy, optimizer, prompts = accelerator.prepare(policy, optimizer, prompts)
        for batch in prompts:
            rollouts = [policy(x) for x in batch]  # this rank's own rollouts
            for chunk in DataLoader(rollouts, batch_size=2):
                accelerator.backward(chunk.sum())
                optimizer.step()
        """,
        # a mixing iterator over loaders that were prepared: it reads their shards
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        class Alternating:
            def __init__(self, loaders):
                self.loaders = loaders
            def __iter__(self):
                for loader in self.loaders:
                    yield from loader
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        left = DataLoader(part_one, batch_size=4)
        right = DataLoader(part_two, batch_size=4)
        net, opt, left, right = accelerator.prepare(net, opt, left, right)
        for batch in Alternating([left, right]):
            accelerator.backward(net(batch).sum())
            opt.step()
        """,
        # a trainer's rollout buffer: filled with what this rank's policy generated
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        class PPO:
            def __init__(self, policy, prompts):
                self.accelerator = Accelerator()
                self.policy = torch.nn.Linear(4, 4)
                self.opt = torch.optim.SGD(self.policy.parameters(), lr=0.1)
                self.policy, self.opt = self.accelerator.prepare(self.policy, self.opt)
                self.prompts = prompts
                self.buffer = []
            def collect(self):
                for prompt in self.prompts:
                    self.buffer.append(self.policy(prompt))
            def train(self):
                self.collect()
                loader = DataLoader(Rollouts(self.buffer), batch_size=None)
                for experience in loader:
                    self.accelerator.backward(self.policy(experience).sum())
                    self.opt.step()
        """,
    ]
    INVALID = [
        # a dict of loaders read by the loop's key: the "dev" pass iterates the unprepared loader
        """
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
def run_epochs(loaders, model, optimizer):
    for phase in ["train", "dev"]:
        for batch in loaders[phase]:  # expect: AL201
            loss = model(batch).mean()
            if phase == "train":
                accelerator.backward(loss)
                optimizer.step()
accelerator = Accelerator()
train_dl = DataLoader(train_set, batch_size=8, shuffle=True)
dev_dl = DataLoader(dev_set, batch_size=8)
model, optimizer, train_dl, eval_dl = accelerator.prepare(torch.nn.Linear(4, 1), optimizer, train_dl, dev_dl)
run_epochs({"train": train_dl, "dev": dev_dl}, model, optimizer)
""",
        """
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = DataLoader(dataset, batch_size=8, shuffle=True)
model, optimizer = accelerator.prepare(model, optimizer)
batches = iter(train_loader)
for step in range(1000):
    batch = next(batches)  # expect: AL201
    accelerator.backward(model(batch).sum())
    optimizer.step()
""",
        """
from accelerate import Accelerator
import torch
from transformers import AutoModelForSequenceClassification
from torch.utils.data import DataLoader
accelerator = Accelerator()
train_dl = DataLoader(ds, batch_size=16, shuffle=True)
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
for step, batch in enumerate(train_dl):  # expect: AL201
    accelerator.backward(model(**batch).loss)
""",
        # rebinding after prepare makes the name raw again
        """
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification
accelerator = Accelerator()
model = accelerator.prepare(AutoModelForSequenceClassification.from_pretrained("bert-base-uncased"))
eval_dl = DataLoader(eval_ds, batch_size=8)
for batch in eval_dl:  # expect: AL201
    preds = model(**batch).logits.argmax(-1)
    accelerator.gather_for_metrics(preds)
""",
        # `prepare` returns an object of a class that is no DataLoader unchanged, and this one
        # iterates the two loaders it was built from: neither is sharded
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        class TwoSource:
            def __init__(self, first, second):
                self.first, self.second = first, second
                self.first_source = first
                self.second_source = second
            def __iter__(self):
                return iter(zip(self.first_source, self.second_source))
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        mixed = TwoSource(
            DataLoader(part_one, batch_size=4),
            DataLoader(part_two, batch_size=4),
        )
        net, opt, mixed = accelerator.prepare(net, opt, mixed)
        for a, b in mixed:  # expect: AL201
            accelerator.backward(net(a).sum() + net(b).sum())
            opt.step()
        """,
        # a loader built where the loop reads it
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        net, opt = accelerator.prepare(net, opt)
        for batch in DataLoader(part_one, batch_size=4, shuffle=True):  # expect: AL201
            accelerator.backward(net(batch).sum())
            opt.step()
        """,
        # a loop over `zip` iterates each loader
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        main = DataLoader(part_one, batch_size=4, shuffle=True)
        extra = DataLoader(part_two, batch_size=4, shuffle=True)
        net, opt, main = accelerator.prepare(net, opt, main)
        for a, b in zip(main, extra):  # expect: AL201
            accelerator.backward(net(a).sum() + net(b).sum())
            opt.step()
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for loop in model.index.loops:
            consumed = [(loader, loop.iter) for loader in _iterated(loop.iter)] if isinstance(loop, cst.For) else []
            consumed += _drawn_with_next(model, loop)
            for loader, where_read in consumed:
                value = _held(model, loader)
                key = None
                if value is None or _unprepared_origins(model, value) is None:
                    # `for phase in ["train", "dev"]: ... loaders[phase]`: each pass reads one item
                    key, value = _item_on_some_pass(model, loader) or (None, value)
                if value is None:
                    continue
                if value.kind == COMPOSITE and isinstance(loop, cst.For):
                    # an object `prepare` returns unchanged that iterates the loaders it was built from
                    yield from self._through_composite(model, loop, loader, value)
                    continue
                origins = _unprepared_origins(model, value)
                if origins is None:
                    continue
                if model.single_process_at(loop):
                    continue  # (the program runs only as one process there: nothing to shard)
                if model.callers_unknown_off_accelerate(model.scope_of(loop)):
                    # a function that uses no accelerator and that nothing in the file calls (a
                    # plain PyTorch trainer method beside the Accelerate one): who runs it is unknown
                    continue
                train = _trains(model, loop)
                if train is None or (not train and model.under_rank_condition(loop)):
                    # an evaluation only some ranks run (main-only evaluation): sharding its
                    # loader would make it see a part of the data, and nothing counts twice
                    continue
                if _splits_each_batch_by_rank(model, loop):
                    continue  # each rank keeps its own slice of every batch: sharded by hand
                acc = model.accelerator_name_in(model.scope_of(loop))
                name = shorten(model.code(loader)) if key is None else f"{shorten(model.code(loader.value))}[{key!r}]"
                where = "a training" if train else "an evaluation"
                if key is not None:
                    # (whether that pass trains or evaluates, the loop's text does not say per key)
                    what = (f"`{model.code(loader)}` is `{name}` on one pass of the loop and holds a loader that "
                            f"`{acc}.prepare()` never returned")
                    yield Finding(where_read, f"{what}; every rank runs that pass over the full dataset (N processes do "
                                              f"the work of one, gathered metrics count each sample N times)",
                                  None if train else "warning", evidence=tuple(_loader_evidence(model, loader)))
                    continue
                # `prepare` returns a new, sharded loader and leaves its argument as it was: what
                # matters is whether the object iterated here is a result of `prepare`
                if any(model.was_prepared(o) for o in origins) and not _another_item_was_prepared(model, loader):
                    what = (f"`{name}` is iterated in {where} loop but holds the loader given to `{acc}.prepare()`, not the "
                            f"sharded one it returned")
                elif len(origins) == 1 and model.scope_of(next(iter(origins))) is not model.scope_of(loop):
                    what = (f"`{name}` (the `DataLoader` built on line {model.line_of(next(iter(origins)))}) is iterated in "
                            f"{where} loop but never passed to `{acc}.prepare()`")
                else:
                    what = f"`{name}` is iterated in {where} loop but never passed to `{acc}.prepare()`"
                yield Finding(where_read, _message(what, train), None if train else "warning",
                              evidence=tuple(_loader_evidence(model, loader)))

    def _through_composite(self, model: FileModel, loop: cst.For, composite: cst.BaseExpression,
                           value) -> Iterable[Finding]:
        origin = value.origin
        if not isinstance(origin, cst.Call):
            return
        inner = [arg for arg in composites.arguments_for(origin, model.objects.iterated_parameters(origin))
                 if (held := _held(model, arg)) is not None and _unprepared_origins(model, held) is not None]
        if not inner:
            return
        train = _trains(model, loop)
        if train is None:
            return
        where = "a training" if train else "an evaluation"
        loaders = ", ".join(f"`{model.code(arg)}`" for arg in inner)
        what = (f"`{model.code(composite)}` is iterated in {where} loop and iterates {loaders}, never prepared "
                f"(`prepare` returns a `{model.code(origin.func)}` unchanged)")
        evidence = [(origin, f"made by `{shorten(model.code(origin))}`: its class iterates the objects it is given, "
                             "and is no DataLoader `prepare` shards")]
        for arg in inner:
            evidence += _loader_evidence(model, arg)
        yield Finding(loop.iter, _message(what, train), None if train else "warning", evidence=tuple(evidence))


def _drawn_with_next(model: FileModel, loop: cst.For | cst.While) -> list[tuple[cst.BaseExpression, cst.Call]]:
    """The loaders whose batches the loop's own body draws with ``next(...)``: ``next(iter(dl))``,
    or ``next(it)`` where ``it = iter(dl)`` (a step loop over ``range``), with the ``next`` call."""
    found = []
    for call in model.calls_in(loop.body):
        if dotted_name(call.func) != "next" or not call.args or call.args[0].keyword is not None:
            continue
        if next((a for a in model.ancestors(call) if isinstance(a, (cst.For, cst.While))), None) is not loop:
            continue  # (an inner loop's own draw)
        source = call.args[0].value
        if isinstance(source, cst.Name):
            value = model.value_at(source)
            source = value.origin if value is not None and not value.alternatives else None
        if isinstance(source, cst.Call) and dotted_name(source.func) == "iter" and source.args \
                and source.args[0].keyword is None:
            found += [(loader, call) for loader in _iterated(source.args[0].value)]
    return found


def _splits_each_batch_by_rank(model: FileModel, loop: cst.For) -> bool:
    """The loop rebinds its batch from an expression that reads the rank (``batch = {k:
    split(v, accelerator.process_index, accelerator.num_processes) for k, v in batch.items()}``):
    every rank iterates the whole loader and keeps its own part of each batch."""
    if type(loop.target) is not cst.Name:
        return False
    batch = loop.target.value
    for node in model.index.walk(loop.body):
        if type(node) is cst.Assign and any(type(t.target) is cst.Name and t.target.value == batch
                                             for t in node.targets) and model.reads_rank(node.value):
            return True
    return False


def _held(model: FileModel, arg: cst.BaseExpression) -> Value | None:
    """The object an argument passes: what a name holds, or the loader a call builds in place."""
    if isinstance(arg, cst.Call):
        return Value(kind="loader", origin=arg) if model.objects.constructs_loader(arg) else None
    return model.value_at(arg)


def _item_on_some_pass(model: FileModel, loader: cst.BaseExpression) -> tuple[str, Value] | None:
    """``loaders[phase]`` inside ``for phase in ["train", "dev"]:`` (a literal list of string
    keys): every key is read on its own pass, so an item that is an unprepared loader is iterated
    for certain. (key, that item's value), the first such key; ``None`` otherwise."""
    if not (isinstance(loader, cst.Subscript) and len(loader.slice) == 1
            and isinstance(loader.slice[0].slice, cst.Index) and isinstance(loader.slice[0].slice.value, cst.Name)):
        return None
    variable = loader.slice[0].slice.value.value
    keys = None
    for parent in model.ancestors(loader):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            break
        if isinstance(parent, cst.For) and isinstance(parent.target, cst.Name) and parent.target.value == variable:
            if isinstance(parent.iter, (cst.List, cst.Tuple)) and parent.iter.elements and all(
                    isinstance(e.value, cst.SimpleString) for e in parent.iter.elements):
                keys = [e.value.evaluated_value for e in parent.iter.elements]
            break
    base = model.value_at(loader.value) if keys else None
    for key in keys or ():
        item = item_of(base, key)
        if item is not None and _unprepared_origins(model, item) is not None:
            return key, item
    return None


def _loader_evidence(model: FileModel, loader: cst.BaseExpression) -> list:
    """Where the loader was made: its value's evidence, or the call that builds it in place."""
    return model.value_evidence(loader) or [(loader, f"made by `{shorten(model.code(loader))}`: a loader")]


def _message(what: str, train: bool) -> str:
    if train:
        return f"{what}; every rank trains on the full dataset, so N processes do the work of one"
    return f"{what}; every rank evaluates the full dataset and gathered metrics count each sample N times"


def _another_item_was_prepared(model: FileModel, loader: cst.BaseExpression) -> bool:
    """``loaders["val"]`` of a container whose ``loaders["train"]`` went to ``prepare``: both
    items were built by one comprehension (one origin), and this one never reached it."""
    if not isinstance(loader, cst.Subscript):
        return False
    base = dotted_name(loader.value)
    given = [a.value for call in model.objects.prepare_calls for a in call.args if isinstance(a.value, cst.Subscript)
             and dotted_name(a.value.value) == base]
    return bool(given) and all(model.code(g) != model.code(loader) for g in given)


def _unprepared_origins(model: FileModel, value) -> frozenset | None:
    """Where an unprepared DataLoader ``value`` was built, when every path made it in this file
    (or a function of the tree returned it plain) and nothing shards it; else ``None``."""
    if value.prepared != NO or value.kind != "loader":
        return None
    origins = value.origins()
    if not origins or not all(isinstance(o, cst.Call) and (
            model.objects.constructs_loader(o)
            or model.objects.returned_kinds.get(model.code(o.func)) == "loader") for o in origins):
        return None  # (a loader another module's function makes: that module showed it plain)
    if any(model.loader_shards_itself(o) for o in origins):
        return None
    if all(_over_data_of_this_rank(model, o) for o in origins):
        return None  # a replay buffer filled from this rank's share of a prepared loader
    return origins


def _trains(model: FileModel, loop: cst.For) -> bool | None:
    """True for a training loop, False for an evaluation loop, None for neither."""
    body_calls = model.calls_in(loop.body)
    # training: accelerator.backward, or a raw `.backward()` / optimizer step (AL101's bug on top
    # of this one: the loop still trains)
    if any(model.performs(c, "BACKWARD") or _raw_training_call(model, c) for c in body_calls):
        return True
    if any(_forwards_prepared_model(model, c) for c in body_calls):
        return False
    return None


def _raw_training_call(model: FileModel, call: cst.Call) -> bool:
    func = call.func
    if not isinstance(func, cst.Attribute):
        return False
    if func.attr.value == "backward" and not call.args:
        return True
    return func.attr.value == "step" and model.prepared_kind(func.value) == "optimizer"


_FILLING_METHODS = frozenset({"append", "extend", "add", "insert", "push", "put"})


def _over_data_of_this_rank(model: FileModel, origin: cst.Call) -> bool:
    """The loader's dataset is a name this function fills (``buffer.append(...)``, ``+=``,
    ``buffer[k] = ...``) only inside loops over a prepared loader: what it holds comes from this
    rank's share of that loader (rollouts of an RL trainer), so it is already this rank's."""
    data = next((a.value for a in origin.args if a.keyword is None or a.keyword.value == "dataset"), None)
    if type(data) is cst.Call:  # `DataLoader(ExperienceDataset(self.buffer, ...))`: the rows it wraps
        data = next((a.value for a in data.args if a.keyword is None and not a.star), None)
    if type(data) is cst.Attribute and type(data.value) is cst.Name and data.value.value == "self":
        return _filled_with_rank_data(model, model.scope_of(origin), data.attr.value)
    if type(data) is not cst.Name:
        return False
    fills = []
    for node in model.index.walk(model.scope_of(origin)):
        if _fills(node, data.value):
            fills.append(node)
        elif type(node) is cst.AugAssign and type(node.target) is cst.Name and node.target.value == data.value:
            fills.append(node)
        elif type(node) is cst.AssignTarget and type(node.target) is cst.Subscript \
                and type(node.target.value) is cst.Name and node.target.value.value == data.value:
            fills.append(node)
    if not fills:
        return False
    for fill in fills:
        loops = [p for p in model.ancestors(fill) if type(p) is cst.For]
        if not any((iterated := _unwrap(loop.iter)) is not None and model.prepared_kind(iterated) == "loader"
                   for loop in loops):
            return False
    return True


def _fills(node: cst.CSTNode, container: str) -> bool:
    """``node`` is a call that puts something into ``container`` (``buffer.append(x)``)."""
    return type(node) is cst.Call and type(node.func) is cst.Attribute and node.func.attr.value in _FILLING_METHODS \
        and dotted_name(node.func.value) == container


def _filled_with_rank_data(model: FileModel, scope, attribute: str) -> bool:
    """``self.<attribute>`` is a buffer the methods of the class fill (``.append(x)``,
    ``.extend(x)``) only with values this rank computed (a model's outputs: the rollouts of an RL
    trainer), so what it holds is this rank's own."""
    cls = model.index.class_of(scope)
    if cls is None:
        return False
    fills = [node for method in cls.methods.values() for node in model.index.walk(method)
             if _fills(node, f"self.{attribute}")]
    return bool(fills) and all(
        node.args and all(model.rank_data.varies(a.value) for a in node.args) for node in fills)


def _unwrap(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The one object a loop over ``expr`` iterates (``enumerate(dl)``, ``tqdm(dl)``), else ``None``."""
    found = _iterated(expr)
    return found[0] if len(found) == 1 else None


# calls a loop iterates through: the first argument, or (zip, chain) every positional one
_THROUGH_FIRST = frozenset({"enumerate", "tqdm", "iter", "cycle"})
_THROUGH_EACH = frozenset({"zip", "chain"})


def _iterated(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The objects a loop over ``expr`` iterates: ``dl`` for ``enumerate(tqdm(dl))``, both
    loaders of ``zip(train_dl, aux_dl)``."""
    if isinstance(expr, cst.Call):
        func = expr.func
        fname = func.value if isinstance(func, cst.Name) else (func.attr.value if isinstance(func, cst.Attribute) else None)
        positional = [a.value for a in expr.args if a.keyword is None and not a.star]
        if fname in _THROUGH_FIRST and positional:
            return _iterated(positional[0])
        if fname in _THROUGH_EACH:
            return [inner for arg in positional for inner in _iterated(arg)]
        return [expr]  # (a loader built in place: `for batch in DataLoader(ds):`)
    if isinstance(expr, (cst.Name, cst.Attribute, cst.Subscript)):
        return [expr]
    return []


def _forwards_prepared_model(model: FileModel, call: cst.Call) -> bool:
    func = call.func
    target = func.value if isinstance(func, cst.Attribute) and func.attr.value == "generate" else func
    value = model.value_at(target)
    return value is not None and value.kind == "model" and value.prepared in (YES, MAYBE)
