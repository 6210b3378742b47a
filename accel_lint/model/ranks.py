"""Rank predicates and their value on each rank class.

A condition is *rank-dependent* when it evaluates differently on different rank
classes (or cannot be resolved on some). Rank classes stand for the processes a
script can run as: the global main process, a local main on another node, any
other rank, the last rank, and one class per literal ``k`` in ``process_index == k``.

Everything the evaluator does not understand is *uniform*: unknown means no finding.
"""

from __future__ import annotations

import operator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import libcst as cst

from .index import FileIndex
from .names import bound_names, dotted_name, last_attr
from .objects import ObjectTracker


class _Sym:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


UNIFORM = _Sym("UNIFORM")  # unknown but the same on every rank
FORK = _Sym("FORK")  # rank-dependent, unresolvable on this class
OTHER = _Sym("OTHER")  # a rank index that matches no literal in the file
ACCELERATOR = _Sym("ACCELERATOR")  # an accelerator object (the same kind on every rank)

RANK_ENV_GLOBAL = frozenset({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "NODE_RANK", "GROUP_RANK"})
RANK_ENV_LOCAL = frozenset({"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"})


@dataclass(frozen=True)
class RankClass:
    """One kind of process: its global index, local index, and whether it is last."""

    name: str
    pi: Any  # int or OTHER
    li: Any  # 0 or OTHER
    last: bool = False


MAIN = RankClass("main", 0, 0)
LOCAL_MAIN = RankClass("local-main", OTHER, 0)
OTHER_RANK = RankClass("other", OTHER, OTHER)
LAST = RankClass("last", OTHER, OTHER, last=True)

_CMP = {
    cst.Equal: operator.eq,
    cst.NotEqual: operator.ne,
    cst.LessThan: operator.lt,
    cst.GreaterThan: operator.gt,
    cst.LessThanEqual: operator.le,
    cst.GreaterThanEqual: operator.ge,
    cst.Is: operator.eq,
    cst.IsNot: operator.ne,
}


