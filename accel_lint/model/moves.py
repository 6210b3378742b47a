"""Def-use facts for fixes that change which ranks run a statement.

A fix that hoists ``accelerator.save_state(save_path)`` out of ``if is_main_process:`` makes
every rank run it. Whatever it reads must then be bound on every rank: ``save_path = ...``
left inside the guard is unbound on the other ranks (``UnboundLocalError``), or stale from an
earlier iteration. This module answers, from the model's values:

* :func:`plan_move`: the def-use slice of a statement leaving a guarded block (the statements
  of that block that bind what it reads, transitively), and whether they may come along: a
  plain assignment of a rank-uniform value, computed by pure calls (no file writes, no
  collectives, no method calls that may mutate), binding names no unguarded code binds;
* :func:`reads_bound_on_some_ranks`: the reads of a local name whose every binding sits
  under a rank guard that does not also hold the read; what ``--fix`` compares before and
  after a fix, so that no fix leaves a name unbound on the ranks a guard skips.

Names are compared by their head (``args`` for ``args.output_dir``): assigning
``args.output_dir`` or calling ``checkpoints.sort()`` changes what ``args`` and
``checkpoints`` hold.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import libcst as cst

from .index import ScopeNode
from .names import bound_names, dotted_name

# Calls that compute a value from their arguments and touch nothing else (no I/O, no state).
PURE_CALLS = frozenset({
    "os.path.join", "os.path.basename", "os.path.dirname", "os.path.splitext", "os.path.normpath",
    "os.path.expanduser", "os.path.abspath", "os.fspath", "pathlib.Path", "pathlib.PurePath",
    "str", "int", "float", "bool", "len", "min", "max", "abs", "round", "repr", "format", "tuple",
    "range", "divmod", "math.ceil", "math.floor",
})
PURE_STRING_METHODS = frozenset({"format", "join", "replace", "strip", "lstrip", "rstrip", "lower", "upper",
                                 "split", "rsplit", "zfill", "removeprefix", "removesuffix"})
_STRINGS = (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString)
_TARGET_WRAPPERS = (cst.Tuple, cst.List, cst.Element, cst.StarredElement)


@dataclass(frozen=True)
class MovePlan:
    """How to move a statement out of a guarded block: the block's statements that must come
    along (in source order), whether they go ahead of the guard (a statement left guarded
    reads them), or why the move is refused."""

    brought: tuple[cst.BaseStatement, ...] = ()
    ahead_of_guard: bool = False
    refusal: str | None = None


def plan_move(model, moved: cst.BaseStatement, before: list[cst.BaseStatement], guard: cst.If) -> MovePlan:
    """The statements of ``before`` (the guarded block ahead of ``moved``) that ``moved`` needs."""
    imports = _imported_names(model)
    needed = reads_of(model, moved) - imports
    brought: list[cst.BaseStatement] = []
    for statement in reversed(before):
        written = writes_of(model, statement, imports)
        if written & needed:
            brought.append(statement)
            needed |= reads_of(model, statement) - imports
    brought.reverse()
    for statement in brought:
        why = _why_not_portable(model, statement, guard)
        if why is not None:
            return MovePlan(refusal=f"`{model.code(moved)}` reads what "
                                    f"`{_short(model.code(statement))}` sets inside the guard, and that "
                                    f"statement {why}")
    bound = set().union(*(writes_of(model, s, imports) for s in brought)) if brought else set()
    left = [s for s in before if s not in brought]
    ahead = any(reads_of(model, s) & bound for s in left)
    if ahead and reads_of(model, guard.test) & bound:
        return MovePlan(refusal="the guard's condition reads what the moved statements set")
    return MovePlan(tuple(brought), ahead)


def _why_not_portable(model, statement: cst.BaseStatement, guard: cst.If) -> str | None:
    """Why ``statement`` may not run on every rank, or ``None`` when it may."""
    if type(statement) is not cst.SimpleStatementLine or len(statement.body) != 1:
        return "is not a single assignment"
    small = statement.body[0]
    if type(small) is cst.Assign:
        targets = [t.target for t in small.targets]
    elif type(small) is cst.AnnAssign and small.value is not None:
        targets = [small.target]
    else:
        return "is not a plain assignment"
    value = small.value
    names: list[str] = []
    for target in targets:
        for node in model.index.walk(target):
            if type(node) is cst.Name:
                names.append(node.value)
            elif type(node) not in _TARGET_WRAPPERS:
                return "assigns into an object other ranks share"
    for node in model.index.walk(value):
        if type(node) is cst.NamedExpr:
            return "binds a name inside an expression"
        if type(node) in (cst.Await, cst.Yield):
            return "suspends"
    for call in model.calls_in(value):
        if model.op_kind(call) is not None:
            return "is a collective"
        if not _pure(model, call):
            return f"calls `{_short(model.code(call.func), 40)}`, which may have effects every rank would repeat"
    if model.rank_data.varies(value) or model.ranks.is_rank_dependent(value) \
            or any(model.ranks.is_rank_dependent(load) for load in model.index.loads_in(value)):
        return "computes a value that differs between ranks"
    scope = model.index.scope_of(statement)
    for name in names:
        if any(site is not None and not _inside(model, site, guard) for site in _binding_sites(model, scope, name)):
            return f"rebinds `{name}`, which the other ranks also set; moving it would change their value"
    return None


def _pure(model, call: cst.Call) -> bool:
    func = call.func
    qualified = model.index.imports.qualify(dotted_name(func)) or dotted_name(func)
    if qualified in PURE_CALLS:
        return True
    return type(func) is cst.Attribute and func.attr.value in PURE_STRING_METHODS and type(func.value) in _STRINGS


# -- reads and writes of a statement ----------------------------------------------------------

def reads_of(model, node: cst.CSTNode) -> set[str]:
    """Head names ``node`` reads (outside nested scopes; comprehension variables excluded)."""
    local = {n.value for n in _comprehension_targets(model, node)}
    return {n.value for n in model.index.loads_in(node)
            if type(n) is cst.Name and n.value not in local and not _is_store(model, n)}


def writes_of(model, node: cst.CSTNode, imports: set[str]) -> set[str]:
    """Head names ``node`` binds, or whose object it may change: assignment and loop targets
    (``a.b = ...`` and ``a[i] = ...`` change ``a``), ``with ... as``, walrus, ``del``, imports,
    nested definitions, and the receivers of method calls that are not imported modules."""
    written: set[str] = set()
    for n in model.index.walk(node):
        kind = type(n)
        if kind is cst.AssignTarget or kind is cst.AugAssign or kind is cst.For or kind is cst.NamedExpr \
                or (kind is cst.AnnAssign and n.value is not None):
            written |= _heads(n.target)
        elif kind is cst.AsName:
            written |= _heads(n.name)
        elif kind is cst.Del:
            written |= _heads(n.target)
        elif kind is cst.ImportAlias:
            written.add(_alias_name(n))
        elif kind is cst.Call and type(n.func) is cst.Attribute:
            head = _head(n.func.value)
            if head is not None and head not in imports:
                written.add(head)
    # nested definitions bind their names (walk does not enter them)
    for child in model.index.children.get(node, []):
        if type(child) in (cst.FunctionDef, cst.ClassDef):
            written.add(child.name.value)
    if type(node) in (cst.FunctionDef, cst.ClassDef):
        written.add(node.name.value)
    return written


def _heads(target: cst.CSTNode) -> set[str]:
    if type(target) in (cst.Tuple, cst.List):
        return set().union(*(_heads(e.value) for e in target.elements)) if target.elements else set()
    if type(target) is cst.StarredElement:
        return _heads(target.value)
    head = _head(target)
    return {head} if head is not None else set()


def _head(expr: cst.CSTNode) -> str | None:
    while type(expr) in (cst.Attribute, cst.Subscript):
        expr = expr.value
    return expr.value if type(expr) is cst.Name else None


def _is_store(model, name: cst.Name) -> bool:
    """Whether ``name`` is (part of) a binding target rather than a read."""
    parents = model.index.parents
    child, parent = name, parents.get(name)
    while type(parent) in _TARGET_WRAPPERS:
        child, parent = parent, parents.get(parent)
    kind = type(parent)
    if kind in (cst.AssignTarget, cst.For, cst.CompFor, cst.NamedExpr, cst.AnnAssign):
        return parent.target is child
    if kind is cst.AsName:
        return parent.name is child
    if kind is cst.Arg:
        return parent.keyword is child
    return kind in (cst.ImportAlias, cst.Param, cst.Global, cst.Nonlocal, cst.Del, cst.FunctionDef, cst.ClassDef)


def _comprehension_targets(model, node: cst.CSTNode) -> list[cst.Name]:
    found = []
    for n in model.index.walk(node):
        if type(n) is cst.CompFor:
            found += [m for m in model.index.walk(n.target) if type(m) is cst.Name]
    return found


def _imported_names(model) -> set[str]:
    """Every name an import binds in the file (computed once per file: one walk of the module)."""
    cached = model.__dict__.get("_imported_names")
    if cached is not None:
        return cached
    names: set[str] = set()
    for n in model.index.walk(model.module):
        if type(n) is cst.ImportAlias:
            names.add(_alias_name(n))
    model.__dict__["_imported_names"] = names
    return names


def _alias_name(alias: cst.ImportAlias) -> str:
    """The name an import binds: ``np`` for ``import numpy as np``, ``os`` for ``import os.path``."""
    if alias.asname is not None and type(alias.asname.name) is cst.Name:
        return alias.asname.name.value
    return (dotted_name(alias.name) or "").split(".")[0]


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- bindings of a scope and the rank guards they sit under -------------------------------------

_ALWAYS = None  # a binding every rank makes (a parameter, a global declaration)


def scope_bindings(model, scope: ScopeNode) -> dict[str, list[cst.CSTNode | None]]:
    """Every local name of ``scope`` and the nodes that bind it (``None``: a parameter or a
    ``global``/``nonlocal`` declaration, bound for every rank; match patterns count as that
    too, the model does not follow them)."""
    cache = model.__dict__.setdefault("_scope_bindings", {})
    if scope in cache:
        return cache[scope]
    found: dict[str, list] = {}
    if type(scope) is cst.FunctionDef:
        for param in model.index.functions[scope].params:
            found.setdefault(param.name.value, []).append(_ALWAYS)
    children = model.index.children
    for n in model.index.walk(scope):
        kind = type(n)
        names: set[str] = set()
        if kind is cst.AssignTarget or kind is cst.AugAssign or kind is cst.For or kind is cst.NamedExpr \
                or (kind is cst.AnnAssign and n.value is not None) or kind is cst.Del:
            names = _plain_names(n.target)
        elif kind is cst.AsName:
            names = _plain_names(n.name)
        elif kind is cst.ImportAlias and n.asname is None:
            names = {(dotted_name(n.name) or "").split(".")[0]}
        elif kind in (cst.Global, cst.Nonlocal, cst.MatchAs, cst.MatchStar, cst.MatchMapping):
            for name in model.index.walk(n):
                if type(name) is cst.Name:
                    found.setdefault(name.value, []).append(_ALWAYS)
        for name in names:
            found.setdefault(name, []).append(n)
        for kid in children.get(n, ()):
            if type(kid) in (cst.FunctionDef, cst.ClassDef) and kid is not scope:
                found.setdefault(kid.name.value, []).append(kid)
    cache[scope] = found
    return found


def _plain_names(target: cst.CSTNode) -> set[str]:
    """Names a target binds (``a``, each of ``a, *b``); ``a.b`` and ``a[i]`` bind none."""
    return {name for name in bound_names(target) if "." not in name}


def _binding_sites(model, scope: ScopeNode, name: str) -> list:
    return scope_bindings(model, scope).get(name, [])


def rank_branch_of(model, node: cst.CSTNode) -> tuple[cst.If, str] | None:
    """The innermost ``if`` on a rank predicate around ``node`` in its scope, and the branch
    (``"body"`` or ``"orelse"``) that holds it."""
    child = node
    for parent in model.index.ancestors(node):
        if type(parent) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
            return None
        if type(parent) is cst.If and child is not parent.test and model.ranks.is_rank_dependent(parent.test):
            return parent, ("body" if child is parent.body else "orelse")
        child = parent
    return None


def reads_bound_on_some_ranks(model) -> Counter:
    """``(function, name)`` -> how many reads of a local name lie outside every rank-guarded
    branch that binds it, where no binding of it runs on every rank."""
    found: Counter = Counter()
    for scope in [model.module, *model.index.functions]:
        qualname = model.index.functions[scope].qualname if type(scope) is cst.FunctionDef else ""
        guarded: dict[str, list] = {}
        for name, sites in scope_bindings(model, scope).items():
            branches = []
            for site in sites:
                branch = rank_branch_of(model, site) if site is not None else None
                if branch is None:
                    break
                branches.append(branch)
            else:
                if not any((b[0], "orelse") in branches for b in branches if b[1] == "body"):
                    guarded[name] = branches
        if not guarded:
            continue
        for n in model.index.walk(scope):
            if type(n) is not cst.Name or n.value not in guarded or _is_store(model, n):
                continue
            parent = model.index.parents.get(n)
            if type(parent) is cst.Attribute and parent.attr is n:
                continue
            if not any(_in_branch(model, n, branch) for branch in guarded[n.value]):
                found[(qualname, n.value)] += 1
    return found


def _in_branch(model, node: cst.CSTNode, branch: tuple[cst.If, str]) -> bool:
    """``node`` runs only where ``branch`` ran: inside it, or under a guard that lets in only
    ranks its condition selects (``if is_main: path = ...`` then ``if is_main: save(path)``)."""
    guard, which = branch
    block = guard.body if which == "body" else guard.orelse
    if any(a is block for a in model.index.ancestors(node)):
        return True
    return which == "body" and model.runs_only_where(node, guard.test)


def _inside(model, node: cst.CSTNode, guard: cst.If) -> bool:
    return any(a is guard for a in model.index.ancestors(node))
