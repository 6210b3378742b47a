"""Which names are bound on every path to a statement: Python's own rule for
``UnboundLocalError`` (in a function) and ``NameError`` (at module level).

A fix that adds or moves a read must not read a name that some path reaches unbound:
``print(w)`` -> ``accelerator.print(w)`` above ``accelerator = Accelerator()``, or below an
``accelerator`` bound in only one branch of an ``if``. Source order alone does not tell: a
binding in one branch comes earlier in the file than the read after the ``if``, yet the
other branch leaves the name unbound.

The analysis is structural, one pass per scope over its statements:

* an assignment, import, ``def``/``class``, ``with ... as``, ``for`` target or walrus binds;
  ``del`` unbinds;
* after an ``if``, a name is bound when both branches bind it (a branch that returns,
  raises, breaks or continues does not count);
* a loop's body and its ``else`` may run zero times, so nothing they bind is bound after it;
  inside the body, a name bound later in the body is not bound on the first pass;
* a ``try`` body may stop at any statement: its handlers start from what was bound before it.

Parameters, ``global``/``nonlocal`` names and names of enclosing scopes count as bound.
Where a path ends (``return``, ``raise``), everything counts as bound: no read is reached.
"""

from __future__ import annotations

from collections import Counter

import libcst as cst

from .index import ScopeNode
from .moves import _alias_name, _is_store, _plain_names, scope_bindings

_EVERYTHING = None  # the state after a statement that ends the path: nothing after it runs
_NESTED_SCOPES = (cst.FunctionDef, cst.ClassDef, cst.Lambda)


class _Flow:
    """Walks one scope's statements, recording the names bound on every path into each."""

    def __init__(self, local_names: set[str], walrus: bool = True) -> None:
        self.local_names = local_names
        self.entry: dict[int, frozenset | None] = {}
        self.walrus = walrus  # False: the file has no `:=`, nothing to look for

    def _walrus(self, node: cst.CSTNode | None) -> frozenset:
        return _walrus(node) if self.walrus else frozenset()

    def block(self, statements, bound: frozenset | None) -> frozenset | None:
        for statement in statements:
            bound = self.statement(statement, bound)
        return bound

    def statement(self, node: cst.CSTNode, bound: frozenset | None) -> frozenset | None:
        self.entry[id(node)] = bound
        if bound is _EVERYTHING:
            self._mark_unreachable(node)
            return _EVERYTHING
        kind = type(node)
        if kind is cst.SimpleStatementLine:
            for small in node.body:
                bound = self.statement(small, bound)
            return bound
        if kind in (cst.Return, cst.Raise, cst.Break, cst.Continue):
            return _EVERYTHING
        if kind is cst.Del:
            return bound - _plain_names(node.target)
        if kind is cst.If:
            body = self.block(node.body.body, bound | self._walrus(node.test))
            other = self._orelse(node.orelse, bound | self._walrus(node.test))
            return _meet(body, other)
        if kind in (cst.For, cst.While):
            target = _plain_names(node.target) if kind is cst.For else self._walrus(node.test)
            self.block(node.body.body, bound | target)
            if node.orelse is not None:
                self.block(node.orelse.body.body, bound)
            return bound
        if kind is cst.With:
            names = set()
            for item in node.items:
                if item.asname is not None:
                    names |= _plain_names(item.asname.name)
            return self.block(node.body.body, bound | names)
        if kind is cst.Try or kind is cst.TryStar:
            after_body = self.block(node.body.body, bound)
            if node.orelse is not None:
                after_body = self.block(node.orelse.body.body, after_body)
            outcome = after_body
            for handler in node.handlers:
                caught = _plain_names(handler.name.name) if handler.name is not None else set()
                outcome = _meet(outcome, self.block(handler.body.body, bound | caught))
            if node.finalbody is not None:
                self.block(node.finalbody.body.body, bound)
            return outcome
        if kind in (cst.FunctionDef, cst.ClassDef):
            return bound | {node.name.value}
        if kind is cst.Match:
            for case in node.cases:
                self.block(case.body.body, bound)
            return bound
        if isinstance(node, cst.BaseCompoundStatement):  # anything else: what it binds is not trusted
            return bound
        return bound | self._binds(node)

    def _orelse(self, orelse, bound: frozenset) -> frozenset | None:
        if orelse is None:
            return bound
        if type(orelse) is cst.If:
            return self.statement(orelse, bound)
        return self.block(orelse.body.body, bound)

    def _binds(self, small: cst.CSTNode) -> set[str]:
        kind = type(small)
        names: set[str] = set()
        if kind is cst.Assign:
            for target in small.targets:
                names |= _plain_names(target.target)
        elif kind in (cst.AnnAssign, cst.AugAssign) and getattr(small, "value", None) is not None:
            names |= _plain_names(small.target)
        elif kind in (cst.Import, cst.ImportFrom) and not isinstance(small.names, cst.ImportStar):
            names |= {_alias_name(alias) for alias in small.names}
        elif kind in (cst.Global, cst.Nonlocal):
            names |= {n.name.value for n in small.names}
        return names | self._walrus(small)

    def _mark_unreachable(self, node: cst.CSTNode) -> None:
        for child in node.children:
            if isinstance(child, (cst.BaseStatement, cst.BaseSmallStatement)):
                self.entry[id(child)] = _EVERYTHING
            if not isinstance(child, _NESTED_SCOPES):
                self._mark_unreachable(child)