class RankEvaluator:
    """Evaluates conditions per rank class; decides which conditions are rank-dependent."""

    def __init__(self, index: FileIndex, objects: ObjectTracker, is_accelerator_device=lambda expr: False) -> None:
        self.index = index
        self.objects = objects
        # (``accelerator.device``, or a name bound to it: its ``.index`` is the local rank on GPUs)
        self._is_accelerator_device = is_accelerator_device
        self.defines_local_rank_arg = bool({"--local_rank", "--local-rank"} & index.string_literals)
        self._memo: dict[tuple[int, str], Any] = {}
        self._rank_memo: dict[cst.CSTNode, bool] = {}
        self._assigned: dict[cst.FunctionDef, set[str]] = {}
        self._passed: dict[tuple, tuple | None] = {}
        # parameters a call being followed passes as literals: (function, name) -> value
        self._assumed: dict[tuple, Any] = {}
        self._assumed_key: tuple = ()
        self.classes = self._classes()

    def _classes(self) -> list[RankClass]:
        classes = [MAIN, OTHER_RANK, LOCAL_MAIN]
        literals: set[int] = set()
        for call_or_cmp in self._comparisons():
            for side in (call_or_cmp.left, *[c.comparator for c in call_or_cmp.comparisons]):
                if isinstance(side, cst.Integer) and side.evaluated_value > 0:
                    literals.add(side.evaluated_value)
        for k in sorted(literals)[:4]:
            classes.append(RankClass(f"rank-{k}", k, OTHER))
        classes.append(LAST)
        return classes

    def _comparisons(self):
        # Only literals compared against rank expressions create classes; scanning
        # comparisons that mention rank names keeps the class list short.
        out = []
        for node in self.index.parents:
            if isinstance(node, cst.Comparison):
                text = dotted_name(node.left) or ""
                if any(t in text for t in ("process_index", "rank", "RANK")) or (
                    isinstance(node.left, cst.Call) and "rank" in (dotted_name(node.left.func) or "")
                ):
                    out.append(node)
        return out

    @contextmanager
    def assuming(self, constants: dict[tuple, Any]):
        """Evaluate with the parameters of ``constants`` ((function, name) -> value) bound to
        those values: the tests of a helper as one call passes them (``evaluate=True``)."""
        saved = self._assumed, self._assumed_key
        self._assumed = {**self._assumed, **constants}
        self._assumed_key = tuple(sorted(((id(fn), name, repr(v)) for (fn, name), v in self._assumed.items())))
        try:
            yield
        finally:
            self._assumed, self._assumed_key = saved

    # -- public queries -------------------------------------------------------------
    def value_on(self, expr: cst.BaseExpression, cls: RankClass) -> Any:
        """What ``expr`` is on ``cls``, not reduced to a truth value (``OTHER`` for another rank's index)."""
        return self._eval(expr, cls, 0)

    def evaluate(self, expr: cst.BaseExpression, cls: RankClass) -> Any:
        """``True``/``False`` when the condition is decided on ``cls``; ``UNIFORM`` or ``FORK`` otherwise."""
        value = self._eval(expr, cls, 0)
        if value is UNIFORM or value is FORK:
            return value
        if value is OTHER:
            return FORK
        try:
            return bool(value)
        except Exception:
            return UNIFORM

    def is_rank_dependent(self, expr: cst.BaseExpression) -> bool:
        """Whether ``expr`` can take different values on different ranks."""
        key = (expr, self._assumed_key) if self._assumed_key else expr
        cached = self._rank_memo.get(key)
        if cached is None:
            results = [self.evaluate(expr, c) for c in self.classes]
            cached = any(r is FORK for r in results) or len({repr(r) for r in results}) > 1
            self._rank_memo[key] = cached
        return cached

    # -- evaluation --------------------------------------------------------------------
    def _eval(self, expr: cst.BaseExpression, cls: RankClass, depth: int) -> Any:
        if depth > 12:
            return UNIFORM
        key = (id(expr), cls.name, self._assumed_key) if self._assumed_key else (id(expr), cls.name)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = UNIFORM  # cycle guard
        value = self._eval_uncached(expr, cls, depth + 1)
        self._memo[key] = value
        return value

    def _eval_uncached(self, expr: cst.BaseExpression, cls: RankClass, depth: int) -> Any:
        # exact types: libcst's node classes are final, and isinstance on them is slow (ABCs)
        kind = type(expr)
        if kind is cst.Integer or kind is cst.SimpleString:
            return expr.evaluated_value
        if kind is cst.Name and expr.value in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[expr.value]
        if kind is cst.Name or kind is cst.Attribute:
            return self._eval_name(expr, cls, depth)
        if kind is cst.Call:
            return self._eval_call(expr, cls, depth)
        if kind is cst.Subscript:
            return self._eval_env(expr, cls)
        if kind is cst.UnaryOperation:
            operator = type(expr.operator)
            if operator is cst.Not:
                v = self._eval(expr.expression, cls, depth)
                return v if v in (UNIFORM, FORK) else (FORK if v is OTHER else not v)
            if operator is cst.Minus or operator is cst.Plus:
                v = self._eval(expr.expression, cls, depth)
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    return -v if operator is cst.Minus else v
                return FORK if v in (FORK, OTHER) else UNIFORM
            return UNIFORM
        if kind is cst.BooleanOperation:
            return self._eval_bool(expr, cls, depth)
        if kind is cst.IfExp:
            # `True if accelerator.is_main_process else False`: the arm the test picks here
            test = self._eval(expr.test, cls, depth)
            if test not in (UNIFORM, FORK, OTHER):
                return self._eval(expr.body if test else expr.orelse, cls, depth)
            if test is UNIFORM:
                # (`is_local_main if local else is_main`: which arm holds is the program's flag;
                # the walks cannot pair it with a later test on the same flag: unknown)
                return UNIFORM
            body, orelse = self._eval(expr.body, cls, depth), self._eval(expr.orelse, cls, depth)
            return body if repr(body) == repr(orelse) else FORK
        if kind is cst.Comparison:
            return self._eval_compare(expr, cls, depth)
        if kind is cst.BinaryOperation:
            left = self._eval(expr.left, cls, depth)
            right = self._eval(expr.right, cls, depth)
            if FORK in (left, right) or OTHER in (left, right):
                return FORK
            return UNIFORM
        return UNIFORM

    def _eval_name(self, expr: cst.BaseExpression, cls: RankClass, depth: int) -> Any:
        attr = last_attr(expr)
        if isinstance(expr, cst.Attribute):
            known = _rank_attribute(attr, cls)
            if known is not _NOT_RANK:
                return known
            if attr in ("should_save", "should_log") and (dotted_name(expr.value) or "").endswith("args"):
                # transformers' TrainingArguments: true on the main process (per node with
                # save_on_each_node). TrainerControl has members of the same names that are the
                # same on every rank, and nothing in the file tells the two objects apart: the
                # one guess by name left in the rank model (Trainer code calls them `args`)
                return cls.pi == 0
            if attr == "local_rank" and self.defines_local_rank_arg and self._parsed_arguments(expr.value):
                return cls.li
            if attr == "index" and self._is_accelerator_device(expr.value):
                return cls.li  # the accelerator's `cuda:<local rank>` device (on CPU it is None)
        prop = self.index.resolve_property(expr)
        if prop is not None:  # `if self.is_main:` with `def is_main(self): return ...is_main_process`
            exprs = self.objects.summaries[prop].return_exprs
            return self._eval(exprs[0], cls, depth) if len(exprs) == 1 else UNIFORM
        if self._assumed and type(expr) is cst.Name:
            scope = self.index.scope_of(expr)
            if (scope, expr.value) in self._assumed:
                return self._assumed[(scope, expr.value)]
        value = self.objects.values.get(expr)
        if value is not None and value.is_acc:
            return ACCELERATOR  # an object, never None: `accelerator is None` is false
        if value is None and type(expr) is cst.Name:
            passed = self._passed_flag(expr, cls, depth)
            if passed is not None:
                return passed
            where = self.objects.predicates.get(expr.value)
            if where is not None:  # `MASTER = RANK == 0` in another module of the tree, imported
                return _imported_role(where, cls)
        origin = value.origin if value is not None else None
        if type(expr) is cst.Attribute and type(expr.value) is cst.Name and expr.value.value == "self":
            # `if use_tb and accelerator.is_main_process: self.writer = SummaryWriter(...)` with
            # `else: self.writer = None`: on a rank whose branches bind it only to None, it is
            # None in every method
            owner = self.index.class_of(self.index.scope_of(expr))
            bound = self.index.self_attribute_values.get((owner.name, attr)) if owner is not None else None
            if bound and 1 < len(bound) <= 4 and self._none_here(bound, cls, depth):
                return None
        if origin is None and value is not None and 1 < len(value.alternatives) <= 4:
            # `flag = True` then `if acc is not None: flag = acc.is_main_process`: what each
            # binding gives; bindings that disagree where one is rank-derived make it rank-dependent
            results = [self._eval(alt, cls, depth) if isinstance(alt, cst.BaseExpression) else UNIFORM
                       for alt in value.alternatives]
            if any(r is FORK or r is OTHER for r in results) or any(self._is_rank_atom(a) for a in value.alternatives
                                                                    if isinstance(a, cst.BaseExpression)):
                first = results[0]
                return first if all(r == first and type(r) is type(first) for r in results) else FORK
        if isinstance(origin, cst.BaseExpression) and origin is not expr:
            # Follow a binding only for rank-derived values: a constant it was once assigned
            # (`self.best = None`) says nothing about its value here.
            result = self._eval(origin, cls, depth)
            if result is UNIFORM or result is FORK or result is OTHER or self._is_rank_atom(origin):
                return result
        return UNIFORM

    def _none_here(self, alternatives, cls: RankClass, depth: int) -> bool:
        """Of the expressions ``alternatives`` (what each binding assigns), the ones a rank of ``cls`` can run all bind
        the literal ``None`` (the others sit in branches whose tests are false there)."""
        if not any(_is_none(a) for a in alternatives):
            return False
        reachable = [a for a in alternatives if not self._branch_excludes(a, cls, depth)]
        return bool(reachable) and all(_is_none(a) for a in reachable)

    def _branch_excludes(self, node: cst.CSTNode, cls: RankClass, depth: int) -> bool:
        """``node`` sits in an ``if`` branch that a rank of ``cls`` never takes (in its function)."""
        child = node
        for parent in self.index.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if type(parent) is cst.If and child is not parent.test:
                test = self._eval(parent.test, cls, depth)
                if test is True and child is parent.orelse or test is False and child is parent.body:
                    return True
            child = parent
        return False

    def _parsed_arguments(self, expr: cst.BaseExpression) -> bool:
        """``expr`` holds what an argument parser returned (``parser.parse_args()``), on every
        path: its ``local_rank`` is the ``--local_rank`` the launcher passes each process."""
        value = self.objects.values.get(expr)
        origins = value.origins() if value is not None else frozenset()
        return bool(origins) and all(
            type(o) is cst.Call and last_attr(o.func) in ("parse_args", "parse_known_args") or
            type(o) is cst.Subscript and type(o.value) is cst.Call
            and last_attr(o.value.func) == "parse_known_args" for o in origins)

    def _assigned_in(self, fn: cst.FunctionDef) -> set[str]:
        """Names an assignment in ``fn`` binds (computed once per function)."""
        found = self._assigned.get(fn)
        if found is None:
            found = {n for node in self.index.walk(fn) if type(node) is cst.Assign
                     for t in node.targets for n in bound_names(t.target)}
            self._assigned[fn] = found
        return found

    def _passed_flag(self, name: cst.Name, cls: RankClass, depth: int) -> Any:
        """A parameter the function never rebinds (``def save(..., *, is_main_process: bool)``):
        what its callers in this file pass there, when that is rank-derived; ``None`` when
        unknown or not rank-derived. Callers that pass different rank predicates
        (``_goes_first(is_main_process)`` and ``_goes_first(is_local_main_process)``) leave it
        unknown: which one holds here cannot be told. A caller that passes a literal beside one
        that passes a rank predicate (``evaluate(..., log=False)`` and ``evaluate(...,
        log=accelerator.is_main_process)``) makes it rank-dependent, unresolved on the classes
        where the two differ."""
        fn = self.index.scope_of(name)
        if type(fn) is not cst.FunctionDef:
            return None
        key = (fn, name.value)
        if key not in self._passed:
            self._passed[key] = None  # recursion guard
            self._passed[key] = self._passed_vector(fn, name.value, depth)
        vector = self._passed[key]
        if vector is None:
            return self._rank_passed_from_another_module(fn, name.value, cls)
        return vector[self.classes.index(cls)]

    def _rank_passed_from_another_module(self, fn: cst.FunctionDef, pname: str, cls: RankClass) -> Any:
        """A parameter of a module function that callers in other modules of the tree pass a rank
        or a rank predicate (``save_states(..., process_index=self.process_index)``), never
        rebound here: that rank; ``None`` otherwise."""
        info = self.index.functions[fn]
        passed = self.objects.incoming.get(info.qualname) if info.class_name is None else None
        if not passed or pname in self._assigned_in(fn):
            return None
        names = [p.name.value for p in (*fn.params.posonly_params, *fn.params.params)]
        role = passed.get(pname) or (passed.get(str(names.index(pname))) if pname in names else None)
        if role is None or not role.startswith(RANK_PASSED):
            return None
        return _imported_role(role.removeprefix(RANK_PASSED), cls)

    def _passed_vector(self, fn: cst.FunctionDef, pname: str, depth: int) -> tuple | None:
        info = self.index.functions[fn]
        params = fn.params
        names = [p.name.value for p in (*params.posonly_params, *params.params)]
        if pname not in names and pname not in {p.name.value for p in params.kwonly_params}:
            return None
        sites = self.index.call_sites(fn)
        if not sites or pname in self._assigned_in(fn):
            return None
        position = names.index(pname) if pname in names else None
        if position is not None and info.class_name is not None and names and names[0] in ("self", "cls"):
            position -= 1
            if position < 0:
                return None  # `self` itself
        vectors = []
        for site in sites:
            if info.class_name is not None and not (type(site.func) is cst.Attribute and type(site.func.value) is cst.Name
                                                    and site.func.value.value in ("self", "cls")):
                return None  # `Class.method(obj, ...)`: the arguments are shifted
            arg = next((a.value for a in site.args if a.keyword is not None and a.keyword.value == pname), None)
            if arg is None and position is not None:
                positional = [a for a in site.args if a.keyword is None]
                if any(a.star for a in positional[: position + 1]):
                    return None
                arg = positional[position].value if position < len(positional) else None
            if arg is None:
                return None
            vectors.append(tuple(self._eval(arg, c, depth) for c in self.classes))
        def rank_derived(vector: tuple) -> bool:
            return any(r is FORK or r is OTHER for r in vector) or len({repr(r) for r in vector}) > 1

        distinct = list({tuple(map(repr, v)): v for v in vectors}.values())
        derived = [v for v in distinct if rank_derived(v)]
        if len(derived) != 1:
            return None  # several rank tests (which holds here cannot be told), or none
        first = derived[0]
        constants = [v for v in distinct if v is not first]
        if any(type(v[0]) is not bool for v in constants):
            return None  # a caller passes something unknown
        # a caller that passes a literal (`log=False`): on each class where it and the rank test
        # disagree, the value is the rank test's or the literal, as the call decides
        return tuple(r if all(repr(c[i]) == repr(r) for c in constants) else FORK for i, r in enumerate(first))

    def _eval_call(self, call: cst.Call, cls: RankClass, depth: int) -> Any:
        name = dotted_name(call.func) or ""
        short = name.split(".")[-1]
        qual = self.index.imports.qualify(name) or name
        if short in ("int", "bool", "str", "float") and name == short and len(call.args) == 1:
            v = self._eval(call.args[0].value, cls, depth)
            if v in (UNIFORM, FORK, OTHER):
                return v
            try:
                return {"int": int, "bool": bool, "str": str, "float": float}[short](v)
            except Exception:
                return UNIFORM
        if qual.endswith("distributed.get_rank") or short in ("get_ordinal", "get_global_rank"):
            return cls.pi
        if qual.endswith(("get_node_local_rank", "get_local_rank")) or short == "get_local_ordinal":
            return cls.li
        if short in ("is_master_ordinal", "is_world_process_zero"):
            return cls.pi == 0
        if short == "is_local_process_zero":
            return cls.li == 0
        if qual.endswith(("distributed.is_initialized", "distributed.is_available")) and not call.args:
            return True  # in a job of several processes, the process group exists
        if type(call.func) is cst.Attribute and not call.args and short in _RANK_FLAGS:
            # `accelerator.is_local_main_process()`: the flag called as if it were a method (it
            # is a property, and calling its bool raises); the test means the flag
            return _rank_attribute(short, cls)
        where = self.objects.predicates.get(name)
        if where is not None:  # a rank predicate (or a rank) defined in another module of the tree
            return _imported_role(where, cls)
        if name == "getattr" and len(call.args) >= 2 and type(call.args[1].value) is cst.SimpleString:
            # `getattr(accelerator, "is_main_process", True)`: the attribute itself
            known = _rank_attribute(call.args[1].value.evaluated_value, cls)
            if known is not _NOT_RANK:
                return known
        env = self._eval_env(call, cls)
        if env is not UNIFORM:
            return env
        target = self.index.resolve_call(call)
        if target is not None:
            exprs = self.objects.summaries[target].return_exprs
            if len(exprs) == 1:
                return self._eval(exprs[0], cls, depth)
        return UNIFORM

    def _eval_env(self, expr: cst.BaseExpression, cls: RankClass) -> Any:
        """``os.environ["RANK"]``, ``os.environ.get("LOCAL_RANK")``, ``os.getenv(...)``."""
        var = None
        if isinstance(expr, cst.Subscript) and dotted_name(expr.value) in ("os.environ", "environ"):
            if len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
                idx = expr.slice[0].slice.value
                if isinstance(idx, cst.SimpleString):
                    var = idx.evaluated_value
                elif type(idx) is cst.Name:
                    var = self._iterated_variable(idx)
        elif isinstance(expr, cst.Call) and expr.args and isinstance(expr.args[0].value, cst.SimpleString):
            name = dotted_name(expr.func)
            if name in ("os.environ.get", "os.getenv", "environ.get", "getenv"):
                var = expr.args[0].value.evaluated_value
        if var in RANK_ENV_LOCAL:
            return cls.li if cls.li is OTHER else str(cls.li)
        if var in RANK_ENV_GLOBAL:
            return cls.pi if cls.pi is OTHER else str(cls.pi)
        return UNIFORM

    def _iterated_variable(self, name: cst.Name) -> str | None:
        """For ``os.environ[v]`` inside ``for v in ("RANK", "SLURM_PROCID"):``: the kind of
        variable every string of the loop names (``"RANK"`` for global ranks, ``"LOCAL_RANK"``
        for local ones), or ``None``."""
        for parent in self.index.ancestors(name):
            if type(parent) is cst.For and type(parent.target) is cst.Name and parent.target.value == name.value:
                items = parent.iter.elements if type(parent.iter) in (cst.Tuple, cst.List) else ()
                strings = {e.value.evaluated_value for e in items if type(e.value) is cst.SimpleString}
                if not items or len(strings) != len(items):
                    return None
                if strings <= RANK_ENV_GLOBAL:
                    return "RANK"
                if strings <= RANK_ENV_LOCAL:
                    return "LOCAL_RANK"
                return None
            if type(parent) in (cst.FunctionDef, cst.ClassDef):
                return None
        return None

    def _eval_bool(self, expr: cst.BooleanOperation, cls: RankClass, depth: int) -> Any:
        left = self._eval(expr.left, cls, depth)
        right = self._eval(expr.right, cls, depth)
        left = FORK if left is OTHER else left
        right = FORK if right is OTHER else right
        if isinstance(expr.operator, cst.And):
            if left is not UNIFORM and left is not FORK and not left:
                return False
            if left is not UNIFORM and left is not FORK:
                return right
            if right is not UNIFORM and right is not FORK and not right:
                return False
            return FORK if FORK in (left, right) else UNIFORM
        if left is not UNIFORM and left is not FORK and left:
            return True
        if left is not UNIFORM and left is not FORK:
            return right
        if right is not UNIFORM and right is not FORK and right:
            return True
        return FORK if FORK in (left, right) else UNIFORM

    def _eval_compare(self, expr: cst.Comparison, cls: RankClass, depth: int) -> Any:
        left = self._eval(expr.left, cls, depth)
        result: Any = True
        for target in expr.comparisons:
            right = self._eval(target.comparator, cls, depth)
            op = _CMP.get(type(target.operator))
            if FORK in (left, right):
                return FORK
            if op is None:  # in / not in
                found = self._membership(left, target.comparator, cls, depth)
                if found is None:
                    return FORK if OTHER in (left, right) else UNIFORM
                if found is FORK or found is UNIFORM:
                    return found
                value = found if type(target.operator) is cst.In else not found
                result = result and value
                left = right
                continue
            if UNIFORM in (left, right):
                sides = (expr.left, *[t.comparator for t in expr.comparisons])
                return FORK if any(self._is_rank_atom(e) for e in sides) else UNIFORM
            value = _compare(op, left, right)
            if value is FORK or value is UNIFORM:
                return value
            result = result and value
            left = right
        return result

    def _membership(self, left: Any, container: cst.BaseExpression, cls: RankClass, depth: int) -> Any:
        """``left in (-1, 0)`` on ``cls``: ``True``/``False`` where ``left`` is known and the
        container is a display of constants, ``FORK`` where ``left`` is another rank's index
        and the constants hold one (no class of its own stands for it), ``UNIFORM`` where
        ``left`` is not known; ``None`` for any other container."""
        if type(container) not in (cst.Tuple, cst.List, cst.Set) or not container.elements:
            return None
        items = [self._eval(e.value, cls, depth) for e in container.elements]
        if any(type(i) not in (int, str) for i in items):
            return None
        if left is UNIFORM:
            return UNIFORM
        if left is OTHER:
            # OTHER is an index of at least 1 that none of the file's compared literals names
            numbers = {int(i) for i in items if type(i) is int or i.lstrip("-").isdigit()}
            return FORK if any(n >= 1 for n in numbers) else False
        if type(left) not in (int, str):
            return UNIFORM
        return any(_compare(operator.eq, left, i) is True for i in items)

    def _is_rank_atom(self, expr: cst.BaseExpression) -> bool:
        results = {repr(self._eval(expr, c, 0)) for c in (MAIN, OTHER_RANK)}
        return len(results) > 1


