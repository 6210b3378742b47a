"""The semantic model of an Accelerate program, built once per file.

Every rule is a query on :class:`FileModel`; no rule walks the tree to re-derive any
of it. The model answers:

* **accelerators** -- which expressions hold an ``Accelerator``/``PartialState``/
  ``AcceleratorState`` (constructors under any import form, aliases, ``self.<attr>``
  set in any method, parameters named or annotated as accelerators, same-file factories);
* **prepared objects** -- flow-sensitively, which names hold the result of
  ``prepare``/``prepare_*`` and of what kind (model, optimizer, loader, scheduler);
  rebinding after ``prepare`` makes a name raw again, and preparing under a new name
  leaves the old one raw (:mod:`.objects`);
* **rank regions** -- which conditions are rank-dependent and which calls run under a
  rank guard (``if``/``else``, early exits, ``@accelerator.on_main_process``, functions
  only called under guards) (:mod:`.ranks`, :mod:`.ops`);
* **collectives** -- which calls are collectives (one table: :mod:`accel_lint.collectives`)
  and which op kinds each rank class executes, compared structurally so that balanced
  branches pass (:mod:`.ops`);
* **call graph** -- same-file helpers are inlined into their callers' op sequences, with
  the chain of helpers kept for messages; summaries tell what a function returns and
  what its callers pass for each parameter;
* **writes** -- which calls write or delete files (:mod:`.writes`).

When the model cannot decide, it answers "unknown", and rules report nothing.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from collections.abc import Callable
from itertools import takewhile

import libcst as cst

from .binding import BoundNames
from .classes import FORWARD, forward_methods, rank_split_tests
from .index import FileIndex, FunctionInfo, ScopeNode
from .counts import counts_items
from .lengths import LoaderLengths
from . import composites
from .moves import rank_branch_of
from .clips import helper_clip
from .rank_data import COLLECTIVE_WORDS, IN_PLACE, RankData
from .ranks import RANK_PASSED
from .names import BUILTIN_NAMES, bound_names, dotted_name, last_attr, none_comparison
from ..collectives import (DOWNLOADS, FORWARD_METHODS, ITERATES_ARGUMENTS, MADE_FACTS, RANK_PREDICATE, RETURNS_KIND,
                           RANK_VARYING_ATTRIBUTES,
                           RETURNS_SHARDING_SAMPLER, RETURNS_UNIFORM, CLIPS_GRADIENTS, SPLITS_PER_RANK,
                           WRITES_FILE, WRITING_METHODS, STARTS_TRACKER, REPLACES_PRINT,
                           WAITS_FOR_CALLERS, ENDING_METHODS, GENERATING_METHODS, NOT_OPS)
from .objects import (ACC_CONSTRUCTORS, ACCELERATOR, ONE_STEP_ACCELERATOR, ACCELERATOR_FACTORY, COMPOSITE, DEFAULT_ACCELERATOR_NAMES, MAYBE,
                      NO, SELF_RETURNING, YES, ObjectTracker, Value, arguments_by_parameter)
from .ops import Divergence, Guard, OpAnalysis, Op, _always_exits
from .undecided import undecided_rank_test
from .ranks import RankEvaluator
from ..reparse import Layout
from .writes import Write, classify_write
from ..library import Library, default_library

__all__ = ["FileModel", "bound_names", "dotted_name", "last_attr", "Value", "Guard", "Op", "Divergence", "Write", "YES", "MAYBE", "NO", "shorten"]


_NO_GRAD = frozenset({"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad"})


def _at_most_one(target: cst.ComparisonTarget) -> bool | None:
    """What ``<count> <op> <integer>`` says of the count: True for at most one (``== 1``,
    ``<= 1``, ``< 2``), False for more than one (``!= 1``, ``> 1``, ``>= 2``), else None."""
    if type(target.comparator) is not cst.Integer:
        return None
    operator, bound = type(target.operator), int(target.comparator.value)
    if (operator, bound) in ((cst.Equal, 1), (cst.LessThanEqual, 1), (cst.LessThan, 2)):
        return True
    if (operator, bound) in ((cst.NotEqual, 1), (cst.GreaterThan, 1), (cst.GreaterThanEqual, 2)):
        return False
    return None


def _disjuncts(test: cst.BaseExpression | None) -> list[cst.BaseExpression]:
    """The parts of ``a or b or c``, in order (``[test]`` for anything else)."""
    if test is None:
        return []
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        return _disjuncts(test.left) + _disjuncts(test.right)
    return [test]


def backend_compared(expr: cst.BaseExpression) -> str | None:
    """``accelerator.distributed_type == DistributedType.DEEPSPEED``: ``"DEEPSPEED"``; so is
    ``AcceleratorState().deepspeed_plugin is not None`` (the plugin exists only under DeepSpeed)."""
    if isinstance(expr, cst.Comparison) and isinstance(expr.left, cst.Attribute) \
            and expr.left.attr.value == "deepspeed_plugin" and len(expr.comparisons) == 1 \
            and isinstance(expr.comparisons[0].operator, (cst.IsNot, cst.NotEqual)) \
            and isinstance(expr.comparisons[0].comparator, cst.Name) and expr.comparisons[0].comparator.value == "None":
        return "DEEPSPEED"
    if isinstance(expr, cst.Comparison) and isinstance(expr.left, cst.Attribute) \
            and expr.left.attr.value == "distributed_type" and len(expr.comparisons) == 1 \
            and isinstance(expr.comparisons[0].operator, (cst.Equal, cst.Is)):
        comparator = expr.comparisons[0].comparator
        if isinstance(comparator, cst.SimpleString):
            return comparator.evaluated_value or None
        return last_attr(comparator) or None
    return None


def shorten(text: str, limit: int = 70) -> str:
    """Source text on one line, cut to ``limit`` characters (for messages and evidence)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# the names a module must mention for ``predicate_constants`` to find a rank or rank predicate in
# it (the engine skips parsing a helper module asked only about such names when none occurs)
RANK_SOURCE_NAMES = frozenset({"environ", "getenv", "get_rank", "process_index", "is_main_process",
                               "local_process_index", "is_local_main_process", "get_local_rank"})

# downloads into a folder that every rank would write at once (huggingface_hub's are not here: they
# lock each file, so ranks that download at once wait for one another and reuse the cache)
_DOWNLOAD_CALLS = frozenset({"urllib.request.urlretrieve"})


# what an `_in_arm_where` verdict returns to pick both arms of a test
_EITHER_ARM = object()

# torch's sampler that gives each rank its own part of the data
_DISTRIBUTED_SAMPLERS = frozenset({"torch.utils.data.DistributedSampler",
                                   "torch.utils.data.distributed.DistributedSampler"})


