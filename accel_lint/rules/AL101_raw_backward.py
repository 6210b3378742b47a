from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..model import MAYBE, YES, FileModel
from ._examples import FLAG_GATED_ACCELERATOR
from .base import Finding, Fix, Rule, quote


class RawBackward(Rule):
    """`loss.backward()` in code that trains a prepared model.

    ## What it does
    Flags `<loss>.backward()` and `torch.autograd.backward(<loss>)` in a function (or
    module code) that uses a prepared model or optimizer, where the loss is any tensor
    when a prepared optimizer is in reach, or a tensor derived from the prepared
    model's output.

    ## Why is this bad?
    `accelerator.backward` divides the loss by the gradient-accumulation steps, scales
    it for fp16 (without the scaler, updates shrink about 65536x) and, under DeepSpeed,
    runs `engine.backward` and `engine.step`; a raw call skips all of it, so under
    DeepSpeed the model never updates. Under plain DDP with no accumulation and no fp16
    both calls agree, which is why the bug survives testing.
    Not flagged: `torch.autograd.grad(...)`, a `GradScaler` when the accelerator is built
    with `mixed_precision="no"`, files that never prepare a model or optimizer, a backward
    that runs before its function makes its accelerator (a plain debug loop that returns
    before `Accelerator()`: nothing is prepared there yet), a backward where no accelerator
    exists (the `else:` of `if accelerator:`, or of a flag bound once that every
    `Accelerator(...)` of the file is built under: `if self.use_accelerator:`).

    ## Example
    ```python
    model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
    for batch in dl:
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
    ```

    ## Use instead
    ```python
    for batch in dl:
        loss = model(**batch).loss
        accelerator.backward(loss)
        optimizer.step()
    ```

    ## Fix safety
    Safe: `loss.backward(**kwargs)` -> `accelerator.backward(loss, **kwargs)` when exactly one
    accelerator is in scope. Unsafe: when a positional argument (`gradient`) becomes a keyword,
    or when the loss was already divided by a gradient-accumulation count (the fix would then
    divide twice: AL102), or when an accelerator of the file accumulates gradients and the
    call is outside `accumulate()`: `accelerator.backward` divides the loss by the
    accumulation steps, and outside `accumulate()` the optimizer still steps on every
    micro-step. No fix for `torch.autograd.backward` with more than the tensor.
    It assumes the accelerator it names is the one that prepared the model; the fix is only
    offered when that accelerator is bound on every path to the call.
    """

    code = "AL101"
    holds_in_one_process = True
    name = "raw-backward"
    severity = "error"
    summary = "`loss.backward()` bypasses `accelerator.backward()` (accumulation, fp16 scaling, DeepSpeed step)"

    VALID = [
        FLAG_GATED_ACCELERATOR,
        """
import torch
from accelerate import Accelerator
def main(args):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.AdamW(model.parameters())
    if args.debug:  # one process, before any accelerator exists
        for batch in loader:
            model(batch).sum().backward()
            optimizer.step()
        return
    accelerator = Accelerator()
    model, optimizer = accelerator.prepare(model, optimizer)
    for batch in loader:
        accelerator.backward(model(batch).sum())
        optimizer.step()
""",
        # a trainer that runs with or without an accelerator: the raw backward is the path without
        """\
        import torch
        from accelerate import Accelerator
        class Trainer:
            def __init__(self, model, accelerator: Accelerator = None):
                self.accelerator = accelerator
                self.model = model
                self.optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                if self.accelerator:
                    self.optimizer = self.accelerator.prepare(self.optimizer)

            def step(self, batch):
                self.optimizer.zero_grad()
                loss = self.model(batch)
                if not self.accelerator:
                    loss.backward()
                else:
                    self.accelerator.backward(loss)
                self.optimizer.step()
        """,
        # accelerator.backward, and a utility function that calls it
        """
from accelerate import Accelerator
import torch
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification
accelerator = Accelerator()
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
dl = DataLoader(dataset, batch_size=8)
model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
def step(loss):
    accelerator.backward(loss)
for batch in dl:
    step(model(**batch).loss)
    optimizer.step()
""",
        # gradient penalty through autograd.grad; no prepared objects: inference only
        """
import torch
from accelerate import PartialState
state = PartialState()
x = torch.randn(3, requires_grad=True)
y = (x * 2).sum()
y.backward()
(g,) = torch.autograd.grad(y, x)
""",
        # a plain PyTorch file
        """
import torch
model = torch.nn.Linear(2, 2)
loss = model(torch.randn(1, 2)).sum()
loss.backward()
""",
    ]
    INVALID = [
        """
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification
accelerator = Accelerator()
model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
dl = DataLoader(dataset, batch_size=8)
model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
for batch in dl:
    loss = model(**batch).loss
    loss.backward()  # expect: AL101
    optimizer.step()
""",
        """
import accelerate, torch
class Trainer:
    def __init__(self, model):
        self.acc = accelerate.Accelerator()
        self.model, self.opt = self.acc.prepare(model, torch.optim.AdamW(model.parameters(), lr=1e-4))
    def step(self, batch):
        out = self.model(batch)
        torch.autograd.backward(out.loss)  # expect: AL101
        self.opt.step()
""",
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for call in model.index.calls:
            loss = self._loss_of(model, call)
            if loss is None:
                continue
            scope = model.scope_of(call)
            reached = self._prepared_kinds_in(model, scope)
            if "optimizer" not in reached and not ("model" in reached and self._from_prepared_model(model, loss, 0)):
                continue
            if not any(v.kind == "optimizer" for v in model.objects.values.values()) and not any(
                    v.kind == "optimizer" for env in model.objects.final_envs.values() for v in env.values()):
                continue  # nothing in the file steps an optimizer: gradients computed to inspect them
            if self._scaler_without_mixed_precision(model, loss):
                continue
            if model.without_accelerator_at(call) or model.before_any_accelerator(call):
                continue  # `if not self.accelerator: loss.backward()`, or a plain loop before the
                # function makes its accelerator: the path with no Accelerate
            acc = model.accelerator_name_in(scope)
            text = model.code(loss)
            yield Finding(
                call,
                f"{quote(text + '.backward()')} bypasses `{acc}.backward()`: gradient-accumulation and fp16 loss "
                f"scaling are skipped and under DeepSpeed the model never updates; use `{acc}.backward({text})`",
                fix=self._fix(model, call, loss, scope),
                evidence=tuple(self._prepared_evidence(model, scope)),
            )

    @staticmethod
    def _fix(model: FileModel, call: cst.Call, loss: cst.BaseExpression, scope) -> Fix | None:
        """``{acc}.backward(loss, **kwargs)`` when exactly one accelerator is in scope. Unsafe when a
        positional ``gradient`` becomes a keyword, or the loss was already divided by a GA count
        (the fix would then scale twice: AL102)."""
        acc = model.accelerator_for_fix(call)
        if acc is None:
            return None
        is_tensor_method = isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward" \
            and model.index.imports.qualify_expr(call.func) != "torch.autograd.backward"
        args = list(call.args) if is_tensor_method else list(call.args[1:])
        if any(a.star for a in args) or (not is_tensor_method and args):
            return None  # torch.autograd.backward's other arguments have other names: no guess
        safe = True
        keyword_args = []
        for position, arg in enumerate(args):
            if arg.keyword is None:
                if position >= len(_TENSOR_BACKWARD_PARAMS):
                    return None
                arg = arg.with_changes(keyword=cst.Name(_TENSOR_BACKWARD_PARAMS[position]),
                                       equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
                safe = False
            keyword_args.append(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
        if _divided_by_accumulation(model, loss):
            safe = False
        if not model.inside_accumulate(call) and model.accumulation_arguments():
            safe = False  # `accelerator.backward` divides by the accumulation steps: outside
            # `accumulate()` the optimizer still steps every micro-step, on gradients 1/N the size
        loss_arg = cst.Arg(loss.with_changes(lpar=[], rpar=[]) if getattr(loss, "lpar", None) else loss)
        new = cst.parse_expression(f"{acc}.backward()").with_changes(args=[loss_arg, *keyword_args])
        return Fix("safe" if safe else "unsafe", f"use `{acc}.backward(...)`", ((call, new),))

    @staticmethod
    def _loss_of(model: FileModel, call: cst.Call) -> cst.BaseExpression | None:
        func = call.func
        if model.index.imports.qualify_expr(func) == "torch.autograd.backward":
            return call.args[0].value if call.args else None
        if isinstance(func, cst.Attribute) and func.attr.value == "backward":
            receiver = func.value
            if model.is_accelerator(receiver):
                return None
            value = model.value_at(receiver)
            if value is not None and value.kind == "model" and value.prepared in (YES, MAYBE):
                return None  # a DeepSpeed engine's own backward(loss)
            if any(a.keyword is None for a in call.args) and isinstance(receiver, (cst.Name, cst.Attribute)):
                if value is None or value.origin is None:
                    return None  # `engine.backward(loss)`: an object's method, not a tensor's
            return receiver
        return None

    @staticmethod
    def _prepared_evidence(model: FileModel, scope) -> list:
        """Where the optimizer (else the model) this scope trains was made and prepared."""
        for wanted in ("optimizer", "model"):
            for node, value in model.objects.values.items():
                if value.prepared in (YES, MAYBE) and value.kind == wanted and model.scope_of(node) is scope \
                        and value.prepared_at is not None:
                    return model.value_evidence(node)
        return []

    @staticmethod
    def _prepared_kinds_in(model: FileModel, scope) -> set[str]:
        kinds = set()
        for node, value in model.objects.values.items():
            if value.prepared in (YES, MAYBE) and value.kind and model.scope_of(node) is scope:
                kinds.add(value.kind)
        return kinds

    def _from_prepared_model(self, model: FileModel, expr: cst.CSTNode, depth: int) -> bool:
        if depth > 8:
            return False
        for call in model.calls_in(expr):
            value = model.value_at(call.func)
            if value is not None and value.kind == "model" and value.prepared in (YES, MAYBE):
                return True
        for n in model.index.loads_in(expr):
            value = model.value_at(n)
            if value is None or value.kind == "model" or not isinstance(value.origin, cst.BaseExpression):
                continue
            if value.origin is not n and self._from_prepared_model(model, value.origin, depth + 1):
                return True
        return False

    @staticmethod
    def _scaler_without_mixed_precision(model: FileModel, loss: cst.BaseExpression) -> bool:
        if not (isinstance(loss, cst.Call) and isinstance(loss.func, cst.Attribute) and loss.func.attr.value == "scale"):
            return False
        for ctor in model.objects.acc_constructors:
            for arg in ctor.args:
                if arg.keyword is not None and arg.keyword.value == "mixed_precision":
                    if isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "no":
                        return True
        return False


_TENSOR_BACKWARD_PARAMS = ("gradient", "retain_graph", "create_graph", "inputs")
def _divided_by_accumulation(model: FileModel, loss: cst.BaseExpression) -> bool:
    """The loss is divided by something (``loss / ga`` in the expression or where the name was
    bound, or ``loss /= ga`` earlier): a hand-written accumulation that ``accelerator.backward``
    would divide a second time, so the fix is not safe."""
    nodes: list[cst.CSTNode] = [loss]
    value = model.value_at(loss)
    if value is not None and value.origin is not None:
        parent = model.index.parents.get(value.origin)
        nodes.append(parent if parent is not None else value.origin)
    nodes.extend(model.calls_in(model.statement_of(loss)))
    return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Divide)
               for node in nodes for n in model.index.walk(node)) or _augmented_division(model, loss)


def _augmented_division(model: FileModel, loss: cst.BaseExpression) -> bool:
    """``loss /= ga`` earlier in the same function."""
    name = model.code(loss)
    scope = model.scope_of(loss)
    for node in model.index.walk(scope):
        if isinstance(node, cst.AugAssign) and isinstance(node.operator, cst.DivideAssign) \
                and model.code(node.target) == name:
            return True
    return False
