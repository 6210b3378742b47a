from __future__ import annotations

from collections.abc import Iterable

from ..model import FileModel
from .base import Finding, Rule


class SyntaxErrorRule(Rule):
    """A file that does not parse.

    ## What it does
    Reports a Python file that libcst cannot parse, at the position of the error. The
    engine emits it before any other rule runs (a file that does not parse has no model),
    so this class carries the rule's metadata and examples; the other files are still
    checked.

    ## Why is this bad?
    Nothing in the file was checked, so its distributed bugs stay hidden; and Python
    will refuse to run it too.

    ## Example
    ```python
    def train(:
        pass
    ```

    ## Use instead
    ```python
    def train():
        pass
    ```
    """

    code = "AL001"
    holds_in_one_process = True
    name = "syntax-error"
    severity = "error"
    summary = "the file does not parse; nothing in it was checked"
    VALID = ["from accelerate import Accelerator\naccelerator = Accelerator()\n"]
    INVALID = ["from accelerate import Accelerator\ndef train(:  # expect: AL001\n    pass\n"]

    def check(self, model: FileModel) -> Iterable[Finding]:
        return ()  # parse failures are reported by the engine (a file that does not parse has no model)
