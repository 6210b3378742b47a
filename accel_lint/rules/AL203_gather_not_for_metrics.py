from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import FileModel, last_attr
from ..model.samples import per_sample
from .base import Finding, Fix, Rule

_ACCUMULATE_METHODS = {"add_batch", "update", "append", "extend"}
_CONCAT = {"torch.cat", "torch.concat", "torch.concatenate", "numpy.concatenate", "np.concatenate", "torch.stack"}


class GatherNotForMetrics(Rule):
    """`accelerator.gather()` feeding metrics in an evaluation loop.

    ## What it does
    Flags `accelerator.gather(x)` (or `accelerate.utils.gather(x)`) inside a loop over a
    prepared evaluation loader when the gathered value goes into metric accumulation:
    `metric.add_batch(...)`, `.update(...)`, `.append(...)`, `.extend(...)`,
    `torch.cat`/`np.concatenate`, or `+=` (also item by item: `for s in gathered: ids.append(s)`);
    and `accelerator.gather_object(x)` there when `x` has
    one entry per sample of the batch. An evaluation loop iterates a prepared loader under
    `torch.no_grad()`/`inference_mode()`, or runs no backward and puts its prepared model in
    `eval()` mode or its forward under `no_grad`.
    Also flags a gather after such a loop (`accelerator.gather`, `accelerate.utils.gather` or
    `gather_object`, `torch.distributed.all_gather_object` or `all_gather`) of a list the loop
    filled sample by sample (`results.extend(...)`, or `.append`/`+=` of a value with the
    batch's rows), alone or through `torch.cat`/`torch.tensor`/`np.concatenate`; and
    `gather_for_metrics` after such a loop of a running total the loop adds to (`total += ...`):
    outside the loop it does not cut the padding.
    Not flagged: `gather` in training code (losses, statistics); loops that truncate by
    hand (`samples_seen`, `[: len(eval_dataset) ...]`, or `[:n]` where `n` holds such a count,
    also as a parameter every caller fills with one); loaders built with
    `drop_last=True` or an accelerator with `even_batches=False`.

    ## Why is this bad?
    With `even_batches=True` (the default) the prepared loader pads the last round with
    samples from the start of the dataset so that every rank gets a full batch.
    `gather` keeps those duplicates, so the metric is computed over more samples than the
    dataset has (12 for 9 in Accelerate's own test). `gather_for_metrics` drops them.

    ## Example
    ```python
    model.eval()
    for batch in eval_dl:
        preds = model(**batch).logits.argmax(-1)
        metric.add_batch(predictions=accelerator.gather(preds), references=accelerator.gather(batch["labels"]))
    ```

    ## Use instead
    ```python
    model.eval()
    for batch in eval_dl:
        preds = model(**batch).logits.argmax(-1)
        preds, refs = accelerator.gather_for_metrics((preds, batch["labels"]))
        metric.add_batch(predictions=preds, references=refs)
    ```

    ## Fix safety
    `accelerator.gather` -> `accelerator.gather_for_metrics`, which has the same signature.
    It assumes that the gathered value has one row per sample of the batch, because
    `gather_for_metrics` drops the last batch's padding by counting rows along the first
    dimension. The fix is safe only where the model shows that: the loop's batch or a field
    of it, a forward of the prepared model on it (fields other than `loss`), and
    element-wise operations or `argmax(dim=-1)` of those. Otherwise it is unsafe: on a
    per-rank scalar (`gather(loss).mean()`) the cut drops whole ranks' values and changes
    the metric. No fix for the function form `accelerate.utils.gather`.
    """

    code = "AL203"
    name = "gather-not-for-metrics"
    severity = "warning"
    summary = "gather() in an evaluation loop keeps the duplicated padding samples; use gather_for_metrics()"

    VALID = [
        # one value per batch (a norm over every dimension, the loss field): no row per sample
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(make_model(), DataLoader(val_set, batch_size=8))
        model.eval()
        norms, losses = [], []
        with torch.no_grad():
            for batch in loader:
                outputs = model(batch["image"])
                norms.append((outputs["xyz"] - batch["xyz"]).norm(2))
                losses.append(outputs["loss"])
        norms = accelerator.gather_for_metrics(torch.stack(norms))
        losses = accelerator.gather_for_metrics(torch.stack(losses))
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(make_model(), DataLoader(test_set, batch_size=8))
        model.eval()
        labels = []
        for batch in loader:
            with torch.no_grad():
                logits = model(batch["x"])
            labels.extend(accelerator.gather_for_metrics(logits.argmax(-1).tolist(), use_gather_object=True))
            counts = accelerator.gather_object([len(batch["x"])])
        """,
        """\
        from accelerate import Accelerator
        import torch
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        train_dl = DataLoader(dataset, batch_size=8)
        model, optimizer, train_dl = accelerator.prepare(model, optimizer, train_dl)
        for batch in train_dl:
            loss = model(**batch).loss
            losses.append(accelerator.gather(loss))
            accelerator.backward(loss)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        eval_dl = DataLoader(dataset, batch_size=8)
        model, eval_dl = accelerator.prepare(model, eval_dl)
        samples_seen = 0
        for step, batch in enumerate(eval_dl):
            with torch.no_grad():
                preds = model(**batch).logits.argmax(-1)
            preds = accelerator.gather(preds)
            if step == len(eval_dl) - 1:
                preds = preds[: len(eval_dl.dataset) - samples_seen]
            metric.add_batch(predictions=preds)
        """,
        """\
        import torch
        import torch.distributed as dist
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(model, DataLoader(test_set, batch_size=8))
        answers = []
        with torch.no_grad():
            for batch in loader:
                answers.extend(decode(model.generate(batch["input_ids"])))
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, answers)
        answers = [a for part in everyone for a in part][: len(test_set)]
        """,
    ]
    INVALID = [
        # loaders of one dict prepared in two calls: each item keeps what it is
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        def make_loaders(datasets):
            train = DataLoader(datasets["train"], batch_size=8, shuffle=True)
            valid = DataLoader(datasets["valid"], batch_size=8)
            test = DataLoader(datasets["test"], batch_size=8)
            return {"train": train, "valid": valid, "test": test}
        accelerator = Accelerator()
        loaders = make_loaders(datasets)
        loaders["train"], loaders["valid"] = accelerator.prepare(loaders["train"], loaders["valid"])
        loaders["test"] = accelerator.prepare(loaders["test"])
        model = accelerator.prepare(torch.nn.Linear(4, 2))
        model.eval()
        with torch.no_grad():
            for x, y in loaders["test"]:
                metric.update(accelerator.gather(model(x)), y)  # expect: AL203
        """,
        # each gathered row appended one by one
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(torch.nn.Linear(4, 1), DataLoader(eval_set, batch_size=8))
        model.eval()
        ids = []
        with torch.no_grad():
            for batch in loader:
                gathered = accelerator.gather(batch["id"])  # expect: AL203
                for sample_id in gathered:
                    ids.append(sample_id.cpu())
                model(batch["x"])
        """,
        # a per-sample error (a field of the outputs minus a field of a dict of the batch's
        # fields, reduced over the last dimension), kept under a test and gathered after the loop
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(make_model(), DataLoader(val_set, batch_size=8))
        model.eval()
        errors = []
        with torch.no_grad():
            for batch in loader:
                targets = {"xyz": batch["xyz"], "mask": batch["mask"]}
                outputs = model(batch["image"])
                if "xyz" in outputs:
                    error = (outputs["xyz"] - targets["xyz"]).norm(dim=-1)
                    errors.append(error)
        errors = accelerator.gather_for_metrics(torch.cat(errors))  # expect: AL203
        """,
        """\
        import torch
        import evaluate
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSpeechSeq2Seq
        accelerator = Accelerator()
        metric = evaluate.load("wer")
        model = AutoModelForSpeechSeq2Seq.from_pretrained("whisper-tiny")
        eval_dl = DataLoader(eval_set, batch_size=8)
        model, eval_dl = accelerator.prepare(model, eval_dl)
        model.eval()
        for batch in eval_dl:
            with torch.no_grad():
                ids = model.generate(batch["inputs"])
            ids = accelerator.gather(ids)  # expect: AL203
            texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
            metric.add_batch(predictions=texts, references=batch["text"])
        """,
        """\
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model, eval_dl = accelerator.prepare(model, DataLoader(eval_ds, batch_size=8))
        model.eval()
        for batch in eval_dl:
            preds = model(**batch).logits.argmax(-1)
            metric.add_batch(predictions=accelerator.gather(preds))  # expect: AL203
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model, loader = accelerator.prepare(model, DataLoader(test_ds, batch_size=8))
        all_preds = []
        with torch.no_grad():
            for batch in loader:
                logits = model(**batch).logits
                gathered = accelerator.gather(logits)  # expect: AL203
                all_preds.append(gathered)
        """,
        """\
        import torch
        import torch.distributed as dist
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from tqdm import tqdm
        accelerator = Accelerator()
        model, loader = accelerator.prepare(model, DataLoader(test_set, batch_size=8))
        answers = []
        with torch.no_grad():
            for batch in tqdm(loader):
                answers.extend(decode(model.generate(batch["input_ids"])))
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, answers)  # expect: AL203
        score(everyone)
        """,
        """\
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        accelerator = Accelerator()
        model, loader = accelerator.prepare(make_model(), DataLoader(test_set, batch_size=8))
        model.eval()
        labels = []
        for batch in loader:
            with torch.no_grad():
                logits = model(batch["x"])
            labels.extend(accelerator.gather_object(logits.argmax(-1).tolist()))  # expect: AL203
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        if "even_batches" in model.index.identifiers and _even_batches_off(model):
            return
        for call in model.index.calls:
            if _is_gather_object(model, call):
                yield from _gathered_objects_in_the_loop(model, call)
            if not _is_gather(model, call):
                if call.args and "gather" in model.code(call.func):
                    yield from _gathered_after_the_loop(model, call)
                continue
            loop = _enclosing_eval_loop(model, call)
            if loop is None:
                yield from _gathered_after_the_loop(model, call)
                continue
            if _truncates_by_hand(model, loop, call) or _drops_last(model, loop):
                continue
            if not _feeds_accumulation(model, call, loop):
                continue
            fix = None
            if isinstance(call.func, cst.Attribute) and model.is_accelerator(call.func.value):
                # the padding is cut by counting rows: right only for a value with the batch's rows
                rows_are_samples = len(call.args) == 1 and per_sample(model, call.args[0].value, loop)
                fix = Fix("safe" if rows_are_samples else "unsafe", "use `gather_for_metrics`",
                          ((call.func, call.func.with_changes(attr=cst.Name("gather_for_metrics"))),))
            receiver = model.code(call.func.value) if isinstance(call.func, cst.Attribute) else "accelerator"
            yield Finding(
                call,
                f"`{model.code(call.func)}()` in an evaluation loop keeps the samples the prepared loader duplicated to "
                f"even out the last batch, so the metric counts some samples twice; use "
                f"`{receiver}.gather_for_metrics()`",
                fix=fix,
                evidence=tuple(model.value_evidence(_loop_iterable(model, loop))),
            )


# gathers of what each rank collected, by the position of the gathered argument
_GATHER_FUNCTIONS = {"accelerate.utils.gather": 0, "accelerate.utils.operations.gather": 0,
                     "accelerate.utils.gather_object": 0, "accelerate.utils.operations.gather_object": 0,
                     "torch.distributed.all_gather_object": 1, "torch.distributed.all_gather": 1}
# calls that turn a list of results into one value (or a tensor) with the same items
_AS_ONE = _CONCAT | {"torch.tensor", "torch.as_tensor", "numpy.array", "np.array", "numpy.asarray", "list"}


def _gathered_after_the_loop(model: FileModel, call: cst.Call) -> Iterable[Finding]:
    """A gather, after an evaluation loop over a prepared loader, of a list that loop filled one
    sample at a time (``results.extend(decoded)``, ``preds.append(logits.argmax(-1))``): every
    rank's list holds the padding samples of its last batch, and nothing drops them."""
    func = call.func
    for_metrics = False
    if isinstance(func, cst.Attribute) and func.attr.value in ("gather", "gather_for_metrics") \
            and model.is_accelerator(func.value):
        # outside the loop `gather_for_metrics` does not know where the data ends: it gathers
        for_metrics = func.attr.value == "gather_for_metrics"
        position, receiver = 0, model.code(func.value)
    else:
        position = _GATHER_FUNCTIONS.get(model.index.imports.qualify_expr(func) or "")
        receiver = None
    if position is None or len(call.args) <= position or call.args[position].keyword is not None:
        return
    gathered = call.args[position].value
    while isinstance(gathered, cst.Call) and gathered.args and (
            model.index.imports.qualify_expr(gathered.func) or model.code(gathered.func)) in _AS_ONE:
        gathered = gathered.args[0].value
    if type(gathered) is not cst.Name:
        return
    scope = model.scope_of(call)
    gather_line = model.line_of(call)
    around = set(model.ancestors(call))
    for loop in model.index.loops:
        if type(loop) is not cst.For or model.scope_of(loop) is not scope or model.line_of(loop) >= gather_line \
                or loop in around:
            continue
        if model.prepared_kind(_loop_iterable(model, loop)) != "loader" or not _is_eval_context(model, loop):
            continue
        summed = for_metrics and _sums_in(model, gathered.value, loop)
        if not summed and not _fills_per_sample(model, gathered.value, loop):
            continue
        if _truncates_by_hand(model, loop, call) or _drops_last(model, loop) or _even_batches_off(model):
            return
        loader = model.code(_loop_iterable(model, loop))
        if summed:
            yield Finding(
                call,
                f"`{model.code(func)}()` after the loop does not cut the padding: `{gathered.value}`, summed over the "
                f"prepared loader `{loader}` (line {model.line_of(loop)}), includes the samples the loader duplicated "
                f"to even out the last batch, so the metric counts some samples twice; gather each batch's values with "
                f"`{receiver}.gather_for_metrics()` in the loop",
                evidence=((loop, f"`{gathered.value}` is summed here over the batches of `{loader}`"),
                          *model.value_evidence(_loop_iterable(model, loop))))
            return
        advice = (f"gather each batch with `{receiver}.gather_for_metrics()` in the loop" if receiver
                  else "gather each batch with `accelerator.gather_for_metrics()` in the loop")
        yield Finding(
            call,
            f"`{model.code(func)}()` of `{gathered.value}`, filled sample by sample from the prepared loader "
            f"`{loader}` (line {model.line_of(loop)}), keeps the samples the loader duplicated to even out the last "
            f"batch, so the metric counts some samples twice; {advice}, or cut the result to the dataset's length",
            evidence=((loop, f"`{gathered.value}` is filled here, one entry per sample of `{loader}`"),
                      *model.value_evidence(_loop_iterable(model, loop))))
        return


