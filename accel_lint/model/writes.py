"""Calls that write to or delete from the file system (the I/O half of the model)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from ..library import Library
from .names import ImportMap, dotted_name

@dataclass(frozen=True)
class Write:
    """A file-system mutation: the call, a short description, and the path argument."""

    call: cst.Call
    what: str
    path: cst.BaseExpression | None
    # passed a keyword that makes it safe on every rank at once (`exist_ok=True`)
    tolerant: bool = False
    creates_directory: bool = False  # the losers of the race raise FileExistsError
    # a call of another module's function that writes: where its write is ("open(..., 'w') on
    # line 12 of its module"); None for a write of this file
    origin: str | None = None


def _mode_of(call: cst.Call) -> str | None:
    for i, arg in enumerate(call.args):
        if (arg.keyword is not None and arg.keyword.value == "mode") or (arg.keyword is None and i == 1):
            if isinstance(arg.value, cst.SimpleString):
                return arg.value.evaluated_value
            return None
    return "r"


_MODE_LETTERS = frozenset("rwaxbt+")


def _path_open_mode(call: cst.Call) -> str | None:
    """The mode of ``<path>.open(mode)`` (first positional or ``mode=``), when it is a literal
    made only of mode letters."""
    for i, arg in enumerate(call.args):
        if (arg.keyword is not None and arg.keyword.value == "mode") or (arg.keyword is None and i == 0):
            if isinstance(arg.value, cst.SimpleString):
                mode = arg.value.evaluated_value
                return mode if isinstance(mode, str) and mode and set(mode) <= _MODE_LETTERS else None
            return None
    return None


def _argument(call: cst.Call, position: int | str | None, keyword: str | None) -> cst.BaseExpression | None:
    if position == "self":
        # `Path(d).mkdir()`: the receiver; `fs.mkdir(d)` (fsspec): the argument
        positional = [a for a in call.args if a.keyword is None and not a.star]
        if positional:
            return positional[0].value
        return call.func.value if isinstance(call.func, cst.Attribute) else None
    for arg in call.args:
        if keyword is not None and arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a for a in call.args if a.keyword is None and not a.star]
    if isinstance(position, int) and position < len(positional):
        return positional[position].value
    return None


def _is_tolerant(call: cst.Call, keywords: tuple[str, ...]) -> bool:
    return any(arg.keyword is not None and arg.keyword.value in keywords and isinstance(arg.value, cst.Name)
               and arg.value.value == "True" for arg in call.args)


OriginsOf = Callable[[cst.BaseExpression], "tuple[frozenset, str | None]"]


def classify_write(call: cst.Call, imports: ImportMap, library: Library,
                   origins_of: OriginsOf | None = None,
                   inherits_saver: Callable[[cst.BaseExpression], bool] | None = None) -> Write | None:
    """``Write`` when ``call`` mutates the file system (by the library table), else ``None``.
    ``origins_of(expr)``: the calls that may have made the object ``expr`` holds, and its kind.
    ``inherits_saver(expr)``: the object is an instance of a class of the tree that inherits
    ``save_pretrained`` from one of the library table's saver mixins."""
    name = dotted_name(call.func)
    first = call.args[0].value if call.args else None
    if name == "open" or (name and imports.qualify(name) in ("io.open", "builtins.open")):
        mode = _mode_of(call)
        if mode and any(c in mode for c in "wax"):
            # appending (O_APPEND) on every rank at once truncates nothing and races on nothing:
            # the lines interleave, each rank's own
            return Write(call, "open(..., %r)" % mode, first, tolerant="a" in mode and not any(c in mode for c in "wx"))
        return None
    qual = imports.qualify(name) if name else None
    known = library.writes.get(qual) if qual else None
    if known is not None:
        if known.only_with and not any(arg.keyword is not None and arg.keyword.value in known.only_with
                                       and not (isinstance(arg.value, cst.Name) and arg.value.value == "None")
                                       for arg in call.args):
            return None
        path = _argument(call, known.path, known.path_keyword)
        if path is None and known.path is not None:
            return None  # no path given (export_to_video's temporary file), or one in `**kwargs`: unknown
        return Write(call, qual, path, _is_tolerant(call, known.tolerant), known.creates_directory)
    if isinstance(call.func, cst.Attribute):
        method = call.func.attr.value
        owner = dotted_name(call.func.value) or ""
        if method == "open":
            # `Path.open("w")`: the mode is the first argument and the path the receiver (a
            # string of mode letters only, so `zipfile.ZipFile.open("weights.bin")` is no mode)
            mode = _path_open_mode(call)
            if mode and any(c in mode for c in "wax"):
                return Write(call, f"{owner or _shown(call.func.value)}.open(%r)" % mode, call.func.value,
                             tolerant="a" in mode and not any(c in mode for c in "wx"))
            return None
        known = library.write_methods.get(method)
        if known is not None:
            return Write(call, f"{owner or '...'}.{method}", _argument(call, known.path, known.path_keyword),
                         _is_tolerant(call, known.tolerant), known.creates_directory)
        made = _writer_object(call.func.value, method, library, imports, origins_of)
        if made is not None:
            return Write(call, f"{owner or _shown(call.func.value)}.{method}", _argument(call, made.path, made.path_keyword),
                         _is_tolerant(call, made.tolerant), made.creates_directory)
        if method == "save_pretrained" and inherits_saver is not None and inherits_saver(call.func.value):
            return Write(call, f"{owner or _shown(call.func.value)}.save_pretrained", first)
        if method == "save_pretrained" and origins_of is not None:
            saver = _unguarded_saver(call.func.value, library, origins_of, imports)
            gated = any(a.keyword is not None and a.keyword.value == "is_main_process" for a in call.args)
            # a tokenizer's, processor's or config's `save_pretrained` takes no `is_main_process`
            # (it lands in `**kwargs`, unread); a diffusers model's is gated by it
            if saver == "always" or (saver == "unless-gated" and not gated):
                return Write(call, f"{owner or _shown(call.func.value)}.save_pretrained", first)
    return None


