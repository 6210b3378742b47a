from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from .base import Finding, Rule, quote


class DoubleSharding(Rule):
    """Data already split per rank, then sharded again by `prepare`.

    ## What it does
    Flags a `DataLoader(...)` passed to `accelerator.prepare` whose data is already split per
    rank: a `DistributedSampler` as its sampler, a dataset from `ds.shard(num_shards=...,
    index=<rank>)`, or a slice that starts at the rank (`data[rank::world_size]`).
    Not flagged: per-rank splits used without `prepare` (inference with
    `split_between_processes`); rank slicing of seeds or file names; `DistributedSampler(...,
    num_replicas=1)` (one part: the whole dataset); a loader whose prepared result is thrown away
    (`model, opt, _ = accelerator.prepare(model, opt, loader)`).

    ## Why is this bad?
    `prepare` shards the loader again (`BatchSamplerShard`/`IterableDatasetShard`) without
    checking: each rank sees about 1/num_processes² of the data and nothing fails. Uneven
    per-rank counts can also hang per-batch collectives.

    ## Example
    ```python
    sampler = DistributedSampler(train_ds)
    train_dl = DataLoader(train_ds, sampler=sampler, batch_size=16)
    train_dl = accelerator.prepare(train_dl)
    ```

    ## Use instead
    ```python
    train_dl = DataLoader(train_ds, shuffle=True, batch_size=16)
    train_dl = accelerator.prepare(train_dl)   # prepare() shards it
    ```
    """

    code = "AL205"
    name = "double-sharding"
    severity = "warning"
    summary = "data split per rank (DistributedSampler, shard, rank slice) and sharded again by prepare()"

    VALID = [
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler
        accelerator = Accelerator()
        train_dl = accelerator.prepare(DataLoader(train_ds, shuffle=True, batch_size=16))
        eval_dl = DataLoader(eval_ds, sampler=DistributedSampler(eval_ds))
        """,
        # one replica is the whole dataset; and the loader prepare returned is thrown away
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler
        accelerator = Accelerator()
        loader = DataLoader(ds, sampler=DistributedSampler(ds, num_replicas=1, rank=0))
        whole = DataLoader(ds, sampler=DistributedSampler(ds))
        model, optimizer, _ = accelerator.prepare(model, optimizer, whole)
        model, sharded = accelerator.prepare(model, loader)
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler
        accelerator = Accelerator()
        sampler = DistributedSampler(train_ds)
        train_dl = DataLoader(train_ds, sampler=sampler, batch_size=16)  # expect: AL205
        shard = full_ds.shard(num_shards=accelerator.num_processes, index=accelerator.process_index)
        other_dl = DataLoader(shard, batch_size=16)  # expect: AL205
        train_dl, other_dl = accelerator.prepare(train_dl, other_dl)
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for prepare in model.objects.prepare_calls:
            discarded = model.objects.discarded_results(prepare)
            for position, arg in enumerate(prepare.args):
                if position in discarded:
                    continue  # the loader prepare returned is thrown away: the program iterates its own
                loader = _loader_call(model, arg.value)
                if loader is None:
                    continue
                how = _per_rank_split(model, loader)
                if how is not None:
                    evidence = [(prepare, f"`{model.code(prepare.func)}(...)` returned it sharded here")]
                    made = _dataset_of(model, loader)
                    if made is not None and model.splits_per_rank(made) is not None:
                        evidence.append((made, f"made by `{model.code(made.func)}(...)`: its class keeps this rank's "
                                               f"rows only"))
                    yield Finding(loader, f"the data of this DataLoader is already split per rank ({how}) and "
                                          f"`prepare()` shards it again: each rank sees about 1/num_processes² of "
                                          f"it; drop the manual split",
                                  evidence=tuple(evidence))


def _loader_call(model: FileModel, expr: cst.BaseExpression) -> cst.Call | None:
    if isinstance(expr, cst.Call) and model.code(expr.func).rsplit(".", 1)[-1] == "DataLoader":
        return expr
    value = model.value_at(expr)
    origin = value.origin if value is not None else None
    if isinstance(origin, cst.Call) and model.code(origin.func).rsplit(".", 1)[-1] == "DataLoader":
        return origin
    return None


def _origin(model: FileModel, expr: cst.BaseExpression) -> cst.BaseExpression:
    value = model.value_at(expr)
    origin = value.origin if value is not None else None
    return origin if isinstance(origin, cst.BaseExpression) and origin is not expr else expr


def _dataset_of(model: FileModel, loader: cst.Call) -> cst.BaseExpression | None:
    """What made the loader's dataset (its first positional or ``dataset=`` argument)."""
    data = next((a.value for a in loader.args if a.keyword is None or a.keyword.value == "dataset"), None)
    return _origin(model, data) if data is not None else None


def _per_rank_split(model: FileModel, loader: cst.Call) -> str | None:
    for arg in loader.args:
        if arg.keyword is not None and arg.keyword.value in ("sampler", "batch_sampler"):
            if model.sampler_shards(arg.value):
                return f"the sampler {quote(model.code(_origin(model, arg.value)), 60)}"
    data = _dataset_of(model, loader)
    if data is None:
        return None
    split = model.splits_per_rank(data)
    if split is not None:
        return f"`{model.code(data.func)}` keeps only the rows where `{split}`"
    if isinstance(data, cst.Call) and isinstance(data.func, cst.Attribute) and data.func.attr.value == "shard":
        index = next((a.value for a in data.args if a.keyword is not None and a.keyword.value == "index"), None)
        if index is not None and model.ranks.is_rank_dependent(index):
            return f"`{model.code(data.func)}(index={model.code(index)})`"
    if isinstance(data, cst.Subscript):
        for element in data.slice:
            piece = element.slice
            if isinstance(piece, cst.Slice) and piece.lower is not None and model.ranks.is_rank_dependent(piece.lower):
                return f"the slice `{model.code(data)}`"
    return None