def _sums_in(model: FileModel, name: str, loop: cst.For) -> bool:
    """``name += ...`` in the loop's body: a running total over the batches."""
    return any(isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) and node.target.value == name
               and isinstance(node.operator, cst.AddAssign) for node in model.index.walk(loop.body))


def _fills_per_sample(model: FileModel, name: str, loop: cst.For) -> bool:
    """``name.extend(...)`` in the loop, or ``name.append(x)`` / ``name += x`` of a value with the
    batch's first dimension."""
    for node in model.index.walk(loop.body):
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) \
                and isinstance(node.func.value, cst.Name) and node.func.value.value == name and node.args:
            if node.func.attr.value == "extend":
                return True
            if node.func.attr.value == "append" and per_sample(model, node.args[0].value, loop):
                return True
        if isinstance(node, cst.AugAssign) and isinstance(node.target, cst.Name) and node.target.value == name \
                and isinstance(node.operator, cst.AddAssign) and per_sample(model, node.value, loop):
            return True
    return False


def _gathered_objects_in_the_loop(model: FileModel, call: cst.Call) -> Iterable[Finding]:
    """``accelerator.gather_object(x)`` in an evaluation loop over a prepared loader, where ``x``
    has one entry per sample of the batch and the result goes into metric accumulation."""
    loop = _enclosing_eval_loop(model, call)
    if loop is None or not call.args or _truncates_by_hand(model, loop, call) or _drops_last(model, loop):
        return
    if not (per_sample(model, call.args[0].value, loop) and _feeds_accumulation(model, call, loop)):
        return
    receiver = model.code(call.func.value) if isinstance(call.func, cst.Attribute) else "accelerator"
    yield Finding(
        call,
        f"`{model.code(call.func)}()` in an evaluation loop keeps the samples the prepared loader duplicated to even "
        f"out the last batch, so the metric counts some samples twice; use "
        f"`{receiver}.gather_for_metrics(..., use_gather_object=True)`",
        evidence=((call.args[0].value, "one entry per sample of the batch"),
                  *model.value_evidence(_loop_iterable(model, loop))),
    )


