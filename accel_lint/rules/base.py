"""What every rule is: a code, a name, a severity, four-part docs, examples, and a query."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar
from collections.abc import Iterable

import libcst as cst

from ..model import FileModel, Guard, shorten

SEVERITIES = ("error", "warning", "info")
DOC_SECTIONS = ("## What it does", "## Why is this bad?", "## Example", "## Use instead")


@dataclass(frozen=True)
class Fix:
    """A rule's correction: nodes of the parsed module and what replaces each (a node, a
    ``cst.FlattenSentinel`` of statements, or ``cst.RemoveFromParent()``).

    ``applicability`` is "safe" (the only change in behaviour is the intended correction;
    applied by ``--fix``) or "unsafe" (may change more; needs ``--unsafe-fixes``).

    A fix with a ``refusal`` changes nothing: ``--fix`` tells the user why it would not be
    safe and what to do by hand (the finding is then not marked fixable)."""

    applicability: str
    description: str
    replacements: tuple[tuple[cst.CSTNode, object], ...] = ()
    # edits of raw text, (line, start column, end column, new text), 1-based, for what is not a
    # node (a comment)
    text_edits: tuple[tuple[int, int, int, str], ...] = ()
    refusal: str | None = None

    @classmethod
    def refused(cls, applicability: str, description: str, why: str) -> Fix:
        return cls(applicability, description, refusal=why)


@dataclass(frozen=True)
class Finding:
    """A rule's answer: the node to report, the message, the severity if not the default,
    and a fix if the rule has one for this case."""

    node: cst.CSTNode
    message: str
    severity: str | None = None
    fix: Fix | None = None
    tag: str = ""  # which variant of the rule (for configuration-aware severities)
    # the facts the finding rests on: (node, fact), e.g. where the object was made and which
    # prepare() returned it (FileModel.value_evidence, FileModel.guard_evidence)
    evidence: tuple[tuple[cst.CSTNode, str], ...] = ()


class Rule:
    """Base class. A rule module defines one subclass; registering it is importing it.

    Class attributes:
      ``code``, ``name`` (kebab-case), ``severity``, ``summary`` (the one-line message
      shown by ``--list-rules``), ``scope`` ("accelerate": only files that use an
      accelerator; "distributed": also plain ``torch.distributed`` files), and ``VALID``/
      ``INVALID`` examples. In an INVALID example each reported line carries a
      ``# expect: <CODE>`` comment; the suite checks both lists for every rule.
    The docstring holds the four documentation sections of ``DOC_SECTIONS``.
    """

    code: ClassVar[str]
    name: ClassVar[str]
    severity: ClassVar[str]
    summary: ClassVar[str]
    scope: ClassVar[str] = "accelerate"
    # A rule computed by the engine from the other rules' results (AL002): its examples run with every rule.
    needs_other_rules: ClassVar[bool] = False
    # A rule whose fix may be refused (a move the def-use slice does not allow): `--fix` looks
    # at its findings to say why, even where nothing in the file is fixable.
    fix_may_refuse: ClassVar[bool] = False
    # the harm exists when the program runs as one process too (skipped accumulation, fp16
    # scaling, a move under the prepared model); False: it needs several ranks, so the rule
    # does not report in a file the project runs only as ``python script.py``
    holds_in_one_process: ClassVar[bool] = False
    # of such a rule, the variants (finding tags) whose harm still needs several ranks: an
    # unprepared scheduler's horizon counted in all ranks' batches, a torch clip where nothing
    # asks for fp16 (its harm is FSDP's shards and XLA's cores)
    several_process_variants: ClassVar[frozenset[str]] = frozenset()
    # the variants (finding tags) whose harm exists only under a backend that shards the weights
    # or runs on TPU cores (FSDP, DeepSpeed ZeRO-3, XLA): they are not reported in a project that
    # names none of them anywhere (``launches.names_sharding_backend``)
    sharding_only_variants: ClassVar[frozenset[str]] = frozenset()
    # the variants whose fp16 harm depends on the precision the launch gives (no constructor
    # chooses one): sharding-only too in a file every launch of which runs without fp16
    launch_precision_variants: ClassVar[frozenset[str]] = frozenset()
    VALID: ClassVar[list[str]] = []
    INVALID: ClassVar[list[str]] = []

    def applies_to(self, model: FileModel) -> bool:
        if self.scope == "distributed":
            return model.is_accelerate_file or model.uses_torch_distributed
        return model.is_accelerate_file

    def check(self, model: FileModel) -> Iterable[Finding]:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def docs(cls) -> str:
        return _dedent(cls.__doc__ or "")


def _dedent(text: str) -> str:
    lines = text.expandtabs().splitlines()
    indents = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    cut = min(indents) if indents else 0
    return "\n".join([lines[0].strip()] + [line[cut:] for line in lines[1:]]).strip() + "\n"


def guard_statement_fix(model: FileModel, call: cst.Call, acc: str | None, condition: str,
                        applicability: str) -> Fix | None:
    """Wrap the statement that is exactly ``call`` in ``if {acc}.{condition}:``; ``None`` when the
    call is part of a larger statement (an assignment would leave the name unbound) or no single
    accelerator is in scope."""
    statement = model.statement_of(call)
    if acc is None or not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    if not (isinstance(small, cst.Expr) and small.value is call):
        return None
    if any(type(node) is cst.NamedExpr for node in model.index.walk(call)):
        return None  # `log(n := ...)`: the other ranks would lose the binding
    block = model.index.parents.get(statement)
    parent = model.index.parents.get(block) if block is not None else None
    if type(parent) is cst.If and model.code(parent.test) == f"{acc}.{condition}":
        return None  # already guarded by this very test: wrapping again would never end
    return wrap_in_guard(statement, acc, condition, applicability)


def wrap_in_guard(statement: cst.BaseStatement, acc: str, condition: str, applicability: str) -> Fix:
    """The fix that puts ``statement`` (with its comments above it) under ``if {acc}.{condition}:``."""
    guarded = cst.If(test=cst.parse_expression(f"{acc}.{condition}"),
                     body=cst.IndentedBlock(body=[statement.with_changes(leading_lines=[])]),
                     leading_lines=statement.leading_lines)
    return Fix(applicability, f"guard with `if {acc}.{condition}:`", ((statement, guarded),))


def quote(text: str, limit: int = 60) -> str:
    """A code excerpt for a message, shortened on one line."""
    return f"`{shorten(text, limit)}`"


def describe_guard(model: FileModel, guard: Guard | None) -> str:
    """'where `accelerator.is_main_process` (line 86) is true' and the like."""
    if guard is None:
        return "on some ranks only"
    line = model.line_of(guard.node)
    if guard.how == "decorator":
        return f"only on the ranks that `@{model.code(guard.condition)}` (line {line}) selects"
    cond = quote(model.code(guard.condition))
    if guard.how == "else":
        return f"only where {cond} (line {line}) is false"
    if guard.callers() is not None:
        where, test = guard.callers()
        return f"only where its callers run it: under `{test}` ({where})"
    if guard.how == "main-only-loop":
        return f"only on the main process (in the loop over {cond}, line {line}, a list only it fills)"
    if guard.how == "early-exit":
        return f"only on the ranks that pass the early exit on {cond} (line {line})"
    return f"only where {cond} (line {line}) is true"


def expected_lines(source: str, code: str) -> list[int]:
    """Lines of an example marked ``# expect: CODE``."""
    pattern = re.compile(r"#\s*expect:\s*([A-Z0-9, ]+)")
    out = []
    for number, line in enumerate(source.splitlines(), 1):
        m = pattern.search(line)
        if m and code in [c.strip() for c in m.group(1).split(",")]:
            out.append(number)
    return out
