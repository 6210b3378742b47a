from __future__ import annotations

import re
from collections.abc import Iterable

import libcst as cst

from ..model import FileModel, shorten
from .base import Finding, Rule

# methods of a `datasets` Dataset/DatasetDict that return another one (what `.map` may be called on)
_DATASET_METHODS = frozenset({"map", "filter", "select", "shuffle", "train_test_split", "remove_columns",
                              "rename_column", "rename_columns", "cast", "cast_column", "select_columns",
                              "with_format", "flatten", "sort", "shard", "add_column", "align_labels_with_mapping"})
_MAIN_FIRST = re.compile(r"main(_process)?_first")


class PreprocessRace(Rule):
    """One-time preprocessing that every rank runs at once, and collectives inside
    `main_process_first()`.

    ## What it does
    (A, warning) Once an accelerator exists, in code every rank runs and outside
    `with accelerator.main_process_first():` / `local_main_process_first()`: `Dataset.map` and
    `.filter` on a Hugging Face `datasets` object (made by a function of `datasets` such as
    `load_dataset`, or derived from one by `.map`, `.filter`, `["train"]`, ...), `urlretrieve`,
    torchvision datasets with `download=True`, and a function or class of another module of
    the tree that downloads so when called, in its body or through its module's own functions
    and classes (`get_dataset("cifar10")`). (B, error) A collective inside the
    `main_process_first()` body.
    Not flagged: calls inside either context manager or under a rank guard; work before any
    accelerator exists (also in a function that makes its own accelerator later, with none
    handed to it); a `.map` on anything the model cannot trace to `datasets` (a
    webdataset pipeline's `.map` is a lazy per-sample transform with no cache files);
    `huggingface_hub` downloads (`hf_hub_download`, `snapshot_download` take a file lock per
    file, so concurrent ranks wait and reuse the cache: the work is not repeated); a `.map` or
    `.filter` with `keep_in_memory=True`, or on a dataset built in memory
    (`Dataset.from_dict`/`from_list`/`from_pandas`): `datasets` writes no cache file for
    them, and every rank needs the result anyway.

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
        # tokenized in main() before main() makes its accelerator: no accelerator exists yet
        """\
        from accelerate import Accelerator
        from datasets import load_dataset
        def main(tokenizer):
            data = load_dataset("json", data_files="train.json").map(lambda r: tokenizer(r["text"]))
            accelerator = Accelerator()
            loader = accelerator.prepare(make_loader(data))
            for batch in loader:
                step(batch)
        """,
        """\
        from accelerate import Accelerator
        from datasets import load_dataset
        raw = load_dataset("glue", "mrpc")
        tokenized = raw.map(tokenize)
        accelerator = Accelerator()
        with accelerator.main_process_first():
            train_dataset = raw["train"].map(tokenize, batched=True)
        """,
        """\
        import webdataset as wds
        from accelerate import Accelerator
        from huggingface_hub import hf_hub_download
        accelerator = Accelerator()
        config = hf_hub_download("org/model", "model_index.json")
        dataset = wds.WebDataset(shards).decode("pil")
        dataset = dataset.map(preprocess)
        """,
        """\
        from accelerate import Accelerator
        from datasets import Dataset, load_dataset
        accelerator = Accelerator()
        raw = load_dataset("imdb")
        prompts = raw["test"].map(build_prompt, keep_in_memory=True)
        table = Dataset.from_list(rows).map(tokenize, batched=True)
        """,
        # a dataset class whose __init__ downloads, built above the line that makes the accelerator
        """\
        import torchvision
        from accelerate import Accelerator

        class Digits:
            def __init__(self):
                self.data = torchvision.datasets.MNIST("./data", download=True)

        dataset = Digits()
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        """,
    ]
    INVALID = [
        """\
        import torchvision
        from accelerate import Accelerator

        class Digits:
            def __init__(self):
                self.data = torchvision.datasets.MNIST("./data", download=True)  # expect: AL404

        accelerator = Accelerator()
        dataset = Digits()
        model = accelerator.prepare(model)
        """,
        """\
        from accelerate import Accelerator
        from datasets import load_dataset
        from urllib.request import urlretrieve
        accelerator = Accelerator()
        raw = load_dataset("glue", "mrpc")
        train_dataset = raw["train"].map(tokenize, batched=True)  # expect: AL404
        urlretrieve("https://example.com/vocab.txt", "vocab.txt")  # expect: AL404
        with accelerator.main_process_first():
            stats = accelerator.gather(local_stats)  # expect: AL404
        """,
        """\
        from accelerate import Accelerator
        from datasets import load_dataset
        def main(model):
            accelerator = Accelerator()
            model = accelerator.prepare(model)
            raw = load_dataset("imdb")
            train = raw["train"]
            train = train.map(tokenize, batched=True)  # expect: AL404
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        order = model.index.call_order
        first_accelerator = min((order[c] for c in model.objects.acc_constructors if c in order), default=None)
        memo: dict = {}
        for call in model.index.calls:
            block = _main_process_first(model, call, memo)
            if block is not None:
                kind = model.op_kind(call)
                if kind is not None and kind not in ("BARRIER", "END") and not _is_context_call(block, call):
                    yield Finding(call, f"`{model.code(call.func)}()` inside `main_process_first()`: the main rank "
                                        f"runs it while the other ranks wait in the entry barrier, so the collectives "
                                        f"no longer line up", severity="error",
                                  evidence=((block, "`main_process_first()` runs its body on the main rank first, "
                                                    "while the others wait in a barrier"),))
                continue
            what = _preprocessing(model, call)
            if what is None or model.rank_guard_of(call) is not None:
                continue
            scope = model.scope_of(call)
            if scope is model.module and (first_accelerator is None or order[call] < first_accelerator):
                continue  # before any accelerator exists
            if model.before_any_accelerator(call):
                continue  # in a function that makes its accelerator later, with none before
            if not model.runs_on_every_rank(scope) or not _accelerator_reaches(model, scope) or model.single_process_at(call) or model.rank_undecided_at(call):
                continue
            acc = model.sole_accelerator_in(scope) or "accelerator"
            yield Finding(call, f"`{what}` runs on every rank at once: the work is repeated N times and the ranks "
                                f"race on the same cache files; wrap it in `with {acc}.main_process_first():`",
                          evidence=tuple(_preprocessing_evidence(model, call, scope)))