def _is_gather_object(model: FileModel, call: cst.Call) -> bool:
    return _calls_accelerate(model, call, "gather_object")


def _is_gather(model: FileModel, call: cst.Call) -> bool:
    return _calls_accelerate(model, call, "gather")


def _calls_accelerate(model: FileModel, call: cst.Call, operation: str) -> bool:
    """``call`` is an accelerator's ``<operation>(...)`` or ``accelerate.utils.<operation>(...)``."""
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value == operation and model.is_accelerator(func.value):
        return True
    qualified = model.index.imports.qualify_expr(func) or ""
    return qualified in (f"accelerate.utils.{operation}", f"accelerate.utils.operations.{operation}")


def _loop_iterable(model: FileModel, loop: cst.For) -> cst.BaseExpression:
    """The loader a loop draws from (behind ``enumerate``/``tqdm``/``iter``/``zip`` and a bar bound
    to a name)."""
    return model.iterated_source(loop.iter)


def _enclosing_eval_loop(model: FileModel, call: cst.Call) -> cst.For | None:
    for parent in model.ancestors(call):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return None
        if isinstance(parent, cst.For):
            loader = _loop_iterable(model, parent)
            if model.prepared_kind(loader) != "loader":
                continue
            if _is_eval_context(model, parent):
                return parent
    return None