_NOT_RANK = _Sym("NOT_RANK")


# the boolean rank attributes of an accelerator or state
_RANK_FLAGS = frozenset({"is_main_process", "is_local_main_process", "is_last_process"})


def _rank_attribute(attr: str, cls: RankClass) -> Any:
    """What an accelerator's or state's rank attribute holds on ``cls`` (``is_main_process``,
    ``process_index``, ...); ``_NOT_RANK`` for any other name."""
    if attr in ("is_main_process", "is_world_process_zero"):
        return cls.pi == 0
    if attr in ("is_local_main_process", "is_local_process_zero"):
        return cls.li == 0
    if attr == "is_last_process":
        return cls.last
    if attr == "process_index":
        return cls.pi
    if attr == "local_process_index":
        return cls.li
    return _NOT_RANK


def _compare(op, left: Any, right: Any) -> Any:
    # rank values from the environment are strings; literals may be ints
    if isinstance(left, str) and isinstance(right, int) or isinstance(left, int) and isinstance(right, str):
        try:
            left, right = int(left), int(right)
        except ValueError:
            return UNIFORM
    if left is OTHER or right is OTHER:
        other = right if left is OTHER else left
        if not isinstance(other, (int, str)):
            return FORK
        try:
            k = int(other)
        except ValueError:
            return FORK
        if op is operator.eq:
            return False
        if op is operator.ne:
            return True
        # OTHER stands for an index >= 1 that is none of the file's literals
        if left is OTHER:
            if op in (operator.gt, operator.ge) and k <= (0 if op is operator.gt else 1):
                return True
            if op in (operator.lt, operator.le) and k <= (0 if op is operator.le else 1):
                return False
        else:
            if op in (operator.lt, operator.le) and k <= (0 if op is operator.lt else 1):
                return True
            if op in (operator.gt, operator.ge) and k <= (0 if op is operator.ge else 1):
                return False
        return FORK
    try:
        return op(left, right)
    except TypeError:
        return UNIFORM


# how the engine says a caller in another module passes a parameter a rank: "rank:<role>"
RANK_PASSED = "rank:"


def _is_none(node: cst.CSTNode) -> bool:
    return type(node) is cst.Name and node.value == "None"


def _imported_role(where: str, cls: RankClass) -> Any:
    """What a name another module exports as a rank predicate or a rank is on ``cls``."""
    if where == "main":
        return cls.pi == 0
    if where == "local_main":
        return cls.li == 0
    if where == "rank":
        return cls.pi if cls.pi is OTHER else str(cls.pi)
    return cls.li if cls.li is OTHER else str(cls.li)
