"""Which scalar values carry a loader's length taken before ``prepare`` sharded it.

A prepared loader is about ``num_processes`` times shorter than the loader passed to
``prepare``. A step count computed from ``len(loader)`` before ``prepare`` is right for a
scheduler (which the prepared wrapper steps ``num_processes`` times per optimizer step) and
wrong for a loop bound. Which one a value is depends on its *current* definition: the
canonical training script computes ``num_update_steps_per_epoch`` before ``prepare`` for the
scheduler and recomputes it, and every value derived from it, afterwards.

This module runs a small abstract interpretation per scope: every dotted name
(``steps``, ``args.max_train_steps``) holds the set of pre-``prepare`` ``len()`` calls its
value was computed from. An assignment replaces the set (reassignment kills the older value
on every path); ``+=`` adds to it. The walk is path-sensitive for boolean flags assigned a
constant (``overrode_max_train_steps = True``): a later ``if overrode_max_train_steps:`` follows
only the branch consistent with each path, so values assigned together with a flag stay
correlated with it. Paths with equal flags are merged; past a small bound every path is merged
and the flags forgotten (sound for "may carry": sets only grow).

The answer for a read is the union over the paths that reach it: "may carry a pre-prepare
length". Nothing else (calls of unknown functions, attributes of unknown objects) adds to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from .index import FileIndex, ScopeNode
from .names import bound_names, dotted_name
from .objects import NO, YES, ObjectTracker

_EMPTY: frozenset = frozenset()
_MAX_PATHS = 8
_PER_RANK = (0, None)  # a count that is the same whatever num_processes is: a plain number
_NUM_PROCESSES = frozenset([(1, None)])


def _flag_tested(test: cst.BaseExpression) -> tuple[str | None, bool]:
    """The dotted name a test reads (``overrode``, ``not args.flag``) and whether it is negated."""
    negate = False
    while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
        negate = not negate
        test = test.expression
    return dotted_name(test), negate


def _combine(left: frozenset, right: frozenset, sign: int) -> frozenset:
    """Scales of ``left * right`` (sign 1) or ``left / right`` (sign -1), for every pair of
    possibilities; a side the model knows nothing of is a plain number."""
    if not left and not right:
        return _EMPTY
    out = set()
    for scale_l, len_l in left or (_PER_RANK,):
        for scale_r, len_r in right or (_PER_RANK,):
            out.add((scale_l + sign * scale_r, len_l or len_r))
    return _strip(frozenset(out))


def _join_into(env: dict[str, frozenset], other: dict[str, frozenset]) -> None:
    """Join ``other`` into ``env``: a name that is a plain number on one side keeps that
    possibility (so that a later ratio is computed for both)."""
    for name in env.keys() | other.keys():
        mine, theirs = env.get(name, _EMPTY), other.get(name, _EMPTY)
        if mine == theirs:
            continue
        joined = mine | theirs
        if not mine or not theirs:
            joined |= {_PER_RANK}
        env[name] = joined


def _strip(values: frozenset) -> frozenset:
    """Plain numbers carry nothing; a set of only plain numbers is empty. A per-rank count
    that still names its ``len()`` is kept: divided by ``num_processes`` again, it is wrong."""
    if all(scale == 0 and length is None for scale, length in values):
        return _EMPTY
    return values
_NUMERIC = frozenset({"int", "float", "round", "min", "max", "abs", "sum"})
_MATH = frozenset({"ceil", "floor", "trunc"})


@dataclass
class _Path:
    env: dict[str, frozenset] = field(default_factory=dict)
    flags: dict[str, bool] = field(default_factory=dict)

    def copy(self) -> _Path:
        return _Path(dict(self.env), dict(self.flags))


def _merge(paths: list[_Path]) -> list[_Path]:
    """Join paths with the same flags; past the bound, join all and forget the flags."""
    by_flags: dict[tuple, _Path] = {}
    for path in paths:
        key = tuple(sorted(path.flags.items()))
        into = by_flags.get(key)
        if into is None:
            by_flags[key] = path.copy()
        else:
            _join_into(into.env, path.env)
    merged = list(by_flags.values())
    if len(merged) > _MAX_PATHS:
        merged = _forget_uninformative_flags(merged)
    if len(merged) > _MAX_PATHS:
        one = merged[0].copy()
        one.flags = {}
        for path in merged[1:]:
            _join_into(one.env, path.env)
        merged = [one]
    return merged


def _counts(path: _Path) -> dict:
    """The step counts a path holds (a name bound to no count holds nothing to tell apart)."""
    return {key: value for key, value in path.env.items() if value}


def _forget_uninformative_flags(paths: list[_Path]) -> list[_Path]:
    """Past the bound, first forget the flags that tell no step counts apart (paths that differ
    only in such a flag hold the same counts), so that a flag that does (``overrode_max_train_steps``)
    stays correlated with what was assigned with it however many other flags a script has."""
    flags = sorted({name for path in paths for name in path.flags})
    for name in flags:
        groups: dict[tuple, list[_Path]] = {}
        for path in paths:
            key = tuple(sorted((k, v) for k, v in path.flags.items() if k != name))
            groups.setdefault(key, []).append(path)
        if all(all(_counts(p) == _counts(group[0]) for p in group[1:]) for group in groups.values()):
            out = []
            for key, group in groups.items():
                one = group[0].copy()
                one.flags.pop(name, None)
                out.append(one)
            paths = out
        if len(paths) <= _MAX_PATHS:
            break
    return paths


@dataclass
class LengthsState:
    """What the next edit of the same file may reuse: each scope's walk, with what it read."""

    key: tuple  # the file's prepare calls and prepared objects
    scopes: dict  # scope -> (the lengths of its reads, its final bindings, the enclosing scopes' bindings)