def _is_eval_context(model: FileModel, loop: cst.For) -> bool:
    """A loop over a prepared loader that evaluates: it runs under ``no_grad`` / ``inference_mode``,
    or it does no backward pass and puts its forward under ``no_grad`` or its prepared model in
    ``eval()`` mode. A ``no_grad`` block inside a training loop (a logging step) is not one."""
    if model.is_no_grad_block(loop) or model.under_no_grad(loop):
        return True
    if model.loop_trains(loop):
        return False
    if any(model.is_no_grad_block(inner) for inner in model.index.walk(loop.body)):
        return True
    for c in model.calls_in(model.scope_of(loop)):  # model.eval() in the same function
        if isinstance(c.func, cst.Attribute) and c.func.attr.value == "eval" and not c.args \
                and model.prepared_kind(c.func.value) == "model":
            return True
    return False


def _truncates_by_hand(model: FileModel, loop: cst.For, gather: cst.Call) -> bool:
    """The gathered results are cut to a length (``preds[: len(dl.dataset) - seen]``, or ``[:n]``
    where ``n`` holds such a count), in the loop or after it in the same function: the duplicates
    are removed by hand."""
    gathered_at = model.line_of(gather)
    for node in model.index.walk(model.scope_of(loop)):
        if not isinstance(node, cst.Subscript) or model.line_of(node) < gathered_at:
            continue  # (a cut before the gather, of the last batch's prompts, cuts something else)
        if any(isinstance(n, cst.Call) and isinstance(n.func, cst.Name) and n.func.value == "len"
               for element in node.slice for n in model.index.walk(element)):
            return True
        # `[:n]` with `n` a number of samples (not `[:n * k]`, which cuts rows of k at k * n)
        if any(isinstance(element.slice, cst.Slice) and isinstance(element.slice.upper, cst.Name)
               and model.counts_items(element.slice.upper) for element in node.slice):
            return True
    return False


