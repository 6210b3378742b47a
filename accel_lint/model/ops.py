"""Per-rank op sequences, rank-gated regions and the same-file call graph.

Each function (and the module body) is walked once per rank class. Rank-dependent
conditions are resolved for the class; uniform ones stay as ``Choice`` nodes keyed by
the condition, so that the sequences of two classes can be compared structurally: the
balanced barrier pattern (``if main: work(); wait() else: wait()``) gives the same
sequence on every class, an unbalanced one does not. A call to a same-file function
inlines that function's sequence for the class, which is how a collective reached
through helpers counts at the guarded call site.

The same walk records, for every call, the innermost rank guard it runs under.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Union

import libcst as cst

from .. import collectives as C
from .index import FileIndex, ScopeNode
from .names import bound_names, dotted_name
from ..collectives import NOT_OPS
from .objects import ObjectTracker, _protocol_place, arguments_by_parameter
from .ranks import FORK, UNIFORM, RankClass, RankEvaluator, _rank_attribute


@dataclass(frozen=True)
class Guard:
    """Why a region runs on some ranks only: an ``if`` on a rank predicate, an early exit,
    a rank-gating decorator, or a call site under such a guard."""

    node: cst.CSTNode  # the If/While statement, decorator, or call
    condition: cst.CSTNode  # the expression or decorator to quote
    how: str  # "if" | "else" | "early-exit" | "decorator" | "main-only-loop" | "callers:<file:line>|<test>"

    def callers(self) -> tuple[str, str] | None:
        """For a guard that only the callers in other modules explain: (their file:line, their test)."""
        if not self.how.startswith("callers:"):
            return None
        where, _, test = self.how.removeprefix("callers:").partition("|")
        return where, test


@dataclass(frozen=True)
class Op:
    """One collective (or checkpoint call) as the walk of one function sees it."""

    kind: str
    node: cst.CSTNode  # where the finding goes: the call in this function
    origin: cst.Call  # the collective call itself (may be in a helper)
    chain: tuple[str, ...]  # helpers from ``node`` to ``origin``
    guard: Guard | None


@dataclass
class Choice:
    key: cst.CSTNode
    branches: list[list[Item]]


@dataclass
class Loop:
    key: cst.CSTNode
    body: list[Item]


@dataclass
class Fork:
    """A rank-dependent condition the evaluator cannot resolve: both outcomes happen."""

    key: cst.CSTNode
    branches: list[list[Item]]
    guard: Guard
    inlined: bool = False


Item = Union[Op, Choice, Loop, Fork]
OPAQUE = "OPAQUE"  # collectives the analysis cannot place (callbacks): no finding in that scope
_TORCH_DATALOADERS = frozenset({"torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader"})
EXIT_FUNCTION_CALLS = frozenset({"sys.exit", "exit", "quit", "os._exit"})


@dataclass
class Divergence:
    """An op that some rank classes reach and others do not."""

    op: Op
    scope: ScopeNode


@dataclass
class _Summary:
    items: list[Item]
    exit: str | None
    _flat: tuple | None = None

    def flat(self) -> tuple[list[tuple[str, Op | None]], list[Op]]:
        """The items as one token sequence, and the ops of the rank-dependent forks in them
        whose branches differ (computed once: several queries read a summary)."""
        if self._flat is None:
            forks: list[Op] = []
            self._flat = (_flatten(self.items, forks), forks)
        return self._flat


@dataclass
class OpAnalysis:
    """Runs the per-class walks and keeps what the rules query."""

    index: FileIndex
    objects: ObjectTracker
    ranks: RankEvaluator
    guards: dict[cst.CSTNode, Guard] = field(default_factory=dict)
    visits: dict[cst.CSTNode, set[str]] = field(default_factory=dict)
    divergences: list[Divergence] = field(default_factory=list)
    # functions of other modules of the linted tree that this file imports by name:
    # local name -> the collectives they perform, as (op kind, the call's source)
    external: dict[str, list[tuple[str, str]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._summaries: dict[tuple[ScopeNode, str], _Summary] = {}
        self._in_progress: set[tuple[ScopeNode, str]] = set()
        self._divergent: dict[ScopeNode, bool] = {}
        self._rank_free: dict[ScopeNode, bool] = {}
        self._tested: dict[cst.FunctionDef, frozenset[str]] = {}
        self._component = _strongly_connected(self.index)
        for scope in [self.index.module, *self.index.functions]:
            self._analyse_root(scope)

    # -- collectives ----------------------------------------------------------------------
    def _never_prepared(self, expr: cst.BaseExpression) -> bool:
        """``expr`` holds, on every path, an object made in this file (a call) that no ``prepare``
        was given: nothing wrapped or sharded it."""
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "unwrap_model" \
                and expr.args:
            owner = self.objects.values.get(expr.func.value)
            if owner is not None and owner.is_acc:
                return self._never_prepared(expr.args[0].value)
        value = self.objects.values.get(expr)
        if value is not None and value.unwrapped:
            # `unwrap_model(m)`: the module of whatever `m` is (a prepared model's still gathers
            # under ZeRO-3 and FSDP)
            call = value.origin
            return isinstance(call, cst.Call) and bool(call.args) and self._never_prepared(call.args[0].value)
        if value is None or value.prepared != "no" or value.is_acc:
            return False
        origins = value.origins()
        return bool(origins) and all(isinstance(o, cst.Call) and o not in self.objects.prepared_origins for o in origins)

    def op_kind(self, call: cst.Call) -> str | None:
        """The op kind of a call that is a collective, else ``None``."""
        func = call.func
        name = dotted_name(func)
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            owner = self.objects.values.get(func.value)
            owner_is_acc = (owner is not None and owner.is_acc) or (
                isinstance(func.value, cst.Call) and self.objects.is_acc_constructor(func.value)
            )
            if owner_is_acc:
                if method == "gather_for_metrics":
                    for arg in call.args:
                        if arg.keyword is not None and arg.keyword.value == "use_gather_object":
                            if isinstance(arg.value, cst.Name) and arg.value.value == "True":
                                return C.ALLGATHER_OBJ
                    return C.ALLGATHER
                if method == "split_between_processes":
                    for arg in call.args:
                        if arg.keyword is not None and arg.keyword.value == "apply_padding":
                            if isinstance(arg.value, cst.Name) and arg.value.value == "True":
                                return C.ALLGATHER
                    return None
                if method in ("save_model", "get_state_dict") and call.args and self._never_prepared(call.args[0].value):
                    return None  # a plain module (an EMA copy): its state dict is this rank's, no gathering
                return C.ACCELERATOR_METHOD_OPS.get(method)
            if method == "state_dict" and owner is not None and owner.prepared == "yes" and owner.kind == "model" and not owner.not_wrapped:
                return C.CKPT
        qual = self.index.imports.qualify(name) if name else None
        if name == "iter" and len(call.args) == 1 and self.starts_shuffled_loader(call.args[0].value):
            return C.DL_ITER
        if qual:
            module, _, fn = qual.rpartition(".")
            if module in ("torch.distributed", "torch.distributed.distributed_c10d"):
                return C.TORCH_DISTRIBUTED_OPS.get(fn)
            if module in C.ACCELERATE_FUNCTION_MODULES:
                return C.ACCELERATE_FUNCTION_OPS.get(fn)
        return None

    # -- gating decorators -----------------------------------------------------------------
    def decorator_guard(self, fn: cst.FunctionDef) -> tuple[Guard, set[str]] | None:
        """The guard of ``@<acc>.on_main_process`` and friends, with the classes that run the body."""
        for dec in fn.decorators:
            expr = dec.decorator
            call_args = None
            if isinstance(expr, cst.Call):
                call_args = expr.args
                expr = expr.func
            if not isinstance(expr, cst.Attribute) or expr.attr.value not in C.RANK_GATING_DECORATORS:
                continue
            owner = self.objects.values.get(expr.value)
            # an accelerator by its value, or by this very use: the gating decorators are members
            # of the accelerator protocol (`library.toml`), which only accelerators and states have
            key = dotted_name(expr.value)
            qualified = self.index.imports.qualify(key) if key is not None else None
            by_use = key is not None and (qualified is None or qualified.startswith("accelerate")) \
                and (_protocol_place(self.index, self.index.scope_of(expr), key), key) in self.objects.protocol_uses
            if not (owner and owner.is_acc) and not by_use:
                continue
            which = expr.attr.value
            names = {c.name for c in self.ranks.classes}
            if which == "on_main_process":
                runs = {"main"}
            elif which == "on_local_main_process":
                runs = {"main", "local-main"}
            elif which == "on_last_process":
                runs = {"last"}
            else:
                k = None
                for a in call_args or []:
                    if isinstance(a.value, cst.Integer):
                        k = a.value.evaluated_value
                runs = {"main"} if k == 0 else ({f"rank-{k}"} & names if k is not None else {"main"})
            return Guard(dec, dec.decorator, "decorator"), runs
        return None

    def starts_shuffled_loader(self, iterable: cst.BaseExpression) -> bool:
        """A prepared loader built here as ``DataLoader(..., shuffle=True)`` on every path: each
        ``iter()`` of it broadcasts rank 0's sampler generator (``synchronize_rng_states``), on
        every backend. Not where the file names ``use_seedable_sampler`` or ``rng_types``,
        which change what is synchronized."""
        if "use_seedable_sampler" in self.index.identifiers or "rng_types" in self.index.identifiers:
            return False
        value = self.objects.values.get(iterable)
        if value is None or value.kind != "loader" or value.prepared != "yes" or value.container:
            return False
        origins = value.origins()
        return bool(origins) and all(self._shuffled_loader_call(origin) for origin in origins)

    def _shuffled_loader_call(self, origin: cst.CSTNode) -> bool:
        if type(origin) is not cst.Call:
            return False
        name = dotted_name(origin.func)
        qual = self.index.imports.qualify(name) if name else None
        if qual not in _TORCH_DATALOADERS:
            return False
        for arg in origin.args:
            if arg.star:
                return False  # `**kwargs` may carry a sampler
            if arg.keyword is not None and arg.keyword.value in ("sampler", "batch_sampler"):
                return False
        return any(arg.keyword is not None and arg.keyword.value == "shuffle"
                   and type(arg.value) is cst.Name and arg.value.value == "True" for arg in origin.args)

    def main_only_collection(self, iterable: cst.BaseExpression) -> bool:
        """``accelerator.trackers``: a list only the main process fills."""
        if not (isinstance(iterable, cst.Attribute) and iterable.attr.value in C.MAIN_ONLY_COLLECTIONS):
            return False
        owner = self.objects.values.get(iterable.value)
        return owner is not None and owner.is_acc

    # -- walking ----------------------------------------------------------------------------
    def is_rank_free(self, scope: ScopeNode, _seen: frozenset = frozenset()) -> bool:
        """No rank-dependent condition, gating decorator or call to a rank-dependent helper:
        every rank class walks it the same way, so one walk serves all classes."""
        cached = self._rank_free.get(scope)
        if cached is not None:
            return cached
        free = not (type(scope) is cst.FunctionDef and self.decorator_guard(scope) is not None)
        if free:
            branches, calls = self.index.by_scope.get(scope, ((), ()))
            free = not any(self.ranks.is_rank_dependent(node.test) for node in branches)
        if free:
            free = not any(type(loop) is cst.For and self.main_only_collection(loop.iter)
                           and self.index.walk_owner(loop) is scope for loop in self.index.loops)
        if free:
            for node in calls:
                target = self.index.resolve_call(node)
                if target is not None and target is not scope and target not in _seen:
                    if not self.is_rank_free(target, _seen | {scope}):
                        free = False
                        break
        if not _seen or not free:  # "free" under a recursion cut is provisional; "not free" is final
            self._rank_free[scope] = free
        return free

    def summary(self, scope: ScopeNode, cls: RankClass, constants: tuple = ()) -> _Summary:
        """The ops ``scope`` performs on ``cls``; ``constants``: (parameter, value) pairs a call
        passes as literals (``load(..., evaluate=True)``), which decide the tests on them."""
        key = (scope, cls.name, constants)
        if key in self._summaries:
            return self._summaries[key]
        if cls is not self.ranks.classes[0] and self.is_rank_free(scope):
            result = self.summary(scope, self.ranks.classes[0], constants)
            self._summaries[key] = result
            return result
        if constants:
            with self.ranks.assuming({(scope, name): value for name, value in constants}):
                return self._summarise(scope, cls, key)
        return self._summarise(scope, cls, key)

    def constant_arguments(self, call: cst.Call, target: cst.FunctionDef) -> tuple:
        """The parameters of ``target`` that a test of it reads, nothing rebinds, and ``call``
        passes a literal (``True``, ``None``, a number) or leaves to a literal default, as
        sorted (name, value) pairs."""
        tested = self._tested_parameters(target)
        if not tested:
            return ()
        info = self.index.functions[target]
        bound_first = isinstance(call.func, cst.Attribute) and info.class_name is not None
        passed = dict(arguments_by_parameter(call, target, bound_first))
        if any(arg.star for arg in call.args):
            return ()  # `f(*args)`: what fills the rest is unknown
        out = []
        for param in info.params:
            name = param.name.value
            if name not in tested:
                continue
            given = passed.get(name)
            value = _literal_value(given.value) if given is not None else \
                (_literal_value(param.default) if param.default is not None else _NO_LITERAL)
            if value is not _NO_LITERAL:
                out.append((name, value))
        return tuple(sorted(out, key=repr))

    def call_contexts(self, fn: ScopeNode) -> list[tuple]:
        """The literal arguments each call of this file passes ``fn`` (``constant_arguments``),
        once each; ``[()]`` (nothing assumed) where no call of this file reaches it or some call
        passes one of them a value that is not a literal. (A call from another module is
        analysed there, with what that module passes.)"""
        if not isinstance(fn, cst.FunctionDef) or not self._tested_parameters(fn):
            return [()]
        sites = self.index.call_sites(fn)
        contexts = {self.constant_arguments(site, fn) for site in sites}
        if not sites or () in contexts:
            return [()]
        return sorted(contexts, key=repr)

    def _tested_parameters(self, fn: cst.FunctionDef) -> frozenset[str]:
        """The parameters of ``fn`` an ``if`` test reads and no assignment rebinds."""
        found = self._tested.get(fn)
        if found is None:
            params = {p.name.value for p in self.index.functions[fn].params}
            rebound = {n for node in self.index.walk(fn) if type(node) in (cst.Assign, cst.AugAssign, cst.AnnAssign)
                       for target in (node.targets if type(node) is cst.Assign else [node])
                       for n in bound_names(target.target)}
            found = frozenset(node.value for stmt in self.index.walk(fn) if type(stmt) is cst.If
                              for node in self.index.walk(stmt.test)
                              if type(node) is cst.Name and node.value in params - rebound)
            self._tested[fn] = found
        return found

    def _summarise(self, scope: ScopeNode, cls: RankClass, key: tuple) -> _Summary:
        if key in self._in_progress:
            return _Summary([], None)  # recursion: opaque
        self._in_progress.add(key)
        guard = None
        skip = False
        if isinstance(scope, cst.FunctionDef):
            gated = self.decorator_guard(scope)
            if gated is not None:
                guard = gated[0]
                skip = cls.name not in gated[1]
            body = scope.body.body if isinstance(scope.body, cst.IndentedBlock) else scope.body.body
        else:
            body = scope.body
        items, exit_ = ([], None) if skip else _Walker(self, cls, scope).block(list(body), guard)
        result = _Summary(items, exit_)
        self._in_progress.discard(key)
        self._summaries[key] = result
        return result

    def is_divergent(self, scope: ScopeNode, constants: tuple | None = None) -> bool:
        """Whether the function's own op sequence differs between rank classes: as the calls
        of this file fill its tested parameters (``constants=None``), or with ``constants``."""
        if constants is None:
            return any(self.is_divergent(scope, context) for context in self.call_contexts(scope))
        key = (scope, constants)
        if key not in self._divergent:
            self._divergent[key] = False  # recursion guard
            flats = [self.summary(scope, c, constants).flat() for c in self.ranks.classes]
            tokens = [_rotated(_kinds(seq)) for seq, _ in flats]
            self._divergent[key] = any(t != tokens[0] for t in tokens[1:]) or any(forks for _, forks in flats)
        return self._divergent[key]

    def _analyse_root(self, scope: ScopeNode) -> None:
        classes = self.ranks.classes
        if self.is_rank_free(scope):
            return  # every class walks it alike, and it holds no rank-dependent fork: nothing can diverge
        found: dict[int, Op] = {}
        for context in self.call_contexts(scope):
            self._divergent_ops(scope, context, found)
        for op in found.values():
            self.divergences.append(Divergence(op, scope))

    def _divergent_ops(self, scope: ScopeNode, constants: tuple, into: dict[int, Op]) -> None:
        """Adds to ``into`` the ops whose presence differs between rank classes in ``scope``'s walk
        with ``constants``; nothing where some class's sequence holds an opaque op."""
        classes = self.ranks.classes
        found: dict[int, Op] = {}
        seqs = {}
        for cls in classes:
            seqs[cls.name], forks = self.summary(scope, cls, constants).flat()
            for op in forks:
                found.setdefault(id(op.node), op)
        base = seqs[classes[0].name]
        base_kinds = _kinds(base)
        if any(OPAQUE in _kinds(seq) for seq in seqs.values()):
            return  # unknown means no finding
        if not found and all(_rotated(_kinds(seq)) == _rotated(base_kinds) for seq in seqs.values()):
            return  # the same ops in an order that runs the same (see `_rotated`)
        for cls in classes[1:]:
            other = seqs[cls.name]
            if _kinds(other) == base_kinds:
                continue
            # Align on kinds, except that an op both classes execute (the same call) only
            # matches itself: otherwise ["ckpt" under a guard, "ckpt" for all] vs ["ckpt"]
            # would blame the call every rank makes.
            shared = {id(op.node) for _, op in base if op is not None} & {id(op.node) for _, op in other if op is not None}

            def keys(seq):
                return [(kind, id(op.node)) if op is not None and id(op.node) in shared else kind for kind, op in seq]

            matcher = SequenceMatcher(None, keys(base), keys(other), autojunk=False)
            for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                if tag == "equal":
                    continue
                for _, op in base[i1:i2] + other[j1:j2]:
                    if op is not None:
                        found.setdefault(id(op.node), op)
        for key, op in found.items():
            into.setdefault(key, op)

    def same_cycle(self, caller: ScopeNode, callee: cst.FunctionDef) -> bool:
        """Whether ``callee`` can call back into ``caller`` (same strongly connected component)."""
        return callee is caller or (
            caller in self._component and self._component.get(caller) == self._component.get(callee)
        )

    def exported_ops(self, fn: cst.FunctionDef) -> list[tuple[str, str]]:
        """What another module needs to know about ``fn``: the collectives it performs on any
        rank class, in order of first appearance, as (op kind, the call's source)."""
        seen: dict[str, str] = {}
        for cls in self.ranks.classes:
            for kind, op in self.summary(fn, cls).flat()[0]:
                if op is not None and kind != OPAQUE and kind not in seen:
                    seen[kind] = _source(op.origin)
        return list(seen.items())

    def kinds_performed(self, fn: cst.FunctionDef) -> set[str]:
        """Op kinds a same-file function performs on any rank class (helpers included)."""
        kinds: set[str] = set()
        for cls in self.ranks.classes:
            # only ops: the brackets of branches and loops are structure, not something done
            kinds.update(kind for kind, op in self.summary(fn, cls).flat()[0] if op is not None)
        return kinds

    # -- regions ---------------------------------------------------------------------------
    def guard_of(self, node: cst.CSTNode, _seen: frozenset = frozenset()) -> Guard | None:
        """The innermost rank guard ``node`` runs under, following same-file callers
        when every call site of the enclosing function is itself guarded."""
        if node in self.guards:
            return self.guards[node]
        scope = self.index.scope_of(node)
        if isinstance(scope, cst.FunctionDef) and scope not in _seen:
            return self.function_guard(scope, _seen | {scope})
        return None

    def function_guard(self, fn: cst.FunctionDef, _seen: frozenset = frozenset()) -> Guard | None:
        gated = self.decorator_guard(fn)
        if gated is not None:
            return gated[0]
        sites = self.call_sites(fn)
        if not sites:
            return None
        guards = [self.guard_of(site, _seen | {fn}) for site in sites]
        if all(g is not None for g in guards):
            # `if is_main: f(a) else: f(b)`: each call is guarded, yet every rank class reaches one
            reached = set().union(*(self.visits.get(site, set()) for site in sites))
            if reached >= {cls.name for cls in self.ranks.classes}:
                return None
            return guards[0]
        return None

    def call_sites(self, fn: cst.FunctionDef) -> list[cst.Call]:
        return self.index.call_sites(fn)


