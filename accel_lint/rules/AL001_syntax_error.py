from __future__ import annotations

from collections.abc import Iterable

from ..model import FileModel
from .base import Finding, Rule


class SyntaxErrorRule(Rule):
    """A file that does not parse.

    ## What it does
    Reports a Python file that does not parse, at the position of the error. The engine
    emits it before any other rule runs, so this class carries the rule's metadata and
    examples; the other files are still checked. Where reading the lines the parser stops at
    (at most three) as meant gives a file that parses, the rest of the file is checked as ruff
    does, without fixes, and the message says how each line was read: a block header without
    its colon with one, a line indented to no enclosing level at the nearest one, any other
    line (a stray `//print(x)`) as `pass`. Otherwise (an unclosed bracket, a broken `def`
    header) the file is not checked. In a notebook, each cell is compiled on its own and a
    cell that does not is left out.

    ## Why is this bad?
    Python will refuse to run the file, and what the check had to leave out stays
    unchecked.

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
    summary = "the file does not parse; the lines that break it (or the whole file) were not checked"
    VALID = ["from accelerate import Accelerator\naccelerator = Accelerator()\n"]
    INVALID = ["from accelerate import Accelerator\ndef train(:  # expect: AL001\n    pass\n"]

    def check(self, model: FileModel) -> Iterable[Finding]:
        return ()  # parse failures are reported by the engine (a file that does not parse has no model)