def _drops_last(model: FileModel, loop: cst.For) -> bool:
    value = model.value_at(_loop_iterable(model, loop))
    origin = value.origin if value is not None else None
    if isinstance(origin, cst.Call):
        return any(a.keyword is not None and a.keyword.value == "drop_last" and model.code(a.value) == "True"
                   for a in origin.args)
    return False


def _even_batches_off(model: FileModel) -> bool:
    for ctor in model.objects.acc_constructors:
        for arg in ctor.args:
            if arg.keyword is not None and arg.keyword.value == "even_batches" and model.code(arg.value) == "False":
                return True
    return "even_batches=False" in model.code(model.module).replace(" ", "")


# methods that give the same values elsewhere (another device, dtype or container)
_MOVES = frozenset({"cpu", "cuda", "to", "numpy", "tolist", "detach", "float", "double", "half", "long", "int",
                    "contiguous", "clone"})


def _feeds_accumulation(model: FileModel, call: cst.Call, loop: cst.For) -> bool:
    """The gathered value goes into a metric, a list, a concatenation or a running sum."""
    if _is_accumulation_sink(model, call):
        return True
    # the gathered value, through methods that move it without reducing it
    # (`gather(x).cpu().numpy()`; not `gather(x).mean().item()`, one number per batch)
    # and through a helper that takes it as an argument (`preds, refs = postprocess(gather(p), gather(l))`),
    # unless the helper reduces it to one number per batch
    value: cst.CSTNode = call
    while True:
        parent = model.index.parents.get(value)
        if isinstance(parent, cst.Attribute) and parent.value is value and parent.attr.value in _MOVES:
            value = parent
        elif isinstance(parent, cst.Call) and parent.func is value:
            value = parent
        elif isinstance(parent, cst.Arg) and parent.value is value and _passes_rows_on(model, parent):
            value = model.index.parents[parent]
        elif isinstance(parent, (cst.Tuple, cst.List)) and isinstance(model.index.parents.get(parent), cst.Arg):
            value = parent  # `postprocess((gather(p), gather(l)))`
        elif isinstance(parent, (cst.Comparison, cst.ComparisonTarget, cst.BinaryOperation)):
            value = parent  # element-wise: `gather(preds) == gather(labels)` keeps a row per sample
        else:
            break
    if value is not call and _is_accumulation_sink(model, value):
        return True
    statement = model.index.parents.get(value)
    names: set[str] = set()
    if isinstance(statement, cst.Assign) and statement.value is value:
        for target in statement.targets:
            names.update(model.code(n) for n in model.index.loads_in(target.target) if isinstance(n, cst.Name))
    if not names:
        return False
    # what is computed from the gathered value in the loop carries its duplicates too
    # (`predictions = processor.batch_decode(gathered)`, then `metric.add_batch(predictions)`)
    assigns = [n for n in model.index.walk(loop.body) if isinstance(n, cst.Assign)]
    grew = True
    while grew:
        grew = False
        for inner in model.index.walk(loop.body):
            # `for s in gathered: ids.append(s)`: each item is one gathered row
            if isinstance(inner, cst.For) and isinstance(inner.iter, cst.Name) and inner.iter.value in names \
                    and isinstance(inner.target, cst.Name) and inner.target.value not in names:
                names.add(inner.target.value)
                grew = True
        for assign in assigns:
            if any(isinstance(n, cst.Name) and n.value in names for n in model.index.walk(assign.value)):
                for target in assign.targets:
                    if isinstance(target.target, (cst.Name, cst.Tuple, cst.List)):
                        new = {n.value for n in model.index.walk(target.target) if isinstance(n, cst.Name)} - names
                        if new:
                            names |= new
                            grew = True
    for node in model.index.walk(loop.body):
        if isinstance(node, cst.Name) and node.value in names and _is_accumulation_sink(model, node):
            return True
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.AddAssign) \
                and any(isinstance(n, cst.Name) and n.value in names for n in model.index.walk(node.value)):
            return True
    return False