def _preprocessing_evidence(model: FileModel, call: cst.Call, scope) -> list[tuple[cst.CSTNode, str]]:
    """The accelerator that makes the code run on every rank, and for ``.map``/``.filter`` what
    made the dataset a Hugging Face one."""
    out = model.launch_evidence(scope)
    imported = model.imported_download(call) if model.external else None
    if imported is not None:
        out.append((call, f"`{model.code(call.func)}()` may download: `{imported[0]}` on line {imported[1]} of its "
                          f"module, into the same folder on every rank"))
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in ("map", "filter"):
        dataset = func.value
        while isinstance(dataset, cst.Subscript):  # `raw["train"].map(...)`: a split of `raw`
            dataset = dataset.value
        value = model.value_at(dataset)
        for origin in sorted(value.origins() if value is not None else (), key=model.line_of)[:2]:
            if isinstance(origin, (cst.Call, cst.Subscript)):
                out.append((origin, f"made by `{shorten(model.code(origin))}`: a Hugging Face dataset, "
                                    f"whose `{func.attr.value}` writes a cache file"))
    return out


def _accelerator_reaches(model: FileModel, scope, _seen: frozenset = frozenset()) -> bool:
    """An accelerator exists where ``scope`` runs: one is visible in it (its own, a parameter,
    module level), or in a same-file function that calls it. A function that only
    a framework's class uses (a Trainer subclass's ``self.accelerator``) gives nothing to a
    ``main()`` that never sees one."""
    if any(model.scope_of(c) is scope for c in model.objects.acc_constructors):
        return True
    if model.accelerators_visible_in(scope):
        return not _runs_before_the_accelerator(model, scope)
    if not isinstance(scope, cst.FunctionDef) or scope in _seen:
        return False
    return any(_accelerator_reaches(model, model.scope_of(site), _seen | {scope}) for site in model.ops.call_sites(scope))


def _runs_before_the_accelerator(model: FileModel, scope) -> bool:
    """A function (or a class's ``__init__``) that module-level code alone calls (or builds), on
    lines before the module's accelerator is made: the accelerator it sees does not exist yet
    when it runs (``dataset = MnistDataset()`` above ``accelerator = Accelerator()``)."""
    if not isinstance(scope, cst.FunctionDef):
        return False
    sites = model.ops.call_sites(scope) or model.constructions_of(scope)
    made = [c for c in model.objects.acc_constructors if isinstance(model.scope_of(c), cst.Module)]
    return bool(sites and made) and all(isinstance(model.scope_of(s), cst.Module) for s in sites) \
        and max(model.line_of(s) for s in sites) < min(model.line_of(c) for c in made)


def _preprocessing(model: FileModel, call: cst.Call) -> str | None:
    downloads = model.download_call(call)
    if downloads is not None:
        return downloads
    imported = model.imported_download(call) if model.external else None
    if imported is not None:
        return f"{model.code(call.func)}()"
    func = call.func
    if isinstance(func, cst.Attribute) and func.attr.value in ("map", "filter") and call.args \
            and _is_hf_dataset(model, func.value) and not _keeps_in_memory(call) \
            and not _in_memory_dataset(model, func.value):
        return f"{model.code(func.value)}.{func.attr.value}()"
    return None


def _keeps_in_memory(call: cst.Call) -> bool:
    """``.map(..., keep_in_memory=True)``: `datasets` writes no cache file, so there is nothing
    to race on, and nothing another rank could reuse."""
    return any(a.keyword is not None and a.keyword.value == "keep_in_memory" and type(a.value) is cst.Name
               and a.value.value == "True" for a in call.args)