def _strongly_connected(index: FileIndex) -> dict[ScopeNode, int]:
    """Component number of every function in a same-file call cycle (Tarjan, iterative)."""
    graph: dict[ScopeNode, list[cst.FunctionDef]] = {}
    for call in index.calls:
        target = index.resolve_call(call)
        if target is not None:
            graph.setdefault(index.scope_of(call), []).append(target)
    order: dict[ScopeNode, int] = {}
    low: dict[ScopeNode, int] = {}
    stack: list[ScopeNode] = []
    on_stack: set[ScopeNode] = set()
    component: dict[ScopeNode, int] = {}
    counter = 0
    for root in graph:
        if root in order:
            continue
        work = [(root, iter(graph.get(root, ())))]
        order[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in order:
                    order[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], order[child])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == order[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member is node:
                        break
                if len(members) > 1:
                    for member in members:
                        component[member] = order[node]
    return component


def _source(call: cst.Call) -> str:
    return " ".join(cst.Module([]).code_for_node(call.func).split())


def _kinds(tokens: list[tuple[str, Op | None]]) -> list[str]:
    return [t for t, _ in tokens]


def _rotated(kinds: list[str]) -> list[str]:
    """``kinds`` with what runs just before a loop moved after it where it is one pass of that
    loop's body (made only of ops): ``S, loop(S)`` and ``loop(S), S`` run the same ops (the main
    process's ``setup()`` then a barrier, the others' barrier then ``setup()``, each ``setup()`` a
    loop of barriers). Used only to show that sequences that differ are the same, never to
    make them differ."""
    out: list[str] = []
    i = 0
    while i < len(kinds):
        token = kinds[i]
        if token.startswith("(L"):
            depth, j = 1, i + 1
            while j < len(kinds) and depth:
                depth += kinds[j].startswith("(") - (kinds[j] == ")")
                j += 1
            body = kinds[i + 1:j - 1]
            flat = body and not any(t.startswith("(") or t in ("|", ")") for t in body)
            if flat and out[len(out) - len(body):] == body and len(out) >= len(body):
                del out[len(out) - len(body):]
                out.extend(kinds[i:j])
                out.extend(body)
                i = j
                continue
        out.append(token)
        i += 1
    return out


def _flatten(items: list[Item], forks: list[Op] | None) -> list[tuple[str, Op | None]]:
    out: list[tuple[str, Op | None]] = []
    for item in items:
        if isinstance(item, Op):
            out.append((item.kind, item))
        elif isinstance(item, Choice):
            branches = [_flatten(branch, forks) for branch in item.branches]
            if not any(branches):
                continue  # (a choice between runs that do no collective: nothing to order)
            out.append((f"(C{id(item.key)}", None))
            for branch in branches:
                out.extend(branch)
                out.append(("|", None))
            out.append((")", None))
        elif isinstance(item, Loop):
            out.append((f"(L{id(item.key)}", None))
            out.extend(_flatten(item.body, forks))
            out.append((")", None))
        elif isinstance(item, Fork):
            branches = [_flatten(b, None) for b in item.branches]
            if all(_kinds(b) == _kinds(branches[0]) for b in branches[1:]):
                out.extend(branches[0])
                continue
            if forks is not None and not item.inlined:
                matcher = SequenceMatcher(None, _kinds(branches[0]), _kinds(branches[1]), autojunk=False)
                for tag, i1, i2, j1, j2 in matcher.get_opcodes():
                    if tag != "equal":
                        for _, op in branches[0][i1:i2] + branches[1][j1:j2]:
                            if op is not None:
                                # the op's own guard says which side it is on (an early exit's
                                # rest is on the side that does not exit); the fork's is the if's
                                forks.append(Op(op.kind, op.node, op.origin, op.chain, op.guard or item.guard))
            out.append((f"F{id(item.key)}", None))
    return out


def _relocate(items: list[Item], call: cst.Call, name: str, guard: Guard | None) -> list[Item]:
    out: list[Item] = []
    for item in items:
        if isinstance(item, Op):
            out.append(Op(item.kind, call, item.origin, (name, *item.chain), guard or item.guard))
        elif isinstance(item, Choice):
            out.append(Choice(item.key, [_relocate(b, call, name, guard) for b in item.branches]))
        elif isinstance(item, Loop):
            out.append(Loop(item.key, _relocate(item.body, call, name, guard)))
        else:
            out.append(Fork(item.key, [_relocate(b, call, name, guard) for b in item.branches], item.guard, True))
    return out


_NO_LITERAL = object()


def _literal_value(expr: cst.BaseExpression):
    """What a literal argument is (``True``, ``None``, ``3``, ``"eval"``), or ``_NO_LITERAL``."""
    if type(expr) is cst.Name and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    if type(expr) in (cst.Integer, cst.SimpleString):
        return expr.evaluated_value
    return _NO_LITERAL


def _always_exits(stmts) -> bool:
    for stmt in stmts:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, (cst.Return, cst.Raise, cst.Break, cst.Continue)):
                    return True
                if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
                    if dotted_name(small.value.func) in EXIT_FUNCTION_CALLS:
                        return True
        elif isinstance(stmt, (cst.Return, cst.Raise, cst.Break, cst.Continue)):
            return True
        elif isinstance(stmt, cst.If) and stmt.orelse is not None and not isinstance(stmt.orelse, cst.If):
            if _always_exits(stmt.body.body) and _always_exits(stmt.orelse.body.body):
                return True
    return False