_REDUCTIONS = frozenset({"mean", "sum", "item", "max", "min", "std", "var", "norm", "len", "nanmean", "average",
                         "median", "prod", "all", "any", "count_nonzero", "argmax", "argmin"})


def _passes_rows_on(model: FileModel, arg: cst.Arg) -> bool:
    """A call that ``arg`` is an argument of keeps its rows: not a reduction (``torch.mean``,
    ``len``), nor a method call on it (that is handled as a move)."""
    call = model.index.parents.get(arg)
    if not isinstance(call, cst.Call):
        return False
    name = last_attr(call.func) if isinstance(call.func, cst.Attribute) else \
        call.func.value if isinstance(call.func, cst.Name) else None
    return name is not None and name not in _REDUCTIONS


def _is_accumulation_sink(model: FileModel, expr: cst.CSTNode) -> bool:
    """``expr`` is (inside) an argument of an accumulating call."""
    node = expr
    for parent in model.ancestors(expr):
        if isinstance(parent, cst.Call) and node is not parent.func:
            func = parent.func
            if isinstance(func, cst.Attribute) and func.attr.value in _ACCUMULATE_METHODS:
                return True
            if (model.index.imports.qualify_expr(func) or model.code(func)) in _CONCAT:
                return True
        if isinstance(parent, cst.AugAssign) and isinstance(parent.operator, cst.AddAssign):
            return True
        if isinstance(parent, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return False
        node = parent
    return False