class FileModel:
    """Everything the rules may ask about one parsed file."""

    def __init__(self, module: cst.Module, accelerator_names: tuple[str, ...] = DEFAULT_ACCELERATOR_NAMES,
                 external: dict[str, list[tuple[str, str]]] | None = None,
                 incoming: dict[str, dict[str, str]] | None = None, layout: Layout | None = None,
                 previous: dict | None = None, library: Library | None = None) -> None:
        self.module = module
        self.library = library if library is not None else default_library()
        self._layout = layout
        # the flow walks of this file before an edit (see ObjectTracker and LoaderLengths)
        self._previous = previous or {}
        self.index = FileIndex(module)
        self.accelerator_names = accelerator_names
        self.external = {**self._user_declared(), **(external or {})}
        self.incoming = incoming or {}
        self._positions = None
        self._deepspeed_read_before: dict[cst.CSTNode, bool] = {}  # (see _reads_deepspeed_plugin_before)
        self._every_rank: dict = {}
        # per scope: where the first statement that refuses several processes is, and where
        # each top-level statement of its body is (see `_several_refused_before`)
        self._refusals: dict = {}
        self._accelerator_flags: dict[str, bool] = {}  # (see _gates_every_accelerator)
        self._outside_accelerate: dict[int, bool] = {}  # (see value_at)
        self._statement_positions: dict = {}

    def _user_declared(self) -> dict[str, list[tuple[str, str]]]:
        """The project's own rank predicates and collectives (``extend-rank-predicates``,
        ``extend-collectives``), keyed as this file calls them (``is_rank0`` after ``from
        mylib.dist import is_rank0``), in the form other modules' summaries take."""
        declared = {**{name: (RANK_PREDICATE, where) for name, where in self.library.rank_predicates.items()},
                    **{name: (kind, name) for name, kind in self.library.collectives.items()}}
        if not declared:
            return {}
        out: dict[str, list[tuple[str, str]]] = {}
        for call in self.index.calls:
            local = dotted_name(call.func)
            if local is None:
                continue
            qualified = self.index.imports.qualify(local) or local
            if qualified in declared:
                out[local] = [declared[qualified]]
        return out

    def walks(self) -> dict:
        """The flow walks this model made, for its next edit (see :class:`accel_lint.reparse.Reparser`)."""
        kept = {}
        for name in ("objects", "loader_lengths"):
            if name in self.__dict__:
                kept["lengths" if name == "loader_lengths" else name] = self.__dict__[name].state()
        return kept

    def release(self) -> None:
        """Drop everything the model computed, once nobody asks it anything more. Its parts refer
        back to it (bound methods), so a large file's model would otherwise wait for the cyclic
        collector, and that collection walks every syntax tree the process keeps (the language
        server keeps one per open file): tens of milliseconds per lint of a 5,000-line file."""
        self.__dict__.clear()

    @cached_property
    def objects(self) -> ObjectTracker:
        return ObjectTracker(self.index, self.accelerator_names, self.incoming, self.external,
                             self._previous.get("objects"), self.library)

    @cached_property
    def bound_names(self) -> BoundNames:
        """Which names are bound on every path to a statement (for fixes that add a read)."""
        return BoundNames(self)

    def bound_at(self, node: cst.CSTNode, name: str) -> bool:
        return self.bound_names.bound_at(node, name)

    @cached_property
    def loader_lengths(self) -> LoaderLengths:
        return LoaderLengths(self.index, self.objects, self._previous.get("lengths"))

    def iterated_source(self, iterable: cst.BaseExpression) -> cst.BaseExpression:
        """What a ``for`` over ``iterable`` draws its items from: the first argument of
        ``enumerate(...)``, ``iter(...)``, ``zip(...)`` and the library table's identity calls
        (progress bars: ``tqdm(loader)``), and through a name its scope binds once before, on
        every path to the read (``bar = tqdm(enumerate(loader)); for i, b in bar:``)."""
        for _ in range(6):
            if type(iterable) is cst.Name:
                # the last assignment before the read, not inside a branch or loop the read is not in
                scope = self.scope_of(iterable)
                around = set(self.ancestors(iterable))
                assigned = [n for n in self.index.walk(scope) if type(n) in (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For)
                            and self.line_of(n) < self.line_of(iterable)
                            and any(iterable.value in bound_names(t) for t in (
                                [t.target for t in n.targets] if type(n) is cst.Assign else [n.target]))]
                if not assigned:
                    return iterable
                last = max(assigned, key=self.line_of)
                if type(last) is not cst.Assign or len(last.targets) != 1 or type(last.targets[0].target) is not cst.Name \
                        or not self._wraps_iteration(last.value):
                    return iterable  # (only a name bound to a wrapper call is looked through)
                if any(type(a) in (cst.If, cst.For, cst.While, cst.Try) and a not in around for a in self.ancestors(last)):
                    return iterable
                iterable = last.value
                continue
            if self._wraps_iteration(iterable):
                iterable = iterable.args[0].value
                continue
            return iterable
        return iterable

    def _wraps_iteration(self, expr: cst.BaseExpression) -> bool:
        return type(expr) is cst.Call and bool(expr.args) and not expr.args[0].star and (
            dotted_name(expr.func) in ("enumerate", "iter", "zip")
            or (self.index.imports.qualify_expr(expr.func) or "") in self.library.identity_calls)

    def step_scales_of(self, expr: cst.CSTNode) -> frozenset:
        """What the number ``expr`` may be, as (scale, ``len()`` call) pairs: scale 1 is a count
        taken from a loader before ``prepare`` sharded it (``num_processes`` times the per-rank
        count each rank iterates), 0 a per-rank count, 2 such a count times ``num_processes``.
        Followed through every assignment that still holds, per path; empty when nothing is
        known."""
        return self.loader_lengths.scales_of(expr)

    @cached_property
    def rank_data(self) -> RankData:
        """Which values are computed from rank-local data (batches, model outputs, the clock)."""
        return RankData(self.index, self.value_at, self.is_uniform_result, self.reads_rank, self._external_attributes,
                        self.ranks.is_rank_dependent)

    def _external_attributes(self, name: str) -> frozenset[str]:
        """The rank-local attributes of instances of ``name``, a class of another module."""
        return frozenset(attr for kind, detail in self.external.get(name, ()) if kind == RANK_VARYING_ATTRIBUTES
                         for attr in detail.split())

    @cached_property
    def ranks(self) -> RankEvaluator:
        return RankEvaluator(self.index, self.objects, self.is_accelerator_device)

    # -- file-level gates ---------------------------------------------------------------
    @cached_property
    def is_accelerate_file(self) -> bool:
        """The file constructs or receives an accelerator-like object."""
        # Every accelerator value starts at a constructor, a use through the accelerator
        # protocol or a declared accelerator name (or another module passes prepared objects in):
        # a file with none of these skips the flow analysis.
        if any(not key.startswith("@") for passed in self.incoming.values() for key in passed) or \
                any(kind == ACCELERATOR_FACTORY for ops in self.external.values() for kind, _ in ops):
            return True
        if not self.index.identifiers & (ACC_CONSTRUCTORS | self.library.accelerator_protocol | set(self.accelerator_names)):
            return False
        return bool(self.objects.acc_constructors) or any(v.is_acc for v in self.objects.values.values())

    # what only a program meant for several processes reads
    _MULTI_PROCESS_NAMES = frozenset({
        "process_index", "local_process_index", "is_main_process", "is_local_main_process", "is_last_process",
        "num_processes", "split_between_processes", "main_process_first", "local_main_process_first",
        "on_main_process", "on_local_main_process", "on_process", "on_local_process", "wait_for_everyone"})

    @cached_property
    def single_process_program(self) -> bool:
        """The file builds its own accelerator and uses nothing that matters with several
        processes: nothing prepared, no collective, no rank or process count read, no
        ``torch.distributed`` (an inference or caching tool that uses the accelerator for its
        device and autocast). Every process would redo the whole job, so it is not launched on
        several: what it writes is not a race between ranks."""
        # what other modules say of a name counts unless it is only what the name makes
        says_more = any(kind not in MADE_FACTS for ops in self.external.values() for kind, _ in ops)
        if not self.objects.acc_constructors or self.incoming or says_more or self.objects.prepare_calls:
            return False
        if self.uses_torch_distributed or self.index.identifiers & self._MULTI_PROCESS_NAMES:
            return False
        if any(summary.returns is not None and summary.returns.is_acc for summary in self.objects.summaries.values()):
            return False  # a factory: its callers elsewhere may use the accelerator for several processes
        trainer_packages = self.library.distributed_trainer_packages
        for call in self.index.calls:
            if self.op_kind(call) is not None:
                return False
            qualified = self.index.imports.qualify_expr(call.func) or ""
            if qualified.endswith("Trainer") and qualified.partition(".")[0] in trainer_packages:
                return False  # (a library trainer trains on every launched process)
            # handed to code of another module, which may use it for several processes
            if self.index.resolve_call(call) is None and any(
                    (v := self.objects.values.get(arg.value)) is not None and v.is_acc for arg in call.args):
                return False
        return True

    @cached_property
    def uses_torch_distributed(self) -> bool:
        """The file imports torch.distributed or calls into it (``import torch; torch.distributed.barrier()``)."""
        if self.index.imports.imports_module("torch.distributed"):
            return True
        return any((self.index.imports.qualify_expr(c.func) or "").startswith("torch.distributed.") for c in self.index.calls)

    # -- values ---------------------------------------------------------------------------
    def value_at(self, expr: cst.CSTNode) -> Value | None:
        """What ``expr`` (a name or attribute read, or an item of a known container such as
        ``loaders["train"]``) holds at its program point."""
        if type(expr) is cst.Subscript:
            item = self.objects.values.get(expr)
            if item is not None:
                return item  # an item known by its constant key
            base = self.value_at(expr.value)
            if base is not None and base.container:
                return replace(base, container=False, origin=None if base.origin is None else expr)
            return None
        value = self.objects.values.get(expr)
        if value is not None and value.prepared != NO and self._outside_accelerate_at(expr):
            # where no accelerator exists (`else:` of `if self.use_accelerator:`), nothing was prepared
            return replace(value, prepared=NO, prepared_at=None, prepared_unknown_kind=False)
        return value

    def _outside_accelerate_at(self, node: cst.CSTNode) -> bool:
        known = self._outside_accelerate.get(id(node))
        if known is None:
            known = self._outside_accelerate[id(node)] = self.without_accelerator_at(node)
        return known

    def is_accelerator(self, expr: cst.BaseExpression) -> bool:
        v = self.value_at(expr)
        if v is not None and v.is_acc:
            return True
        return isinstance(expr, cst.Call) and self.objects.is_acc_constructor(expr)

    def prepared_kind(self, expr: cst.BaseExpression) -> str | None:
        """The kind of object ``expr`` holds when it is prepared on every path, else ``None``."""
        v = self.value_at(expr)
        if v is not None and v.prepared == YES:
            return v.kind
        return None

    def is_prepared_module(self, expr: cst.BaseExpression) -> bool:
        """``expr`` holds a prepared model on every path: one the file knows is a model, or an
        object of a kind it does not show that went through ``prepare`` on every path and is
        used as a module (``nets.disc.parameters()`` where ``nets[k] = accelerator.prepare(nets[k])``
        for each item of a dict of outside classes)."""
        if self.prepared_kind(expr) == "model":
            return True
        value = self.value_at(expr)
        return value is not None and value.prepared_unknown_kind and value.prepared == MAYBE \
            and self.objects.module_evidence(expr, self.scope_of(expr)) is not None

    def kind_given_to_prepare(self, call: cst.Call, arg: cst.BaseExpression) -> str | None:
        """The kind of object ``arg`` is, as ``prepare`` sees it: from the method
        (``prepare_model``), how the object was made, or its parameters feeding an optimizer;
        ``None`` for anything ``prepare`` returns unchanged or that is unknown."""
        return self.objects.kind_for_prepare(call, arg, self.value_at(arg), self.scope_of(call))

    def was_prepared(self, origin: cst.CSTNode) -> bool:
        """Whether the object created at ``origin`` was passed to ``prepare`` anywhere in the file."""
        return origin in self.objects.prepared_origins

    def accelerator_name_in(self, scope: ScopeNode) -> str:
        """The name to write in messages and fixes: the accelerator used in ``scope``."""
        names = []
        for node, v in self.objects.values.items():
            if v.is_acc and self.index.scope_of(node) is scope:
                name = dotted_name(node)
                if name and not name.endswith(".state"):
                    names.append(name)
        if not names:
            for node, v in self.objects.values.items():
                if v.is_acc:
                    name = dotted_name(node)
                    if name and not name.endswith(".state"):
                        names.append(name)
        if not names:
            return "accelerator"
        return max(set(names), key=names.count)

    def accelerators_visible_in(self, scope: ScopeNode) -> set[str]:
        """The names (``accelerator``, ``self.acc``) of the accelerators read in ``scope``, or,
        when it reads none, those of module level: what a fix may write. More than one means
        the fix would have to guess."""
        by_scope = self._accelerator_names_by_scope

        def names_in(wanted: ScopeNode) -> frozenset[str]:
            return by_scope.get(wanted, frozenset())

        found = names_in(scope)
        cls = self.index.class_of(scope) if not found and type(scope) is cst.FunctionDef else None
        first = scope.params.params[0].name.value if cls is not None and scope.params.params else None
        if first is not None and not any(dotted_name(d.decorator) in ("staticmethod", "classmethod")
                                         for d in scope.decorators):
            # a method of a class whose other methods keep the accelerator on the instance
            # (`self.accelerator`): it reads the same one through its own first parameter
            found = {name for method in cls.methods.values() for name in names_in(method)
                     if name.startswith(f"{first}.") and method.params.params
                     and method.params.params[0].name.value == first}
        return found or (names_in(self.module) if scope is not self.module else set())

    @cached_property
    def _accelerator_names_by_scope(self) -> dict[ScopeNode, frozenset[str]]:
        """Scope -> the names of the accelerators read there (not ``.state``), built once: the
        rules ask ``accelerators_visible_in`` for every print and every method of a class."""
        found: dict[ScopeNode, set[str]] = {}
        for node, v in self.objects.values.items():
            if v.is_acc:
                name = dotted_name(node)
                if name and not name.endswith(".state"):
                    found.setdefault(self.index.scope_of(node), set()).add(name)
        return {scope: frozenset(names) for scope, names in found.items()}

    def accelerator_for_fix(self, node: cst.CSTNode) -> str | None:
        """The accelerator a fix at ``node`` may name: the only one visible in its scope, and bound
        on every path that reaches ``node`` (else the fix would raise ``UnboundLocalError``)."""
        acc = self.sole_accelerator_in(self.scope_of(node))
        if acc is None or not self.bound_at(node, acc.split(".")[0]):
            return None
        return acc

    def sole_accelerator_in(self, scope: ScopeNode) -> str | None:
        """The one accelerator name visible in ``scope``, or ``None`` when there are none or
        several: what a fix may write without guessing."""
        names = self.accelerators_visible_in(scope)
        return next(iter(names)) if len(names) == 1 else None

    def nodes_after(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The nodes of ``node``'s function (or module) that come after ``node`` and everything
        in it, in source order (a pre-order walk: a subtree is contiguous in it)."""
        scope = self.scope_of(node)
        order = list(self.index.walk(scope.body if isinstance(scope, cst.FunctionDef) else scope))
        start = next(i for i, n in enumerate(order) if n is node)
        return order[start + sum(1 for _ in self.index.walk(node)):]

    def loop_trains(self, loop: cst.For | cst.While) -> bool:
        """The loop runs a backward pass (``accelerator.backward(loss)`` or ``loss.backward()``),
        itself or through a same-file function it calls (a PPO update after each rollout): a
        training loop, whatever else it does."""
        return self._runs_backward(loop.body, set())

    def _runs_backward(self, node: cst.CSTNode, seen: set) -> bool:
        for call in self.calls_in(node):
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward":
                return True
            callee = self.index.resolve_call(call)
            if callee is not None and callee not in seen:
                seen.add(callee)
                if self._runs_backward(callee.body, seen):
                    return True
        return False

    def may_train_after(self, node: cst.CSTNode) -> bool:
        """``node`` is in a loop that runs a backward pass, or before a backward pass of its
        function, outside ``no_grad``: what it changes or computes may still reach training."""
        if self.under_no_grad(node):
            return False
        loop = self.enclosing_loop(node)
        if loop is not None and self.loop_trains(loop):
            return True
        line = self.line_of(node)
        return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward" and self.line_of(c) > line
                   for c in self.calls_in(self.scope_of(node)))

    def after_training(self, node: cst.CSTNode) -> bool:
        """``node`` comes after the training of its function: a backward pass runs earlier in the
        same function, and none later nor in a loop around ``node`` (a cast before saving). A
        function that trains nowhere (a constructor, another method trains) is not known to."""
        if self.may_train_after(node):
            return False
        line = self.line_of(node)
        return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "backward" and self.line_of(c) < line
                   for c in self.calls_in(self.scope_of(node)))

    def enclosing_loop(self, node: cst.CSTNode) -> cst.For | cst.While | None:
        """The innermost ``for``/``while`` around ``node`` in the same function."""
        for parent in self.index.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return None
            if isinstance(parent, (cst.For, cst.While)):
                return parent
        return None

    # -- ranks and collectives ----------------------------------------------------------------
    @cached_property
    def ops(self) -> OpAnalysis:
        return OpAnalysis(self.index, self.objects, self.ranks, external=self.external)

    # -- across modules ---------------------------------------------------------------------------
    def loader_shards_itself(self, loader_call: cst.Call) -> bool:
        """A ``DataLoader(...)`` that gives each rank its own part without ``prepare``: a
        distributed sampler, a dataset sharded by hand, or data that differs per rank."""
        for arg in loader_call.args:
            if arg.keyword is not None and arg.keyword.value in ("sampler", "batch_sampler") \
                    and self.sampler_shards(arg.value) is not False:
                return True  # a distributed sampler, or one whose behaviour is unknown here
        if loader_call.args:
            data = loader_call.args[0].value
            value = self.value_at(data)
            made = value.origin if value is not None and value.origin is not None else data
            if any(type(call.func) is cst.Attribute and call.func.attr.value in ("shard", "split_between_processes")
                   for call in self.calls_in(made)):
                return True
            if self.rank_data.varies(data):
                return True  # built from this rank's own data (rollouts of a prepared loader's batches)
        return False

    def sampler_shards(self, expr: cst.BaseExpression, _depth: int = 0) -> bool | None:
        """Whether the sampler ``expr`` holds gives each rank its own part: ``True`` for torch's
        ``DistributedSampler`` or a class of this module derived from it or reading the rank, and
        for a function (of this module or another of the tree) that returns one; ``False`` for
        torch's other samplers and a class of this module that never reads the rank; ``None``
        (unknown) for anything else: a class of another module, a parameter. Where paths differ
        (``DistributedSampler(ds) if multi_gpu else None``), one that shards is enough: it is the
        path a launch of several processes takes, and ``None`` there means no sampler at all."""
        value = self.value_at(expr)
        origins = value.origins() if value is not None and value.origins() else frozenset({expr})
        return _shards_on_some_path(self._made_sampler_shards(origin, _depth) for origin in origins)

    def _made_sampler_shards(self, origin: cst.CSTNode, depth: int) -> bool | None | str:
        """What ``origin`` makes, as ``sampler_shards`` reads it; computed once per expression (the
        returns of helpers that call helpers fan out: without it, 10^8 calls on one tree)."""
        if depth > 8:
            return None  # (not remembered: a shallower read may still tell)
        memo = self.__dict__.setdefault("_sampler_memo", {})
        if origin in memo:
            return memo[origin]  # (None while it is being computed: a cycle is unknown)
        memo[origin] = None
        found = memo[origin] = self._made_sampler_shards_uncached(origin, depth)
        return found

    def _made_sampler_shards_uncached(self, origin: cst.CSTNode, depth: int) -> bool | None | str:
        if depth > 8:
            return None
        if type(origin) is cst.Name and origin.value == "None":
            return "none"
        if isinstance(origin, cst.IfExp):
            return _shards_on_some_path(self.sampler_shards(branch, depth + 1) for branch in (origin.body, origin.orelse))
        if not isinstance(origin, cst.Call):
            return None
        target = self.index.resolve_call(origin)
        if target is not None:  # `get_sampler(ds)` of this module: what it returns
            return _shards_on_some_path(self.sampler_shards(r, depth + 1) if r is not None else "none"
                                        for r in self.objects.summaries[target].return_exprs)
        name = dotted_name(origin.func)
        if name is not None and any(kind == RETURNS_SHARDING_SAMPLER for kind, _ in self.external.get(name, ())):
            return True
        if any(a.keyword is not None and a.keyword.value == "num_replicas" and type(a.value) is cst.Integer
               and a.value.evaluated_value == 1 for a in origin.args):
            return False  # `DistributedSampler(ds, num_replicas=1, rank=0)`: one part, the whole dataset
        return self._class_shards(self.index.imports.qualify_expr(origin.func) or "", name, 0)

    def sharding_sampler_functions(self) -> set[str]:
        """Module functions whose return values include a sampler that gives each rank its own
        part (for other modules of the tree)."""
        found = set()
        for name, fn in self.index.module_functions.items():
            returned = [r for r in self.objects.summaries[fn].return_exprs if r is not None]
            if returned and any(self.sampler_shards(r) for r in returned):
                found.add(name)
        return found

    def _class_shards(self, qualified: str, local: str | None, depth: int) -> bool | None:
        if qualified in _DISTRIBUTED_SAMPLERS:
            return True
        if qualified.startswith("torch.utils.data."):
            return False
        cls = self.index.classes.get(local or "")
        if cls is None or depth > 8:
            return None
        if any(self.ranks.is_rank_dependent(n) for n in self.index.walk(cls.node)
               if type(n) in (cst.Name, cst.Attribute, cst.Call)):
            return True
        verdicts = {self._class_shards(self.index.imports.qualify(base) or "", base, depth + 1) for base in cls.bases
                    if base not in ("", "object")}
        return True if True in verdicts else (None if None in verdicts else False)

    def exported_kinds(self) -> dict[str, str]:
        """What other modules of the tree get by calling this module's functions and classes (see
        ``ObjectTracker.exported_kinds``); a loader only where the function returns a plain
        ``DataLoader(...)`` that does not shard itself."""
        kinds = self.objects.exported_kinds()
        for name, kind in list(kinds.items()):
            if kind != "loader" or name in self.index.classes:
                continue  # (a DataLoader subclass: its instances are loaders `prepare` shards)
            fn = self.index.module_functions.get(name)
            returned = self.objects.summaries[fn].returns if fn is not None else None
            origins = returned.origins() if returned is not None else frozenset()
            if not origins or not all(self.objects.constructs_loader(o)
                                      and not self.loader_shards_itself(o) for o in origins):
                del kinds[name]
        return kinds

    def module_summary(self) -> dict[str, list[tuple[str, str]]]:
        """For other modules of the tree: module-level functions that perform collectives."""
        if not (self.is_accelerate_file or self.uses_torch_distributed or self.objects.accelerator_subclasses):
            return {}
        out = {}
        for name, fn in self.index.module_functions.items():
            ops = self.ops.exported_ops(fn)
            returned = self.objects.summaries[fn].returns
            if returned is not None and returned.is_acc:
                # a factory (`def prepare_accelerator(args): return Accelerator(...)`): its
                # callers in other modules hold an accelerator
                ops = [*ops, (ACCELERATOR_FACTORY, "")]
            where = self._predicate_kind(fn)
            if where is not None:
                ops = [*ops, (RANK_PREDICATE, where)]
            if ops:
                out[name] = ops
        for name in self.accelerator_classes():
            out.setdefault(name, []).append((ACCELERATOR_FACTORY, ""))
        for name, facts in self.made_facts().items():
            known = out.get(name, [])
            out[name] = [*known, *(fact for fact in facts if fact not in known)]  # a predicate both say once
        for name in self.helpers_waiting_for_callers():
            out.setdefault(name, []).append((WAITS_FOR_CALLERS, ""))
        return out

    # how many members only Accelerate's accelerator has make a class one (a vendored, modified
    # copy of `Accelerator`)
    _PROTOCOL_MEMBERS_OF_AN_ACCELERATOR = 5

    def accelerator_classes(self) -> list[str]:
        """Top-level classes of this module that define the accelerator's own protocol (the
        library table's ``accelerator-protocol``: ``wait_for_everyone``, ``gather_for_metrics``,
        ``is_main_process``, ...): a vendored copy of ``Accelerator``, whose instances the
        modules that import it use as accelerators; and its subclasses here
        (``class SavingAccelerator(Accelerator)``)."""
        protocol = self.library.accelerator_protocol
        return sorted(name for name, cls in self.index.classes.items()
                      if cls.node in self.index.module.body
                      and (len(protocol & set(cls.methods)) >= self._PROTOCOL_MEMBERS_OF_AN_ACCELERATOR
                           or name in self.objects.accelerator_subclasses))

    def helpers_waiting_for_callers(self) -> list[str]:
        """Module functions of this Accelerate file with a write no rank guard holds, that
        nothing in this file calls and that do not run on every rank by themselves (a report
        helper of an evaluation module that the entry script calls): whether they race depends
        on their callers in other modules."""
        if not self.is_accelerate_file:
            return []
        waiting = set()
        for write in self.writes:
            scope = self.scope_of(write.call)
            if write.tolerant or type(scope) is not cst.FunctionDef or scope.name.value in waiting:
                continue
            if self.index.module_functions.get(scope.name.value) is not scope or self.under_rank_condition(write.call):
                continue
            # (still waiting once a caller elsewhere runs it on every rank: that is what it waits for)
            if not self.ops.call_sites(scope) and (not self.runs_on_every_rank(scope)
                                                   or self.every_rank_caller(scope) is not None):
                waiting.add(scope.name.value)
        return sorted(waiting)

    def every_rank_caller(self, scope: ScopeNode) -> str | None:
        """``"<file>:<line>"`` of a call in another module of the tree that runs ``scope`` (a
        module function) on every rank, when that is what makes it run there."""
        info = self.index.functions.get(scope) if isinstance(scope, cst.FunctionDef) else None
        if info is None or info.class_name is not None:
            return None
        return self.incoming.get(info.qualname, {}).get(self.EVERY_RANK)

    def made_facts(self) -> dict[str, list[tuple[str, str]]]:
        """What calling this module's functions and classes makes, for other modules of the tree
        (also read from modules with no Accelerate in them): the kind of object, a dataset that
        keeps one rank's rows, the methods of a model class that run its forward."""
        out: dict[str, list[tuple[str, str]]] = {}
        for name, kind in self.exported_kinds().items():
            out.setdefault(name, []).append((RETURNS_KIND, kind))
        for name, test in self.rank_split_classes.items():
            out.setdefault(name, []).append((SPLITS_PER_RANK, test))
        for name, methods in self.forward_methods.items():
            if self.index.classes[name].node in self.index.module.body and methods - FORWARD:
                out.setdefault(name, []).append((FORWARD_METHODS, " ".join(sorted(methods))))
        for name, where in self.predicate_constants().items():
            out.setdefault(name, []).append((RANK_PREDICATE, where))
        for name, detail in self.writing_functions().items():
            out.setdefault(name, []).append((WRITES_FILE, detail))
        for name, detail in self.writing_methods().items():
            out.setdefault(name, []).append((WRITING_METHODS, detail))
        for name, methods in self.ending_methods().items():
            out.setdefault(name, []).append((ENDING_METHODS, " ".join(methods)))
        for name, methods in self.generating_methods.items():
            if self.index.classes[name].node in self.index.module.body:
                out.setdefault(name, []).append((GENERATING_METHODS, " ".join(sorted(methods))))
        for name, detail in self.downloading_names().items():
            out.setdefault(name, []).append((DOWNLOADS, detail))
        for name, detail in self.tracker_starting_names().items():
            out.setdefault(name, []).append((STARTS_TRACKER, detail))
        for name, detail in self.print_replacing_names().items():
            out.setdefault(name, []).append((REPLACES_PRINT, detail))
        for name in self.sharding_sampler_functions():
            out.setdefault(name, []).append((RETURNS_SHARDING_SAMPLER, ""))
        if self.is_accelerate_file and self.index.classes:
            try:
                varying = self.rank_data.exported_attributes()
            except RecursionError:
                # (the rank walk recurses into expressions: a generated file with a very deep one
                # tells other modules nothing of its classes, rather than losing its own findings)
                varying = {}
            for name, attrs in varying.items():
                out.setdefault(name, []).append((RANK_VARYING_ATTRIBUTES, " ".join(sorted(attrs))))
        if self.index.identifiers & COLLECTIVE_WORDS:
            for name, fn in self.index.module_functions.items():
                # (the walk only for a function that runs such a collective itself: library
                # modules name `gather` and `reduce` everywhere)
                if any(self.is_uniform_result(call) or (self.index.imports.qualify_expr(call.func) or "") in IN_PLACE
                       for call in self.calls_in(fn.body)) and self.rank_data.returns_uniform(fn):
                    out.setdefault(name, []).append((RETURNS_UNIFORM, ""))
        for name, fn in self.index.module_functions.items():
            clip = helper_clip(self, fn)
            if clip is not None:
                out.setdefault(name, []).append((CLIPS_GRADIENTS, clip))
        for name, cls in self.index.classes.items():
            parameters = self.objects.class_iterated_parameters(cls) if cls.node in self.index.module.body else ()
            if parameters:
                out.setdefault(name, []).append((ITERATES_ARGUMENTS, composites.encode(parameters)))
        return out

    def download_call(self, call: cst.Call) -> str | None:
        """What ``call`` downloads into a folder, as written for a message: ``urlretrieve()``, or a
        torchvision dataset given ``download=True``; ``None`` for anything else."""
        qualified = self.index.imports.qualify_expr(call.func) or ""
        if qualified in _DOWNLOAD_CALLS:
            return qualified.rsplit(".", 1)[-1] + "()"
        if qualified.startswith("torchvision.datasets.") and any(
                a.keyword is not None and a.keyword.value == "download" and self.code(a.value) == "True"
                for a in call.args):
            return qualified + "(download=True)"
        return None

    def downloading_names(self) -> dict[str, str]:
        """Module-level functions and classes that download (``download_call``) whenever they are
        called: in their body (a class: its ``__init__``) or through the functions and classes of
        this module they call, each call under no condition of its function (a factory that picks
        a dataset by name downloads only for some names, which the caller's config decides):
        name -> ``"<what>|<line>"`` of the first."""
        if not {"download", "urlretrieve"} & self.index.identifiers:
            return {}
        return self._names_reaching(self.download_call)

    def tracker_starting_names(self) -> dict[str, str]:
        """Module-level functions and classes that start an experiment tracker's run (the library
        table's ``trackers`` with ``starts``) whenever they are called, as ``downloading_names``
        finds downloads: name -> ``"<the call>|<line>"``. From an Accelerate module, only the
        functions nothing in it calls (``prepare_tensorboard(path)`` of a utilities module that
        also unwraps models): its own calls of the others are reported where they are."""
        spelled = {part for name in self.library.tracker_starts for part in (name.split(".")[0], name.rsplit(".", 1)[-1])}
        if not spelled & self.index.identifiers:
            return {}  # no tracker named in the module: nothing to follow

        def starts(call: cst.Call) -> str | None:
            qualified = self.index.imports.qualify_expr(call.func) or ""
            return qualified if qualified in self.library.tracker_starts else None
        found = self._names_reaching(starts)
        if self.is_accelerate_file:
            found = {name: where for name, where in found.items()
                     if (fn := self.index.module_functions.get(name)) is not None and not self.index.call_sites(fn)}
        return found

    def print_replacing_names(self) -> dict[str, str]:
        """Module-level functions that rebind ``builtins.print`` in their body (torchvision's
        ``setup_for_distributed(is_master)``, which silences the other ranks): name ->
        ``"<the assignment>|<line>"``."""
        out = {}
        for name, fn in self.index.module_functions.items():
            for node in self.index.walk(fn):
                if type(node) is cst.AssignTarget and self._is_builtin_print(node.target):
                    out[name] = f"{self.code(node.target)}|{self.line_of(node)}"
                    break
        return out

    @cached_property
    def replaces_builtin_print(self) -> bool:
        """The file rebinds ``builtins.print``, or calls another module's function that does
        (``REPLACES_PRINT``): what ``print`` does on each rank is the program's own choice."""
        if any(type(node) is cst.AssignTarget and self._is_builtin_print(node.target) for node in self.index.parents):
            return True
        return any(self._imported_fact(call, REPLACES_PRINT) is not None for call in self.index.calls)

    @cached_property
    def _builtins_names(self) -> frozenset[str]:
        """The names the builtins module goes by in this file (``import builtins as __builtin__``)."""
        names = {"builtins", "__builtins__"}
        for node in self.index.parents:
            if type(node) is cst.ImportAlias and self.code(node.name) in ("builtins", "__builtin__"):
                names.add(node.asname.name.value if node.asname is not None and type(node.asname.name) is cst.Name
                          else self.code(node.name))
        return frozenset(names)

    def _is_builtin_print(self, target: cst.BaseExpression) -> bool:
        return type(target) is cst.Attribute and target.attr.value == "print" and type(target.value) is cst.Name \
            and target.value.value in self._builtins_names

    def imported_tracker_start(self, call: cst.Call) -> str | None:
        """``"<the call> on line <n> of its module"`` where ``call`` calls another module's
        function or class that starts a tracker's run (``STARTS_TRACKER``)."""
        found = self._imported_fact(call, STARTS_TRACKER)
        return f"{found[0]} on line {found[1]} of its module" if found is not None else None

    def _names_reaching(self, finds: Callable[[cst.Call], str | None]) -> dict[str, str]:
        """Module-level functions and classes (their ``__init__``) whose every run reaches a call
        ``finds`` names, in their body or through the functions and classes of this module they
        call, each call under no condition of its function and no rank guard: name ->
        ``"<what finds said>|<line>"`` of the first."""
        starts: dict[str, cst.FunctionDef] = dict(self.index.module_functions)
        for name, cls in self.index.classes.items():
            init = cls.methods.get("__init__")
            if init is not None and cls.node in self.index.module.body:
                starts.setdefault(name, init)
        found: dict[str, str] = {}
        for name, start in starts.items():
            seen, stack = {start}, [start]
            while stack and name not in found:
                function = stack.pop()
                if not self._runs_as_called(function):
                    continue  # `@on_main_process def __init__(...)`: which ranks run it is the decorator's
                for call in self.calls_in(function):
                    if not self._runs_whenever_its_function_does(call):
                        continue  # `if name == "cifar10": return Cifar(...)`: which one runs is the caller's
                    what = finds(call)
                    if what is not None and self.rank_guard_of(call) is None:
                        found[name] = f"{what}|{self.line_of(call)}"
                        break
                    callee = self.index.resolve_call(call) or self.index.constructor_of(call)
                    if callee is not None and callee not in seen:
                        seen.add(callee)
                        stack.append(callee)
        return found

    def _runs_as_called(self, function: cst.FunctionDef) -> bool:
        """Calling ``function`` runs its body: it has no decorator other than ``staticmethod``,
        ``classmethod`` or one of ``functools``/``torch`` (a decorator of unknown behaviour, such
        as accelerate's ``on_main_process``, may run it on some ranks only, or not at all)."""
        for decorator in function.decorators:
            expr = decorator.decorator.func if type(decorator.decorator) is cst.Call else decorator.decorator
            name = dotted_name(expr) or ""
            qualified = self.index.imports.qualify(name) or name
            if name not in ("staticmethod", "classmethod") and not qualified.startswith(("functools.", "torch.")):
                return False
        return True

    def _runs_whenever_its_function_does(self, node: cst.CSTNode) -> bool:
        """``node`` is under no ``if``, conditional expression, loop, ``try`` or ``with`` of its function."""
        for parent in self.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.Module)):
                return True
            if isinstance(parent, (cst.If, cst.IfExp, cst.For, cst.While, cst.Try, cst.With, cst.BooleanOperation)):
                return False
        return True

    def imported_download(self, call: cst.Call) -> tuple[str, int] | None:
        """(what, line in its module) where ``call`` calls another module's function or class that
        downloads (``DOWNLOADS``)."""
        return self._imported_fact(call, DOWNLOADS)

    def _imported_fact(self, call: cst.Call, wanted: str) -> tuple[str, int] | None:
        """(what, line in its module) of the ``"<what>|<line>"`` fact ``wanted`` that another
        module's summary gives the function or class ``call`` calls."""
        name = dotted_name(call.func)
        for kind, detail in self.external.get(name, ()) if name is not None else ():
            if kind == wanted:
                what, line = detail.rsplit("|", 1)
                return what, int(line)
        return None

    def writing_functions(self) -> dict[str, str]:
        """Module functions that write a file whenever they run, for the modules that call them
        (``def save_json(obj, path): with open(path, "w") ...``): the write is in the function's
        own body, under no ``if``, ``try`` or rank test, not tolerant of other ranks
        (``exist_ok=True``), and its path is a parameter or built only from one and constants
        (``os.path.join(out_dir, "preds.json")``), or a constant, never from a rank. name -> ``"<position of
        that parameter, or ->|<the write>|<its line>"``; the first such write of each function.
        Only from a module with no Accelerate in it: an Accelerate module's own writes are
        reported where they are."""
        return self._unconditional_writes(self.index.module_functions, bound=False)

    def ending_methods(self) -> dict[str, list[str]]:
        """Top-level classes of this module -> their methods whose last collective is
        ``end_training()`` (a trainer's ``train`` that ends the run): after a call of one, the
        process group is gone."""
        found: dict[str, list[str]] = {}
        if not self.index.identifiers & {"end_training", "destroy_process_group"}:
            return found  # (the ops of every method of a large library module cost seconds)
        for name, cls in self.index.classes.items():
            if cls.node not in self.index.module.body:
                continue
            for method, fn in sorted(cls.methods.items()):
                if self.ends_training(fn):
                    found.setdefault(name, []).append(method)
        return found

    def ends_training(self, fn: cst.FunctionDef) -> bool:
        """The last collective ``fn`` performs destroys the process group."""
        kinds = [kind for kind, _ in self.ops.exported_ops(fn) if kind not in NOT_OPS]
        return bool(kinds) and kinds[-1] == "END"

    @cached_property
    def _ending_method_names(self) -> frozenset[str]:
        """The names of the methods that end training, of this module's classes and of the
        classes other modules of the tree export."""
        names = {method for methods in self.ending_methods().values() for method in methods}
        names.update(method for facts in self.external.values() for kind, detail in facts
                     if kind == ENDING_METHODS for method in detail.split())
        return frozenset(names)

    def ending_method_called(self, call: cst.Call) -> bool:
        """``call`` is ``obj.method()`` where every call that may have made ``obj`` builds a class
        (of this module or, as its summary says, of another) whose ``method`` ends training."""
        if type(call.func) is not cst.Attribute or call.func.attr.value not in self._ending_method_names:
            return False  # (asked of every call of a file: the receiver's makers only for such names)
        return self._every_maker_has(call, self.ending_methods(), ENDING_METHODS)

    def _every_maker_has(self, call: cst.Call, local: dict, fact: str) -> bool:
        """``call`` is ``obj.method(...)`` and every class that may have made ``obj`` lists
        ``method`` among its methods of one sort: ``local`` (class -> methods, this module's) or
        the ``fact`` another module's summary says of the class."""
        if type(call.func) is not cst.Attribute:
            return False
        method = call.func.attr.value
        classes = self._classes_of(call.func.value)
        if not classes:
            return False
        for cls in classes:
            said = [detail.split() for kind, detail in self.external.get(cls, ()) if kind == fact]
            if method not in local.get(cls, ()) and not (said and method in said[0]):
                return False
        return True

    def writing_methods(self) -> dict[str, str]:
        """The same for the methods of this module's top-level classes that write whenever they
        run (``def save(self, out_dir): torch.save(..., os.path.join(out_dir, "model.pt"))``):
        class -> ``"<method>|<position of the path among the call's arguments, or ->|<the
        write>|<its line>"``, one line per method."""
        found: dict[str, list[str]] = {}
        for name, cls in self.index.classes.items():
            if cls.node not in self.index.module.body:
                continue
            for method, detail in self._unconditional_writes(cls.methods, bound=True).items():
                found.setdefault(name, []).append(f"{method}|{detail}")
        # one line per method: what a write is called may hold spaces (`open(..., 'w')`)
        return {name: "\n".join(details) for name, details in found.items()}

    def _unconditional_writes(self, functions: dict[str, cst.FunctionDef], bound: bool) -> dict[str, str]:
        """``writing_functions`` over ``functions`` (``bound``: methods, whose first parameter
        the call does not pass)."""
        out: dict[str, str] = {}
        if self.is_accelerate_file or not functions:
            return out
        for write in self.writes:
            call = write.call
            scope = self.scope_of(call)
            if type(scope) is not cst.FunctionDef or write.tolerant or write.what.endswith("()"):
                continue  # (a write that is itself another module's function: not followed twice)
            name = scope.name.value
            if name in out or functions.get(name) is not scope:
                continue
            if any(type(a) in (cst.If, cst.IfExp, cst.Try, cst.While, cst.Lambda)
                   for a in takewhile(lambda a: a is not scope, self.index.ancestors(call))):
                continue
            params = [p.name.value for p in self.index.functions[scope].params]
            if bound:
                if not params or scope.decorators:
                    continue  # (a static or class method, a property: not called as `obj.method(path)`)
                params = params[1:]
            position = "-"
            if write.path is not None:
                read = self._names_read(write.path)
                for local in read - set(params):
                    # `out = os.path.join(output_dir, "preds.json")`, bound once in the function
                    value = self._bound_once(scope, local)
                    if value is not None:
                        read = (read - {local}) | self._names_read(value)
                from_params = [p for p in params if p in read]
                others = read - set(params) - {"os", "Path", "str"}
                if not read and not isinstance(write.path, cst.Call):
                    pass  # a constant path (`open("graph_list.txt", "w")`): the same for every caller
                elif len(from_params) != 1 or others or self.reads_rank(write.path):
                    continue
                else:
                    position = str(params.index(from_params[0]))
            out[name] = f"{position}|{write.what}|{self.line_of(call)}"
        return out

    def _bound_once(self, scope: cst.CSTNode, name: str) -> cst.BaseExpression | None:
        """The value of the one plain assignment ``name = <value>`` in ``scope``, if there is
        exactly one."""
        bound = [n.value for n in self.index.walk(scope) if type(n) is cst.Assign and len(n.targets) == 1
                 and type(n.targets[0].target) is cst.Name and n.targets[0].target.value == name]
        return bound[0] if len(bound) == 1 else None

    def _names_read(self, expr: cst.BaseExpression) -> set[str]:
        """The plain names ``expr`` reads (``index.loads_in``: not attribute or keyword names)."""
        return {n.value for n in self.index.loads_in(expr) if type(n) is cst.Name}

    def predicate_constants(self) -> dict[str, str]:
        """Module-level names bound once to a rank predicate or a rank (``MASTER = RANK == 0``,
        ``RANK = int(os.environ["RANK"])``), and module functions that take no required
        argument and return one on every path (``def get_rank(): return dist.get_rank()``) ->
        ``"main"`` / ``"local_main"`` / ``"rank"`` / ``"local_rank"``, for the modules that import
        them."""
        sources = RANK_SOURCE_NAMES
        if not self.index.identifiers & sources:
            return {}

        def mentions(node: cst.CSTNode, names: set[str]) -> bool:
            return any(type(n) is cst.Name and n.value in names for n in self.index.walk(node))

        # only what mentions a rank source (or a constant that does) is evaluated: building the
        # rank model of a large module that merely reads `os.environ` elsewhere costs seconds
        reading = set(sources)
        bound: dict[str, list[cst.BaseExpression | None]] = {}
        for statement in self.index.module.body:
            if type(statement) is cst.SimpleStatementLine:
                for small in statement.body:
                    if type(small) is cst.Assign:
                        relevant = mentions(small.value, reading)
                        for target in small.targets:
                            for name in bound_names(target.target):
                                bound.setdefault(name, []).append(
                                    small.value if type(target.target) is cst.Name and relevant else None)
                                if relevant:
                                    reading.add(name)
        candidates = [fn for fn in self.index.module_functions.values() if mentions(fn.body, sources)]
        if not candidates and all(v is None for values in bound.values() for v in values):
            return {}
        out = {}
        for name, values in bound.items():
            if len(values) == 1 and values[0] is not None:  # rebound: which one an importer sees is unknown
                where = self._rank_role((values[0],))
                if where is not None:
                    out[name] = where
        for name, fn in self.index.module_functions.items():
            if fn not in candidates or any(p.default is None for p in fn.params.params) or fn.params.posonly_params:
                continue
            where = self._rank_role(tuple(self.objects.summaries[fn].return_exprs))
            if where is not None:
                out[name] = where
        return out

    def _rank_role(self, exprs: tuple) -> str | None:
        """What every expression of ``exprs`` is, the same on each rank class: a predicate true on
        the main process (``"main"``) or on each node's (``"local_main"``), or the global or local
        rank itself."""
        from .ranks import LOCAL_MAIN, MAIN, OTHER, OTHER_RANK
        roles = set()
        for expr in exprs:
            vector = tuple(self.ranks.evaluate(expr, c) for c in (MAIN, LOCAL_MAIN, OTHER_RANK))
            role = {(True, False, False): "main", (True, True, False): "local_main"}.get(vector)
            if role is None:
                raw = tuple(self.ranks.value_on(expr, c) for c in (MAIN, LOCAL_MAIN, OTHER_RANK))
                if raw[0] in (0, "0") and raw[2] is OTHER:
                    role = "rank" if raw[1] is OTHER else ("local_rank" if raw[1] in (0, "0") else None)
            roles.add(role)
        return roles.pop() if len(roles) == 1 and None not in roles else None

    @cached_property
    def forward_methods(self) -> dict[str, frozenset[str]]:
        """Class name -> the methods that run the module's own forward (``classes.forward_methods``)."""
        return forward_methods(self.index)

    def runs_forward(self, model_expr: cst.BaseExpression, method: str) -> bool:
        """``model_expr.<method>(...)`` runs the model's forward: ``forward``/``generate``, or a
        method that calls them on every class that made the object (this module's or another's)."""
        if method in FORWARD:
            return True
        value = self.value_at(model_expr)
        classes = [self._class_made_by(o) for o in value.origins()] if value is not None else []
        known = [self._forward_methods_of(c) for c in classes if c is not None]
        known = [k for k in known if k is not None]
        return bool(known) and all(method in k for k in known)

    @cached_property
    def generating_methods(self) -> dict[str, frozenset[str]]:
        """Class name -> its methods that return what the object's own ``generate()`` returned
        (``result = self.generate(...); return result``): generated sequences, as long as each
        rank's batch made them."""
        found: dict[str, frozenset[str]] = {}
        if "generate" not in self.index.identifiers:
            return found
        for name, cls in self.index.classes.items():
            methods = frozenset(method for method, fn in cls.methods.items()
                                if method != "generate" and self._returns_own_generate(fn))
            if methods:
                found[name] = methods
        return found

    def _returns_own_generate(self, fn: cst.FunctionDef) -> bool:
        exprs = self.objects.summaries[fn].return_exprs
        if not exprs:
            return False
        for expr in exprs:
            if type(expr) is cst.Name:
                expr = self._bound_once(fn, expr.value) or expr
            if not (type(expr) is cst.Call and type(expr.func) is cst.Attribute and expr.func.attr.value == "generate"
                    and type(expr.func.value) is cst.Name and expr.func.value.value == "self"):
                return False
        return True

    def generates(self, call: cst.Call) -> bool:
        """``call`` is ``obj.method(...)`` where every class that may have made ``obj`` has
        ``method`` return what its own ``generate()`` returned."""
        return self._every_maker_has(call, self.generating_methods, GENERATING_METHODS)

    def _classes_of(self, expr: cst.BaseExpression) -> set[str]:
        """The classes that may have made ``expr``'s object (through ``unwrap_model``, as
        ``_origins_of`` follows it); empty when one is unknown."""
        origins, _ = self._origins_of(expr)
        classes = set()
        for origin in origins:
            made = self._class_made_by(origin)
            if made is None:
                return set()
            classes.add(made)
        return classes

    def _through_self_returning(self, call: cst.Call) -> cst.BaseExpression:
        """The outermost call of a chain of methods that return the object itself on ``call``'s
        result (``KGPrompt(...).to(device).train()``), or ``call``."""
        parents = self.index.parents
        node: cst.BaseExpression = call
        while True:
            attribute = parents.get(node)
            outer = parents.get(attribute) if type(attribute) is cst.Attribute else None
            if not (isinstance(outer, cst.Call) and outer.func is attribute and attribute.attr.value in SELF_RETURNING):
                return node
            node = outer

    @staticmethod
    def _class_made_by(origin: cst.CSTNode) -> str | None:
        """The class a constructor call instantiates, through the module methods that return the
        object itself (``KGPrompt(...).to(device)``) and ``from_pretrained``."""
        while isinstance(origin, cst.Call) and type(origin.func) is cst.Attribute \
                and origin.func.attr.value in SELF_RETURNING and isinstance(origin.func.value, cst.Call):
            origin = origin.func.value
        if not isinstance(origin, cst.Call):
            return None
        name = dotted_name(origin.func)
        if name is None:
            return None
        return name[: -len(".from_pretrained")] if name.endswith(".from_pretrained") else name

    def _forward_methods_of(self, cls: str) -> frozenset[str] | None:
        if cls in self.forward_methods:
            return self.forward_methods[cls]
        detail = next((d for kind, d in self.external.get(cls, ()) if kind == FORWARD_METHODS), None)
        return frozenset(detail.split()) if detail is not None else None

    @cached_property
    def rank_split_classes(self) -> dict[str, str]:
        """Module-level classes whose instances keep only this rank's share of the data -> the
        rank test, as written (``classes.rank_split_tests``)."""
        return {name: shorten(self.code(test))
                for name, test in rank_split_tests(self.index, self.ranks.is_rank_dependent).items()}

    def splits_per_rank(self, call: cst.CSTNode) -> str | None:
        """The rank test of the class ``call`` instantiates, where that class (of this module or
        another of the tree) keeps only this rank's share of the data."""
        if not isinstance(call, cst.Call):
            return None
        name = dotted_name(call.func)
        if name is None:
            return None
        local = self.rank_split_classes.get(name)
        if local is not None:
            return local
        return next((detail for kind, detail in self.external.get(name, ()) if kind == SPLITS_PER_RANK), None)

    def _predicate_kind(self, fn: cst.FunctionDef) -> str | None:
        """``"main"`` / ``"local_main"`` when the function takes no required argument and
        returns a rank predicate (true on the main process / on each node's main process)."""
        if any(p.default is None for p in fn.params.params) or fn.params.posonly_params:
            return None
        exprs = self.objects.summaries[fn].return_exprs
        if len(exprs) != 1:
            return None
        role = self._rank_role(tuple(exprs))
        return role if role in ("main", "local_main") else None

    # keys of a prepared_arguments() entry that are not parameters: every call of the function
    # from this file, and the calls that run on every rank
    CALLED, UNGUARDED, GUARDED_BY, RUNS_IT = "@called", "@unguarded", "@guard", "@runs-it"
    # in ``incoming``: a caller in another module runs the function on every rank (its place)
    EVERY_RANK = "@every-rank"

    def prepared_arguments(self) -> list[tuple[int, str, str, dict[str, str]]]:
        """Calls to functions imported from other modules (``from m import f; f(...)`` or
        ``import m; m.f(...)``), as (relative level, module, name, {parameter position or
        keyword: kind of the prepared object passed there, or ``"accelerator"``}), plus :attr:`CALLED` and, when the
        call runs on every rank, :attr:`UNGUARDED`: whether every caller of a helper in another
        module guards it."""
        if not self.is_accelerate_file:
            return []
        imported = self._names_imported_from()
        modules = self._modules_imported()
        out = []
        for call in self.index.calls:
            if isinstance(call.func, cst.Name) and call.func.value in imported:
                where = imported[call.func.value]
            elif isinstance(call.func, cst.Attribute) and isinstance(call.func.value, cst.Name) \
                    and call.func.value.value in modules:
                where = (*modules[call.func.value.value], call.func.attr.value)
            else:
                continue
            passed = {self.CALLED: "yes"}
            guard = self.rank_guard_of(call)
            scope = self.index.scope_of(call)
            if guard is None and self.runs_on_every_rank(scope):
                passed[self.UNGUARDED] = "yes"
                if isinstance(scope, cst.Module) or self.index.functions[scope].class_name is None:
                    # where a script's code or function runs a helper on every rank (a library
                    # class's method, on every rank only by what it uses, does not say so)
                    passed[self.RUNS_IT] = str(self.line_of(call))
            elif guard is not None:  # where, for a finding in the helper that only its callers' guard explains
                passed[self.GUARDED_BY] = f"{self.line_of(guard.node)}|{shorten(self.code(guard.condition))}"
            for position, arg in enumerate(call.args):
                if arg.star:
                    break
                if self.is_accelerator(arg.value):
                    passed[arg.keyword.value if arg.keyword is not None else str(position)] = \
                        ONE_STEP_ACCELERATOR if self.never_accumulates(arg.value) else ACCELERATOR
                    continue
                if self.reads_rank(arg.value):
                    # a rank or a rank predicate (`process_index=self.state.process_index`): the
                    # helper's parameter holds it on every rank
                    role = self._rank_role((arg.value,))
                    if role is not None:
                        passed[arg.keyword.value if arg.keyword is not None else str(position)] = RANK_PASSED + role
                    continue
                kind = self.prepared_kind(arg.value)
                if kind == "model" and (self.wrapped_at(call, arg.value) == NO or self.value_at(arg.value).not_wrapped):
                    continue  # the bare module: passed in the `else` of `isinstance(m, DDP)`, or frozen before prepare
                if kind in ("model", "optimizer", "loader", "scheduler"):
                    passed[arg.keyword.value if arg.keyword is not None else str(position)] = kind
            out.append((*where, passed))
        return out

    def _argument_of_assigned_call(self, call: cst.Call) -> bool:
        arg = self.index.parents.get(call)
        outer = self.index.parents.get(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(outer, cst.Call) and isinstance(self.index.parents.get(outer), (cst.Assign, cst.AnnAssign))

    def project_imports(self) -> list[tuple[int, str, str, str, str]]:
        """``from [.]*module import name [as local]`` and ``import module`` + ``module.name(...)``
        anywhere in the file, as (relative level, module, name, local name, why), for the names
        this file calls under a rank guard (why: ``"guarded"``: what the imported function does
        can change a finding there) or assigns from (``"assigned"``: it may return an
        accelerator). Only files that import such functions are linted a second time."""
        analysed = self.is_accelerate_file or self.uses_torch_distributed
        imported, modules = self._names_imported_from(), self._modules_imported()
        star_imported = self._star_imported(imported, modules)
        from_stars = {name for _level, _module, name in star_imported}

        def from_another_module(name: str | None) -> bool:
            return name is not None and (name in imported or name in from_stars or name.rpartition(".")[0] in modules)

        # (a file whose accelerator comes from another module is not analysed yet: only what
        # it assigns from imported calls matters for it)
        guarded = {name for call in self.index.calls
                   if analysed and from_another_module(name := dotted_name(call.func)) and self.rank_guard_of(call) is not None}
        # an imported call in a condition (`if is_main_process():`): it may be a rank predicate
        tested = {name for call in self.index.calls
                  if analysed and from_another_module(name := dotted_name(call.func)) and not call.args
                  and self._in_condition(call)}
        # an imported constant or argument-free call anywhere (`if MASTER_PROCESS:`,
        # `f"out_{get_rank()}.json"`): it may be a rank predicate or a rank; only a module that
        # says so makes this file be linted again
        if analysed and self.index.identifiers & imported.keys():
            tested |= {node.value for node in self.index.parents if type(node) is cst.Name and node.value in imported
                       and not self.objects.is_binding(node)}
            tested |= {name for call in self.index.calls
                       if not call.args and from_another_module(name := dotted_name(call.func))}
        # whatever an imported function returns is bound by an assignment: an accelerator
        # factory matters wherever it is called; so does what an argument of an assigned call
        # makes (`loader = DataLoader(Clips(...))`: a dataset class that keeps one rank's rows)
        assigned = {dotted_name(call.func) for call in self.index.calls
                    if isinstance(self.index.parents.get(self._through_self_returning(call)), (cst.Assign, cst.AnnAssign))
                    or self._argument_of_assigned_call(call)}
        if not analysed:
            # not known to be an Accelerate program until another module says so (an
            # accelerator factory): which calls are guarded is only known in the second pass
            guarded = {dotted_name(call.func) for call in self.index.calls}
        # a model class of the tree loaded with `Model.from_pretrained(...)` (also `.to(device)` after it):
        # what its methods do matters where the model is used
        pretrained = {name.rpartition(".")[0] for call in self.index.calls
                      if (name := dotted_name(call.func)) is not None and name.endswith(".from_pretrained")}
        # a class whose alternative constructor is assigned from (`model = Reranker.load(path)`)
        pretrained |= {name.rpartition(".")[0] for name in assigned if name and "." in name}

        # any other imported call with arguments: it may write a file (`save_json(preds, out)`)
        called = {name for call in self.index.calls
                  if analysed and call.args and from_another_module(name := dotted_name(call.func))}

        # why each name matters: "guarded" (its collectives count at a guarded call), "tested"
        # (only read: it may be a rank predicate or a rank) or "assigned" (what it makes)
        def why(name: str) -> str:
            if name in guarded:
                return "guarded"
            if name in assigned or name in pretrained:
                return "assigned"
            return "called" if name in called else "tested"

        out = [(*where, local, why(local))
               for local, where in imported.items()
               if local in guarded or local in assigned or local in tested or local in pretrained or local in called]
        # `from utils import *`: a name called here that nothing in the file binds may come from
        # any star-imported module (each is asked; one that does not define it tells nothing)
        for level, module, name in star_imported:
            if name in guarded or name in assigned or name in tested or name in called:
                out.append((level, module, name, name, why(name)))
        for name in sorted(n for n in assigned | guarded | tested | called if n and "." in n):
            head, _, function = name.rpartition(".")
            if head in modules and "." not in function:
                out.append((*modules[head], function, name, why(name)))
        return out

    def _star_imported(self, imported: dict, modules: dict) -> list[tuple[int, str, str]]:
        """(relative level, module, name) for each name this file calls that nothing in it binds
        and no builtin is, once per ``from module import *`` of the file."""
        stars = [(len(node.relative), dotted_name(node.module) if node.module is not None else "")
                 for node in self.index.import_froms if isinstance(node.names, cst.ImportStar)]
        if not stars:
            return []
        called = {call.func.value for call in self.index.calls if type(call.func) is cst.Name}
        free = called - self.index.bindings.keys() - imported.keys() - modules.keys() - BUILTIN_NAMES
        return [(level, module, name) for level, module in stars for name in sorted(free)]

    def _in_condition(self, call: cst.Call) -> bool:
        """``call`` is (part of) the test of an ``if``, ``while`` or conditional expression."""
        child: cst.CSTNode = call
        for parent in self.index.ancestors(call):
            kind = type(parent)
            if kind in (cst.If, cst.While, cst.IfExp):
                return child is parent.test
            if kind not in (cst.BooleanOperation, cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget):
                return False
            child = parent
        return False

    def _modules_imported(self) -> dict[str, tuple[int, str]]:
        """local name -> (relative level, module) for ``import module [as local]`` (``import
        train_util``) and ``from package import module`` (``from .utils import train_utils``:
        a name imported from a package may be one of its modules; where it is not, no file of
        that name exists and nothing is found)."""
        found: dict[str, tuple[int, str]] = {}
        for node in self.index.walk(self.module):
            if isinstance(node, cst.Import):
                for alias in node.names:
                    module = dotted_name(alias.name) or ""
                    if alias.asname is not None and isinstance(alias.asname.name, cst.Name):
                        found[alias.asname.name.value] = (0, module)
                    elif "." not in module:
                        found[module] = (0, module)
        for local, (level, module, name) in self._names_imported_from().items():
            found.setdefault(local, (level, f"{module}.{name}" if module else name))
        return found

    def _names_imported_from(self) -> dict[str, tuple[int, str, str]]:
        """local name -> (relative level, module, name) for every ``from ... import name [as local]``."""
        imported = {}
        for node in self.index.import_froms:
            if isinstance(node.names, cst.ImportStar):
                continue
            module = dotted_name(node.module) if node.module is not None else ""
            for alias in node.names:
                name = dotted_name(alias.name) or ""
                asname = alias.asname.name if alias.asname is not None else None
                imported[asname.value if isinstance(asname, cst.Name) else name] = (len(node.relative), module or "", name)
        return imported

    @property
    def divergences(self) -> list[Divergence]:
        """Ops that some rank classes execute and others do not (per function, with guards)."""
        return self.ops.divergences

    # -- wrapped-ness refined per branch ----------------------------------------------------------
    # backends under which `prepare` returns the model itself: no wrapper class
    _UNWRAPPED_BACKENDS = frozenset({"XLA", "TPU", "NO"})
    _WRAPPER_CLASSES = frozenset({"DistributedDataParallel", "DDP", "FullyShardedDataParallel", "FSDP",
                                  "DeepSpeedEngine", "DataParallel"})

    def wrapped_at(self, node: cst.CSTNode, model_expr: cst.BaseExpression) -> str:
        """Whether the prepared model ``model_expr`` is a wrapper object where ``node`` runs:
        ``NO`` inside a branch that only runs without one (``else`` of ``hasattr(m, "module")``
        or of ``isinstance(m, DistributedDataParallel)``, the body of ``isinstance(m,
        ModelClass)``; ``distributed_type == XLA``/``NO``; ``num_processes == 1``), ``YES`` inside
        the branch that tests for the wrapper or the ``else`` of ``isinstance(m, ModelClass)``, else
        ``MAYBE`` (it depends on the backend)."""
        name = dotted_name(model_expr)
        if self.single_process_at(node):
            return NO
        child = node
        for parent in self.index.ancestors(node):
            if type(parent) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                break
            if type(parent) in (cst.If, cst.IfExp) and child is not parent.test:
                in_body = child is parent.body
                # `a and b` is true in the body only where both are; `a or b` false in the else
                # only where both are: each part then says what it says alone
                test = parent.test
                joined = cst.And if in_body else cst.Or
                parts = [test.left, test.right] if type(test) is cst.BooleanOperation and type(test.operator) is joined else [test]
                for part in parts:
                    if self._isinstance_of_model_class(part, name):
                        if in_body:
                            return NO  # a wrapper is no instance of the model's own class
                        # not an instance of the model's class: the script asserts the wrapper
                        # (`if isinstance(unet, UNet3DConditionModel): ... else: unet.module`)
                        return YES
                    verdict = self._wrapper_test(part, name)
                    if verdict is not None:
                        holds = verdict if in_body else (not verdict)
                        return YES if holds else NO
            child = parent
        return MAYBE

    # classes a wrapper is also an instance of: `isinstance(m, nn.Module)` says nothing
    _WRAPPER_BASES = frozenset({"Module", "object", "torch.nn.Module", "nn.Module"})

    def _isinstance_of_model_class(self, test: cst.BaseExpression, name: str | None) -> bool:
        """``isinstance(<name>, SomeModelClass)`` with no wrapper class or wrapper base among the
        classes: where it is true, the object is the bare module (DDP, FSDP1 and DeepSpeed's
        wrappers are instances of none of the model's classes); where it is false nothing follows."""
        if name is None or type(test) is not cst.Call or type(test.func) is not cst.Name \
                or test.func.value != "isinstance" or len(test.args) != 2 or dotted_name(test.args[0].value) != name:
            return False
        classes = test.args[1].value
        names = [dotted_name(e.value) for e in classes.elements] if type(classes) is cst.Tuple else [dotted_name(classes)]
        return all(n is not None and n not in self._WRAPPER_BASES and n.rsplit(".", 1)[-1] not in self._WRAPPER_CLASSES
                   and n.rsplit(".", 1)[-1] != "Module" for n in names)

    def compiled_at(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs only where the script's own compile flag holds (``m._orig_mod
        if args.torch_compile else m``): the user asserts the model is compiled there."""
        child = node
        for parent in self.index.ancestors(node):
            if type(parent) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False
            if type(parent) in (cst.If, cst.IfExp) and child is not parent.test:
                test, positive = parent.test, child is parent.body
                if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
                    test, positive = test.expression, not positive
                flag = last_attr(test) if type(test) in (cst.Name, cst.Attribute) else None
                if positive and flag is not None and "compile" in flag.lower():
                    return True
            child = parent
        return False

    def prepared_backend(self, value: Value) -> str | None:
        """The backend the accelerator that prepared ``value`` is built for, when its
        constructor says so: ``"fsdp1"`` (``fsdp_plugin=`` without ``fsdp_version=2``),
        ``"fsdp2"``, ``"deepspeed"`` (``deepspeed_plugin=``), or when the function that prepares
        it reads its DeepSpeed plugin on every path (``"deepspeed"``); ``None`` when nothing names
        one (the launch config decides) or is unknown."""
        call = value.prepared_at
        if not isinstance(call, cst.Call) or not isinstance(call.func, cst.Attribute):
            return None
        if self._reads_deepspeed_plugin_before(call):
            return "deepspeed"
        accelerator = self.value_at(call.func.value)
        constructor = accelerator.origin if accelerator is not None else None
        if not (isinstance(constructor, cst.Call) and self.objects.is_acc_constructor(constructor)):
            return None
        for arg in constructor.args:
            if arg.keyword is None:
                continue
            if arg.keyword.value == "deepspeed_plugin":
                return "deepspeed"
            if arg.keyword.value == "fsdp_plugin":
                # the plugin object: built right there, or the one constructor a variable holds
                # (a variable that may be None on some path says nothing)
                plugin = arg.value
                if not isinstance(plugin, cst.Call):
                    plugin_value = self.value_at(plugin)
                    origins = plugin_value.origins() if plugin_value is not None else frozenset()
                    plugin = next(iter(origins)) if len(origins) == 1 else None
                if not isinstance(plugin, cst.Call):
                    return None
                version = next((self.code(a.value) for a in plugin.args
                                if a.keyword is not None and a.keyword.value == "fsdp_version"), "1")
                return {"1": "fsdp1", "2": "fsdp2"}.get(version)
        return None

    def never_runs(self, node: cst.CSTNode) -> bool:
        """``node`` is in an arm of an ``if`` or conditional expression that no launch takes
        (``index.dead_arms``): no rule reports there."""
        dead = self.index.dead_arms
        if not dead:
            return False
        return any(ancestor in dead for ancestor in self.index.ancestors(node))

    def single_process_at(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` only runs when the job has one process: inside a branch taken only
        then (``num_processes == 1``, ``distributed_type == DistributedType.NO``, ``not
        torch.distributed.is_initialized()``, ``torch.backends.mps.is_available()``: Accelerate
        runs one process on Apple silicon), or its ``else`` (``num_processes > 1``)."""
        return self._in_arm_where(node, self._single_process_test) or self.without_accelerator_at(node) \
            or self._several_refused_before(node)

    def _several_refused_before(self, node: cst.CSTNode) -> bool:
        """Whether the program stops, before ``node`` in its own scope, unless it runs as one
        process: ``assert accelerator.num_processes == 1``, ``assert torch.cuda.device_count()
        == 1`` (a launch on several GPUs sees them all in every process), or ``if world_size >
        1: raise ...``."""
        scope = self.index.scope_of(node)
        refused = self._refusals.get(scope, -1)
        if refused == -1:
            refused = self._refusals[scope] = self._first_refusal(scope)
        if refused is None:
            return False
        positions = self._statement_positions.get(scope)
        if positions is None:
            positions = self._statement_positions[scope] = {id(stmt): i for i, stmt in enumerate(self.index.body_of(scope))}
        top = next((positions[id(a)] for a in [node, *self.index.ancestors(node)] if id(a) in positions), None)
        return top is not None and refused < top

    def _first_refusal(self, scope) -> int | None:
        """The position in ``scope``'s body of the first statement that stops the program unless
        it runs as one process (see ``_several_refused_before``), or ``None``."""
        for i, stmt in enumerate(self.index.body_of(scope)):
            if type(stmt) is cst.SimpleStatementLine:
                for small in stmt.body:
                    if type(small) is cst.Assert and (self._single_process_test(small.test) is True
                                                      or self._several_gpus_test(small.test) is False):
                        return i
            elif type(stmt) is cst.If and stmt.orelse is None and _always_exits(stmt.body.body) \
                    and (self._single_process_test(stmt.test) is False or self._several_gpus_test(stmt.test) is True):
                return i
        return None

    def rank_undecided_at(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` sits, in its own function, in an arm of an ``if`` (or conditional
        expression) whose test compares a value the model knows nothing about with the first
        process's index (``if args.rank == 0:`` with ``args.rank`` from a package the linter
        cannot read): it may be the program's own rank guard, so whether every rank runs
        ``node`` is unknown (see :mod:`.undecided`)."""
        return self._in_arm_where(node, lambda test: _EITHER_ARM if undecided_rank_test(self, test) else None)

    def _reads_deepspeed_plugin_before(self, node: cst.CSTNode) -> bool:
        """A statement of ``node``'s function, before it and under no ``if``, ``try`` or loop,
        reads an attribute or item of the accelerator's DeepSpeed plugin
        (``accelerator.state.deepspeed_plugin.deepspeed_config[...] = ...``): on any other backend
        the plugin is ``None`` and that statement raises, so past it the program runs under
        DeepSpeed."""
        known = self._deepspeed_read_before.get(node)
        if known is None:
            known = self._deepspeed_read_before[node] = self._scan_deepspeed_plugin_reads(node)
        return known

    def _scan_deepspeed_plugin_reads(self, node: cst.CSTNode) -> bool:
        scope = self.scope_of(node)
        line = self.line_of(node)
        for statement in self.index.body_of(scope):
            if self.line_of(statement) >= line:
                return False
            if type(statement) is not cst.SimpleStatementLine:
                continue
            for inner in self.index.walk(statement):
                if type(inner) in (cst.Attribute, cst.Subscript) and type(inner.value) is cst.Attribute \
                        and inner.value.attr.value == "deepspeed_plugin" and not any(
                            type(a) in (cst.BooleanOperation, cst.IfExp, cst.Lambda, cst.ListComp, cst.SetComp,
                                        cst.DictComp, cst.GeneratorExp)
                            for a in takewhile(lambda a: a is not statement, self.ancestors(inner))):
                    # (`plugin is not None and plugin.deepspeed_config`: read only where it exists)
                    owner = inner.value.value
                    if type(owner) is cst.Attribute and owner.attr.value == "state":
                        owner = owner.value
                    if self.is_accelerator(owner):
                        return True
        return False

    def before_any_accelerator(self, node: cst.CSTNode) -> bool:
        """``node`` runs, in its function (or the module's code), before any accelerator exists
        there: the function makes its own later (``if args.debug: ...plain loop...; return``
        then ``accelerator = Accelerator()``), and nothing before ``node`` holds one (no
        parameter, attribute or global read as an accelerator). Nothing is prepared yet there."""
        scope = self.scope_of(node)
        made_here = [call for call in self.index.calls if self.scope_of(call) is scope
                     and self.objects.is_acc_constructor(call)]
        if not made_here:
            return False
        order = self.index.call_order
        if type(node) is cst.Call and node in order:
            # (source order of calls: no line positions, which a deeply nested file cannot give
            # without walking the whole module)
            if any(order[call] <= order[node] for call in made_here):
                return False
        elif any(self.line_of(call) <= self.line_of(node) for call in made_here):
            return False
        line = self.line_of(node)
        if isinstance(scope, cst.FunctionDef) and any(
                self.objects.values.get(p.name) is not None and self.objects.values[p.name].is_acc
                for p in self.index.functions[scope].params):
            return False
        return not any(value.is_acc and self.scope_of(expr) is scope and self.line_of(expr) < line
                       for expr, value in self.objects.values.items() if isinstance(expr, cst.BaseExpression))

    def without_accelerator_at(self, node: cst.CSTNode) -> bool:
        """Whether ``node`` runs only where an accelerator the code is handed is absent: in the
        branch of ``if acc is None:`` / ``if not acc:`` (or the ``else`` of ``if acc:``)."""
        return self._in_arm_where(node, self._without_accelerator)

    def _in_arm_where(self, node: cst.CSTNode, verdict) -> bool:
        """Whether ``node`` sits, in its own function, in the arm of an ``if`` (or conditional
        expression) that ``verdict`` picks: ``verdict(test)`` says what the test being true means
        (True, False, or None for nothing), and the body is that arm when it is True, the ``else``
        when it is False; ``_EITHER_ARM`` picks both."""
        child = node
        for parent in self.index.ancestors(node):
            if type(parent) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                return False
            if type(parent) in (cst.If, cst.IfExp) and child is not parent.test:
                said = verdict(parent.test)
                if said is _EITHER_ARM or said is not None and said == (child is parent.body):
                    return True
            child = parent
        return False

    def _without_accelerator(self, test: cst.BaseExpression) -> bool | None:
        """``True`` where ``test`` holds only when an accelerator the code is handed is absent
        (``acc is None``, ``not acc``), ``False`` where it holds only when it is there (``acc is
        not None``, ``acc``): the code without one runs outside Accelerate, as one process."""
        negated = False
        while type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            negated, test = not negated, test.expression
        subject, absent = test, False
        if type(test) is cst.Comparison:
            compared = none_comparison(test)
            if compared is None:
                return None
            subject, absent = compared
        elif type(test) not in (cst.Name, cst.Attribute):
            return None
        if type(subject) not in (cst.Name, cst.Attribute):
            return None
        if not self.is_accelerator(subject):
            if subject is test and self._gates_every_accelerator(subject):
                return negated  # `if self.use_accelerator:` true only where one was built
            return None
        return absent != negated

    def _gates_every_accelerator(self, flag: cst.Name | cst.Attribute) -> bool:
        """``flag`` is a flag the file binds once (``self.use_accelerator = args.use_accelerator``)
        and every ``Accelerator(...)`` of the file is built only where it is true: in the body
        of ``if flag:`` (or ``if flag and ...:``), or in a method every call of which is there
        (``if self.use_accelerator: self.setup_accelerator()``). Where it is false, no
        accelerator exists: that code runs outside Accelerate."""
        key = self.code(flag)
        known = self._accelerator_flags.get(key)
        if known is None:
            constructors = self.objects.acc_constructors
            known = self._accelerator_flags[key] = bool(constructors) and self._flag_bound_once(flag) and all(
                self._under_flag(c, key) or self._only_called_under_flag(c, key) for c in constructors)
        return known

    def _flag_bound_once(self, flag: cst.Name | cst.Attribute) -> bool:
        if type(flag) is cst.Name:
            return len(self.index.bindings.get(flag.value, ())) == 1
        owner = self.index.class_of(self.scope_of(flag))
        if type(flag.value) is not cst.Name or flag.value.value != "self" or owner is None:
            return False
        return len(self.index.self_attribute_values.get((owner.name, flag.attr.value), ())) == 1

    def _under_flag(self, node: cst.CSTNode, key: str) -> bool:
        """``node`` sits, in its function, where the flag whose source is ``key`` is true: in the
        arm of an ``if`` (or conditional expression) whose test is the flag or an ``and`` of it."""
        def holds(test: cst.BaseExpression) -> bool | None:
            conjuncts = []
            while type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
                conjuncts.append(test.right)
                test = test.left
            return True if any(self.code(c) == key for c in (test, *conjuncts)) else None

        return self._in_arm_where(node, holds)

    def _only_called_under_flag(self, node: cst.CSTNode, key: str) -> bool:
        scope = self.scope_of(node)
        if type(scope) is not cst.FunctionDef:
            return False
        sites = self.index.call_sites(scope)
        return bool(sites) and all(self._under_flag(site, key) for site in sites)

    def _flag_origin(self, test: cst.BaseExpression) -> cst.BaseExpression | None:
        """The test a flag was assigned from (``is_ddp = isinstance(model, DDP)``; ``if is_ddp:``),
        when it holds exactly one."""
        if type(test) not in (cst.Name, cst.Attribute):
            return None
        value = self.value_at(test)
        origins = value.origins() if value is not None else frozenset()
        origin = next(iter(origins)) if len(origins) == 1 else None
        if isinstance(origin, (cst.Call, cst.Comparison, cst.UnaryOperation, cst.BooleanOperation)):
            return origin
        return None

    def _single_process_test(self, test: cst.BaseExpression, depth: int = 0) -> bool | None:
        """What ``test`` being true says about the job: True (one process), False (several),
        None (nothing)."""
        origin = self._flag_origin(test) if depth < 3 else None
        if origin is not None:
            return self._single_process_test(origin, depth + 1)
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self._single_process_test(test.expression)
            return None if inner is None else not inner
        if type(test) is cst.BooleanOperation and type(test.operator) is cst.And:
            # `a and b` true: both hold; it says "one process" when either side does
            if self._single_process_test(test.left) is True or self._single_process_test(test.right) is True:
                return True
            return None
        if type(test) is cst.Call:
            qualified = self.index.imports.qualify_expr(test.func) or dotted_name(test.func) or ""
            if qualified.endswith("backends.mps.is_available"):
                return True
            if qualified.endswith("distributed.is_initialized"):
                return False
            return None
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            left, target = test.left, test.comparisons[0]
            operator, comparator = type(target.operator), target.comparator
            size = last_attr(left) if type(left) in (cst.Name, cst.Attribute) else \
                (last_attr(left.func) if type(left) is cst.Call else None)
            if size in ("num_processes", "world_size", "get_world_size"):
                at_most_one = _at_most_one(target)
                if at_most_one is not None:
                    return at_most_one
            if size == "distributed_type":
                backend = comparator.evaluated_value if type(comparator) is cst.SimpleString else last_attr(comparator)
                if backend == "NO":
                    return {cst.Equal: True, cst.Is: True}.get(operator)
            # transformers' TrainingArguments.parallel_mode: "distributed" where a launcher
            # started several processes (`args.parallel_mode.value != "distributed"`)
            mode = left.value if type(left) is cst.Attribute and left.attr.value == "value" else left
            if type(mode) is cst.Attribute and mode.attr.value == "parallel_mode":
                wanted = comparator.evaluated_value if type(comparator) is cst.SimpleString else last_attr(comparator)
                if wanted in ("distributed", "DISTRIBUTED"):
                    return {cst.Equal: False, cst.Is: False, cst.NotEqual: True, cst.IsNot: True}.get(operator)
        return None

    def _several_gpus_test(self, test: cst.BaseExpression) -> bool | None:
        """``torch.cuda.device_count() > 1`` (True), ``... <= 1`` / ``== 1`` (False); else None."""
        if type(test) is not cst.Comparison or len(test.comparisons) != 1 or type(test.left) is not cst.Call:
            return None
        if (self.index.imports.qualify_expr(test.left.func) or "") != "torch.cuda.device_count":
            return None
        at_most_one = _at_most_one(test.comparisons[0])
        return None if at_most_one is None else not at_most_one

    def _wrapper_test(self, test: cst.BaseExpression, name: str | None, depth: int = 0) -> bool | None:
        """What ``test`` being true says about the model being wrapped: True (wrapped), False
        (not wrapped), None (nothing). A flag assigned from such a test says the same."""
        origin = self._flag_origin(test) if depth < 3 else None
        if origin is not None:
            return self._wrapper_test(origin, name, depth + 1)
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            inner = self._wrapper_test(test.expression, name, depth)
            return None if inner is None else not inner
        single = self._single_process_test(test)
        if single is not None:
            # one process: prepare returns the model itself; several: it wrapped it
            return not single
        several_gpus = self._several_gpus_test(test)
        if several_gpus is not None:
            # the script's own proxy for "wrapped": a launch on a machine of several GPUs starts
            # one process per GPU; on one GPU (or none) it starts one
            return several_gpus
        if type(test) is cst.Call and type(test.func) is cst.Name and len(test.args) == 2 and name is not None:
            subject = dotted_name(test.args[0].value)
            if subject != name:
                return None
            if test.func.value == "hasattr" and type(test.args[1].value) is cst.SimpleString \
                    and test.args[1].value.evaluated_value in ("module", "_orig_mod"):
                return True
            if test.func.value == "isinstance":
                classes = test.args[1].value
                names = [dotted_name(e.value) for e in classes.elements] if type(classes) is cst.Tuple else [dotted_name(classes)]
                if any(n and n.rsplit(".", 1)[-1] in self._WRAPPER_CLASSES for n in names):
                    return True
            return None
        if type(test) is cst.Comparison and len(test.comparisons) == 1 and name is not None:
            # `type(m).__name__ == "DeepSpeedEngine"` (or `m.__class__.__name__`): the wrapper's class
            left, target = test.left, test.comparisons[0]
            subject = None
            if type(left) is cst.Attribute and left.attr.value == "__name__":
                inner = left.value
                if type(inner) is cst.Call and dotted_name(inner.func) == "type" and len(inner.args) == 1:
                    subject = dotted_name(inner.args[0].value)
                elif type(inner) is cst.Attribute and inner.attr.value == "__class__":
                    subject = dotted_name(inner.value)
            if subject == name and type(target.comparator) is cst.SimpleString \
                    and target.comparator.evaluated_value in self._WRAPPER_CLASSES:
                if type(target.operator) is cst.Equal:
                    return True
                if type(target.operator) is cst.NotEqual:
                    return False
        if type(test) is cst.Comparison and len(test.comparisons) == 1:
            left, target = test.left, test.comparisons[0]
            operator = type(target.operator)
            if type(left) is cst.Attribute and self.is_accelerator(left.value) or \
                    (type(left) is cst.Attribute and left.attr.value in ("distributed_type", "num_processes")
                     and type(left.value) is cst.Attribute and left.value.attr.value == "state"):
                attr = left.attr.value
                if attr == "distributed_type" and operator in (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot):
                    comparator = target.comparator
                    backend = comparator.evaluated_value if type(comparator) is cst.SimpleString \
                        else (last_attr(comparator) or "")
                    positive = operator in (cst.Equal, cst.Is)
                    if backend in self._UNWRAPPED_BACKENDS:
                        return False if positive else None
                    if backend.startswith("MULTI_") or backend == "DEEPSPEED":  # DDP, or DeepSpeed's engine
                        return True if positive else None
                if attr == "num_processes" and type(target.comparator) is cst.Integer and target.comparator.value == "1":
                    if operator is cst.Equal:
                        return False
        return None

    # Results that are the same on every rank: what a collective returns, and the gradient norm
    # `clip_grad_norm_` computes from gradients DDP/FSDP/DeepSpeed have already all-reduced.
    _UNIFORM_KINDS = frozenset({"ALLGATHER", "ALLGATHER_OBJ", "ALLREDUCE", "BROADCAST", "BROADCAST_OBJ"})

    def is_uniform_result(self, call: cst.CSTNode) -> bool:
        """``call`` returns the same value on every rank: a gather, reduce or broadcast, or an
        accelerator's ``clip_grad_norm_`` (the norm of already synchronized gradients)."""
        if type(call) is not cst.Call:
            return False
        if self.op_kind(call) in self._UNIFORM_KINDS:
            return True
        func = call.func
        name = dotted_name(func)
        if name is not None and any(kind == RETURNS_UNIFORM for kind, _ in self.external.get(name, ())):
            return True  # a helper of another module that returns what an all_gather put in place
        return type(func) is cst.Attribute and func.attr.value == "clip_grad_norm_" and self.is_accelerator(func.value)

    # -- evidence: the facts a finding rests on --------------------------------------------------
    def value_evidence(self, expr: cst.BaseExpression) -> list[tuple[cst.CSTNode, str]]:
        """Where the object ``expr`` holds was made and what kind that makes it, and which
        ``prepare`` returned it: (node, fact) pairs for a finding's evidence."""
        value = self.value_at(expr)
        if value is None:
            return []
        out: list[tuple[cst.CSTNode, str]] = []
        use = None
        if value.kind == "model" and value.prepared_at is not None:
            argument = value.prepared_at.args[0].value if value.prepared_at.args else expr
            use = self.objects.module_evidence(argument, self.scope_of(value.prepared_at))
        elif value.prepared_unknown_kind:
            use = self.objects.module_evidence(expr, self.scope_of(expr))  # what tells it is a module
        # the kind is stated on the fact that decided it: how the object was made, or its use
        what = "" if use is not None or not value.kind else f": a {value.kind}"
        for origin in sorted(value.origins(), key=lambda n: self.line_of(n))[:3]:
            made = origin.name.value if isinstance(origin, cst.Param) else self.code(origin)
            how = "passed in as" if isinstance(origin, cst.Param) else "made by"
            fact = f"{how} `{shorten(made)}`{what}"
            if isinstance(origin, cst.Call) and self.code(origin.func) in self.objects.returned_kinds:
                fact += " (what that function or class of another module of the tree makes)"
            out.append((origin, fact))
        if use is not None:
            out.append((use, f"used as a module (`{shorten(self.code(use))}`): a model"))
        if value.prepared_at is not None:
            wrapped = "not wrapped" if value.not_wrapped else "was given it" if value.prepared_unknown_kind \
                else "returned wrapped"
            out.append((value.prepared_at, f"`{shorten(self.code(value.prepared_at.func))}(...)` {wrapped} here"))
        return out

    def is_accelerator_device(self, expr: cst.BaseExpression, _depth: int = 0) -> bool:
        """``expr`` is the accelerator's device: ``accelerator.device``, a same-class property
        that returns it (``self.device``), or a name every assignment of its scope binds to one."""
        if isinstance(expr, cst.Attribute) and expr.attr.value == "device" and self.is_accelerator(expr.value):
            return True
        getter = self.index.resolve_property(expr)
        if getter is not None:
            returns = [n for n in self.index.walk(getter.body) if isinstance(n, cst.Return)]
            return bool(returns) and all(r.value is not None and self.is_accelerator_device(r.value) for r in returns)
        if isinstance(expr, cst.Name):
            scope = self.scope_of(expr)
            bound = self._assigned_names(scope, expr.value)
            if not bound and isinstance(scope, cst.FunctionDef) and _depth < 4:
                if expr.value in {p.name.value for p in self.index.functions[scope].params}:
                    return self._passed_accelerator_device(scope, expr.value, _depth)
                # a module global (`device = accelerator.device` under `if __name__ == ...`)
                bound = self._assigned_names(self.index.module, expr.value)
            return bool(bound) and all(
                isinstance(assign := self.index.parents.get(self.index.parents.get(target)), cst.Assign)
                and len(assign.targets) == 1 and self.is_accelerator_device(assign.value, _depth) for target in bound)
        return False

    def _assigned_names(self, scope: ScopeNode, name: str) -> list[cst.Name]:
        """The ``name = ...`` targets of ``scope`` itself (not of its nested functions)."""
        return [t.target for t in self.index.walk(scope.body if isinstance(scope, cst.FunctionDef) else scope)
                if isinstance(t, cst.AssignTarget) and isinstance(t.target, cst.Name)
                and t.target.value == name and self.scope_of(t) is scope]

    def _passed_accelerator_device(self, fn: cst.FunctionDef, name: str, depth: int) -> bool:
        """A parameter the function never rebinds, given the accelerator's device at every call
        of this file (``scale(blocks, device=accelerator.device)``); no call site: unknown."""
        if name not in {p.name.value for p in self.index.functions[fn].params}:
            return False
        sites = self.ops.call_sites(fn)
        given = []
        for site in sites:
            passed = [arg.value for pname, arg in arguments_by_parameter(site, fn, isinstance(site.func, cst.Attribute))
                      if pname == name]
            if len(passed) != 1:
                return False  # a call that leaves the default (or passes it through *args)
            given.append(passed[0])
        return bool(given) and all(self.is_accelerator_device(g, depth + 1) for g in given)

    def manual_wrapper(self, call: cst.CSTNode) -> str | None:
        """The distributed wrapper a call builds by hand (``DistributedDataParallel(model)``,
        ``deepspeed.initialize``), by its short name; ``None`` for anything else."""
        if not isinstance(call, cst.Call):
            return None
        row = self.library.manual_wrappers.get(self.index.imports.qualify_expr(call.func) or "")
        return row[0] if row else None

    def bare_model_consumer(self, call: cst.Call) -> str | None:
        """The library class (qualified) that ``call`` builds and that takes model components as
        its library's own classes (``StableDiffusionPipeline(...)``,
        ``DiffusionPipeline.from_pretrained(..., unet=...)``), from the table's
        ``bare-model-consumers``; ``None`` for anything else."""
        func = call.func
        qualified = self.index.imports.qualify_expr(func) or ""
        package, _, _ = qualified.partition(".")
        row = self.library.bare_model_consumers.get(package)
        if row is None:
            return None
        suffixes, methods = row
        cls = qualified
        if isinstance(func, cst.Attribute) and func.attr.value in methods:
            cls = qualified.rpartition(".")[0]
        return cls if cls.rpartition(".")[2].endswith(suffixes) else None

    def always_wrapped(self, value: Value) -> bool:
        """Every object ``value`` may hold was wrapped by hand in a wrapper with ``.module``
        before ``prepare`` saw it: it has the wrapper's attributes on every launch."""
        def has_module(origin: cst.CSTNode) -> bool:
            row = self.library.manual_wrappers.get(self.index.imports.qualify_expr(origin.func) or "") \
                if isinstance(origin, cst.Call) else None
            return bool(row and row[1])
        origins = value.origins()
        return bool(origins) and all(has_module(o) for o in origins)

    def launch_evidence(self, scope: ScopeNode) -> list[tuple[cst.CSTNode, str]]:
        """The accelerator construction that makes ``scope`` run on every rank of a launch (the
        scope's own, else the file's first)."""
        constructors = self.objects.acc_constructors
        ctor = next((c for c in constructors if self.scope_of(c) is scope), constructors[0] if constructors else None)
        if ctor is None:
            return []
        return [(ctor, f"made by `{shorten(self.code(ctor))}`: this code runs on every rank of a launch")]

    def prepare_receiving(self, expr: cst.BaseExpression) -> cst.Call | None:
        """The ``prepare`` call that receives the object ``expr`` holds (the same creation
        expression, or the same variable of the same scope when it is built on several paths)."""
        value = self.objects.values.get(expr)
        origins = value.origins() if value is not None else frozenset()
        name, scope = dotted_name(expr), self.scope_of(expr)
        for prepare in self.objects.prepare_calls:
            for arg in prepare.args:
                held = self.objects.values.get(arg.value)
                if origins and held is not None and origins & held.origins():
                    return prepare
                if name is not None and dotted_name(arg.value) == name and self.scope_of(prepare) is scope:
                    return prepare
        return None

    def is_pre_prepare_length(self, length: cst.Call) -> bool:
        """``length`` is ``len(loader)`` of a loader that ``prepare`` shards only later."""
        return self.loader_lengths.is_pre_prepare_len(length)

    def length_evidence(self, length: cst.Call) -> list[tuple[cst.CSTNode, str]]:
        """The ``len(loader)`` a number carries: where it was taken (before or after ``prepare``),
        what made the loader, and the ``prepare`` that shards it."""
        loader = length.args[0].value
        when = "before the loader is prepared" if self.is_pre_prepare_length(length) else \
            "after `prepare()`: it counts this rank's batches only"
        out: list[tuple[cst.CSTNode, str]] = [(length, f"`len({shorten(self.code(loader))})` is taken here, {when}")]
        value = self.objects.values.get(loader)
        for origin in sorted(value.origins() if value is not None else (), key=self.line_of)[:2]:
            if isinstance(origin, cst.Call):
                out.append((origin, f"made by `{shorten(self.code(origin))}`: a loader"))
        prepare = self.prepare_receiving(loader)
        if prepare is not None:
            out.append((prepare, f"`{shorten(self.code(prepare.func))}(...)` returned it sharded here, about "
                                 f"num_processes times shorter"))
        return out

    def guard_evidence(self, guard: Guard | None) -> list[tuple[cst.CSTNode, str]]:
        """The guard a finding's call runs under, and why it differs between ranks."""
        if guard is None:
            return []
        condition = guard.condition
        text = shorten(self.code(condition))
        if guard.callers() is not None:
            where, test = guard.callers()
            return [(guard.node, f"every caller in the other modules of the tree calls it under `{test}` ({where}), "
                                 f"which differs between ranks")]
        if guard.how == "main-only-loop":
            return [(guard.node, f"runs only in a loop over `{text}`, a list that only the main process fills "
                                 f"(init_trackers is main-only)")]
        how = {"if": "only where", "else": "only where this is false:", "early-exit": "after an early exit on",
               "decorator": "only on the ranks of"}.get(guard.how, "under")
        return [(guard.node, f"runs {how} `{text}`, which differs between ranks")]

    def counts_items(self, expr: cst.BaseExpression) -> bool:
        """``expr`` is the number of items of a collection: ``len(x)``, or a name every binding
        (or, for a parameter, every same-file call) fills with one."""
        return counts_items(self.index, expr)

    def rank_guard_of(self, node: cst.CSTNode) -> Guard | None:
        """The innermost rank guard ``node`` runs under, or ``None`` when every rank runs it."""
        return self.ops.guard_of(node)

    def guard_admits_every_rank(self, guard: Guard | None) -> str | None:
        """The backend under which a rank guard lets every rank in: ``"DEEPSPEED"`` for ``if
        accelerator.is_main_process or accelerator.distributed_type == DistributedType.DEEPSPEED:``
        (a widely copied workaround); ``None`` for a plain guard."""
        for part in _disjuncts(getattr(guard.node, "test", None) if guard is not None else None):
            backend = backend_compared(part)
            if backend:
                return backend
        return None

    def guard_admits_every_rank_where(self, guard: Guard | None) -> cst.BaseExpression | None:
        """The part of a rank guard's ``or`` that lets every rank in where it holds: a comparison of
        ``distributed_type`` with a backend, or a plain flag that is the same on every rank (``if
        args.use_deepspeed or accelerator.is_main_process:``); ``None`` for a plain guard. A
        negated flag (``not args.distributed or ...``) is left out: it usually means one process."""
        parts = _disjuncts(getattr(guard.node, "test", None) if guard is not None else None)
        if len(parts) < 2 or not any(self.ranks.is_rank_dependent(p) for p in parts):
            return None
        for part in parts:
            if backend_compared(part):
                return part
            if isinstance(part, (cst.Name, cst.Attribute)) and not self.ranks.is_rank_dependent(part) \
                    and not self.is_accelerator(part) and self._single_process_test(part) is None:
                return part
        return None

    def under_rank_condition(self, node: cst.CSTNode) -> bool:
        """``node`` sits in a branch of an ``if`` on a rank predicate in its function, whether
        or not any rank class reaches it (``if is_main: if not is_local_main: ...`` runs on
        none, and the op walk records no guard there)."""
        return self.rank_guard_of(node) is not None or rank_branch_of(self, node) is not None

    def runs_only_where(self, node: cst.CSTNode, test: cst.BaseExpression) -> bool:
        """Every rank class that may run ``node`` (under the ``if`` rank guard around it) makes
        ``test`` true: ``if is_main and args.save:`` runs only where ``is_main`` holds. ``False``
        when ``node`` has no such guard or the model cannot decide."""
        condition = None
        child = node
        for parent in self.index.ancestors(node):
            if type(parent) in (cst.FunctionDef, cst.ClassDef, cst.Lambda):
                break
            if type(parent) is cst.If and child is parent.body and self.ranks.is_rank_dependent(parent.test):
                condition = parent.test
                break
            child = parent
        if condition is None:
            return False
        for cls in self.ranks.classes:
            if self.ranks.evaluate(condition, cls) is False:
                continue  # this class never runs node
            if self.ranks.evaluate(test, cls) is not True:
                return False
        return True

    def op_kind(self, call: cst.Call) -> str | None:
        return self.ops.op_kind(call)

    def unguarded_call_site(self, scope: ScopeNode) -> cst.Call | None:
        """For a helper, the first same-file call that runs it on every rank (for messages)."""
        if isinstance(scope, cst.Module):
            return None
        for site in self.ops.call_sites(scope) or self.constructions_of(scope):
            if self.rank_guard_of(site) is None and not self.never_runs(site) \
                    and self.runs_on_every_rank(self.index.scope_of(site)):
                return site
        return None

    def call_sites_reaching(self, node: cst.CSTNode) -> list[cst.Call] | None:
        """The same-file calls of ``node``'s function that can reach it, by what they pass to
        the parameters its branches test against ``None`` (``if step is None: ...``, taken only
        by the calls that leave ``step`` out); ``None`` when ``node`` is not in a function."""
        scope = self.index.scope_of(node)
        if not isinstance(scope, cst.FunctionDef):
            return None
        params = {p.name.value: p for p in self.index.functions[scope].params}
        wanted: dict[str, bool] = {}  # parameter -> must be None (True) / must not be (False)
        child = node
        for parent in self.ancestors(node):
            if parent is scope:
                break
            if isinstance(parent, cst.If) and child is not parent.test:
                tested = _none_test(parent.test)
                if tested is not None and tested[0] in params:
                    name, is_none = tested
                    wanted.setdefault(name, is_none if child is parent.body else not is_none)
            child = parent
        sites = self.ops.call_sites(scope)
        if not wanted:
            return sites
        bound_first = self.index.functions[scope].class_name is not None
        out = []
        for site in sites:
            passed = dict(arguments_by_parameter(site, scope, bound_first and isinstance(site.func, cst.Attribute)))
            maybe = True
            for name, is_none in wanted.items():
                given = passed[name].value if name in passed else params[name].default
                none = _is_none(given) if given is not None else None
                if none is None and given is not None and self._never_none(given, self.index.scope_of(site)):
                    none = False
                if none is not None and none != is_none:
                    maybe = False
            if maybe:
                out.append(site)
        return out

    def _never_none(self, expr: cst.BaseExpression, scope: ScopeNode) -> bool:
        """A number or string, or a name every binding of its scope makes one (``step = 0`` then
        ``step += 1``)."""
        if type(expr) in (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString, cst.BinaryOperation):
            return True
        if type(expr) is not cst.Name:
            return False
        body = scope.body if isinstance(scope, cst.FunctionDef) else scope
        bindings = [n for n in self.index.walk(body) if isinstance(n, (cst.Assign, cst.AnnAssign, cst.AugAssign))
                    and any(isinstance(t, cst.Name) and t.value == expr.value
                            for t in ([x.target for x in n.targets] if isinstance(n, cst.Assign) else [n.target]))]
        return bool(bindings) and all(isinstance(b, cst.AugAssign) or (
            b.value is not None and type(b.value) in (cst.Integer, cst.Float, cst.SimpleString, cst.BinaryOperation))
            for b in bindings)

    def runs_on_every_rank(self, scope: ScopeNode, _seen: frozenset = frozenset()) -> bool:
        """Whether code in ``scope`` (outside local guards) runs on every rank of an Accelerate
        program: module code; functions that use an accelerator and are not gated; helpers
        called without a guard from such code."""
        if self.single_process_program:
            return False
        if isinstance(scope, cst.Module):
            return True
        if scope in _seen:
            return False
        if not _seen:  # a top-level question: the answer does not depend on a path of callers
            cached = self._every_rank.get(scope)
            if cached is None:
                cached = self._every_rank[scope] = self._runs_on_every_rank(scope)
            return cached
        return self._runs_on_every_rank(scope, _seen)

    @cached_property
    def _script_without_an_accelerator(self) -> bool:
        """The file is a script (``if __name__ == "__main__":``) whose module code builds no
        accelerator and calls no function of the file that reaches one: ``main()`` builds it but
        the entry point runs only ``encode()``. Run as a script it is no Accelerate program, and
        what its module code calls runs on no several ranks. (Unknown, so not so, where other
        modules call into it or hand it an accelerator.)"""
        constructors = self.objects.acc_constructors
        if not constructors or self.incoming or any(
                kind == ACCELERATOR_FACTORY for ops in self.external.values() for kind, _ in ops):
            return False
        module = self.index.module
        if not any(type(node) is cst.If and type(node.test) is cst.Comparison and self.index._is_main_test(node.test)
                   for node in module.body):
            return False
        homes = {self.scope_of(c) for c in constructors}
        if module in homes:
            return False
        for call in self.index.calls:
            if self.scope_of(call) is not module:
                continue
            fn = self.index.resolve_call(call) or self.index.constructor_of(call)
            if fn is None:
                if any((v := self.objects.values.get(a.value)) is not None and v.is_acc for a in call.args):
                    return False
                continue
            if any(fn is home or (type(home) is cst.FunctionDef and self.index.reaches(fn, home)) for home in homes):
                return False
        return True

    def _runs_on_every_rank(self, scope: ScopeNode, _seen: frozenset = frozenset()) -> bool:
        if self.ops.function_guard(scope) is not None:
            return False
        sites = self.ops.call_sites(scope)
        if sites and self._script_without_an_accelerator:
            # (module code of a script whose entry point builds no accelerator: one process)
            sites = [site for site in sites if self.scope_of(site) is not self.index.module]
            if not sites:
                return False
        constructions = [] if sites else self.constructions_of(scope)
        if constructions:
            # a class's __init__: it runs wherever the class is built. Built under a rank guard
            # everywhere: not every rank; built where every rank runs: every rank; built in code
            # whose callers are unknown: as a method that uses the accelerator
            live = [c for c in constructions if not self.never_runs(c) and self.rank_guard_of(c) is None]
            if not live:
                return False
            if any(self.runs_on_every_rank(self.index.scope_of(c), _seen | {scope}) for c in live):
                return True
            return scope in self._scopes_using_an_accelerator
        if sites and self.index.dead_arms:
            sites = [site for site in sites if not self.never_runs(site)]  # (a call no launch makes)
            if not sites:
                return False
        if sites:
            uses_one = scope in self._scopes_using_an_accelerator
            return any(
                self.rank_guard_of(site) is None and not self.rank_undecided_at(site)
                and not self._in_one_process_arm(site) and (
                    self.runs_on_every_rank(caller := self.index.scope_of(site), _seen | {scope})
                    # `def main(argv): train(cfg)` handed to `app.run(main)`: every process runs
                    # the entry point, so a function that uses an accelerator runs where it calls it
                    or (uses_one and self._entry_point(caller)))
                for site in sites
            )
        hooked = self._state_hook_runs(scope, _seen | {scope})
        if hooked is not None:
            return hooked
        info = self.index.functions[scope]
        if info.class_name is None and "@guarded" in self.incoming.get(info.qualname, {}):
            return False  # every caller in the other modules of the tree calls it under a rank guard
        if self.every_rank_caller(scope) is not None:
            return True  # a caller in another module runs it on every rank
        return scope in self._scopes_using_an_accelerator

    def callers_unknown_off_accelerate(self, scope: ScopeNode) -> bool:
        """``scope`` is a function that nothing in the file calls or builds, that uses no
        accelerator and that no caller in another module is known to run on every rank: on
        which ranks it runs, if on several, is unknown."""
        if not isinstance(scope, cst.FunctionDef) or self.ops.call_sites(scope) or self.constructions_of(scope):
            return False
        return not self.runs_on_every_rank(scope)

    def callers_guard(self, scope: ScopeNode) -> Guard | None:
        """For a module function that every caller in the other modules of the tree calls under a
        rank guard: that guard, as a ``Guard`` on the function (``how="callers"``, the condition
        quoting the caller's file, line and test); ``None`` otherwise."""
        if not isinstance(scope, cst.FunctionDef):
            return None
        info = self.index.functions[scope]
        where = self.incoming.get(info.qualname, {}).get("@guarded") if info.class_name is None else None
        if not where or where == "yes" or self.ops.call_sites(scope):
            return None
        return Guard(scope, cst.Name("_"), "callers:" + where)

    def constructions_of(self, scope: ScopeNode) -> list[cst.Call]:
        """For a class's ``__init__``: the calls of this file that construct the class (``Tracker(out)``
        runs ``Tracker.__init__``)."""
        if not isinstance(scope, cst.FunctionDef) or scope.name.value != "__init__":
            return []
        return [call for call in self.index.calls if self.index.constructor_of(call) is scope]

    def _entry_point(self, scope: ScopeNode) -> bool:
        """A module-level function that nothing in the file calls but module-level code hands to
        a launcher (``app.run(main)``, ``fire.Fire(main)``, ``notebook_launcher(main)``), and no
        rank test gates: every process runs it. (One that only other modules call may be run
        by one process of a larger program: unknown.)"""
        if not isinstance(scope, cst.FunctionDef):
            return False
        info = self.index.functions[scope]
        if info.class_name is not None or not isinstance(info.parent_scope, cst.Module) \
                or self.ops.call_sites(scope) or self.ops.function_guard(scope) is not None \
                or "@guarded" in self.incoming.get(info.qualname, {}):
            return False
        return scope.name.value in self._handed_to_module_level_calls

    @cached_property
    def _handed_to_module_level_calls(self) -> frozenset[str]:
        """Plain names that module-level code passes to a call no rank test gates (``app.run(main)``)."""
        parents = self.index.parents
        return frozenset(node.value for node in self.index.walk(self.module)
                         if type(node) is cst.Name and type(arg := parents.get(node)) is cst.Arg
                         and arg.value is node  # (not the keyword of `f(main=1)`)
                         and type(call := parents.get(arg)) is cst.Call
                         and self.rank_guard_of(call) is None)

    _STATE_HOOKS = {"register_save_state_pre_hook": "save_state", "register_load_state_pre_hook": "load_state"}

    def _state_hook_runs(self, fn: cst.FunctionDef, _seen: frozenset) -> bool | None:
        """For a function registered with ``<acc>.register_save_state_pre_hook(fn)`` (or the load
        hook): it runs inside ``save_state`` (``load_state``), so on every rank exactly when some
        ``save_state`` call of the file runs on every rank. ``None`` for other functions."""
        methods = set()
        for call in self.index.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value in self._STATE_HOOKS and call.args \
                    and type(call.args[0].value) is cst.Name and self.is_accelerator(func.value) \
                    and self.index.resolve_function_name(call.args[0].value.value, self.index.scope_of(call)) is fn:
                methods.add(self._STATE_HOOKS[func.attr.value])
        if not methods:
            return None
        for call in self.index.calls:
            func = call.func
            if type(func) is cst.Attribute and func.attr.value in methods and self.is_accelerator(func.value) \
                    and self.rank_guard_of(call) is None \
                    and self.runs_on_every_rank(self.index.scope_of(call), _seen):
                return True
        return False

    @cached_property
    def _scopes_using_an_accelerator(self) -> set:
        """The scopes that read an accelerator (``del accelerator``, which drops a parameter a
        method takes only for its signature, is no use of it)."""
        return {self.index.scope_of(n) for n, v in self.objects.values.items() if v.is_acc and not self._deleted(n)}

    def _deleted(self, node: cst.CSTNode) -> bool:
        parent = self.index.parents.get(node)
        while type(parent) in (cst.Element, cst.Tuple, cst.List):
            parent = self.index.parents.get(parent)
        return type(parent) is cst.Del

    @cached_property
    def _reaching_an_accelerator(self) -> frozenset:
        """The functions of this file that use an accelerator or call (through functions of this
        file) one that does."""
        reaching = {s for s in self._scopes_using_an_accelerator if isinstance(s, cst.FunctionDef)}
        callers: dict[cst.FunctionDef, set] = {}
        for call in self.index.calls:
            target = self.index.resolve_call(call) or self.index.constructor_of(call)
            if target is not None:
                callers.setdefault(target, set()).add(self.index.scope_of(call))
        work = list(reaching)
        while work:
            for caller in callers.get(work.pop(), ()):
                if isinstance(caller, cst.FunctionDef) and caller not in reaching:
                    reaching.add(caller)
                    work.append(caller)
        return frozenset(reaching)

    def _reaches_an_accelerator(self, node: cst.CSTNode) -> bool:
        """Code in ``node`` makes or uses an accelerator, or calls a function of this file that
        does (see ``_reaching_an_accelerator``)."""
        for inner in self.index.walk(node):
            if type(inner) is cst.Call and ((self.index.resolve_call(inner) or self.index.constructor_of(inner))
                                            in self._reaching_an_accelerator):
                return True
            if type(inner) is cst.Name and (value := self.objects.values.get(inner)) is not None and value.is_acc:
                return True
        return False

    @cached_property
    def _program_makes_no_accelerator(self) -> bool:
        """The file builds no accelerator, uses no ``torch.distributed``, and its module code
        (what ``python file.py`` runs) reaches no function of the file that uses one: a demo
        whose helpers take an accelerator from elsewhere, run as one process."""
        if self.objects.acc_constructors or self.uses_torch_distributed:
            return False
        return not any(self._reaches_an_accelerator(statement) for statement in self.module.body
                       if not isinstance(statement, (cst.FunctionDef, cst.ClassDef)))

    def _in_one_process_arm(self, site: cst.CSTNode) -> bool:
        """``site`` is module code in an arm of an ``if`` that makes and uses no accelerator while
        the other arm does (``if args.eval: evaluate() else: train()``), or in a file whose
        module code reaches none: the path that never builds an Accelerator is a one-process
        program, as a file without one is."""
        if not isinstance(self.index.scope_of(site), cst.Module):
            return False
        if self._program_makes_no_accelerator:
            return True
        child = site
        for parent in self.ancestors(site):
            if isinstance(parent, cst.If) and child is not parent.test:
                arm, other = (parent.body, parent.orelse) if child is parent.body else (parent.orelse, parent.body)
                if other is not None and not self._reaches_an_accelerator(arm) \
                        and self._reaches_an_accelerator(other):
                    return True
            child = parent
        return False

    # -- I/O ----------------------------------------------------------------------------------
    def _origins_of(self, expr: cst.BaseExpression) -> tuple[frozenset, str | None]:
        """Every call that may have made the object ``expr`` holds, and its kind. The model
        that ``unwrap_model`` returns is the one it was given, so its makers are that one's."""
        if self.is_unwrap_call(expr):
            return self._origins_of(expr.args[0].value)
        value = self.value_at(expr)
        if value is not None and value.unwrapped and self.is_unwrap_call(value.origin):
            return self._origins_of(value.origin.args[0].value)
        return (value.origins(), value.kind) if value is not None else (frozenset(), None)

    @cached_property
    def _saver_classes(self) -> frozenset[str]:
        """Classes of this file that inherit ``save_pretrained`` from a saver mixin of the
        library table (``class Net(nn.Module, PyTorchModelHubMixin)``)."""
        mixins = self.library.unguarded_saver_mixins
        return frozenset(name for name, cls in self.index.classes.items()
                         if any((self.index.imports.qualify(base) or base) in mixins for base in cls.bases))

    def _inherits_saver(self, owner: cst.BaseExpression) -> bool:
        """``owner`` is ``self`` in a method of such a class, or an object every binding of which
        builds one."""
        if type(owner) is cst.Name and owner.value == "self":
            cls = self.index.class_of(self.scope_of(owner))
            return cls is not None and cls.name in self._saver_classes
        origins, _ = self._origins_of(owner)
        return bool(origins) and all(type(o) is cst.Call and type(o.func) is cst.Name
                                     and o.func.value in self._saver_classes for o in origins)

    def is_unwrap_call(self, call: cst.CSTNode) -> bool:
        """``call`` is an accelerator's ``unwrap_model(model)``."""
        return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) \
            and call.func.attr.value == "unwrap_model" and bool(call.args) and self.is_accelerator(call.func.value)

    def reads_rank(self, expr: cst.BaseExpression) -> bool:
        """Some part of ``expr`` differs between ranks by the rank model: a process index, a rank
        from the environment or ``torch.distributed``, a name bound to one (``f"out_{rank}.pt"``
        with ``rank = accelerator.process_index``). Its text is no evidence."""
        return any(type(node) in (cst.Name, cst.Attribute, cst.Subscript, cst.Call) and self.ranks.is_rank_dependent(node)
                   for node in self.index.walk(expr))

    def made_by_rank_unique_source(self, expr: cst.BaseExpression) -> bool:
        """``expr`` calls something whose result differs on every rank (``uuid4()``,
        ``tempfile.mkdtemp()``; the library table's ``rank-unique-sources``), or is
        ``os.devnull``."""
        if (self.index.imports.qualify_expr(expr) or "") == "os.devnull":
            return True
        return any((self.index.imports.qualify_expr(call.func) or "") in self.library.rank_unique_sources
                   for call in self.calls_in(expr))

    @cached_property
    def _exclusive_directories(self) -> dict[cst.CSTNode, cst.Call]:
        """The objects a directory is created from exclusively (``d.mkdir()``,
        ``os.makedirs(d)`` without ``exist_ok``) by a call every rank runs on every path through
        its function (under no ``if``, loop or ``try``): creation expression
        of the path -> the creating call."""
        out: dict[cst.CSTNode, cst.Call] = {}
        for write in self.writes:
            scope = self.scope_of(write.call)
            if not write.creates_directory or write.tolerant or write.path is None \
                    or self.under_rank_condition(write.call) or any(
                        type(parent) in (cst.Try, cst.If, cst.IfExp, cst.While, cst.For, cst.BooleanOperation)
                        for parent in takewhile(lambda a: a is not scope, self.ancestors(write.call))):
                # guarded, a `try` that may let the losers of the race go on, or a creation that
                # may not run (`if not os.path.exists(d): os.makedirs(d)`: where the folder
                # exists, no rank makes it and every rank writes into it)
                continue
            value = self.value_at(write.path)
            for origin in (value.origins() if value is not None and value.origin is not None else ()):
                out.setdefault(origin, write.call)
        return out

    def inside_exclusive_directory(self, path: cst.BaseExpression, at: cst.CSTNode, depth: int = 0) -> cst.Call | None:
        """The exclusive creation (``d.mkdir(exist_ok=False)`` on every rank) of a directory
        ``path`` is built from (``d / "x.json"``, ``os.path.join(d, ...)``, or a name assigned
        from such a path), run earlier in the same function as ``at``; ``None`` otherwise. A rank
        that got past it owns the directory: a second rank creating the same one raised
        ``FileExistsError`` there, so writes under it race with no other rank (the creation is
        the race, and is reported itself)."""
        if depth > 4 or not self._exclusive_directories:
            return None
        scope = self.scope_of(at)
        for name in self.index.loads_in(path):
            value = self.value_at(name)
            if value is None or value.origin is None:
                continue
            for origin in value.origins():
                creation = self._exclusive_directories.get(origin)
                if creation is not None and creation is not at and self.scope_of(creation) is scope \
                        and self.line_of(creation) < self.line_of(at):
                    return creation
            if isinstance(value.origin, cst.BaseExpression) and value.origin is not name \
                    and self.scope_of(value.origin) is scope:
                found = self.inside_exclusive_directory(value.origin, at, depth + 1)
                if found is not None:
                    return found
        return None

    @cached_property
    def writes(self) -> list[Write]:
        out = []
        writers = {name: detail for name, facts in self.external.items()
                   for kind, detail in facts if kind == WRITES_FILE}
        methods = {name: dict(d.split("|", 1) for d in detail.split("\n")) for name, facts in self.external.items()
                   for kind, detail in facts if kind == WRITING_METHODS}
        for call in self.index.calls:
            w = classify_write(call, self.index.imports, self.library, self._origins_of,
                               self._inherits_saver if self._saver_classes else None)
            if w is None and writers:
                w = self._imported_write(call, writers.get(dotted_name(call.func) or ""))
            if w is None and methods and type(call.func) is cst.Attribute:
                w = self._imported_write(call, self._method_write(call.func, methods))
            if w is not None:
                if w.creates_directory and not w.tolerant and self._catches_exists_error(call):
                    w = replace(w, tolerant=True)  # the ranks that lose the race go on
                out.append(w)
        return out

    def _catches_exists_error(self, call: cst.Call) -> bool:
        """``call`` is in the body of a ``try`` with a handler for ``FileExistsError`` (or a
        base of it, or a bare ``except``)."""
        child: cst.CSTNode = call
        for parent in self.ancestors(call):
            if type(parent) is cst.Try and child is parent.body:
                for handler in parent.handlers:
                    caught = handler.type
                    names = [] if caught is None else [e.value for e in caught.elements] \
                        if type(caught) is cst.Tuple else [caught]
                    if caught is None or any((dotted_name(n) or "").rsplit(".", 1)[-1] in (
                            "FileExistsError", "OSError", "IOError", "Exception", "BaseException") for n in names):
                        return True
            child = parent
        return False

    def _method_write(self, func: cst.Attribute, methods: dict[str, dict[str, str]]) -> str | None:
        """The ``WRITING_METHODS`` detail of ``obj.method`` where every call that may have made
        ``obj`` instantiates a class of another module whose ``method`` writes; else ``None``."""
        origins, _ = self._origins_of(func.value)
        details = {methods.get(self._class_made_by(o) or "", {}).get(func.attr.value) for o in origins}
        return details.pop() if len(details) == 1 else None

    def _imported_write(self, call: cst.Call, detail: str | None) -> Write | None:
        """A call of another module's function or method that writes a file whenever it runs
        (``WRITES_FILE``, ``WRITING_METHODS``): a write here, of the argument its path
        parameter receives."""
        if detail is None:
            return None
        name = dotted_name(call.func) or self.code(call.func)
        position, rest = detail.split("|", 1)
        what, line = rest.rsplit("|", 1)  # (what the write is called may hold a `|`)
        path = None
        if position != "-":
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if any(a.star for a in call.args) or int(position) >= len(positional):
                return None  # passed by keyword or unpacked: which argument is the path is not known here
            path = positional[int(position)].value
        return Write(call, f"{name}()", path, origin=f"{what} on line {line} of its module")

    # -- positions (resolved only for files that report something) --------------------------
    @property
    def layout(self) -> Layout:
        if self._layout is None:
            self._layout = Layout(self.module)
        return self._layout

    def position_of(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """1-based line and column of ``node``'s start, and its end line and column. Resolved
        inside the statement of the module or of a top-level class body that holds the node (a
        method, not the whole file: a tenth of the time on a large file)."""
        layout, unit = self.layout, node
        while unit is not None and unit not in layout.starts:
            unit = self.index.parents.get(unit)
        if unit is not None:
            rng = layout.position_of(node, unit)
        else:  # not under any statement the index knows
            if self._positions is None:
                wrapper = cst.metadata.MetadataWrapper(self.module, unsafe_skip_copy=True)
                self._positions = wrapper.resolve(cst.metadata.PositionProvider)
            rng = self._positions[node]
        return rng.start.line, rng.start.column + 1, rng.end.line, rng.end.column + 1

    def line_of(self, node: cst.CSTNode) -> int:
        return self.position_of(node)[0]

    # -- gradient accumulation ------------------------------------------------------------------
    def gradient_accumulation(self, accelerator: cst.BaseExpression) -> tuple[set[str], bool]:
        """The accumulation expressions given to this accelerator's constructor, and whether any
        differs from a literal 1 (a plugin counts as accumulating). The constructor is where the
        value came from; when that is unknown (a parameter), the file's only constructor; else
        nothing is known."""
        ctor = self._constructor_of(accelerator)
        exprs: set[str] = set()
        accumulates = False
        for arg in ctor.args if ctor is not None else ():
            if arg.keyword is None:
                continue
            if arg.keyword.value == "gradient_accumulation_steps":
                exprs.add(self.code(arg.value))
                if not (isinstance(arg.value, cst.Integer) and arg.value.value == "1"):
                    accumulates = True
            elif arg.keyword.value == "gradient_accumulation_plugin":
                accumulates = True
        return exprs, accumulates

    def never_accumulates(self, accelerator: cst.BaseExpression) -> bool:
        """The constructor this accelerator comes from is known (see ``gradient_accumulation``) and
        sets no accumulation: no ``gradient_accumulation_steps`` (or a literal 1), no plugin that
        may carry one (``gradient_accumulation_plugin``, ``deepspeed_plugin``) and no ``**kwargs``.
        Its ``accumulate()`` then syncs on every step. (``accelerate launch
        --gradient_accumulation_steps`` could still set it through the environment.)"""
        ctor = self._constructor_of(accelerator)
        if ctor is None:
            return self._passed_one_step_accelerator(accelerator)
        for arg in ctor.args:
            if arg.star:
                return False
            keyword = arg.keyword.value if arg.keyword is not None else None
            if keyword in ("gradient_accumulation_plugin", "deepspeed_plugin"):
                return False
            if keyword == "gradient_accumulation_steps" and not (
                    isinstance(arg.value, cst.Integer) and arg.value.value == "1"):
                return False
        return True

    def _passed_one_step_accelerator(self, accelerator: cst.BaseExpression) -> bool:
        """The accelerator is a parameter (or what one was stored as) that every caller in
        another module fills with an accelerator whose constructor sets no accumulation."""
        value = self.value_at(accelerator)
        param = value.origin if value is not None else None
        if not isinstance(param, cst.Param):
            return False
        fn = next((a for a in self.index.ancestors(param) if isinstance(a, cst.FunctionDef)), None)
        return fn is not None and fn in self.index.functions and any(
            given is param and kind == ONE_STEP_ACCELERATOR for given, kind in self.objects.incoming_kinds(fn))

    def may_scale_fp16(self, accelerator: cst.BaseExpression | None) -> bool:
        """Whether a constructor the accelerator may come from (every one in the file when that is
        unknown) may ask for fp16 itself: ``mixed_precision=`` other than a literal ``"no"`` or
        ``"bf16"``, or a ``**`` spread. In a process started by ``python script.py`` nothing
        else sets it (the launcher's config is not read)."""
        value = self.value_at(accelerator) if accelerator is not None else None
        constructors = self.objects.acc_constructors
        known = [o for o in (value.origins() if value is not None else ()) if o in constructors]
        for ctor in known or constructors:
            for arg in ctor.args:
                if arg.star == "**":
                    return True
                if arg.keyword is not None and arg.keyword.value == "mixed_precision" and not (
                        isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in ("no", "bf16")):
                    return True
        return not constructors

    def precision_fixed_without_fp16(self) -> bool:
        """Every constructor of the file passes ``mixed_precision="no"`` or ``"bf16"`` (a literal):
        the launch config cannot make it fp16 (the argument wins over it), so no loss scaler runs."""
        constructors = self.objects.acc_constructors
        return bool(constructors) and all(
            any(arg.keyword is not None and arg.keyword.value == "mixed_precision"
                and isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value in ("no", "bf16")
                for arg in ctor.args) and not any(arg.star == "**" for arg in ctor.args)
            for ctor in constructors)

    def built_for_deepspeed(self, accelerator: cst.BaseExpression) -> bool:
        """The accelerator's constructor (see ``_constructor_of``) is given a DeepSpeed plugin on
        every path (``deepspeed_plugin=DeepSpeedPlugin(...)``, or a name every binding of which
        builds one): it runs under DeepSpeed whatever the launch."""
        ctor = self._constructor_of(accelerator)
        plugin = next((arg.value for arg in ctor.args if arg.keyword is not None
                       and arg.keyword.value == "deepspeed_plugin"), None) if ctor is not None else None
        if plugin is None:
            return False
        if isinstance(plugin, cst.Call):
            made = [plugin]
        else:
            value = self.value_at(plugin)
            made = list(value.origins()) if value is not None else []
        return bool(made) and all(
            isinstance(m, cst.Call) and (self.index.imports.qualify_expr(m.func) or "").endswith("DeepSpeedPlugin")
            for m in made)

    def _constructor_of(self, accelerator: cst.BaseExpression) -> cst.Call | None:
        """The ``Accelerator(...)`` call this accelerator comes from; when that is unknown (a
        parameter), the file's only one; else ``None``."""
        value = self.value_at(accelerator)
        origin = value.origin if value is not None else None
        constructors = self.objects.acc_constructors
        if isinstance(origin, cst.Call) and origin in constructors:
            return origin
        return next(iter(constructors)) if len(constructors) == 1 else None

    def accumulate_accelerator(self, node: cst.CSTNode) -> cst.BaseExpression | None:
        """The accelerator of the ``with <accelerator>.accumulate(...)`` around ``node`` (same function)."""
        for parent in self.ancestors(node):
            if isinstance(parent, cst.With):
                for item in parent.items:
                    call = item.item
                    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) \
                            and call.func.attr.value == "accumulate" and self.is_accelerator(call.func.value):
                        return call.func.value
            if isinstance(parent, cst.FunctionDef):
                return None
        return None

    def accelerator_settings(self, keyword: str) -> list[cst.BaseExpression]:
        """What the file's accelerators are given for a setting: the constructor's keyword, or
        the field of the ``DataLoaderConfiguration`` its ``dataloader_config=`` is (written there
        or bound to a name in this file), as Accelerate reads either."""
        found: list[cst.BaseExpression] = []
        for ctor in self.objects.acc_constructors:
            for arg in ctor.args:
                if arg.keyword is None:
                    continue
                if arg.keyword.value == keyword:
                    found.append(arg.value)
                elif arg.keyword.value == "dataloader_config":
                    for config in self._configurations(arg.value):
                        found += [a.value for a in config.args if a.keyword is not None and a.keyword.value == keyword]
        return found

    def _configurations(self, expr: cst.BaseExpression) -> list[cst.Call]:
        """The ``DataLoaderConfiguration(...)`` calls ``expr`` may be: the call itself, or every
        call assigned to its name in this file."""
        def is_configuration(node: cst.CSTNode) -> bool:
            return isinstance(node, cst.Call) and last_attr(node.func) == "DataLoaderConfiguration"
        if is_configuration(expr):
            return [expr]
        if not isinstance(expr, cst.Name):
            return []
        return [call for call in self.index.calls if is_configuration(call)
                and isinstance(assign := self.index.parents.get(call), cst.Assign)
                and any(isinstance(t.target, cst.Name) and t.target.value == expr.value for t in assign.targets)]

    def splits_batches(self) -> cst.BaseExpression | None:
        """The setting that makes a prepared loader split each batch between the processes
        instead of dealing whole batches: its length is then the unprepared one, and a prepared
        scheduler steps once per optimizer step. Anything but a literal ``False`` may be on."""
        for value in self.accelerator_settings("split_batches"):
            if not (isinstance(value, cst.Name) and value.value == "False"):
                return value
        return None

    def accumulation_evidence(self, node: cst.CSTNode) -> list[tuple[cst.CSTNode, str]]:
        """Why ``node`` runs on gradient-accumulation micro-steps: the ``accumulate()`` block around
        it, or the ``gradient_accumulation_steps`` (or plugin) its file's accelerator is built with."""
        for parent in self.ancestors(node):
            if isinstance(parent, cst.With):
                for item in parent.items:
                    if isinstance(item.item, cst.Call) and last_attr(item.item.func) == "accumulate":
                        return [(item.item, "inside `accumulate()`: the optimizer updates only on its sync step")]
        return [(arg, f"`{shorten(self.code(arg))}`: the accelerator accumulates gradients")
                for arg in self.accumulation_arguments()[:1]]

    def accumulation_arguments(self) -> list[cst.Arg]:
        """The arguments that make any accelerator of the file accumulate gradients: a
        ``gradient_accumulation_steps`` other than a literal 1, or a ``gradient_accumulation_plugin``."""
        return [arg for ctor in self.objects.acc_constructors for arg in ctor.args
                if arg.keyword is not None and (arg.keyword.value == "gradient_accumulation_plugin" or (
                    arg.keyword.value == "gradient_accumulation_steps" and self.code(arg.value) != "1"))]

    def is_no_grad_block(self, node: cst.CSTNode) -> bool:
        """``with torch.no_grad():`` / ``torch.inference_mode()``: nothing in it makes a gradient."""
        return isinstance(node, cst.With) and any(
            isinstance(i.item, cst.Call) and (self.index.imports.qualify_expr(i.item.func) or "") in _NO_GRAD
            for i in node.items)

    def under_no_grad(self, node: cst.CSTNode) -> bool:
        return any(self.is_no_grad_block(p) for p in self.ancestors(node))

    def inside_accumulate(self, node: cst.CSTNode) -> bool:
        """Lexically inside ``with <accelerator>.accumulate(...)`` in the same function."""
        return self.accumulate_accelerator(node) is not None

    # -- where a finding sits (suppressions, baselines) ---------------------------------------
    def statement_of(self, node: cst.CSTNode) -> cst.CSTNode:
        """The statement line (``SimpleStatementLine``) or compound statement that holds ``node``."""
        current = node
        while current is not None:
            if isinstance(current, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
                return current
            current = self.index.parents.get(current)
        return node

    def qualname_of(self, node: cst.CSTNode) -> str:
        """The qualified name of the function around ``node`` ("" at module level)."""
        scope = self.index.scope_of(node)
        return self.index.functions[scope].qualname if isinstance(scope, cst.FunctionDef) else ""

    def statement_text(self, statement: cst.CSTNode) -> str:
        """A statement's code on one line, without comments or its body: what identifies a
        finding when lines above it change."""
        if isinstance(statement, cst.SimpleStatementLine):
            return "; ".join(self.code(small) for small in statement.body)
        if isinstance(statement, cst.BaseCompoundStatement):
            header = statement.with_changes(body=cst.IndentedBlock(body=[cst.SimpleStatementLine([cst.Pass()])]))
            if hasattr(header, "orelse"):
                header = header.with_changes(orelse=None)
            if hasattr(header, "leading_lines"):
                header = header.with_changes(leading_lines=[])
            return " ".join(cst.Module([]).code_for_node(header).split()).removesuffix(" pass")
        return self.code(statement)

    # -- helpers for rules ----------------------------------------------------------------------
    def calls_in(self, node: cst.CSTNode) -> list[cst.Call]:
        """Calls lexically inside ``node``, outside nested functions and classes."""
        return self.index.calls_in(node)

    def performs(self, call: cst.Call, kind: str) -> bool:
        """Whether ``call`` is an op of ``kind``, directly or through same-file helpers."""
        if self.op_kind(call) == kind:
            return True
        target = self.index.resolve_call(call) or self.instance_method(call)
        if target is None:
            return False
        return kind in self.ops.kinds_performed(target)

    def instance_method(self, call: cst.Call) -> cst.FunctionDef | None:
        """The method ``obj.m()`` runs where ``obj`` is, on every path, an instance made here of
        one class of this file (``trainer = Trainer(...)``), found in the class or its bases."""
        func = call.func
        if type(func) is not cst.Attribute:
            return None
        value = self.value_at(func.value)
        origins = value.origins() if value is not None else frozenset()
        made_by = {dotted_name(o.func) if type(o) is cst.Call else None for o in origins}
        if len(made_by) != 1:
            return None
        name = next(iter(made_by))
        cls = self.index.classes.get(name) if name is not None else None
        if cls is None or self.index.resolve_function_name(name, self.scope_of(call)) is not None:
            return None
        for owner in self.objects._class_and_bases(name):
            method = self.index.classes[owner].methods.get(func.attr.value) if owner in self.index.classes else None
            if method is not None:
                return method
        return None

    def scope_of(self, node: cst.CSTNode) -> ScopeNode:
        return self.index.scope_of(node)

    def function_info(self, fn: cst.FunctionDef) -> FunctionInfo:
        return self.index.functions[fn]

    def code(self, node: cst.CSTNode) -> str:
        """Source text of a node, on one line."""
        text = self.module.code_for_node(node).strip()
        return " ".join(text.split())

    def ancestors(self, node: cst.CSTNode):
        return self.index.ancestors(node)


def _none_test(test: cst.BaseExpression) -> tuple[str, bool] | None:
    """``(name, True)`` for ``name is None``, ``(name, False)`` for ``name is not None``."""
    compared = none_comparison(test)
    if compared is None or type(compared[0]) is not cst.Name:
        return None
    return compared[0].value, compared[1]


def _is_none(expr: cst.BaseExpression) -> bool | None:
    """``True`` for the literal ``None``, ``False`` for another literal, ``None`` when unknown."""
    if type(expr) is cst.Name and expr.value in ("None", "True", "False"):
        return expr.value == "None"
    if type(expr) in (cst.Integer, cst.Float, cst.SimpleString, cst.FormattedString):
        return False
    return None


def _shards_on_some_path(verdicts) -> bool | None:
    """One verdict for a sampler from the verdicts of its paths: ``True`` where one path shards
    (the one a launch of several processes takes), ``None`` where one is unknown, else ``False``;
    a path with no sampler at all (``"none"``) says nothing, and no path at all is unknown."""
    found = set(verdicts) - {"none"}
    if True in found:
        return True
    return None if None in found or not found else False