def _meet(a: frozenset | None, b: frozenset | None) -> frozenset | None:
    if a is _EVERYTHING:
        return b
    if b is _EVERYTHING:
        return a
    return a & b


def _walrus(node: cst.CSTNode | None) -> frozenset:
    if node is None:
        return frozenset()
    found = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if type(n) is cst.NamedExpr and type(n.target) is cst.Name:
            found.add(n.target.value)
        stack.extend(c for c in n.children if not isinstance(c, _NESTED_SCOPES))
    return frozenset(found)


class BoundNames:
    """Per scope of a file, the names bound on every path into each statement."""

    def __init__(self, model) -> None:
        self.model = model
        self._flows: dict[ScopeNode, _Flow] = {}
        # every node of the file is a key of the parent map: one pass says whether any `:=` exists
        self._walrus = any(type(n) is cst.NamedExpr for n in model.index.parents)

    def _flow(self, scope: ScopeNode) -> _Flow:
        flow = self._flows.get(scope)
        if flow is None:
            bindings = scope_bindings(self.model, scope)
            # a parameter or a global/nonlocal declaration: bound on entry, not a local to follow
            on_entry = {name for name, sites in bindings.items() if any(site is None for site in sites)}
            flow = _Flow(set(bindings) - on_entry, self._walrus)
            body = scope.body.body if type(scope) is not cst.Module else scope.body
            flow.block(body, frozenset(on_entry))
            self._flows[scope] = flow
        return flow

    def bound_at(self, node: cst.CSTNode, name: str) -> bool:
        """Whether ``name`` is bound on every path that reaches ``node`` (a name that is not local
        to ``node``'s scope counts as bound: it is read from an enclosing scope at run time)."""
        scope = self.model.scope_of(node)
        flow = self._flow(scope)
        if name not in flow.local_names:
            return True
        state = self._state_at(flow, node)
        return state is _EVERYTHING or name in state

    def _state_at(self, flow: _Flow, node: cst.CSTNode) -> frozenset | None:
        for candidate in (node, *self.model.index.ancestors(node)):
            if id(candidate) in flow.entry:
                return flow.entry[id(candidate)]
        return frozenset()

    def reads_maybe_unbound(self) -> Counter:
        """``(scope's qualified name, name)`` -> how many reads of a local name some path reaches
        unbound, over every scope of the file."""
        model = self.model
        found: Counter = Counter()
        for scope in [model.module, *model.index.functions]:
            flow = self._flow(scope)
            if not flow.local_names:
                continue
            qualname = model.index.functions[scope].qualname if type(scope) is cst.FunctionDef else ""
            for node in _reads_in(model, scope):
                if node.value in flow.local_names and not self._read_bound(flow, node):
                    found[(qualname, node.value)] += 1
        return found

    def _read_bound(self, flow: _Flow, node: cst.Name) -> bool:
        state = self._state_at(flow, node)
        if state is _EVERYTHING or node.value in state:
            return True
        # bound earlier in the same statement (`x = f(y := g())`, a comprehension's own target)
        return node.value in _comprehension_targets_around(self.model, node)


def _reads_in(model, scope: ScopeNode):
    """The ``Name`` loads of ``scope`` itself (not of functions, classes or lambdas inside it)."""
    stack = list(scope.body.children if type(scope) is not cst.Module else scope.children)
    while stack:
        n = stack.pop()
        if type(n) in (cst.Import, cst.ImportFrom):
            continue
        if isinstance(n, _NESTED_SCOPES):
            # decorators, defaults and bases run in this scope
            if type(n) is cst.FunctionDef:
                stack.extend(d.decorator for d in n.decorators)
                stack.extend(p.default for p in (*n.params.params, *n.params.kwonly_params) if p.default is not None)
            elif type(n) is cst.ClassDef:
                stack.extend(d.decorator for d in n.decorators)
                stack.extend(a.value for a in n.bases)
            continue
        if type(n) is cst.Name:
            parent = model.index.parents.get(n)
            if type(parent) is cst.Attribute and parent.attr is n:
                continue
            if not _is_store(model, n):
                yield n
            continue
        stack.extend(n.children)


def _comprehension_targets_around(model, node: cst.CSTNode) -> set[str]:
    names: set[str] = set()
    for ancestor in model.index.ancestors(node):
        if isinstance(ancestor, (cst.BaseStatement, cst.BaseSmallStatement)):
            break
        if isinstance(ancestor, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            comp = ancestor.for_in
            while comp is not None:
                names |= _plain_names(comp.target)
                comp = comp.inner_for_in
        if type(ancestor) is cst.NamedExpr and type(ancestor.target) is cst.Name:
            names.add(ancestor.target.value)
    return names
