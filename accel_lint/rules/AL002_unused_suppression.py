from __future__ import annotations

from collections.abc import Iterable

from ..model import FileModel
from .base import Finding, Rule


class UnusedSuppression(Rule):
    """A ``# noqa`` code of accel-lint that suppresses nothing.

    ## What it does
    Reports the accel-lint codes or rule names in a ``# noqa`` comment that did not
    suppress a finding on that statement, and codes that name no accel-lint rule
    (``AL999``). The engine computes it after every other rule has run; a code whose
    rule was not selected for the file is not judged, and codes of other tools in the
    same comment (``# noqa: E501``) and bare ``# noqa`` are left alone.

    ## Why is this bad?
    A stale suppression hides the next real finding on that line: the bug it was
    written for is gone, and a new rank-gated barrier added there would be silenced.
    A misspelled code suppresses nothing while looking as if it did.

    ## Example
    ```python
    accelerator.wait_for_everyone()  # noqa: AL301
    ```

    ## Use instead
    ```python
    accelerator.wait_for_everyone()
    ```

    ## Fix safety
    Safe: ``--fix`` removes the unused codes, or the whole comment when none is left.
    It assumes the lint that found the code unused ran with the configuration the project
    uses (the same selected rules and settings); a comment is only ever removed, never moved.
    """

    code = "AL002"
    holds_in_one_process = True
    name = "unused-suppression"
    severity = "warning"
    summary = "a # noqa code that suppresses nothing (or names no rule)"
    needs_other_rules = True
    VALID = [
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        loss = model(batch).sum()
        loss.backward()  # noqa: AL101
        print("done")  # noqa: E501
        """,
    ]
    INVALID = [
        """\
        from accelerate import Accelerator
        from transformers import AutoModelForSequenceClassification
        accelerator = Accelerator()
        model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
        model = accelerator.prepare(model)
        loss = model(batch)
        accelerator.backward(loss)  # noqa: AL101  # expect: AL002
        accelerator.wait_for_everyone()  # noqa: AL999  # expect: AL002
        """,
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        return ()  # computed by the engine from the other rules' results
