from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel, dotted_name
from .base import Finding, Rule, quote

# random splits and the keyword that fixes their draw
_SPLIT_FUNCTIONS = {
    "torch.utils.data.random_split": "generator",
    "torch.utils.data.dataset.random_split": "generator",
    "sklearn.model_selection.train_test_split": "random_state",
}
_SPLIT_METHODS = {"train_test_split": "seed"}  # `datasets.Dataset.train_test_split(seed=...)`
# methods that reorder a dataset: only reported with a seed computed from the rank (without a
# seed, what `.shuffle()` draws from depends on the object, which the model does not know)
_SHUFFLE_METHODS = {"shuffle": "seed"}  # `datasets.Dataset.shuffle(seed=...)`
# calls that seed the process's global generators (torch, numpy, random)
_SEEDERS = frozenset({"accelerate.utils.set_seed", "accelerate.utils.random.set_seed", "transformers.set_seed",
                      "transformers.trainer_utils.set_seed", "torch.manual_seed", "numpy.random.seed", "random.seed",
                      "lightning.seed_everything", "pytorch_lightning.seed_everything"})


# the draws of Python's and numpy's global generators, and what seeds each of them: each process
# seeds them from the operating system's entropy, so unseeded they differ on every rank
_GLOBAL_DRAWS = {
    "random": frozenset({"random.shuffle", "random.randint", "random.sample", "random.choice", "random.choices",
                         "random.random", "random.randrange", "random.uniform"}),
    "numpy": frozenset({"numpy.random.shuffle", "numpy.random.permutation", "numpy.random.randint",
                        "numpy.random.choice", "numpy.random.rand", "numpy.random.random"}),
}
_GLOBAL_SEEDERS = {
    "random": frozenset({"random.seed", "accelerate.utils.set_seed", "accelerate.utils.random.set_seed",
                         "transformers.set_seed", "transformers.trainer_utils.set_seed",
                         "lightning.seed_everything", "pytorch_lightning.seed_everything"}),
    "numpy": frozenset({"numpy.random.seed", "accelerate.utils.set_seed", "accelerate.utils.random.set_seed",
                        "transformers.set_seed", "transformers.trainer_utils.set_seed",
                        "lightning.seed_everything", "pytorch_lightning.seed_everything"}),
}