def _writer_object(owner: cst.BaseExpression, method: str, library: Library, imports: ImportMap,
                   origins_of: OriginsOf | None) -> WriteModel | None:
    """How ``owner.<method>(...)`` writes, where ``owner`` is an object the library table's
    ``writer-objects`` say writes by that method (``Image.fromarray(a).convert("L")``, or a name
    every path binds to one); ``None`` otherwise."""
    if not library.writer_objects:
        return None
    makers = [owner] if isinstance(owner, cst.Call) else list(origins_of(owner)[0]) if origins_of is not None else []
    found = None
    for made in makers:
        model = None
        for _ in range(8):
            if not isinstance(made, cst.Call):
                break
            row = library.writer_objects.get(imports.qualify(dotted_name(made.func) or "") or "")
            if row is not None:
                model = row[1] if row[0] == method else None
                break
            # a method of such an object that returns another one: `.convert("L")`
            if isinstance(made.func, cst.Attribute) and any(
                    made.func.attr.value in keeps for _, _, keeps in library.writer_objects.values()):
                made = made.func.value
                continue
            break
        if model is None:
            return None  # a path where it is something else, or unknown
        found = model
    return found


def _shown(expr: cst.BaseExpression, limit: int = 50) -> str:
    """Source text of an owner that is no dotted name (``accelerator.unwrap_model(unet)``)."""
    text = " ".join(cst.Module([]).code_for_node(expr).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _unguarded_saver(owner: cst.BaseExpression, library: Library, origins_of: OriginsOf,
                     imports: ImportMap) -> str | None:
    """Whether the object's ``save_pretrained`` writes on every rank that calls it: ``"always"``
    for a tokenizer, a processor or a config (``AutoTokenizer.from_pretrained``, or such an
    attribute of a model: ``model.generation_config``), ``"unless-gated"`` for a class of a
    package whose savers take ``is_main_process=`` (a diffusers model or pipeline), on every
    path; ``None`` otherwise."""
    if isinstance(owner, cst.Attribute) and owner.attr.value in library.unguarded_model_attributes \
            and origins_of(owner.value)[1] == "model":
        return "always"
    origins, _ = origins_of(owner)
    kinds = {_made_by_saver_class(origin, library, imports) for origin in origins}
    if not origins or None in kinds:
        return None
    return "unless-gated" if "unless-gated" in kinds else "always"


def _made_by_saver_class(origin: cst.CSTNode, library: Library, imports: ImportMap) -> str | None:
    if not isinstance(origin, cst.Call):
        return None
    made_by = dotted_name(origin.func) or ""
    if made_by.rsplit(".", 1)[-1] in ("from_pretrained", "from_pipe", "from_single_file"):
        made_by = made_by.rsplit(".", 1)[0]
    if (imports.qualify(made_by) or "").partition(".")[0] in library.unguarded_saver_packages:
        return "unless-gated"
    return "always" if made_by.rsplit(".", 1)[-1].endswith(library.unguarded_saver_suffixes) else None
