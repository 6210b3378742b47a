"""Calls that write to or delete from the file system (the I/O half of the model)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from .names import ImportMap, dotted_name

_WRITE_FUNCTIONS = {
    "torch.save": "torch.save",
    "safetensors.torch.save_file": "save_file",
    "safetensors.torch.save_model": "save_model",
    "numpy.save": "np.save",
    "numpy.savez": "np.savez",
    "numpy.savez_compressed": "np.savez_compressed",
    "numpy.savetxt": "np.savetxt",
    "shutil.rmtree": "shutil.rmtree",
    "shutil.copy": "shutil.copy",
    "shutil.copy2": "shutil.copy2",
    "shutil.copyfile": "shutil.copyfile",
    "shutil.copytree": "shutil.copytree",
    "shutil.move": "shutil.move",
    "os.remove": "os.remove",
    "os.unlink": "os.unlink",
    "os.rename": "os.rename",
    "os.replace": "os.replace",
    "os.rmdir": "os.rmdir",
}
_WRITE_METHODS = {"write_text", "write_bytes", "to_csv", "to_json", "to_parquet"}
_SELF_UNGATED_SAVERS = re.compile(r"(tokenizer|processor|feature_extractor|config)$", re.I)


@dataclass(frozen=True)
class Write:
    """A file-system mutation: the call, a short description, and the path argument."""

    call: cst.Call
    what: str
    path: cst.BaseExpression | None


def _mode_of(call: cst.Call) -> str | None:
    for i, arg in enumerate(call.args):
        if (arg.keyword is not None and arg.keyword.value == "mode") or (arg.keyword is None and i == 1):
            if isinstance(arg.value, cst.SimpleString):
                return arg.value.evaluated_value
            return None
    return "r"


def classify_write(call: cst.Call, imports: ImportMap) -> Write | None:
    """``Write`` when ``call`` mutates the file system, else ``None``."""
    name = dotted_name(call.func)
    first = call.args[0].value if call.args else None
    if name == "open" or (name and imports.qualify(name) in ("io.open", "builtins.open")):
        mode = _mode_of(call)
        if mode and any(c in mode for c in "wax"):
            return Write(call, "open(..., %r)" % mode, first)
        return None
    qual = imports.qualify(name) if name else None
    if qual in _WRITE_FUNCTIONS:
        what = _WRITE_FUNCTIONS[qual]
        path = call.args[1].value if what in ("torch.save", "save_file", "np.save") and len(call.args) > 1 else first
        if what in ("torch.save", "save_file") and len(call.args) < 2:
            path = None
        return Write(call, what, path)
    if isinstance(call.func, cst.Attribute):
        method = call.func.attr.value
        owner = dotted_name(call.func.value) or ""
        if method in _WRITE_METHODS:
            return Write(call, f"{owner or '...'}.{method}", first)
        if method == "save_pretrained" and owner and _SELF_UNGATED_SAVERS.search(owner.split(".")[-1]):
            return Write(call, f"{owner}.save_pretrained", first)
    return None