def _leaves_loop(stmts, index: FileIndex) -> bool:
    """A ``break`` or ``return`` among the simple statements of a block, or in a branch of the
    ``if`` that ends it (``if early_stop_counter >= patience: break`` as the last statement of
    the main process's block): the block may leave the loop, with nothing after the exit."""
    stmts = list(stmts)
    if any(isinstance(small, (cst.Break, cst.Return)) for stmt in stmts
           if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body):
        return True
    last = stmts[-1] if stmts else None
    if type(last) is not cst.If or any(type(node) is cst.Call for node in index.walk(last.test)):
        # (a test that calls, `accelerator.check_trigger()` say, may itself be the collective
        # the other ranks miss: reported there, one cause, one finding)
        return False
    if _leaves_loop(last.body.body, index):
        return True
    if type(last.orelse) is cst.If:
        return _leaves_loop([last.orelse], index)
    return last.orelse is not None and _leaves_loop(last.orelse.body.body, index)


def _first_op(items: list[Item]) -> Op | None:
    """The op a pass of a loop body runs first, where that is known (no choice or fork before
    it)."""
    for item in items:
        if isinstance(item, Op):
            return item
        if isinstance(item, Loop):
            return _first_op(item.body)
        return None
    return None


def _loop_iterable(iterable: cst.BaseExpression) -> cst.BaseExpression:
    """The object a ``for`` iterates behind ``enumerate(...)``, ``tqdm(...)`` and ``zip(...)``
    (its first argument)."""
    while type(iterable) is cst.Call and iterable.args and not iterable.args[0].star \
            and (dotted_name(iterable.func) or "").rpartition(".")[2] in ("enumerate", "tqdm", "zip"):
        iterable = iterable.args[0].value
    return iterable