class RankDivergentData(Rule):
    """A random split or sampling order that differs on every rank, feeding a prepared loader.

    ## What it does
    Flags `random_split(...)`, `train_test_split(...)` (scikit-learn) and a dataset's
    `.train_test_split(...)` whose result is iterated through a prepared `DataLoader`, when the
    draw is not the same on every rank: no `generator=` / `random_state=` / `seed=` and no
    global seed set in the file (`set_seed(seed)`, `torch.manual_seed(seed)`: before it in the
    same function, or anywhere in another), a seed set only with
    `set_seed(seed, device_specific=True)`, or a seed computed from the rank. Also flags a
    dataset's `.shuffle(seed=...)` with a seed computed from the rank (`seed + process_index`)
    whose result feeds a prepared loader, and a sampler of a class of the file that draws its
    order from Python's `random` or numpy's global generator when nothing in the file seeds it
    (`set_seed`, `random.seed`, `numpy.random.seed`), given to a loader `prepare` shards.
    Not flagged: a split with a fixed seed or generator; a split after a plain `set_seed(seed)`;
    a split made under a rank guard or `main_process_first()` (one rank decides); a split whose
    result reaches no prepared loader.

    ## Why is this bad?
    Every rank builds its own dataset before `prepare` shards it by index. With different
    splits the shards overlap and leave gaps: some samples are never trained on, and held-out
    samples train on other ranks, so validation scores are inflated. Nothing fails.

    Measured on 2 CPU ranks (gloo, `fixtures/matrix/al206_rank_divergent_data_bad.py`): the
    two ranks held out different samples, and 12 of the held-out samples were trained on by
    the other rank.

    ## Example
    ```python
    train_set, val_set = random_split(dataset, [0.9, 0.1])
    train_loader = accelerator.prepare(DataLoader(train_set, batch_size=32))
    ```

    ## Use instead
    ```python
    train_set, val_set = random_split(dataset, [0.9, 0.1], generator=torch.Generator().manual_seed(42))
    train_loader = accelerator.prepare(DataLoader(train_set, batch_size=32))
    ```
    """

    code = "AL206"
    name = "rank-divergent-data"
    severity = "warning"
    summary = "a random split or order that differs on every rank feeds a prepared loader: shards overlap and leak"

    VALID = [
        # the same order on every rank (a fixed seed), or an object whose shuffle is not known
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        pairs = raw_pairs.shuffle(seed=1234)
        loader = accelerator.prepare(DataLoader(pairs, batch_size=16))
        other = accelerator.prepare(DataLoader(pool.shuffle(), batch_size=16))
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, random_split
        accelerator = Accelerator()
        train_set, val_set = random_split(dataset, [0.9, 0.1], generator=torch.Generator().manual_seed(0))
        loader = accelerator.prepare(DataLoader(train_set, batch_size=8))
        """,
        """\
        from accelerate import Accelerator
        from accelerate.utils import set_seed
        from torch.utils.data import DataLoader, random_split
        accelerator = Accelerator()
        set_seed(42)
        train_set, val_set = random_split(dataset, [0.9, 0.1])
        loader = accelerator.prepare(DataLoader(train_set, batch_size=8))
        """,
        """\
        import random
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        class Shuffled:
            def __init__(self, n):
                self.order = list(range(n))

            def __iter__(self):
                random.shuffle(self.order)
                return iter(self.order)

        random.seed(0)  # every rank draws the same order
        accelerator = Accelerator()
        loader = accelerator.prepare(DataLoader(data, sampler=Shuffled(len(data))))
        """,
    ]
    INVALID = [
        """\
        import random
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        class Shuffled:
            def __init__(self, n):
                self.order = list(range(n))

            def __iter__(self):
                random.shuffle(self.order)
                return iter(self.order)

        accelerator = Accelerator()
        sampler = Shuffled(len(data))  # expect: AL206
        loader = accelerator.prepare(DataLoader(data, sampler=sampler))
        """,
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        rank_seed = 1234 + accelerator.process_index
        pairs = raw_pairs.shuffle(seed=rank_seed)  # expect: AL206
        pairs = pairs.select(range(10_000))
        loader = accelerator.prepare(DataLoader(pairs, batch_size=16))
        """,
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, random_split
        accelerator = Accelerator()
        train_set, val_set = random_split(dataset, [0.9, 0.1])  # expect: AL206
        loader = accelerator.prepare(DataLoader(train_set, batch_size=8))
        """,
        """\
        from accelerate import Accelerator
        from accelerate.utils import set_seed
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        set_seed(42, device_specific=True)
        splits = raw.train_test_split(test_size=0.1)  # expect: AL206
        loader = accelerator.prepare(DataLoader(splits["train"], batch_size=8))
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        order = model.index.call_order
        seeders = [c for c in model.index.calls if (model.index.imports.qualify_expr(c.func) or "") in _SEEDERS]
        for call in model.index.calls:
            keyword = _seed_keyword(model, call)
            if keyword is None or model.rank_guard_of(call) is not None or _in_main_process_first(model, call):
                continue
            seed = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == keyword), None)
            if seed is None and _is_shuffle(call):
                continue
            if seed is not None:
                if not model.reads_rank(seed):
                    continue  # a fixed seed or generator
                why = f"its `{keyword}=` is computed from the rank"
            else:
                # a seed earlier in the same function, or anywhere in another one (whether it runs
                # first is not known: then it may have, and nothing is reported)
                scope = model.scope_of(call)
                earlier = [s for s in seeders if model.scope_of(s) is not scope or order.get(s, -1) < order[call]]
                if any(not _device_specific(s) for s in earlier):
                    continue  # the global generators may be seeded the same on every rank
                why = (f"no `{keyword}=` is given and the seed is per device (`device_specific=True`)" if earlier
                       else f"no `{keyword}=` is given and no seed is set before it, so each process draws its own")
            loader = _prepared_loader_fed_by(model, call)
            if loader is None:
                continue
            if _is_shuffle(call):
                message = (f"{quote(model.code(call.func) + '(...)')} orders the data differently on every rank: {why}; "
                           f"`prepare` then gives each rank its share of a different order, so some samples train on "
                           f"several ranks and others on none; pass the same `{keyword}=` on every rank")
            else:
                message = (f"{quote(model.code(call.func) + '(...)')} splits differently on every rank: {why}; "
                           f"`prepare` then shards different datasets, so samples are skipped and held-out ones "
                           f"train on other ranks; pass a fixed `{keyword}=`")
            yield Finding(call, message, evidence=((loader, "the split reaches this prepared loader"),))
        yield from _unseeded_samplers(model)