class LoaderLengths:
    """For every name read, the pre-``prepare`` ``len(loader)`` calls its value may carry.

    ``previous``: the walks of the file before an edit. A scope's walk stands when the edit kept
    its node, the object tracker's walk of it stood (the same values), the file prepares the
    same objects, and the scopes around it end with the same bindings."""

    def __init__(self, index: FileIndex, objects: ObjectTracker, previous: LengthsState | None = None) -> None:
        self.index = index
        self.objects = objects
        self.at: dict[cst.CSTNode, frozenset] = {}  # load node -> len() calls
        self._final: dict[ScopeNode, dict[str, frozenset]] = {}
        self._scope: ScopeNode = index.module
        self._loop_exits: list[list[_Path]] = []
        self._flags: set[str] = set()
        self._walks: dict[ScopeNode, tuple] = {}
        self._key = (frozenset(objects.prepared_origins), tuple(objects.prepare_calls))
        if not objects.prepare_calls:
            return
        old = previous.scopes if previous is not None and previous.key == self._key else {}
        for scope in [index.module, *index.functions]:
            outers = tuple(self._final.get(s, {}) for s in index.enclosing_scopes(scope))
            walk = old.get(scope)
            if walk is None or scope not in objects.kept or walk[2] != outers:
                walk = self._walk(scope, outers)
            self._walks[scope] = walk
            self.at.update(walk[0])
            self._final[scope] = walk[1]

    def _walk(self, scope: ScopeNode, outers: tuple) -> tuple:
        self._scope = scope
        self._flags = self._constant_flags(scope)
        file_at, self.at = self.at, {}
        try:
            end = self._block(self.index.body_of(scope), [_Path()])
            at = self.at
        finally:
            self.at = file_at
        final: dict[str, frozenset] = dict(end[0].env) if end else {}
        for path in end[1:]:
            _join_into(final, path.env)
        return at, final, outers

    def state(self) -> LengthsState:
        return LengthsState(self._key, self._walks)

    def _constant_flags(self, scope: ScopeNode) -> set[str]:
        """Names this scope assigns ``True`` or ``False`` and tests (in an ``if``, a ``while`` or a
        conditional expression): the only tests worth following per path (forking on every
        other test would multiply paths for nothing)."""
        assigned, tested = set(), set()
        for node in self.index.walk(scope):
            if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value in ("True", "False"):
                for target in node.targets:
                    key = dotted_name(target.target)
                    if key is not None:
                        assigned.add(key)
            elif type(node) in (cst.If, cst.While, cst.IfExp):
                key, _ = _flag_tested(node.test)
                if key is not None:
                    tested.add(key)
        return assigned & tested

    # -- queries ---------------------------------------------------------------------------
    def scales_of(self, expr: cst.CSTNode) -> frozenset:
        """(scale, ``len()`` call) pairs the number ``expr`` may be: scale 1 is a count taken
        from a loader before ``prepare`` sharded it (``num_processes`` times a per-rank count),
        scale 0 a per-rank count, -1 a per-rank count divided by ``num_processes`` again."""
        return self._eval(expr, lambda load: self.at.get(load, _EMPTY))

    # -- evaluation ------------------------------------------------------------------------
    def is_pre_prepare_len(self, call: cst.Call) -> bool:
        """``len(x)`` where ``x`` holds a loader not yet prepared whose object ``prepare``
        receives somewhere in the file."""
        if not (type(call.func) is cst.Name and call.func.value == "len" and len(call.args) == 1):
            return False
        value = self.objects.values.get(call.args[0].value)
        if value is None or value.kind != "loader" or value.prepared != NO:
            return False
        if value.origin is not None:
            return value.origin in self.objects.prepared_origins
        # built differently on different paths (the origin is unknown): the same variable of
        # this scope is what a `prepare` call receives
        name = dotted_name(call.args[0].value)
        scope = self.index.scope_of(call)
        return any(dotted_name(arg.value) == name and self.index.scope_of(prepare) is scope
                   for prepare in self.objects.prepare_calls for arg in prepare.args)

    def _per_rank_len(self, call: cst.Call) -> bool:
        """``len(x)`` where ``x`` holds the loader ``prepare`` returned: a count of this rank's
        batches."""
        if not (type(call.func) is cst.Name and call.func.value == "len" and len(call.args) == 1):
            return False
        value = self.objects.values.get(call.args[0].value)
        return value is not None and value.kind == "loader" and value.prepared == YES and not value.not_wrapped

    def _eval(self, expr: cst.CSTNode, read) -> frozenset:
        """Arithmetic over names, as a set of (scale, len call): what a number computed by
        ``expr`` may be. The scale counts factors of ``num_processes`` relative to a per-rank
        count: ``len(loader)`` before ``prepare`` is 1, divided by ``num_processes`` 0, a ratio of
        two such counts 0. Objects are not numbers: a call other than ``len`` and the numeric
        builtins carries nothing."""
        kind = type(expr)
        if kind is cst.Name or kind is cst.Attribute:
            if kind is cst.Attribute and expr.attr.value == "num_processes" and self.objects.values.get(expr.value) is not None \
                    and self.objects.values[expr.value].is_acc:
                return _NUM_PROCESSES
            return read(expr)
        if kind is cst.BinaryOperation:
            left, right = self._eval(expr.left, read), self._eval(expr.right, read)
            operator = type(expr.operator)
            if operator is cst.Multiply:
                return _combine(left, right, 1)
            if operator in (cst.Divide, cst.FloorDivide):
                return _combine(left, right, -1)
            if operator in (cst.Add, cst.Subtract):
                return _strip(left | right)
            return _EMPTY
        if kind is cst.UnaryOperation:
            return self._eval(expr.expression, read)
        if kind is cst.BooleanOperation:
            return self._eval(expr.left, read) | self._eval(expr.right, read)
        if kind is cst.IfExp:
            # `derived if overrode_max_train_steps else args.max_train_steps * num_processes`:
            # on a path that knows the flag, only its arm is taken
            arm = self._arm_taken(expr.test, getattr(read, "flags", None))
            if arm is not None:
                return self._eval(expr.body if arm else expr.orelse, read)
            return self._eval(expr.body, read) | self._eval(expr.orelse, read)
        if kind is cst.Comparison:
            out = self._eval(expr.left, read)
            for target in expr.comparisons:
                out |= self._eval(target.comparator, read)
            return _strip(out)
        if kind is cst.Call:
            if self.is_pre_prepare_len(expr):
                return frozenset([(1, expr)])
            if self._per_rank_len(expr):
                # already per rank: right as it is, N times too small once divided by num_processes
                return frozenset([(0, expr)])
            name = dotted_name(expr.func) or ""
            if name in _NUMERIC or name.rsplit(".", 1)[-1] in _MATH or name == "range":
                out = _EMPTY
                for arg in expr.args:
                    out |= self._eval(arg.value, read)
                return out
        return _EMPTY

    def _reader(self, path: _Path):
        def read(load: cst.BaseExpression) -> frozenset:
            key = dotted_name(load)
            return self._lookup(key, path) if key is not None else _EMPTY
        read.flags = path.flags  # (for a conditional expression's test)
        return read

    def _arm_taken(self, test: cst.BaseExpression, flags: dict[str, bool] | None) -> bool | None:
        """Whether a path with ``flags`` takes the true arm of a test of a flag (``overrode``,
        ``not overrode``); ``None`` when the path does not know."""
        if not flags:
            return None
        flag, negate = _flag_tested(test)
        known = flags.get(flag) if flag is not None else None
        return None if known is None else known != negate

    def _lookup(self, key: str, path: _Path) -> frozenset:
        if key in path.env:
            return path.env[key]
        for scope in self.index.enclosing_scopes(self._scope):
            outer = self._final.get(scope, {})
            if key in outer:
                return outer[key]
        return _EMPTY

    def _record(self, node: cst.CSTNode, paths: list[_Path]) -> None:
        for load in self.index.loads_in(node):
            if self.objects.is_binding(load):
                continue
            key = dotted_name(load)
            if key is None:
                continue
            lengths = set(self.at.get(load, _EMPTY))
            for path in paths:
                lengths |= self._lookup(key, path)
            if lengths:
                self.at[load] = frozenset(lengths)

    # -- statements -----------------------------------------------------------------------
    def _block(self, stmts, paths: list[_Path]) -> list[_Path]:
        for stmt in stmts:
            if not paths:
                return paths
            paths = self._stmt(stmt, paths)
        return paths

    def _stmt(self, stmt: cst.CSTNode, paths: list[_Path]) -> list[_Path]:
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            for small in stmt.body:
                paths = self._small(small, paths)
                if not paths:
                    break
            return paths
        if kind is cst.If:
            self._record(stmt.test, paths)
            taken, other = self._split(stmt.test, paths)
            then = self._block(stmt.body.body, taken)
            if stmt.orelse is None:
                rest = other
            elif type(stmt.orelse) is cst.If:
                rest = self._stmt(stmt.orelse, other)
            else:
                rest = self._block(stmt.orelse.body.body, other)
            return _merge(then + rest)
        if kind in (cst.For, cst.While):
            head = stmt.iter if kind is cst.For else stmt.test
            self._record(head, paths)
            entry = [p.copy() for p in paths]
            if kind is cst.For:
                for path in entry:
                    self._bind(stmt.target, _EMPTY, path)
            self._loop_exits.append([])
            first = self._block(stmt.body.body, [p.copy() for p in entry])
            # a `continue` goes back to the head: what left the first pass early enters the second
            second = self._block(stmt.body.body, _merge(entry + first + self._loop_exits[-1]))
            exits = self._loop_exits.pop()
            out = _merge(paths + second + exits)
            if stmt.orelse is not None:
                out = self._block(stmt.orelse.body.body, out)
            return out
        if kind is cst.With:
            for item in stmt.items:
                self._record(item.item, paths)
                if item.asname is not None:
                    for path in paths:
                        self._bind(item.asname.name, _EMPTY, path)
            return self._block(stmt.body.body, paths)
        if kind is cst.Try:
            body_end = self._block(stmt.body.body, [p.copy() for p in paths])
            start = _merge(paths + body_end)
            out = self._block(stmt.orelse.body.body, body_end) if stmt.orelse is not None else list(body_end)
            for handler in stmt.handlers:
                out += self._block(handler.body.body, [p.copy() for p in start])
            out = _merge(out) if out else []
            if stmt.finalbody is not None:
                out = self._block(stmt.finalbody.body.body, out or start)
            return out
        if kind in (cst.FunctionDef, cst.ClassDef):
            return paths
        self._record(stmt, paths)
        return paths

    def _split(self, test: cst.BaseExpression, paths: list[_Path]) -> tuple[list[_Path], list[_Path]]:
        """The paths that take the ``if`` and those that do not, for a test of a flag."""
        known = self.index.known_test(test)
        if known is not None:  # `args.max_train_steps is None` with a default of 5000
            return ([p.copy() for p in paths], []) if known else ([], [p.copy() for p in paths])
        flag, negate = _flag_tested(test)
        if flag is None or flag not in self._flags:
            return [p.copy() for p in paths], [p.copy() for p in paths]
        taken, other = [], []
        for path in paths:
            known = path.flags.get(flag)
            if known is None:
                # not refined: a flag matters only through what was assigned with it
                taken.append(path.copy())
                other.append(path.copy())
            elif known != negate:
                taken.append(path.copy())
            else:
                other.append(path.copy())
        return taken, other

    def _small(self, small: cst.CSTNode, paths: list[_Path]) -> list[_Path]:
        self._record(small, paths)
        kind = type(small)
        if kind is cst.Assign:
            for path in paths:
                lengths = self._eval(small.value, self._reader(path))
                for target in small.targets:
                    self._bind(target.target, lengths, path, small.value)
        elif kind is cst.AnnAssign and small.value is not None:
            for path in paths:
                self._bind(small.target, self._eval(small.value, self._reader(path)), path, small.value)
        elif kind is cst.AugAssign:
            key = dotted_name(small.target)
            if key is not None:
                for path in paths:
                    path.env[key] = self._lookup(key, path) | self._eval(small.value, self._reader(path))
                    path.flags.pop(key, None)
        elif kind in (cst.Break, cst.Continue):
            if self._loop_exits:
                self._loop_exits[-1].extend(p.copy() for p in paths)
            return []
        elif kind in (cst.Return, cst.Raise):
            return []
        return paths

    def _bind(self, target: cst.BaseExpression, lengths: frozenset, path: _Path,
              value: cst.BaseExpression | None = None) -> None:
        for key in bound_names(target):
            for stale in [k for k in path.env if k.startswith(key + ".")]:
                del path.env[stale]
            path.env[key] = lengths
            path.flags.pop(key, None)
            if key in self._flags and type(value) is cst.Name and value.value in ("True", "False"):
                path.flags[key] = value.value == "True"