# datasets constructors whose table lives in memory: `.map`/`.filter` on what they make (or on
# a derived dataset) writes no cache file either (`datasets` caches only datasets that have one)
_IN_MEMORY_CONSTRUCTORS = frozenset({"from_dict", "from_list", "from_pandas", "from_polars"})


def _every_origin(model: FileModel, expr: cst.BaseExpression, made, depth: int) -> bool:
    """Every object ``expr`` may hold (a split ``raw["train"]`` is ``raw``'s) was made as
    ``made(model, origin, depth)`` says; ``False`` when none is known."""
    if depth > 20:
        return False
    if isinstance(expr, cst.Subscript):
        return _every_origin(model, expr.value, made, depth + 1)
    if isinstance(expr, cst.Call):
        origins = [expr]
    else:
        value = model.value_at(expr)
        origins = list(value.origins()) if value is not None else []
    return bool(origins) and all(made(model, origin, depth) for origin in origins)


def _in_memory_dataset(model: FileModel, expr: cst.BaseExpression, depth: int = 0) -> bool:
    return _every_origin(model, expr, _made_in_memory, depth)


def _made_in_memory(model: FileModel, origin: cst.CSTNode, depth: int) -> bool:
    if isinstance(origin, cst.Subscript):
        return _in_memory_dataset(model, origin.value, depth + 1)
    if not isinstance(origin, cst.Call) or not isinstance(origin.func, cst.Attribute):
        return False
    qualified = model.index.imports.qualify_expr(origin.func) or ""
    if qualified.startswith("datasets.") and origin.func.attr.value in _IN_MEMORY_CONSTRUCTORS:
        return True
    if origin.func.attr.value in ("map", "filter") and _keeps_in_memory(origin):
        return True
    return origin.func.attr.value in _DATASET_METHODS and _in_memory_dataset(model, origin.func.value, depth + 1)


def _is_hf_dataset(model: FileModel, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """``expr`` holds a Hugging Face ``datasets`` object: made by a function of ``datasets``
    (``load_dataset``, ``Dataset.from_dict``, ``load_from_disk``, ...), or by a method of one that
    returns another (``.map``, ``.filter``, ``["train"]``). Anything else (a webdataset
    pipeline, whose ``.map`` is a lazy per-sample transform) is not."""
    return _every_origin(model, expr, _made_by_datasets, depth)


def _made_by_datasets(model: FileModel, origin: cst.CSTNode, depth: int) -> bool:
    if isinstance(origin, cst.Subscript):  # `train = raw["train"]`: a split of the same object
        return _is_hf_dataset(model, origin, depth + 1)
    if not isinstance(origin, cst.Call):
        return False
    qualified = model.index.imports.qualify_expr(origin.func) or ""
    if qualified.startswith("datasets."):
        return True
    func = origin.func
    return isinstance(func, cst.Attribute) and func.attr.value in _DATASET_METHODS and \
        _is_hf_dataset(model, func.value, depth + 1)


def _main_process_first(model: FileModel, call: cst.CSTNode, memo: dict | None = None,
                        _seen: frozenset = frozenset()) -> cst.With | None:
    """The ``with main_process_first()`` block ``call`` runs in: around it in its function, or
    around every same-file call of that function (a helper only called inside the block).
    ``memo`` keeps each function's answer for one file."""
    for parent in model.ancestors(call):
        kind = type(parent)
        if kind is cst.With and _is_main_first_block(model, parent, memo):
            return parent
        if kind is cst.FunctionDef:
            if parent in _seen:
                return None
            if memo is not None and parent in memo:
                return memo[parent]
            sites = model.ops.call_sites(parent)
            blocks = [_main_process_first(model, site, memo, _seen | {parent}) for site in sites]
            found = blocks[0] if sites and all(block is not None for block in blocks) else None
            if memo is not None and not _seen:
                memo[parent] = found
            return found
        if kind is cst.ClassDef:
            return None
    return None


def _is_main_first_block(model: FileModel, block: cst.With, memo: dict | None) -> bool:
    """``with main_process_first():`` (also wrappers: trl's global_then_local_main_first())."""
    key = ("with", block)
    if memo is not None and key in memo:
        return memo[key]
    found = any(_is_main_first(model, item.item) for item in block.items)
    if memo is not None:
        memo[key] = found
    return found


def _is_main_first(model: FileModel, item: cst.BaseExpression) -> bool:
    """``main_process_first()``, or a call of a variable that holds it on some path
    (``ctx = accelerator.main_process_first if accelerator else nullcontext``; ``with ctx():``)."""
    if _MAIN_FIRST.search(model.code(item)):
        return True
    if isinstance(item, cst.Call) and isinstance(item.func, (cst.Name, cst.Attribute)):
        value = model.value_at(item.func)
        if value is not None:
            return any(_MAIN_FIRST.search(model.code(origin)) for origin in value.origins()
                       if isinstance(origin, cst.BaseExpression))
    return False


def _is_context_call(block: cst.With, call: cst.Call) -> bool:
    return any(item.item is call for item in block.items)
