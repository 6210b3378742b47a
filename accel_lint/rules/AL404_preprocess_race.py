from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst

from ..model import FileModel
from .base import Finding, Rule

_DOWNLOADS = {"huggingface_hub.snapshot_download", "huggingface_hub.hf_hub_download", "urllib.request.urlretrieve"}
_MAIN_FIRST = re.compile(r"main(_process)?_first")
_DATASET_NAME = re.compile(r"(^|_)(ds|dataset|datasets|data)(_|$)|dataset", re.IGNORECASE)


class PreprocessRace(Rule):
    """One-time preprocessing that every rank runs at once, and collectives inside
    `main_process_first()`.

    ## What it does
    (A, warning) Once an accelerator exists, in code every rank runs and outside
    `with accelerator.main_process_first():` / `local_main_process_first()`: `Dataset.map` and
    `.filter` on a dataset (a `load_dataset(...)` result or a name like `train_dataset`),
    `snapshot_download`, `hf_hub_download`, `urlretrieve`, and torchvision datasets with
    `download=True`. (B, error) A collective inside the `main_process_first()` body.
    Not flagged: calls inside either context manager or under a rank guard; work before any
    accelerator exists.

    ## Why is this bad?
    (A) The work runs N times, and the ranks race on the same cache files (corrupt Arrow
    caches, half-downloaded files). (B) `main_process_first()` is one barrier per rank: the
    main rank's first collective inside it pairs with the other ranks' entry barrier, so the
    collectives no longer line up.

    ## Example
    ```python
    accelerator = Accelerator()
    train_ds = raw_ds.map(tokenize, batched=True)
    ```

    ## Use instead
    ```python
    accelerator = Accelerator()
    with accelerator.main_process_first():
        train_ds = raw_ds.map(tokenize, batched=True)
    ```
    """

    code = "AL404"
    name = "preprocess-race"
    severity = "warning"
    summary = "dataset map/download on every rank at once (cache races), or a collective inside main_process_first()"

    VALID = [
        """\
        from accelerate import Accelerator
        from datasets import load_dataset
        raw = load_dataset("glue", "mrpc")
        tokenized = raw.map(tokenize)
        accelerator = Accelerator()
        with accelerator.main_process_first():
            train_dataset = raw["train"].map(tokenize, batched=True)
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        from datasets import load_dataset
        from huggingface_hub import snapshot_download
        accelerator = Accelerator()
        raw = load_dataset("glue", "mrpc")
        train_dataset = raw["train"].map(tokenize, batched=True)  # expect: AL404
        path = snapshot_download("bert-base-uncased")  # expect: AL404
        with accelerator.main_process_first():
            stats = accelerator.gather(local_stats)  # expect: AL404
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        order = model.index.call_order
        first_accelerator = min((order[c] for c in model.objects.acc_constructors if c in order), default=None)
        for call in model.index.calls:
            block = _main_process_first(model, call)
            if block is not None:
                kind = model.op_kind(call)
                if kind is not None and kind not in ("BARRIER", "END") and not _is_context_call(block, call):
                    yield Finding(call, f"`{model.code(call.func)}()` inside `main_process_first()`: the main rank "
                                        f"runs it while the other ranks wait in the entry barrier, so the collectives "
                                        f"no longer line up", severity="error")
                continue
            what = _preprocessing(model, call)
            if what is None or model.rank_guard_of(call) is not None:
                continue
            scope = model.scope_of(call)
            if scope is model.module and (first_accelerator is None or order[call] < first_accelerator):
                continue  # before any accelerator exists
            if not model.runs_on_every_rank(scope):
                continue
            acc = model.accelerator_name_in(scope)
            yield Finding(call, f"`{what}` runs on every rank at once: the work is repeated N times and the ranks "
                                f"race on the same cache files; wrap it in `with {acc}.main_process_first():`")


def _preprocessing(model: FileModel, call: cst.Call) -> str | None:
    qualified = model.index.imports.qualify_expr(call.func) or ""
    if qualified in _DOWNLOADS:
        return qualified.rsplit(".", 1)[-1] + "()"
    if qualified.startswith("torchvision.datasets.") and any(
            a.keyword is not None and a.keyword.value == "download" and model.code(a.value) == "True" for a in call.args):
        return qualified + "(download=True)"
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in ("map", "filter") and call.args:
        receiver = func.value
        base = receiver.value if isinstance(receiver, cst.Subscript) else receiver
        value = model.value_at(base)
        origin = value.origin if value is not None else None
        from_load = isinstance(origin, cst.Call) and \
            (model.index.imports.qualify_expr(origin.func) or "").startswith("datasets.load_dataset")
        if from_load or _DATASET_NAME.search(model.code(base).rsplit(".", 1)[-1]):
            return f"{model.code(receiver)}.{func.attr.value}()"
    return None


def _main_process_first(model: FileModel, call: cst.Call) -> cst.With | None:
    for parent in model.ancestors(call):
        if isinstance(parent, cst.With) and any(  # also wrappers: trl's global_then_local_main_first()
                _MAIN_FIRST.search(model.code(item.item)) for item in parent.items):
            return parent
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return None
    return None


def _is_context_call(block: cst.With, call: cst.Call) -> bool:
    return any(item.item is call for item in block.items)