def _unseeded_samplers(model: FileModel) -> Iterable[Finding]:
    """A sampler of a class of this file that draws its order from Python's or numpy's global
    generator, which nothing in the file seeds, given to a loader ``prepare`` shards."""
    qualify = model.index.imports.qualify_expr
    seeded = {family for family, seeders in _GLOBAL_SEEDERS.items()
              if any((qualify(c.func) or "") in seeders for c in model.index.calls)}
    if seeded == set(_GLOBAL_DRAWS):
        return
    for loader in model.objects.prepared_origins:
        if not (isinstance(loader, cst.Call) and model.objects.constructs_loader(loader)):
            continue
        for arg in loader.args:
            if arg.keyword is None or arg.keyword.value not in ("sampler", "batch_sampler"):
                continue
            value = model.value_at(arg.value)
            made = value.origin if value is not None and isinstance(value.origin, cst.Call) else arg.value
            cls = model.index.classes.get(dotted_name(made.func) or "") if isinstance(made, cst.Call) else None
            if cls is None:
                continue
            calls = [c for c in model.index.calls if model.index.class_of(model.scope_of(c)) is cls]  # its methods'
            draw = next((c for c in calls for family, draws in _GLOBAL_DRAWS.items()
                         if family not in seeded and (qualify(c.func) or "") in draws), None)
            if draw is None:
                continue
            yield Finding(made, f"{quote(model.code(made.func) + '(...)')} draws its order from "
                                f"`{model.code(draw.func)}()`, which nothing in the file seeds: each process seeds "
                                f"it on its own, so every rank draws a different order and `prepare` gives each "
                                f"rank its share of a different one (some samples train on several ranks, others "
                                f"on none); seed it the same on every rank (`set_seed(seed)`)",
                          evidence=((draw, "an unseeded draw of the process's global generator"),
                                    (loader, "the loader `prepare` shards")))


def _seed_keyword(model: FileModel, call: cst.Call) -> str | None:
    qualified = model.index.imports.qualify_expr(call.func) or ""
    if qualified in _SPLIT_FUNCTIONS:
        return _SPLIT_FUNCTIONS[qualified]
    if isinstance(call.func, cst.Attribute) and call.func.attr.value in _SPLIT_METHODS \
            and not qualified.startswith("sklearn"):
        return _SPLIT_METHODS[call.func.attr.value]
    if _is_shuffle(call):
        return _SHUFFLE_METHODS[call.func.attr.value]
    return None


def _is_shuffle(call: cst.Call) -> bool:
    return isinstance(call.func, cst.Attribute) and call.func.attr.value in _SHUFFLE_METHODS


def _device_specific(seeder: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "device_specific" and isinstance(a.value, cst.Name)
               and a.value.value == "True" for a in seeder.args)


def _in_main_process_first(model: FileModel, call: cst.Call) -> bool:
    return any(isinstance(p, cst.With) and any(
        isinstance(i.item, cst.Call) and (dotted_name(i.item.func) or "").endswith("main_process_first")
        for i in p.items) for p in model.ancestors(call))


def _prepared_loader_fed_by(model: FileModel, split: cst.Call) -> cst.Call | None:
    """A ``DataLoader(...)`` that ``prepare`` received, built from what the split's statement
    bound (``train_set`` of ``train_set, val_set = random_split(...)``, or ``splits["train"]``)."""
    statement = model.index.parents.get(split)
    if not isinstance(statement, cst.Assign):
        return None
    bound = {dotted_name(e.value) for t in statement.targets
             for e in (t.target.elements if isinstance(t.target, (cst.Tuple, cst.List)) else [cst.Element(t.target)])}
    bound.discard(None)
    scope = model.scope_of(split)
    for call in model.calls_in(scope):
        if not model.objects.constructs_loader(call) or not call.args or not model.was_prepared(call):
            continue
        data = call.args[0].value
        if isinstance(data, cst.Subscript):
            data = data.value
        if dotted_name(data) in bound and model.index.call_order.get(call, -1) > model.index.call_order[split]:
            return call
    return None