def _combine_exits(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return None
    return "return" if a in ("return", "raise") and b in ("return", "raise") else "loop"


class _Walker:
    """Walks one scope for one rank class, producing its op items."""

    def __init__(self, analysis: OpAnalysis, cls: RankClass, scope: ScopeNode) -> None:
        self.a = analysis
        self.cls = cls
        self.scope = scope

    def block(self, stmts: list, guard: Guard | None) -> tuple[list[Item], str | None]:
        items: list[Item] = []
        i = 0
        while i < len(stmts):
            stmt = stmts[i]
            if isinstance(stmt, cst.If):
                handled = self._if(stmt, stmts, i, guard, items)
                if handled is not None:
                    new_guard, exit_, consumed_rest = handled
                    if exit_ is not None or consumed_rest:
                        return items, exit_
                    guard = new_guard
                    i += 1
                    continue
            exit_ = self.stmt(stmt, guard, items)
            if exit_ is not None:
                return items, exit_
            i += 1
        return items, None

    def _branches(self, stmt: cst.If) -> tuple[list, list]:
        then = list(stmt.body.body)
        if stmt.orelse is None:
            other: list = []
        elif isinstance(stmt.orelse, cst.If):
            other = [stmt.orelse]
        else:
            other = list(stmt.orelse.body.body)
        return then, other

    def _if(self, stmt: cst.If, stmts: list, i: int, guard: Guard | None, items: list[Item]):
        self._calls(stmt.test, guard, items)
        then, other = self._branches(stmt)
        rank = self.a.ranks.is_rank_dependent(stmt.test) and not _takes_turns(self.a.index, stmt)
        value = self.a.ranks.evaluate(stmt.test, self.cls)
        if rank and value is not FORK and value is not UNIFORM:
            chosen, skipped = (then, other) if value else (other, then)
            how = "if" if value else "else"
            branch_guard = Guard(stmt, stmt.test, how)
            branch_items, exit_ = self.block(chosen, branch_guard)
            if exit_ == "raise":
                # this rank fails there, and the launcher stops every rank: the program is the
                # other branch (as for a fork whose branch raises, below)
                other_items, other_exit = self.block(skipped, guard)
                if other_exit != "raise":
                    items.extend(other_items)
                    return guard, other_exit, False
            items.extend(branch_items)
            if exit_ is not None:
                return guard, exit_, False
            if _always_exits(skipped):
                return Guard(stmt, stmt.test, "early-exit"), None, False
            return guard, None, False
        if not rank and value is not UNIFORM and value is not FORK:
            chosen = then if value else other
            branch_items, exit_ = self.block(chosen, guard)
            items.extend(branch_items)
            return guard, exit_, False
        branch_guard = Guard(stmt, stmt.test, "if") if rank else guard
        t_items, t_exit = self.block(then, branch_guard)
        o_items, o_exit = self.block(other, Guard(stmt, stmt.test, "else") if rank else guard)
        # A branch that raises ends the job, not one rank's part in it: torchrun and
        # `accelerate launch` stop every rank when one fails. The other branch is the program,
        # whether the test differs between ranks or not (a check on the data between the two
        # halves of a split barrier leaves the barriers unmatched only on the way to the crash).
        if t_exit == "raise" and o_exit is None:
            items.extend(o_items)
            return guard, None, False
        if o_exit == "raise" and t_exit is None:
            items.extend(t_items)
            return guard, None, False
        if t_exit is None and o_exit is None:
            if rank or t_items or o_items:  # (a choice between no ops is no choice)
                items.append(Fork(stmt, [t_items, o_items], branch_guard) if rank else Choice(stmt, [t_items, o_items]))
            return guard, None, False
        # a branch leaves the block: the rest of the block belongs to the other branch
        rest_guard = Guard(stmt, stmt.test, "early-exit") if rank else guard
        rest, r_exit = self.block(stmts[i + 1 :], rest_guard)
        if t_exit is None:
            t_items = t_items + rest
        if o_exit is None:
            o_items = o_items + rest
        exit_ = _combine_exits(t_exit or r_exit, o_exit or r_exit)
        items.append(Fork(stmt, [t_items, o_items], branch_guard) if rank else Choice(stmt, [t_items, o_items]))
        return guard, exit_, True

    def stmt(self, stmt: cst.CSTNode, guard: Guard | None, items: list[Item]) -> str | None:
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                exit_ = self.small(small, guard, items)
                if exit_ is not None:
                    return exit_
            return None
        if isinstance(stmt, cst.BaseSmallStatement):
            return self.small(stmt, guard, items)
        if isinstance(stmt, cst.If):  # reached only for elif chains
            sub: list[Item] = []
            result = self._if(stmt, [stmt], 0, guard, sub)
            items.extend(sub)
            return result[1]
        if isinstance(stmt, cst.For):
            self._calls(stmt.iter, guard, items)
            loader = _loop_iterable(stmt.iter)
            if self.a.starts_shuffled_loader(loader):
                # (the loop's own iter(): an RNG broadcast before the first batch)
                items.append(Op(C.DL_ITER, loader, cst.Call(cst.Name("iter"), [cst.Arg(loader)]), (), guard))
            body_guard = guard
            if self.a.main_only_collection(stmt.iter):
                # `for tracker in accelerator.trackers:` -- only the main process fills the list
                # (init_trackers is main-only): elsewhere the body never runs
                if _rank_attribute("is_main_process", self.cls) is not True:
                    if stmt.orelse is not None:
                        o_items, _ = self.block(list(stmt.orelse.body.body), guard)
                        items.extend(o_items)
                    return None
                body_guard = Guard(stmt, stmt.iter, "main-only-loop")
            body, exit_ = self.block(list(stmt.body.body), body_guard)
            if body:
                items.append(Loop(stmt, body))
                items.extend(self._passes_left_to_others(list(stmt.body.body), body))
            if stmt.orelse is not None:
                o_items, _ = self.block(list(stmt.orelse.body.body), guard)
                items.extend(o_items)
            return "return" if exit_ == "return" else None
        if isinstance(stmt, cst.While):
            self._calls(stmt.test, guard, items)
            rank = self.a.ranks.is_rank_dependent(stmt.test)
            value = self.a.ranks.evaluate(stmt.test, self.cls)
            if rank and value is not FORK and value is not UNIFORM and not value:
                return None
            loop_guard = Guard(stmt, stmt.test, "if") if rank else guard
            body, exit_ = self.block(list(stmt.body.body), loop_guard)
            if body:
                if rank and value is FORK:
                    items.append(Fork(stmt, [[Loop(stmt, body)], []], loop_guard))
                else:
                    items.append(Loop(stmt, body))
                    items.extend(self._passes_left_to_others(list(stmt.body.body), body))
            return "return" if exit_ == "return" and not rank else None
        if isinstance(stmt, cst.With):
            after: list[Item] = []
            for item in stmt.items:
                self._calls(item.item, guard, items, skip_sync_context=True)
                ctx = item.item
                if isinstance(ctx, cst.Call) and isinstance(ctx.func, cst.Attribute):
                    owner = self.a.objects.values.get(ctx.func.value)
                    if owner is not None and owner.is_acc and ctx.func.attr.value in C.ACCELERATOR_SYNC_CONTEXTS:
                        op = Op(C.BARRIER, ctx, ctx, (), guard)
                        (after if ctx.func.attr.value == "profile" else items).append(op)
            body, exit_ = self.block(list(stmt.body.body), guard)
            items.extend(body)
            items.extend(after)
            return exit_
        if isinstance(stmt, cst.Try):
            body, b_exit = self.block(list(stmt.body.body), guard)
            items.extend(body)
            handlers = [self.block(list(h.body.body), guard)[0] for h in stmt.handlers]
            if any(handlers):
                items.append(Choice(stmt, [[], *handlers]))
            if stmt.orelse is not None:
                o_items, _ = self.block(list(stmt.orelse.body.body), guard)
                items.append(Choice(stmt.orelse, [[], o_items]) if stmt.handlers else Loop(stmt.orelse, o_items))
            if stmt.finalbody is not None:
                f_items, _ = self.block(list(stmt.finalbody.body.body), guard)
                items.extend(f_items)
            return None
        if isinstance(stmt, cst.Match):
            branches = [self.block(list(case.body.body), guard)[0] for case in stmt.cases]
            if any(branches):
                items.append(Choice(stmt, [*branches, []]))
            return None
        return None

    def _passes_left_to_others(self, stmts: list, body: list[Item]) -> list[Item]:
        """A loop whose last statement leaves it (``break``/``return``) on a rank-dependent test
        that this class may pass (``if accelerator.is_main_process and early_stop(...): break``
        at the end of the epoch): no collective follows the exit in that pass, but the ranks
        that stay run the next pass, and block in its first collective. That op, as a fork on
        the test; nothing where the body does not start with a known op."""
        last = stmts[-1] if stmts else None
        if type(last) is not cst.If or not self.a.ranks.is_rank_dependent(last.test):
            return []
        then, other = self._branches(last)
        value = self.a.ranks.evaluate(last.test, self.cls)
        # (UNIFORM: this class's ranks agree, but whether they leave is unknown: they may)
        index = self.a.index
        taken = (_leaves_loop(then, index) and value is not False) or (
            bool(other) and _leaves_loop(other, index) and value is not True)
        first = _first_op(body)
        if not taken or first is None:
            return []
        exit_guard = Guard(last, last.test, "early-exit")
        waiting = Op(first.kind, first.node, first.origin, first.chain, exit_guard)
        return [Fork(last, [[waiting], []], exit_guard)]

    def small(self, small: cst.BaseSmallStatement, guard: Guard | None, items: list[Item]) -> str | None:
        self._calls(small, guard, items)
        if isinstance(small, cst.Raise):
            return "raise"
        if isinstance(small, cst.Return):
            return "return"
        if isinstance(small, (cst.Break, cst.Continue)):
            return "loop"
        if isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
            if dotted_name(small.value.func) in EXIT_FUNCTION_CALLS:
                return "return"
        return None

    def _short_circuit_gate(self, call: cst.Call, node: cst.CSTNode):
        """``(operation, left, runs_when)`` when ``call`` sits in the right operand of an
        ``and``/``or`` (inside ``node``) whose left operand is a rank predicate: Python evaluates it
        only where the left is true (``and``) or false (``or``)."""
        child: cst.CSTNode = call
        parents = self.a.index.parents
        while child is not node:
            parent = parents.get(child)
            if parent is None:
                return None
            if type(parent) is cst.BooleanOperation and child is parent.right \
                    and self.a.ranks.is_rank_dependent(parent.left):
                return parent, parent.left, type(parent.operator) is cst.And
            child = parent
        return None

    def _calls(self, node: cst.CSTNode, guard: Guard | None, items: list[Item], skip_sync_context: bool = False) -> None:
        """Calls in evaluation order (arguments before the call), outside nested scopes."""
        outer = guard
        for call in self.a.index.calls_post_order(node):
            guard = outer
            operand = self._short_circuit_gate(call, node)
            if operand is not None:
                boolop, test, runs_when = operand
                value = self.a.ranks.evaluate(test, self.cls)
                if value is not FORK and value is not UNIFORM and bool(value) is not runs_when:
                    continue  # `is_main and check_trigger()`: this rank class never evaluates it
                guard = Guard(boolop, test, "if" if runs_when else "else")
            self.a.visits.setdefault(call, set()).add(self.cls.name)
            if guard is not None:
                self.a.guards.setdefault(call, guard)
            kind = self.a.op_kind(call)
            if kind is not None:
                items.append(Op(kind, call, call, (), guard))
                continue
            for arg in call.args:
                # a same-file function handed to other code (a callback) runs its collectives
                # where the analysis cannot see: the scope's sequences become unknown
                if isinstance(arg.value, cst.Name):
                    callback = self.a.index.resolve_function_name(arg.value.value, self.scope)
                    if callback is not None and callback is not self.scope and self.a.kinds_performed(callback):
                        items.append(Op(OPAQUE, call, call, (), guard))
            target = self.a.index.resolve_call(call)
            imported = dotted_name(call.func) if target is None and self.a.external else None
            if imported in self.a.external:  # `evaluate(...)` or `train_util.save_state_on_train_end(...)`
                for kind, source in self.a.external[imported]:
                    if kind in NOT_OPS:
                        continue  # not an op: what the function returns
                    origin = cst.parse_expression(source + "()")
                    items.append(Op(kind, call, origin, (imported,), guard))
                continue
            if target is None or self.a.same_cycle(self.scope, target):
                continue  # unknown callee, or recursion: opaque, the same way from every entry point
            name = self.a.index.functions[target].qualname
            constants = self.a.constant_arguments(call, target)
            if self.a.is_divergent(target, constants):
                continue  # reported inside the callee; counting it again here would duplicate
            callee = self.a.summary(target, self.cls, constants)
            items.extend(_relocate(callee.items, call, name, guard))


_WORLD_SIZES = ("num_processes", "get_world_size", "world_size")


def _takes_turns(index: FileIndex, stmt: cst.If) -> bool:
    """``for i in range(dist.get_world_size()): if i == dist.get_rank(): ...``: each rank takes
    the branch once, on its own turn, so what it runs there (a barrier in a helper) is matched
    by the others' turns. (The test is on the loop's variable and a rank; the loop counts the
    processes.)"""
    test = stmt.test
    if type(test) is not cst.Comparison or len(test.comparisons) != 1 \
            or type(test.comparisons[0].operator) is not cst.Equal:
        return False
    sides = (test.left, test.comparisons[0].comparator)
    names = [side.value for side in sides if type(side) is cst.Name]
    for parent in index.ancestors(stmt):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
            return False
        if type(parent) is cst.For and type(parent.target) is cst.Name and parent.target.value in names \
                and type(parent.iter) is cst.Call and type(parent.iter.func) is cst.Name \
                and parent.iter.func.value == "range" and len(parent.iter.args) == 1:
            count = parent.iter.args[0].value
            counted = count.func if type(count) is cst.Call else count
            return type(counted) in (cst.Name, cst.Attribute) and (
                counted.value if type(counted) is cst.Name else counted.attr.value) in _WORLD_SIZES
    return False

