"""Flow-sensitive tracking of accelerators and prepared objects.

Walks each scope's statements in order with an environment ``dotted name -> Value``
and records, for every name or attribute read, the value it holds at that point.
Branches merge (prepared on some paths only becomes ``maybe``), loops are walked
twice, and ``self.<attr>`` bindings are shared across the methods of a class.

Same-file functions get summaries computed to a fixpoint: what they return
(an accelerator, a prepared object), and what their callers pass for each parameter.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property

import libcst as cst

from ..collectives import ACCELERATOR, ACCELERATOR_FACTORY, ITERATES_ARGUMENTS, RANK_PREDICATE, RETURNS_KIND
from ..library import Library, default_library
from . import composites
from .index import FileIndex, ScopeNode
from .names import bound_names, dotted_name, last_attr, statement_targets

YES, MAYBE, NO = "yes", "maybe", "no"

ACC_CONSTRUCTORS = frozenset({"Accelerator", "PartialState", "AcceleratorState"})
PREPARE_METHODS = {
    "prepare": None,
    "prepare_model": "model",
    "prepare_data_loader": "loader",
    "prepare_optimizer": "optimizer",
    "prepare_scheduler": "scheduler",
}
# the kind another module's call passes to a parameter that receives an accelerator
# an accelerator whose every caller's constructor sets no gradient accumulation: its
# `accumulate()` syncs on every step
ONE_STEP_ACCELERATOR = ACCELERATOR + ":one-step"
# names a project declares to hold accelerators (`accelerator-names` in its settings); none by
# default: an accelerator is known from where it was made, or from how it is used (below)
DEFAULT_ACCELERATOR_NAMES: tuple[str, ...] = ()
# An object whose maker the analysis cannot see but that the code uses through a member only
# Accelerate's accelerators have is one: the library table's `accelerator-protocol`.

# the kinds of object `prepare` wraps; it returns anything else unchanged
WRAPPED_KINDS = frozenset({"model", "optimizer", "loader", "scheduler"})
# an object of a class (not a DataLoader) that iterates objects it was built from: `prepare`
# returns it unchanged, and a loop over it reads them (``composites``)
COMPOSITE = "iterates-arguments"
# declared types (`x: DataLoader = ...`) that say what kind an object is
ANNOTATED_KINDS = {"DataLoader": "loader", "Optimizer": "optimizer", "Module": "model", "PreTrainedModel": "model",
                   "ModelMixin": "model", "LRScheduler": "scheduler", "_LRScheduler": "scheduler"}
def declared_kind(annotation: cst.BaseExpression | None) -> str | None:
    """The kind a type annotation declares (``nn.Module``, ``DataLoader``), else ``None``."""
    name = dotted_name(annotation) if annotation is not None else None
    return ANNOTATED_KINDS.get(name.split(".")[-1]) if name else None


# methods only an nn.Module has (among what prepare() is given): an object they are called on is one
MODULE_ONLY_METHODS = frozenset({"parameters", "named_parameters", "modules", "named_modules", "children",
                                 "named_children", "register_forward_hook", "register_forward_pre_hook",
                                 "register_full_backward_hook", "requires_grad_"})
# methods of an nn.Module (and of a tensor) that return the object itself
SELF_RETURNING = frozenset({"to", "cuda", "cpu", "train", "eval", "float", "half", "bfloat16", "double",
                             "to_bettertransformer",  # optimum: the same model, converted in place
                             "requires_grad_", "to_empty"})


@dataclass(frozen=True)
class Value:
    """What the model knows about the object a name holds at one program point."""

    kind: str | None = None  # "model" | "optimizer" | "loader" | "scheduler" | "unknown"
    prepared: str = NO  # YES | MAYBE | NO
    is_acc: bool = False
    origin: cst.CSTNode | None = None  # the expression that created the object
    unwrapped: bool = False  # result of accelerator.unwrap_model(...)
    not_wrapped: bool = False  # prepared with evaluation_mode=True, or frozen before prepare
    frozen: bool = False
    prepared_at: cst.CSTNode | None = None  # the prepare call
    container: bool = False  # a list/dict of such objects (from a comprehension over prepare)
    # where the object may come from when branches built it differently (origin is then None)
    alternatives: frozenset = frozenset()
    # a tuple a function returns (`return model, plugin, accelerator`): what each item holds
    elements: tuple | None = None
    # a dict display with constant keys (`return {"model": model, "steps": n}`): (key, value) pairs
    items: tuple | None = None
    # a dict whose items are read as attributes too (`nets = Munch(gen=G())`: `nets.gen`)
    attribute_items: bool = False
    # passed through `prepare` on every path, as an object of a kind the file does not show (a
    # class of an outside package): what is done with it later may tell (`.parameters()`: a module)
    prepared_unknown_kind: bool = False

    def origins(self) -> frozenset:
        """Every creation expression this value may hold."""
        return self.alternatives | ({self.origin} if self.origin is not None else frozenset())


_UNKNOWN = Value()  # what a binding to an expression the model does not follow holds


def _flag_is(env: Env, name: str, wanted: bool) -> bool:
    """``name`` holds the literal ``wanted`` (``True``/``False``) in ``env``."""
    value = env.get(name)
    origin = value.origin if value is not None else None
    return type(origin) is cst.Name and origin.value == ("True" if wanted else "False")


def merge(a: Value | None, b: Value | None) -> Value | None:
    if a is None or b is None:
        v = a or b
        if v is not None and v.prepared == YES:
            return replace(v, prepared=MAYBE)
        if v is not None and v.prepared_unknown_kind:
            return replace(v, prepared_unknown_kind=False)  # (not prepared on the other path)
        return v
    if a == b:
        return a
    if a.container and b.container and (_empty(a) or _empty(b)):
        return b if _empty(a) else a  # a container filled on one path only: what it may hold
    prepared = a.prepared if a.prepared == b.prepared else MAYBE
    return Value(
        container=a.container and b.container,
        kind=a.kind if a.kind == b.kind else None,  # paths that made different (or unknown) kinds
        prepared=prepared,
        # an accelerator on one path, a stand-in the file does not know on the other
        # (`DummyAccelerator(device)`, `None`): the program is an Accelerate one where it runs
        # the accelerator, and a stand-in is no evidence against that
        is_acc=a.is_acc and b.is_acc or (a.is_acc and _stand_in(b)) or (b.is_acc and _stand_in(a)),
        origin=a.origin if a.origin is b.origin else None,
        alternatives=frozenset() if a.origin is b.origin else a.origins() | b.origins(),
        unwrapped=a.unwrapped and b.unwrapped,
        not_wrapped=a.not_wrapped and b.not_wrapped,
        frozen=a.frozen and b.frozen,
        prepared_at=a.prepared_at or b.prepared_at,
        elements=tuple(merge(x, y) for x, y in zip(a.elements, b.elements))
        if a.elements is not None and b.elements is not None and len(a.elements) == len(b.elements) else None,
        items=_merge_items(a.items, b.items),
        attribute_items=a.attribute_items and b.attribute_items,
        prepared_unknown_kind=a.prepared_unknown_kind and b.prepared_unknown_kind,
    )


def _stand_in(v: Value) -> bool:
    """An object of no kind the model knows, never prepared or unwrapped: what a program binds
    where it runs without its accelerator (a dummy of the file's own, ``None``)."""
    return v.kind is None and v.prepared == NO and not v.container and not v.unwrapped \
        and v.elements is None and v.items is None and not v.prepared_unknown_kind


def _merge_items(a: tuple | None, b: tuple | None) -> tuple | None:
    """The items two dict values both hold under the same keys, each merged."""
    if a is None or b is None:
        return None
    other = dict(b)
    merged = tuple((key, merge(value, other[key])) for key, value in a if key in other)
    return merged or None


def item_of(value: Value | None, key: object) -> Value | None:
    """What a dict value holds under a constant key (``parts["model"]``), when known."""
    if value is None or value.items is None:
        return None
    return dict(value.items).get(key)


Env = dict[str, Value]


def _empty(value: Value) -> bool:
    """A container nothing was put in yet (``loaders = {}``)."""
    return value.container and value.kind is None and not value.is_acc and not value.origins() \
        and not value.prepared_unknown_kind


def _merge_envs(a: Env | None, b: Env | None) -> Env | None:
    if a is None:
        return None if b is None else dict(b)
    if b is None:
        return dict(a)
    out: Env = {}
    for key in a.keys() | b.keys():
        v = merge(a.get(key), b.get(key))
        if v is not None:
            out[key] = v
    return out


def item_key(expr: cst.BaseExpression) -> str | None:
    """``loaders["val"]`` -> ``'loaders["val"]'``: the environment key of one item of a container
    a name holds, read or assigned with a constant string key; ``None`` for any other form."""
    if type(expr) is not cst.Subscript or len(expr.slice) != 1:
        return None
    index = expr.slice[0].slice
    if type(index) is not cst.Index or type(index.value) is not cst.SimpleString:
        return None
    base = dotted_name(expr.value)
    key = index.value.evaluated_value
    if base is None or not isinstance(key, str):
        return None
    return f"{base}[{key!r}]"


def _item_name(expr: cst.Subscript) -> object:
    """The constant key of ``loaders["val"]`` (``item_key`` has made sure there is one)."""
    return expr.slice[0].slice.value.evaluated_value


def _item_prepare_loop(loop: cst.For) -> tuple[str, cst.Call] | None:
    """``for k in X:`` (or ``X.keys()``, or ``for k, _ in X.items():``) whose body, outside any
    condition, assigns ``X[k] = <acc>.prepare(X[k])``: the name of ``X`` and the prepare call."""
    target, iterated = loop.target, loop.iter
    if isinstance(iterated, cst.Call) and isinstance(iterated.func, cst.Attribute) and not iterated.args \
            and iterated.func.attr.value in ("keys", "items"):
        if iterated.func.attr.value == "items":
            if not (isinstance(target, cst.Tuple) and len(target.elements) == 2):
                return None
            target = target.elements[0].value
        iterated = iterated.func.value
    base = dotted_name(iterated)
    if base is None or not isinstance(target, cst.Name):
        return None
    for statement in loop.body.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
                continue
            stored, value = small.targets[0].target, small.value
            if not (_subscript_of(stored, base, target.value) and isinstance(value, cst.Call)
                    and isinstance(value.func, cst.Attribute) and value.func.attr.value == "prepare"
                    and len(value.args) == 1 and _subscript_of(value.args[0].value, base, target.value)):
                continue
            return base, value
    return None


def _subscript_of(expr: cst.BaseExpression, base: str, key: str) -> bool:
    """``expr`` is ``<base>[<key>]`` with ``key`` a name."""
    return type(expr) is cst.Subscript and len(expr.slice) == 1 and dotted_name(expr.value) == base \
        and type(expr.slice[0].slice) is cst.Index and type(expr.slice[0].slice.value) is cst.Name \
        and expr.slice[0].slice.value.value == key


def _other_items(base: str) -> str:
    """The environment key of what the items of ``base`` not assigned by their own key hold."""
    return f"{base}[*]"


def _forget_items(base: str | None, env: Env) -> None:
    """The items known by key of the container ``base`` holds are unknown from here: an
    unknown value, not an absent key, so that a join with a path that still knows them stays
    unknown."""
    if base is not None:
        for key in [k for k in env if k.startswith(base + "[")]:
            env[key] = Value()


# methods of a dict that leave its items as they are
_READING_METHODS = frozenset({"get", "keys", "values", "items", "copy", "__contains__", "__len__"})


@dataclass
class FunctionSummary:
    """What a same-file function does with accelerators and prepared objects."""

    returns: Value | None = None
    return_exprs: list[cst.BaseExpression] = field(default_factory=list)
    params: dict[str, Value] = field(default_factory=dict)
    prepares_params: set[str] = field(default_factory=set)


_WRAPPER_TYPES = re.compile(r"Engine|DeepSpeed|DistributedDataParallel|FullyShardedDataParallel|\bDDP\b|\bFSDP\b")


def _expects_wrapper(param: cst.Param) -> bool:
    """A parameter annotated as the wrapper (``model: "DeepSpeedEngine"``): the function works on
    the prepared object on purpose (trl's ``add_hooks``)."""
    if param.annotation is None:
        return False
    return bool(_WRAPPER_TYPES.search(cst.Module([]).code_for_node(param.annotation.annotation)))


MAX_WALKS_PER_SCOPE = 15

# library EMA wrappers whose averaged copy holds no trainable parameter
# library Modules built from another model's submodules (diffusers' container of a UNet's
# attention processors, which LoRA scripts prepare instead of the UNet)
_MODULE_CONTAINERS = frozenset({"diffusers.loaders.AttnProcsLayers", "diffusers.loaders.utils.AttnProcsLayers"})
_EMA_CONSTRUCTORS = frozenset({"ema_pytorch.EMA", "ema_pytorch.PostHocEMA", "ema_pytorch.ema_pytorch.EMA",
                               "timm.utils.ModelEma", "timm.utils.ModelEmaV2", "timm.utils.ModelEmaV3",
                               "timm.utils.model_ema.ModelEmaV2", "timm.utils.model_ema.ModelEmaV3"})


_MISSING = object()


def _renamed(fact: tuple, renamed: dict) -> tuple:
    return (fact[0], renamed.get(fact[1], fact[1]), *fact[2:])


def _definitions(index: FileIndex) -> tuple:
    """What the walks look up beyond their own scope, apart from the facts they record: the
    file's functions (where they are, their parameters), classes and imports."""
    code = cst.Module([]).code_for_node
    functions = tuple(
        (info.qualname, info.class_name, type(info.parent_scope).__name__,
         tuple((p.name.value, code(p.annotation.annotation) if p.annotation else "") for p in info.params))
        for info in index.functions.values())
    classes = tuple((c.name, tuple(c.bases), tuple(c.methods)) for c in index.classes.values())
    return functions, classes, index.imports.bindings()


def _made_by_calls(value: Value) -> bool:
    """Every object ``value`` may hold was made by a call the walk saw."""
    origins = value.origins()
    return bool(origins) and all(type(origin) is cst.Call for origin in origins)


def _unknown(value: Value | None) -> bool:
    """Nothing is known of the object: no value, or only the parameter or name it was read from
    (``self.acc = acc`` in ``__init__``, with no caller in view passing anything known)."""
    return value is None or (value.kind is None and not value.is_acc and not value.alternatives
                             and isinstance(value.origin, (cst.Param, cst.Name, cst.Attribute)))


def _annotates_accelerator(annotation: cst.Annotation | None) -> bool:
    """``x: Accelerator``, also ``Accelerator | None``, ``Optional[Accelerator]`` and the
    quoted forms: where it is not None, it is an accelerator."""
    if annotation is None:
        return False
    def names(expr: cst.BaseExpression):
        if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.BitOr):
            yield from names(expr.left)
            yield from names(expr.right)
        elif isinstance(expr, cst.Subscript):
            if (dotted_name(expr.value) or "").rsplit(".", 1)[-1] in ("Optional", "Union"):
                for element in expr.slice:
                    if isinstance(element.slice, cst.Index):
                        yield from names(element.slice.value)
        elif isinstance(expr, cst.SimpleString):
            try:
                yield from names(cst.parse_expression(expr.evaluated_value))
            except (cst.ParserSyntaxError, TypeError):
                return
        else:
            yield dotted_name(expr)
    return any(name and name.rsplit(".", 1)[-1] in ACC_CONSTRUCTORS for name in names(annotation.annotation))


def accelerator_protocol_uses(index: FileIndex, protocol: frozenset[str]) -> frozenset[tuple[str, str]]:
    """(where, dotted name) of every expression the file uses through a member of the
    accelerator protocol: ``where`` is the class for ``self.x``/``cls.x`` and the scope's
    qualified name (``""`` for the module) for anything else. ``self`` itself is never one (a
    trainer class's own ``is_main_process`` property)."""
    members = protocol - {name for cls in index.classes.values() for name in cls.methods}
    if not index.identifiers & members:
        return frozenset()
    uses, stored = set(), set()
    for node in index.parents:
        if type(node) is not cst.Attribute or node.attr.value not in members:
            continue
        key = dotted_name(node.value)
        if key is None or key in ("self", "cls"):
            continue
        place = (_protocol_place(index, index.scope_of(node), key), key)
        parent = index.parents.get(node)
        if isinstance(parent, cst.AssignTarget) or (isinstance(parent, (cst.AnnAssign, cst.AugAssign))
                                                    and parent.target is node):
            stored.add(place)  # `args.is_main_process = ...`: the code's own object, not an accelerator
        else:
            uses.add(place)
    return frozenset(uses - stored)


def _protocol_place(index: FileIndex, scope: ScopeNode, key: str) -> str:
    info = index.functions.get(scope) if isinstance(scope, cst.FunctionDef) else None
    if key.partition(".")[0] in ("self", "cls"):
        return f"class {info.class_name}" if info is not None and info.class_name else ""
    return info.qualname if info is not None else ""


def _changed_keys(before: Env, after: Env) -> list[str]:
    if before == after:
        return []
    return [key for key in before.keys() | after.keys() if before.get(key) != after.get(key)]


def _passed_on(returned: Value | None) -> Value | None:
    """What a call of a same-file function evaluates to, from what the function returns: an
    accelerator, a prepared object, an object of a known kind (``return DataLoader(...)``) or a
    tuple of values is passed on to the caller."""
    if returned is not None and (returned.is_acc or returned.prepared != NO or returned.elements is not None
                                 or returned.items is not None or returned.kind in WRAPPED_KINDS):
        return returned
    return None


@dataclass
class _ScopeWalk:
    """What one walk of one scope recorded and produced."""

    values: dict = field(default_factory=dict)  # name or attribute read -> what it holds there
    prepare_calls: list = field(default_factory=list)
    acc_constructors: list = field(default_factory=list)
    prepared_origins: set = field(default_factory=set)
    passed: dict = field(default_factory=dict)  # called function -> parameter -> values passed
    class_binds: list = field(default_factory=list)  # (class, "self.<attr>", value), in order
    returns: Value | None = None
    has_return: bool = False
    return_exprs: list = field(default_factory=list)
    final_env: Env = field(default_factory=dict)
    prepares_grew: bool = False  # the function prepares a parameter it was not known to
    reads: dict = field(default_factory=dict)  # fact -> what it was when the walk first read it
    # self.<attr> a method prepares later through its own calls: key -> the methods that bind it
    deferred: dict = field(default_factory=dict)


@dataclass
class WalkState:
    """What a tracker leaves for the next edit of the same file: every scope's last walk and the
    summaries, valid for the same definitions and settings (``key``)."""

    key: tuple
    walks: dict
    prepares: dict  # function -> the parameters it prepares
    scopes: dict  # qualified name ("" for the module) -> scope node, where the name is unique


_OBJECT_KINDS = frozenset({"model", "optimizer", "loader", "scheduler"})


# What leaves a frozen module frozen (methods on it, calls it is passed to) is the library
# table's `keeps-frozen`; after anything else, whether `prepare` wraps it is no longer known.


def freezing_parameters(fn: cst.FunctionDef, index: FileIndex) -> dict[str, str]:
    """The parameters a helper freezes: ``"object"`` for ``p.requires_grad_(False)``,
    ``"elements"`` for ``for m in p: m.requires_grad_(False)`` (``freeze([vae, text_encoder])``),
    also under an ``if m is not None``, and not where the body also unfreezes."""
    if "requires_grad_" not in index.identifiers:
        return {}
    params = {p.name.value for p in fn.params.params}
    found: dict[str, str] = {}
    loops: dict[str, str] = {}  # loop variable -> the parameter it iterates
    nodes = list(index.walk(fn))
    for node in nodes:
        if isinstance(node, cst.For) and isinstance(node.target, cst.Name) and isinstance(node.iter, cst.Name) \
                and node.iter.value in params:
            loops[node.target.value] = node.iter.value
    for node in nodes:
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "requires_grad_" \
                and isinstance(node.func.value, cst.Name) and node.args:
            flag = node.args[0].value
            if not (isinstance(flag, cst.Name) and flag.value == "False"):
                return {}  # the helper also unfreezes: what it leaves depends on its arguments
            name = node.func.value.value
            if name in params:
                found[name] = "object"
            elif name in loops:
                found[loops[name]] = "elements"
    return found


def _freezes_every_parameter(loop: cst.CSTNode) -> str | None:
    """``for p in m.parameters(): p.requires_grad = False`` (or ``p.requires_grad_(False)``) with
    nothing else in the body: the name of ``m``, whose module then has no trainable parameter."""
    if not isinstance(loop, cst.For) or not isinstance(loop.target, cst.Name) or loop.orelse is not None:
        return None
    it = loop.iter
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value == "parameters"
            and not it.args):
        return None
    body = loop.body.body
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1:
        return None
    small = body[0].body[0]
    param = loop.target.value
    if isinstance(small, cst.Assign) and len(small.targets) == 1:
        target = small.targets[0].target
        sets = (isinstance(target, cst.Attribute) and target.attr.value == "requires_grad"
                and isinstance(target.value, cst.Name) and target.value.value == param
                and isinstance(small.value, cst.Name) and small.value.value == "False")
    elif isinstance(small, cst.Expr) and isinstance(small.value, cst.Call):
        call = small.value
        sets = (isinstance(call.func, cst.Attribute) and call.func.attr.value == "requires_grad_"
                and isinstance(call.func.value, cst.Name) and call.func.value.value == param
                and len(call.args) == 1 and isinstance(call.args[0].value, cst.Name)
                and call.args[0].value.value == "False")
    else:
        sets = False
    return dotted_name(it.func.value) if sets else None


def _thaws_some_parameter(loop: cst.CSTNode, walk) -> str | None:
    """``for name, p in m.named_parameters(): ... p.requires_grad = True``: the name of ``m``,
    some of whose parameters the loop makes trainable (``requires_grad = True`` or
    ``requires_grad_()`` / ``requires_grad_(True)`` anywhere in its body)."""
    if not isinstance(loop, cst.For):
        return None
    it = loop.iter
    if not (isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute)
            and it.func.attr.value in ("parameters", "named_parameters")):
        return None
    for node in walk(loop.body):
        if isinstance(node, cst.Assign) and isinstance(node.value, cst.Name) and node.value.value == "True" and any(
                isinstance(t.target, cst.Attribute) and t.target.attr.value == "requires_grad" for t in node.targets):
            return dotted_name(it.func.value)
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value == "requires_grad_" \
                and (not node.args or (isinstance(node.args[0].value, cst.Name) and node.args[0].value.value == "True")):
            return dotted_name(it.func.value)
    return None


def arguments_by_parameter(call: cst.Call, target: cst.FunctionDef, bound_first: bool,
                           spread: list[cst.Arg] = ()) -> list[tuple[str, cst.Arg]]:
    """``(parameter name, argument)`` for each argument of ``call`` to ``target``, up to the
    first ``*args``/``**kwargs``, then the keyword arguments ``spread`` (what a ``**kwargs`` of
    the call holds: ``FileIndex.spread_keywords``). ``bound_first``: the call fills
    ``self``/``cls`` itself (a method called on an object, or a class constructed), so
    positions start at the second parameter."""
    names = [p.name.value for p in (*target.params.posonly_params, *target.params.params)]
    if bound_first and names and names[0] in ("self", "cls"):
        names = names[1:]
    out = []
    for i, arg in enumerate(call.args):
        if arg.star:
            break
        name = arg.keyword.value if arg.keyword is not None else (names[i] if i < len(names) else None)
        if name is not None:
            out.append((name, arg))
    given = {name for name, _ in out}
    out += [(arg.keyword.value, arg) for arg in spread if arg.keyword.value not in given]
    return out


class ObjectTracker:
    """Runs the flow walk over every scope of a file and answers value queries."""

    def __init__(self, index: FileIndex, accelerator_names: tuple[str, ...] = DEFAULT_ACCELERATOR_NAMES,
                 incoming: dict[str, dict[str, str]] | None = None,
                 external: dict[str, list[tuple[str, str]]] | None = None, previous: WalkState | None = None,
                 library: Library | None = None) -> None:
        self.index = index
        # functions of other modules of the tree that return an accelerator, by the name called
        self.factories = {name for name, ops in (external or {}).items()
                          if any(kind == ACCELERATOR_FACTORY for kind, _ in ops)}
        # functions of other modules of the tree that are rank predicates: name called -> where
        # it is true ("main" or "local_main")
        self.predicates = {name: detail for name, ops in (external or {}).items()
                           for kind, detail in ops if kind == RANK_PREDICATE}
        # functions and classes of other modules of the tree whose call makes a new object of a
        # known kind: name called -> kind
        self.returned_kinds = {name: detail for name, ops in (external or {}).items()
                               for kind, detail in ops if kind == RETURNS_KIND}
        # classes of other modules of the tree that iterate constructor arguments: name called ->
        # the (position, name) of those parameters
        self.external_composites = {name: composites.decode(detail) for name, ops in (external or {}).items()
                                    for kind, detail in ops if kind == ITERATES_ARGUMENTS}
        self.accelerator_names = accelerator_names
        # from other modules of the tree: module function -> parameter (name or position) -> the
        # kind of prepared object every caller passes there
        self.incoming = incoming or {}
        self.values: dict[cst.CSTNode, Value] = {}
        self.summaries: dict[cst.FunctionDef, FunctionSummary] = {f: FunctionSummary() for f in index.functions}
        self.final_envs: dict[ScopeNode, Env] = {}
        self.class_attrs: dict[str, Env] = {}
        self.prepare_calls: list[cst.Call] = []
        self.prepared_origins: set[cst.CSTNode] = set()  # creation expressions that reached prepare()
        self.acc_constructors: list[cst.Call] = []
        self.walk_count = 0  # scope walks the fixpoint took
        self.converged = True  # False: some scope still read a changed fact after its last walk
        self._scope: ScopeNode = index.module
        self._current: _ScopeWalk | None = None
        self.library = library if library is not None else default_library()
        self.protocol_uses = accelerator_protocol_uses(index, self.library.accelerator_protocol)
        self.key = (_definitions(index), accelerator_names, self.protocol_uses, repr(sorted(self.incoming.items())), sorted(self.factories), sorted(self.predicates.items()),
                    sorted(self.returned_kinds.items()), sorted(self.external_composites.items()))
        self.kept: set[ScopeNode] = set()  # scopes whose walk of the previous edit still held
        self._freezing_cache: dict[cst.FunctionDef, dict[str, str]] = {}
        self._module_calls: dict[tuple, cst.Call] | None = None
        self._items_known = False  # some container item was bound by its key (`item_key`)
        # for each loop being walked: the states at its `break`s and at its `continue`s
        self._loop_exits: list[tuple[list[Env], list[Env]]] = []
        self._composites: dict[str, tuple] = {}  # class name -> the constructor parameters it iterates
        self._run(previous if previous is not None and previous.key == self.key else None)

    def state(self) -> WalkState:
        """What the next edit of this file may reuse (see :meth:`_run`)."""
        return WalkState(self.key, self._walks, {f: set(s.prepares_params) for f, s in self.summaries.items()},
                         self._scopes_by_name())

    def _scopes_by_name(self) -> dict[str, ScopeNode]:
        names: dict[str, ScopeNode | None] = {"": self.index.module}
        for f, info in self.index.functions.items():
            names[info.qualname] = None if info.qualname in names else f
        return {name: scope for name, scope in names.items() if scope is not None}

    # -- driver ------------------------------------------------------------------
    def _run(self, previous: WalkState | None) -> None:
        """Walk every scope once, in source order, then again only the scopes that read a fact
        (a function's returns or parameters, a class's ``self.<attr>`` bindings, an enclosing
        scope's final bindings) that changed since they read it, until nothing changes: the
        fixpoint of what the walks read and produce. Every scope is walked at most
        ``MAX_WALKS_PER_SCOPE`` times, so that a fact that keeps changing cannot loop.

        ``previous``: the walks of the file before an edit that kept its definitions (the same
        functions, parameters, classes and imports). A function whose node the edit kept (the
        re-parse keeps every statement it did not touch) starts from its last walk, which stands
        as long as every fact it read is what it was then; the others are walked."""
        scopes: list[ScopeNode] = [self.index.module, *self.index.functions]
        self._order = {scope: i for i, scope in enumerate(scopes)}
        self._walks: dict[ScopeNode, _ScopeWalk] = {}
        readers: dict[tuple, set[ScopeNode]] = {}
        self._callers: dict[cst.FunctionDef, set[ScopeNode]] = {}  # who passes arguments to a function
        self._setters: dict[str, set[ScopeNode]] = {}  # who binds self.<attr> of a class
        walked: dict[ScopeNode, int] = {}
        round_ = self._reuse(previous, readers) if previous is not None else scopes
        while True:
            self._rounds(round_, readers, walked)
            # a reused walk stands only if what it read still holds
            round_ = [scope for scope in scopes if scope not in walked and not self._still_holds(self._walks[scope])]
            if not round_:
                break
        self.kept = {scope for scope in scopes if scope not in walked}  # whose previous walk stood
        self.walk_count = sum(walked.values())
        self._collect(scopes)

    def _reuse(self, previous: WalkState, readers: dict[tuple, set[ScopeNode]]) -> list[ScopeNode]:
        """Take the previous walks of the scopes the edit kept; the scopes left to walk."""
        fresh = []
        # a scope the edit replaced (the module, the edited function) is the same scope by name:
        # what the kept walks read of it and passed to it is about the new node
        now = self._scopes_by_name()
        renamed = {old: now[name] for name, old in previous.scopes.items() if name in now and now[name] is not old}
        replaced = {new: old for old, new in renamed.items()}
        for scope in [self.index.module, *self.index.functions]:
            walk = previous.walks.get(scope)
            if walk is None:
                fresh.append(scope)
                # until it is walked, a replaced scope stands as it was: then its walk changes only
                # the facts the edit changed
                walk = previous.walks.get(replaced.get(scope))
                if walk is None:
                    continue
            elif scope in self.summaries:
                self.summaries[scope].prepares_params = set(previous.prepares.get(scope, ()))
            if renamed:
                walk = replace(walk, reads={_renamed(fact, renamed): seen for fact, seen in walk.reads.items()},
                               passed={renamed.get(f, f): params for f, params in walk.passed.items()})
            for fact in walk.reads:
                readers.setdefault(fact, set()).add(scope)
            self._publish(scope, None, walk)
        return fresh

    def _still_holds(self, walk: _ScopeWalk) -> bool:
        return all(self._fact(fact) == seen for fact, seen in walk.reads.items())

    def _fact(self, fact: tuple):
        """What a fact is now (``_MISSING`` for a function or scope the file no longer has)."""
        kind = fact[0]
        if kind == "class":
            return self.class_attrs.get(fact[1], {}).get(fact[2])
        if kind == "env":
            env = self.final_envs.get(fact[1])
            return _MISSING if env is None else env.get(fact[2])
        summary = self.summaries.get(fact[1])
        if summary is None:
            return _MISSING
        if kind == "returns":
            return _passed_on(summary.returns)
        if kind == "params":
            return summary.params
        return frozenset(summary.prepares_params)

    def _rounds(self, round_: list[ScopeNode], readers: dict[tuple, set[ScopeNode]], walked: dict[ScopeNode, int]) -> None:
        while round_:
            position = {scope: i for i, scope in enumerate(round_)}
            later: set[ScopeNode] = set()  # to walk in the next round
            for i, scope in enumerate(round_):
                walked[scope] = walked.get(scope, 0) + 1
                before = self._walks.get(scope)
                after = self._walk_scope(scope)
                for fact in after.reads:
                    readers.setdefault(fact, set()).add(scope)
                for fact in self._publish(scope, before, after):
                    for reader in readers.get(fact, ()):
                        # a reader still ahead in this round reads the new fact anyway
                        if position.get(reader, -1) > i:
                            continue
                        if walked.get(reader, 0) < MAX_WALKS_PER_SCOPE:
                            later.add(reader)
                        else:
                            self.converged = False
            round_ = sorted(later, key=self._order.__getitem__)

    def _walk_scope(self, scope: ScopeNode) -> _ScopeWalk:
        walk = _ScopeWalk()
        prepares_before = len(self.summaries[scope].prepares_params) if scope in self.summaries else 0
        self._scope, self._current = scope, walk
        env = self._entry_env(scope)
        end = self._block(self.index.body_of(scope), env)
        walk.final_env = end if end is not None else env
        self._current = None
        walk.prepares_grew = scope in self.summaries and len(self.summaries[scope].prepares_params) > prepares_before
        return walk

    def _publish(self, scope: ScopeNode, before: _ScopeWalk | None, after: _ScopeWalk) -> list[tuple]:
        """Store a scope's walk; the facts it changed, for the scopes that read them."""
        self._walks[scope] = after
        self.final_envs[scope] = after.final_env
        changed: list[tuple] = []
        changed.extend(("env", scope, key) for key in _changed_keys(before.final_env if before else {}, after.final_env))
        if isinstance(scope, cst.FunctionDef):
            summary = self.summaries[scope]
            summary.return_exprs = after.return_exprs  # read only once the walks are over
            if _passed_on(summary.returns) != _passed_on(after.returns):
                changed.append(("returns", scope))
            summary.returns = after.returns
            if after.prepares_grew:
                changed.append(("prepares", scope))
        for target in set(after.passed) | set(before.passed if before else ()):
            if target not in self.summaries:
                continue  # a function an edit replaced: the walk that passed to it is walked again
            callers = self._callers.setdefault(target, set())
            if target in after.passed:
                callers.add(scope)
            else:
                callers.discard(scope)
            if before is None or before.passed.get(target) != after.passed.get(target):
                params = self._params_passed(target)
                if params != self.summaries[target].params:
                    self.summaries[target].params = params
                    changed.append(("params", target))
        for cls in {c for c, _, _ in after.class_binds} | {c for c, _, _ in (before.class_binds if before else ())}:
            setters = self._setters.setdefault(cls, set())
            if any(c == cls for c, _, _ in after.class_binds):
                setters.add(scope)
            else:
                setters.discard(scope)
            attrs = self._class_bindings(cls)
            changed.extend(("class", cls, key) for key in _changed_keys(self.class_attrs.get(cls, {}), attrs))
            self.class_attrs[cls] = attrs
        return changed

    def _params_passed(self, target: cst.FunctionDef) -> Env:
        """What every caller passes for each parameter of ``target``, merged in source order."""
        pending: dict[str, list[Value]] = {}
        for caller in sorted(self._callers.get(target, ()), key=self._order.__getitem__):
            for name, vals in self._walks[caller].passed.get(target, {}).items():
                pending.setdefault(name, []).extend(vals)
        params: Env = {}
        for name, vals in pending.items():
            merged = vals[0]
            for v in vals[1:]:
                merged = merge(merged, v)
            # an object of a known kind travels too, prepared or not: a helper that iterates
            # what every caller passes it iterates an unsharded loader, one that prepares the
            # model it is given prepares a model
            if merged is not None and (merged.prepared != NO or merged.is_acc or merged.kind in WRAPPED_KINDS
                                       or merged.elements is not None  # (a list of such objects)
                                       # an object every caller made by a call handed to a
                                       # class's constructor (a tokenizer from
                                       # `AutoTokenizer.from_pretrained` kept on `self`): what
                                       # made it decides what its methods do. (Not to any
                                       # function: parsed arguments would then carry their
                                       # `--local_rank` into every helper's tests.)
                                       or (target.name.value == "__init__" and _made_by_calls(merged))):
                params[name] = merged
        return params

    def _class_bindings(self, cls: str) -> Env:
        """``self.<attr>`` of a class as its methods bind them, in source order: the first binding,
        unless a later one is prepared or an accelerator (prepared in any method makes the
        attribute prepared in every method)."""
        attrs: Env = {}
        for setter in sorted(self._setters.get(cls, ()), key=self._order.__getitem__):
            for c, key, value in self._walks[setter].class_binds:
                if c != cls:
                    continue
                if key not in attrs or value.prepared == YES or value.is_acc:
                    attrs[key] = value
                elif value == _UNKNOWN and attrs[key].prepared == NO and not attrs[key].is_acc:
                    # (`self.model, self.optimizer = self.setup(...)`, a method of another
                    # module: what it holds from there on is not known, so neither is "never
                    # prepared")
                    attrs[key] = _UNKNOWN
        return attrs

    def _prepared_setters(self, cls: str, key: str) -> tuple[list, Value | None]:
        """The methods that bind ``self.<key>`` to a prepared object, and the first other binding."""
        setters, earlier = [], None
        for setter in sorted(self._setters.get(cls, ()), key=self._order.__getitem__):
            for c, bound, value in self._walks[setter].class_binds:
                if c != cls or bound != key:
                    continue
                if value.prepared == NO:
                    earlier = earlier or value
                elif setter not in setters:
                    setters.append(setter)
        return setters, earlier

    def _defer_prepared_attrs(self, method: cst.FunctionDef, cls: str, env: Env) -> None:
        """A method nothing in the file calls (``run()``, ``__init__``) that prepares attributes
        through its own later calls (``self.setup(); ...; self.hook_before_train_loop()``): until
        that call, the attributes hold what they held before."""
        if self.index.call_sites(method):
            return
        # Only the deferred attributes are read as facts here: any other one the method reads
        # is read (and depended on) by its lookup, so an edit elsewhere in a large class does not
        # walk every entry method again.
        for key, value in self.class_attrs.get(cls, {}).items():
            if value.prepared != YES:
                continue
            setters, earlier = self._prepared_setters(cls, key)
            if setters and all(type(s) is cst.FunctionDef and s is not method and self.index.reaches(method, s)
                               for s in setters):
                self._read(("class", cls, key))
                env[key] = earlier or Value()
                self._current.deferred[key] = (setters, value)

    def _before_prepare(self, cls: str, key: str, scope: ScopeNode, prepared: Value) -> Value | None:
        """``self.<attr>`` read in a method that runs only before every method that binds it to
        a prepared object (``fit()`` calls ``self.setup()`` then ``self.prepare_all()``), or in
        that method before its binding: what it held before, the first other binding, or
        unknown."""
        if type(scope) is not cst.FunctionDef:
            return prepared
        method = scope
        while self.index.functions[method].class_name != cls:
            outer = self.index.functions[method].parent_scope
            if type(outer) is not cst.FunctionDef:
                return prepared
            method = outer
        setters, earlier = self._prepared_setters(cls, key)
        # the method that prepares it, read before its own binding on this path (this lookup
        # runs only where its walk has no binding of the attribute yet: a read in a loop after
        # the binding finds it on the loop's second pass)
        if any(type(s) is not cst.FunctionDef or (s is not method and not self.index.runs_only_before(method, s)
                                                   and not self._called_only_before_binding(method, s, cls, key))
               for s in setters):
            return prepared
        return earlier

    def _called_only_before_binding(self, method: cst.FunctionDef, setter: cst.FunctionDef, cls: str, key: str) -> bool:
        """Every call of ``method`` in this file sits in ``setter`` (outside any loop) before the
        ``prepare`` calls whose results ``setter`` binds to ``self.<key>`` (``__init__`` calling
        ``self.check_model()`` and then ``self.model = accelerator.prepare(self.model)``)."""
        sites = self.index.call_sites(method)
        prepares = [value.prepared_at for c, bound, value in self._walks[setter].class_binds
                    if c == cls and bound == key and value.prepared != NO]
        if not sites or not prepares or any(p is None for p in prepares):
            return False
        order = self.index.call_order
        return all(self.index.scope_of(site) is setter and site in order and p in order and order[site] < order[p]
                   and not any(type(a) in (cst.For, cst.While) for a in self.index.ancestors(site))
                   for site in sites for p in prepares)

    def _collect(self, scopes: list[ScopeNode]) -> None:
        """The answer: every scope's last walk, in source order."""
        self.values, self.prepare_calls, self.acc_constructors, self.prepared_origins = {}, [], [], set()
        for scope in scopes:
            walk = self._walks[scope]
            self.values.update(walk.values)
            self.prepare_calls.extend(walk.prepare_calls)
            self.acc_constructors.extend(walk.acc_constructors)
            self.prepared_origins |= walk.prepared_origins

    def _read(self, fact: tuple) -> None:
        if self._current is not None and fact not in self._current.reads:
            self._current.reads[fact] = self._fact(fact)

    def _entry_env(self, scope: ScopeNode) -> Env:
        env: Env = {}
        if isinstance(scope, cst.FunctionDef):
            summary = self.summaries[scope]
            self._read(("params", scope))
            for param in self.index.functions[scope].params:
                name = param.name.value
                if name in summary.params and summary.params[name].is_acc:
                    env[name] = summary.params[name]  # what every caller passes: its constructor is known
                elif name in self.accelerator_names or _annotates_accelerator(param.annotation) \
                        or (self.index.functions[scope].qualname, name) in self.protocol_uses:
                    env[name] = Value(is_acc=True, origin=param)
                elif name in summary.params:
                    env[name] = summary.params[name]
                elif declared_kind(param.annotation.annotation if param.annotation else None) is not None:
                    env[name] = Value(kind=declared_kind(param.annotation.annotation), origin=param)  # `model: nn.Module`
                elif self._param_used_as_module(param, scope):
                    env[name] = Value(kind="model", origin=param)  # used as a module in the body
                else:
                    self._read(("env", self.index.module, name))
                    if name in self.final_envs.get(self.index.module, {}):
                        env[name] = Value(origin=param)  # unknown, and it shadows the global of that name
            info = self.index.functions[scope]
            if info.class_name is not None:
                self._defer_prepared_attrs(scope, info.class_name, env)
            for param, kind in self.incoming_kinds(scope):
                if kind in (ACCELERATOR, ONE_STEP_ACCELERATOR) and param.name.value not in env:
                    env[param.name.value] = Value(is_acc=True, origin=param)  # what its callers pass
                elif kind and not kind.startswith(("rank:", ACCELERATOR)) and param.name.value not in env \
                        and not _expects_wrapper(param):  # (a rank passed there is the rank model's)
                    env[param.name.value] = Value(kind=kind, prepared=YES, origin=param)
        return env

    def incoming_kinds(self, fn: cst.FunctionDef) -> list[tuple[cst.Param, str | None]]:
        """Each parameter of ``fn`` with what callers in other modules pass there (``incoming``,
        by name or position: a prepared kind, an accelerator, a rank), or ``None``; for a class's
        ``__init__``, what `Cls(...)` calls pass, ``self`` left out."""
        info = self.index.functions[fn]
        params = info.params
        if info.class_name is None:
            passed = self.incoming.get(info.qualname)
        elif fn.name.value == "__init__" and info.qualname == f"{info.class_name}.__init__":
            passed = self.incoming.get(info.class_name)  # `Cls(...)` called in another module
            params = params[1:]
        else:
            passed = None
        if not passed:
            return []
        return [(param, passed.get(param.name.value) or passed.get(str(position)))
                for position, param in enumerate(params)]

    # -- lookups -----------------------------------------------------------------
    def lookup(self, key: str, env: Env, scope: ScopeNode) -> Value | None:
        if key in env:
            return env[key]
        head = key.partition(".")[0]
        if head == "self" or head == "cls":
            cls = self.index.class_of(scope)
            # the class's own bindings, else a base class's of this file (`self.dl` prepared in
            # the base trainer's `__init__`, iterated in the subclass's method)
            for owner in self._class_and_bases(cls.name) if cls is not None else ():
                self._read(("class", owner, key))
                attrs = self.class_attrs.get(owner, {})
                if key in attrs:
                    if attrs[key].prepared == YES:
                        return self._before_prepare(owner, key, scope, attrs[key])
                    return attrs[key]
        if head in env:
            return None  # a local shadows outer bindings
        for outer_scope in self.index.enclosing_scopes(scope):
            self._read(("env", outer_scope, key))
            outer = self.final_envs.get(outer_scope, {})
            if key in outer:
                return outer[key]
        return None

    def _class_and_bases(self, name: str) -> list[str]:
        """``name`` and its base classes defined in this file, nearest first (depth first, as
        single inheritance resolves)."""
        out: list[str] = []
        stack = [name]
        while stack and len(out) < 8:
            current = stack.pop()
            if current in out or current not in self.index.classes:
                continue
            out.append(current)
            stack.extend(reversed([b.rsplit(".", 1)[-1] for b in self.index.classes[current].bases]))
        return out

    def value_of(self, expr: cst.BaseExpression, env: Env) -> Value | None:
        """Evaluate an expression to what the model knows of its object."""
        key = dotted_name(expr)
        if key is not None:
            v = self.lookup(key, env, self._scope)
            if _unknown(v) and self._used_as_accelerator(expr):
                return Value(is_acc=True, origin=expr)
            if v is None and isinstance(expr, cst.Attribute):
                v = self._attribute_item(expr, env)
            if v is None and isinstance(expr, cst.Attribute) and expr.attr.value == "state":
                base = self.value_of(expr.value, env)
                if base is not None and base.is_acc:
                    return Value(is_acc=True, origin=expr)
            return v
        if isinstance(expr, cst.Call):
            return self._call_value(expr, env)
        if isinstance(expr, cst.Subscript):
            item = item_key(expr)
            held = self.lookup(item, env, self._scope) if item is not None else None
            if held is not None:
                # `loaders["val"]`, bound from a dict display or assigned by key (here, in another
                # method of the class for `self.loaders["val"]`, or at module level)
                return held
            base = self.value_of(expr.value, env)
            if item is not None:
                known = item_of(base, _item_name(expr))
                if known is not None:
                    return known  # `parts["model"]` of `parts = build()`, which returns a dict display
                owner = dotted_name(expr.value)
                rest = self.lookup(_other_items(owner), env, self._scope) if base is None and owner else None
                if rest is not None:
                    return rest  # `loaders["test"]` after `loaders["train"] = prepare(...)`: as before
            if base is not None and base.container:
                return replace(base, container=False, origin=expr if base.origin is not None else None, items=None)
            return None
        if isinstance(expr, cst.IfExp):
            known = self.index.known_test(expr.test)
            if known is not None:  # `args.n if args.n is not None else ...` with a CLI default
                return self.value_of(expr.body if known else expr.orelse, env)
            # `Accelerator(log_with=...) if track else Accelerator()`: what either branch holds
            body, orelse = self.value_of(expr.body, env), self.value_of(expr.orelse, env)
            if body is None or orelse is None:
                return None
            return merge(body, orelse)
        if isinstance(expr, cst.Dict):
            return self._dict_value(expr, env)
        if isinstance(expr, (cst.Tuple, cst.List)) and expr.elements \
                and not any(isinstance(e, cst.StarredElement) for e in expr.elements):
            items = tuple(self.value_of(e.value, env) for e in expr.elements)
            if any(v is not None and (v.is_acc or v.prepared != NO or v.kind in WRAPPED_KINDS) for v in items):
                # `return train_dl, eval_dl`; `train(nets=[net_g, net_d])` then `net_g, net_d = nets`
                return Value(origin=expr, elements=items)
            return None
        if isinstance(expr, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
            element = expr.value if isinstance(expr, cst.DictComp) else expr.elt
            if isinstance(element, cst.Call):
                inner = self._call_value(element, self._comprehension_env(expr.for_in, env))
                if inner is not None and inner.prepared == YES:
                    return replace(inner, container=True, origin=expr)
            return None
        return None

    def _comprehension_env(self, comp: cst.CompFor, env: Env) -> Env:
        """``env`` with a comprehension's targets bound to the items of the container it runs
        over: ``dl`` in ``for dl in loaders.values()`` / ``for k, dl in loaders.items()`` holds an
        item of the container ``loaders`` holds. (A plain loop over a container is left alone: the
        model does not tell a dict, whose loop gives its keys, from a list.)"""
        iterated = comp.iter
        target = comp.target
        method = None
        if type(iterated) is cst.Call and type(iterated.func) is cst.Attribute and not iterated.args:
            method, iterated = iterated.func.attr.value, iterated.func.value
        container = self.value_of(iterated, env)
        if container is None or not container.container or _empty(container):
            return env
        item = replace(container, container=False)
        if method == "items" and type(target) is cst.Tuple and len(target.elements) == 2:
            target = target.elements[1].value
        elif method != "values":
            return env  # (a plain loop over a dict gives its keys)
        key = dotted_name(target)
        if key is None:
            return env
        return {**env, key: item}

    def _used_as_accelerator(self, expr: cst.BaseExpression) -> bool:
        """A name or attribute whose maker the analysis cannot see, used through the accelerator
        protocol in its scope (``accelerator.wait_for_everyone()``; ``self.acc.is_main_process``
        anywhere in its class), or spelled like a name the project declares
        (``accelerator-names``). A name that an import binds is whatever it imported, and an
        attribute of an imported module is that module's: ``torch.accelerator`` is PyTorch's
        device API, never Accelerate's ``Accelerator``."""
        dotted = dotted_name(expr)
        if dotted is None:
            return False
        used = (_protocol_place(self.index, self._scope, dotted), dotted) in self.protocol_uses
        if not used and last_attr(expr) not in self.accelerator_names:
            return False
        qualified = self.index.imports.qualify(dotted)
        if qualified is not None:
            return qualified.startswith("accelerate")
        # an attribute of another object (`trainer_config.accelerator`, a Lightning trainer's
        # device string) is Accelerate's only in a file that imports Accelerate
        if isinstance(expr, cst.Attribute) and (dotted or "").partition(".")[0] not in ("self", "cls"):
            return self.index.imports.imports_module("accelerate")
        return True

    def _dict_value(self, expr: cst.Dict, env: Env) -> Value | None:
        """``{"train": DataLoader(...), "eval": DataLoader(...)}``: a container whose items are
        all objects of one kind; an item read from it (``loaders["train"]``) may be any of them."""
        if not expr.elements:
            return Value(container=True)  # `loaders = {}`: filled item by item later
        items = self._display_items(expr, env)
        joined: Value | None = None
        for element in expr.elements:
            if not isinstance(element, cst.DictElement):
                return None
            value = self.value_of(element.value, env)
            if value is None or value.kind is None or value.is_acc or value.container:
                return Value(origin=expr, items=items) if items else None
            if joined is not None and joined.kind != value.kind:
                return Value(origin=expr, items=items) if items else None
            joined = value if joined is None else merge(joined, value)
        if joined is None:
            return None
        return replace(joined, container=True, origin=None, alternatives=joined.origins(), items=items)

    def _attribute_item(self, expr: cst.Attribute, env: Env) -> Value | None:
        """``nets.gen`` of ``nets = Munch(gen=G(), disc=D())``: an item, read as an attribute."""
        base = self.value_of(expr.value, env)
        if base is None or not base.attribute_items:
            return None
        known = item_of(base, expr.attr.value)
        if known is not None or not base.container:
            return known
        return replace(base, container=False, items=None, attribute_items=False)

    def _keyword_dict(self, call: cst.Call) -> str | None:
        """``"attributes"`` for ``Munch(gen=G(), ...)`` (a class of the library table's
        ``attribute-dicts``), ``"keys"`` for ``dict(gen=G(), ...)``, both from keyword arguments
        only; ``None`` for any other call."""
        if not call.args or any(a.keyword is None or a.star for a in call.args):
            return None
        qualified = self.index.imports.qualify_expr(call.func) or ""
        if qualified in self.library.attribute_dicts:
            return "attributes"
        if type(call.func) is cst.Name and call.func.value == "dict" and "dict" not in self.index.classes \
                and self.index.resolve_function_name("dict", self.index.scope_of(call)) is None:
            return "keys"
        return None

    def _keyword_dict_value(self, call: cst.Call, made: str, env: Env) -> Value | None:
        """What ``_dict_value`` knows of a dict display, for a dict made from keyword arguments."""
        items = tuple((a.keyword.value, v) for a in call.args
                      if (v := self.value_of(a.value, env)) is not None
                      and (v.kind is not None or v.is_acc or v.prepared != NO)) or None
        joined: Value | None = None
        for arg in call.args:
            value = self.value_of(arg.value, env)
            if value is None or value.kind is None or value.is_acc or value.container or \
                    (joined is not None and joined.kind != value.kind):
                return Value(origin=call, items=items, attribute_items=made == "attributes") if items else None
            joined = value if joined is None else merge(joined, value)
        return replace(joined, container=True, origin=None, alternatives=joined.origins(), items=items,
                       attribute_items=made == "attributes")

    def _display_items(self, expr: cst.Dict, env: Env) -> tuple | None:
        """(key, value) for each item of a dict display under a constant string key whose value
        the model knows as an object (``{"model": model, "lr": 1e-4}``: only ``model``)."""
        items = []
        for element in expr.elements:
            if isinstance(element, cst.DictElement) and type(element.key) is cst.SimpleString:
                value = self.value_of(element.value, env)
                if value is not None and (value.kind is not None or value.is_acc or value.prepared != NO):
                    items.append((element.key.evaluated_value, value))
        return tuple(items) or None

    def is_acc_constructor(self, call: cst.Call) -> bool:
        name = dotted_name(call.func)
        if name is None:
            return False
        qual = self.index.imports.qualify(name)
        if qual is not None:  # imported: `from accelerate import Accelerator as A` counts, a look-alike does not
            return qual.startswith("accelerate") and qual.split(".")[-1] in ACC_CONSTRUCTORS
        return name.split(".")[-1] in ACC_CONSTRUCTORS or name in self.accelerator_subclasses

    @cached_property
    def accelerator_subclasses(self) -> frozenset[str]:
        """Top-level classes of this file that subclass Accelerate's ``Accelerator`` (directly or
        through another such class): their instances are accelerators."""
        found: set[str] = set()
        changed = True
        while changed:
            changed = False
            for name, cls in self.index.classes.items():
                if name in found or cls.node not in self.index.module.body:
                    continue
                for base in cls.bases:
                    qual = self.index.imports.qualify(base) or ""
                    if base in found or (qual.startswith("accelerate") and qual.split(".")[-1] in ACC_CONSTRUCTORS):
                        found.add(name)
                        changed = True
                        break
        return frozenset(found)

    def _call_value(self, call: cst.Call, env: Env) -> Value | None:
        if self.is_acc_constructor(call) or (self.factories and dotted_name(call.func) in self.factories):
            return Value(is_acc=True, origin=call)
        func = call.func
        if self.library.identity_calls:
            position = self.library.identity_calls.get(self.index.imports.qualify_expr(func) or "")
            positional = [a for a in call.args if a.keyword is None and not a.star]
            if position is not None and len(positional) > position:
                return self.value_of(positional[position].value, env)  # `cast(Dataset, ds)` is `ds`
        if isinstance(func, cst.Attribute):
            owner = self.value_of(func.value, env)
            method = func.attr.value
            if owner is not None and owner.is_acc:
                positional = [a for a in call.args if a.keyword is None]
                if method in PREPARE_METHODS and len(positional) == 1 and not positional[0].star:
                    return self._prepared(call, positional[0].value, env)
                if method == "unwrap_model" and call.args:
                    inner = self.value_of(call.args[0].value, env)
                    return Value(kind="model", unwrapped=True, origin=call, frozen=bool(inner and inner.frozen))
                if method == "skip_first_batches" and call.args:
                    inner = self.value_of(call.args[0].value, env)
                    if inner is not None and inner.prepared != NO:
                        return replace(inner, origin=call)
                if method == "state":
                    return Value(is_acc=True, origin=call)
                return None
            if method in SELF_RETURNING and owner is not None and owner.kind == "model" and not owner.is_acc:
                return owner  # `Net().to(device)`, `model.train()`: the module itself
            if method in ("to", "cuda", "cpu") and owner is not None and owner.kind is None and not owner.is_acc \
                    and isinstance(owner.origin, cst.Call):
                return owner  # `Pipeline.from_pretrained(...).to(device)`: a pipeline moves itself and returns itself
        target = self.index.resolve_call(call)
        if target is not None:
            self._read(("returns", target))
            returned = _passed_on(self.summaries[target].returns)
            if returned is not None and returned.prepared == NO and not returned.is_acc and returned.elements is None \
                    and returned.items is None:
                # a new object on every call (`make_loader()` twice is two loaders): made here
                return replace(returned, origin=call, alternatives=frozenset())
            if returned is not None:
                return returned
        name = dotted_name(func) or ""
        short = name.split(".")[-1]
        made = self._keyword_dict(call)
        if made is not None:
            return self._keyword_dict_value(call, made, env)
        if self.iterated_parameters(call):
            return Value(kind=COMPOSITE, origin=call)
        if name in self.returned_kinds:  # made by a function or class of another module of the tree
            holder, _, kind = self.returned_kinds[name].rpartition(":")
            if holder == "tuple":  # `return train_loader, config`: what each item is ("-": unknown)
                return Value(origin=call, elements=tuple(Value(kind=k, origin=call) if k != "-" else None
                                                         for k in kind.split(",")))
            if holder:  # a dict of such objects (its items read as attributes too, for a Munch)
                return Value(kind=kind, origin=None, alternatives=frozenset({call}), container=True,
                             attribute_items=holder == "attribute-dict")
            return Value(kind=kind, origin=call)
        known = self._constructor_kind(call)
        if known is not None:
            return Value(kind=known, origin=call)
        qual = self.index.imports.qualify(name) or name
        if qual in _EMA_CONSTRUCTORS:
            # an exponential moving average of a model: its copy's parameters do not require
            # grad, so prepare() places it but wraps nothing
            return Value(kind="model", origin=call, frozen=True)
        cls = self._enclosing_class_made(call) or self.index.classes.get(short)
        if cls is not None and any("Module" in b or b.endswith("Model") for b in cls.bases):
            # an nn.Module that holds no parameters (only an optimizer, a schedule) is not
            # wrapped by prepare(): what it is then is unknown, and its binding names it
            return Value(kind="model" if self._may_hold_parameters(cls) else None, origin=call)
        if cls is not None and self.is_scheduler_class(cls):
            return Value(kind="scheduler", origin=call)
        return Value(origin=call)

    def exported_kinds(self) -> dict[str, str]:
        """What other modules get by calling this module's functions and classes: a new object of
        a known kind on every call (a function that returns ``DataLoader(...)``, a Module
        subclass that may hold parameters)."""
        found: dict[str, str] = {}
        for name, fn in self.index.module_functions.items():
            returned = _passed_on(self.summaries[fn].returns)
            if returned is not None and returned.kind in _OBJECT_KINDS and returned.prepared == NO \
                    and not returned.is_acc and returned.elements is None:
                if not returned.container:
                    found[name] = returned.kind
                elif returned.items is not None or returned.attribute_items:
                    # `def build_model(): return Munch(gen=G(), disc=D())`: a dict of such objects
                    found[name] = ("attribute-dict:" if returned.attribute_items else "dict:") + returned.kind
            elif returned is not None and returned.elements is not None and not returned.is_acc and any(
                    e is not None and e.kind in _OBJECT_KINDS and e.prepared == NO and not e.container and not e.is_acc
                    for e in returned.elements):
                # `return train_loader, config`: a new object of a known kind in some places
                found[name] = "tuple:" + ",".join(
                    e.kind if e is not None and e.kind in _OBJECT_KINDS and e.prepared == NO and not e.container
                    and not e.is_acc else "-" for e in returned.elements)
            elif self._returns_a_used_module(fn):
                found[name] = "model"
        for name, cls in self.index.classes.items():
            if cls.node not in self.index.module.body:
                continue
            for method_name, method in cls.methods.items():
                # an alternative constructor (`CrossEncoder.from_pretrained(path)` returning
                # `cls(...)`): its callers in other modules call it as `Class.method`
                returned = _passed_on(self.summaries[method].returns) if any(
                    dotted_name(d.decorator) in ("classmethod", "staticmethod") for d in method.decorators) else None
                if returned is not None and returned.kind in _OBJECT_KINDS and returned.prepared == NO \
                        and not returned.is_acc and not returned.container and returned.elements is None:
                    found[f"{name}.{method_name}"] = returned.kind
        for name, cls in self.index.classes.items():
            if cls.node in self.index.module.body and any("Module" in b or b.endswith("Model") for b in cls.bases) \
                    and self._may_hold_parameters(cls):
                found[name] = "model"
            elif cls.node in self.index.module.body and self.is_loader_class(cls):
                found[name] = "loader"
            elif cls.node in self.index.module.body and self.is_scheduler_class(cls):
                found[name] = "scheduler"
        return found

    def _returns_a_used_module(self, fn: cst.FunctionDef) -> bool:
        """Every ``return`` of ``fn`` returns a local name that the function uses as a module
        (``model = klass(config); n = sum(p.numel() for p in model.parameters()); return
        model``), with no other return: whatever class made it, it is a module."""
        exprs = self.summaries[fn].return_exprs
        returned = self.summaries[fn].returns
        return bool(exprs) and (returned is None or (returned.kind is None and not returned.is_acc
                                                     and returned.prepared == NO)) \
            and all(type(e) is cst.Name and self.module_evidence(e, fn) is not None for e in exprs)

    def iterated_parameters(self, call: cst.Call) -> tuple[tuple[int, str], ...]:
        """The constructor parameters (position, name) whose objects the class ``call`` builds
        iterates when a loop reads it (``composites``): a class of this file that is no
        DataLoader and no module, or one of another module of the tree; empty for any other call."""
        name = dotted_name(call.func) or ""
        if name in self.external_composites:
            return self.external_composites[name]
        cls = self.index.classes.get(name)
        if cls is None or self.index.resolve_function_name(name, self.index.scope_of(call)) is not None:
            return ()
        return self.class_iterated_parameters(cls)

    def class_iterated_parameters(self, cls) -> tuple[tuple[int, str], ...]:
        cached = self._composites.get(cls.name)
        if cached is None:
            if self.is_loader_class(cls) or any("Module" in b or b.endswith("Model") for b in cls.bases):
                cached = ()  # (prepare wraps these)
            else:
                cached = composites.iterated_parameters(cls)
            self._composites[cls.name] = cached
        return cached

    def _constructor_kind(self, call: cst.Call) -> str | None:
        """What a library constructor or factory builds: a loader, a scheduler, an optimizer or
        a pretrained model; ``None`` for anything else."""
        name = dotted_name(call.func) or ""
        short = name.split(".")[-1]
        qual = self.index.imports.qualify(name) or name
        if short == "DataLoader" or qual in self.library.loader_classes:
            return "loader"
        local = self.index.classes.get(short)
        if local is not None and self.index.resolve_function_name(short, self.index.scope_of(call)) is None \
                and self.is_loader_class(local):
            return "loader"  # a DataLoader subclass of this file
        if "lr_scheduler" in qual or short == "get_scheduler" or re.match(r"get_.*schedule", short):
            return "scheduler"
        if qual.startswith(("torch.optim.", "bitsandbytes.optim", "bnb.optim")) or short in ("AdamW", "Adam", "SGD", "Adafactor"):
            return "optimizer"
        if short == "from_pretrained" and re.search(r"(Model|ForCausalLM|For[A-Z]\w+|UNet|Transformer|Net)", name):
            return "model"
        if qual.startswith(("torch.nn.", "nn.")) and short[:1].isupper() and not qual.startswith(
                ("torch.nn.utils.", "torch.nn.functional.", "nn.utils.", "nn.functional.")) \
                and short not in ("Parameter", "ParameterList", "ParameterDict", "Identity"):
            return "model"  # a layer or container of layers: a module
        if qual.startswith(("transformers.", "diffusers.")) and re.search(r"(Model|For[A-Z]\w+)$", short):
            return "model"  # a library model class built from its config
        if qual in _MODULE_CONTAINERS:
            return "model"  # a torch Module holding another model's submodules
        return None

    def constructs_loader(self, call: cst.CSTNode) -> bool:
        """``call`` builds a DataLoader: torch's or a subclass (``_constructor_kind``)."""
        return isinstance(call, cst.Call) and self._constructor_kind(call) == "loader"

    def is_loader_class(self, cls) -> bool:
        """Whether ``cls`` (a class of this file) derives from a DataLoader: torch's, one of the
        library table's ``loader-classes``, or another class of this file that does."""
        return self._derives_from(cls, lambda base, qualified: base.split(".")[-1] == "DataLoader"
                                  or qualified in self.library.loader_classes)

    def is_scheduler_class(self, cls) -> bool:
        """Whether ``cls`` (a class of this file) derives from one of torch's learning-rate
        schedulers (``torch.optim.lr_scheduler._LRScheduler``, ``LambdaLR``, ...), directly or
        through another class of this file."""
        return self._derives_from(cls, lambda base, qualified: qualified.startswith("torch.optim.lr_scheduler."))

    def _derives_from(self, cls, is_wanted_base: Callable[[str, str], bool], seen: frozenset = frozenset()) -> bool:
        """Whether a base of ``cls`` (written, qualified) passes ``is_wanted_base``, directly or
        through another class of this file."""
        if cls.name in seen:
            return False
        for base in cls.bases:
            if is_wanted_base(base, self.index.imports.qualify(base) or base):
                return True
            local = self.index.classes.get(base.split(".")[-1])
            if local is not None and self._derives_from(local, is_wanted_base, seen | {cls.name}):
                return True
        return False

    def _enclosing_class_made(self, call: cst.Call):
        """The class whose instance ``cls(...)`` makes inside one of its ``@classmethod``s (an
        alternative constructor such as ``from_pretrained``), or ``None``."""
        if not isinstance(call.func, cst.Name):
            return None
        scope = self.index.scope_of(call)
        if not isinstance(scope, cst.FunctionDef) or not scope.params.params \
                or scope.params.params[0].name.value != call.func.value \
                or not any(dotted_name(d.decorator) == "classmethod" for d in scope.decorators):
            return None
        return self.index.class_of(scope)

    def _may_hold_parameters(self, cls, seen: frozenset = frozenset()) -> bool:
        """Whether instances of ``cls`` (a Module subclass defined in this file) may own
        trainable parameters: it defines or inherits ``forward``, derives from a model class
        other than a bare ``nn.Module``, or stores a layer, a parameter or a model in ``self``."""
        if cls.name in seen:
            return True
        seen = seen | {cls.name}
        if "forward" in cls.methods:
            return True
        for base in cls.bases:
            short = base.split(".")[-1]
            if short == "Module":
                continue
            local = self.index.classes.get(short)
            if local is None or self._may_hold_parameters(local, seen):
                return True
        for method in cls.methods.values():
            for call in self.index.calls_in(method):
                parent = self.index.parents.get(call)
                if not isinstance(parent, (cst.Assign, cst.AnnAssign)):
                    # setattr(self, name, nn.Linear(...)), a ModuleList's append: may hold some
                    if last_attr(call.func) in ("setattr", "append", "add_module", "register_parameter", "register_module"):
                        return True
                    continue
                name = dotted_name(call.func) or ""
                qual = self.index.imports.qualify(name) or name
                short = name.split(".")[-1]
                known = self._constructor_kind(call)
                if known is not None:
                    if known == "model":
                        return True
                    continue
                local = self.index.classes.get(short)
                if local is not None and any("Module" in b or b.endswith("Model") for b in local.bases):
                    if self._may_hold_parameters(local, seen):
                        return True
                elif qual.startswith(("torch.nn.", "nn.")) or short in ("Parameter", "from_pretrained", "deepcopy") \
                        or short[:1].isupper() and not short.endswith(("Optimizer", "Scheduler", "LR", "Warmup", "Accelerator")):
                    return True
        return False

    def _module_uses(self) -> dict[tuple, cst.Call]:
        """Objects used as modules (``model.parameters()``, ``named_parameters()``, ``modules()``,
        ``requires_grad_(...)``, a forward hook...): what is done with them says they are
        ``nn.Module`` instances, whatever they are called. Keyed by (scope, name) for local names
        and (class, name) for ``self.<attr>``; the value is the first such call."""
        if self._module_calls is None:
            uses: dict[tuple, cst.Call] = {}
            for call in self.index.calls:
                if not isinstance(call.func, cst.Attribute) or call.func.attr.value not in MODULE_ONLY_METHODS:
                    continue
                key = dotted_name(call.func.value)
                if key is None:
                    continue
                scope = self.index.scope_of(call)
                cls = self.index.class_of(scope) if key.startswith("self.") else None
                uses.setdefault((cls.name if cls is not None else scope, key), call)
            self._module_calls = uses
        return self._module_calls

    def module_evidence(self, arg: cst.BaseExpression, scope: ScopeNode) -> cst.Call | None:
        """A call that uses ``arg``'s object as a module (``arg.parameters()``) in ``scope`` (or,
        for ``self.<attr>``, in any method of the class)."""
        key = dotted_name(arg)
        if key is None:
            return None
        if key.startswith("self."):
            cls = self.index.class_of(scope)
            return self._module_uses().get((cls.name, key)) if cls is not None else None
        return self._module_uses().get((scope, key))

    def _param_used_as_module(self, param: cst.Param, scope: cst.FunctionDef) -> bool:
        """The body uses the parameter's own object as a module: the use comes before the
        first rebinding of its name. ``model = model(config)`` then ``model.parameters()``
        is a class (or factory) handed in and the instance it builds."""
        evidence = self.module_evidence(param.name, scope)
        if evidence is None:
            return False
        name = param.name.value
        for node in self.index.walk(scope.body):
            if node is evidence:
                return True
            if isinstance(node, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.For)) and name in (
                    bound for target in statement_targets(node) for bound in bound_names(target)):
                return False
        return False

    def kind_for_prepare(self, call: cst.Call, arg: cst.BaseExpression, inner: Value | None,
                         scope: ScopeNode) -> str | None:
        """The kind of object ``arg`` is as ``prepare`` sees it: from the method (``prepare_model``),
        how the object was made (``inner``), or its use as a module; ``None`` for anything
        ``prepare`` returns unchanged or that is unknown."""
        kind = PREPARE_METHODS.get(last_attr(call.func) or "")
        if kind is None:
            kind = inner.kind if inner is not None else None
        if kind is None and self.module_evidence(arg, scope) is not None:
            kind = "model"  # used as a module: it is one
        return kind if kind in WRAPPED_KINDS else None

    def discarded_results(self, call: cst.Call) -> frozenset[int]:
        """The positions of ``prepare``'s arguments whose results the assignment throws away
        (bound to ``_``): the objects given there are not what the program goes on to use."""
        assign = self.index.parents.get(call)
        if not (isinstance(assign, cst.Assign) and assign.value is call and len(assign.targets) == 1
                and isinstance(assign.targets[0].target, (cst.Tuple, cst.List))):
            return frozenset()
        elements = assign.targets[0].target.elements
        if any(isinstance(e, cst.StarredElement) for e in elements) or any(a.star for a in call.args) \
                or len(elements) != len(call.args):
            return frozenset()
        return frozenset(i for i, e in enumerate(elements) if isinstance(e.value, cst.Name) and e.value.value == "_")

    def _prepared(self, call: cst.Call, arg: cst.BaseExpression, env: Env) -> Value:
        inner = self.value_of(arg, env)
        discarded = self.discarded_results(call)
        if not any(a.value is arg for i, a in enumerate(call.args) if i in discarded):
            # (what `_` gets is nothing the program reads: its object was not prepared for it)
            if inner is not None:
                self._current.prepared_origins.update(inner.origins())
            self._current.prepared_origins.add(arg)
        if inner is not None and (inner.container or inner.is_acc or inner.kind == COMPOSITE):
            # a dict or list of objects, or an object of a class that is no module, optimizer,
            # DataLoader or scheduler, comes back unchanged: prepare wraps none of them
            return inner
        kind = self.kind_for_prepare(call, arg, inner, self._scope)
        if kind is None:
            # prepare() returns an object that is not a module, optimizer, loader or scheduler
            # unchanged; of an object of unknown kind nothing is known: it may or may not have been
            # wrapped, and no rule reports on it
            return Value(prepared=MAYBE, origin=inner.origin if inner else arg,
                         alternatives=inner.alternatives if inner else frozenset(), prepared_at=call,
                         prepared_unknown_kind=inner is None or (inner.kind is None and inner.prepared == NO))
        not_wrapped = bool(inner and inner.frozen) or any(
            a.keyword is not None and a.keyword.value == "evaluation_mode" and isinstance(a.value, cst.Name) and a.value.value == "True"
            for a in call.args
        )
        if inner is not None and inner.prepared == YES:
            return inner  # prepare() returns an already prepared object unchanged
        # (what it was made by stays known: one of several constructors on different paths)
        return Value(kind=kind, prepared=YES, origin=inner.origin if inner else arg,
                     alternatives=inner.alternatives if inner else frozenset(), not_wrapped=not_wrapped,
                     prepared_at=call)

    # -- statements ---------------------------------------------------------------
    def _record(self, node: cst.CSTNode, env: Env) -> None:
        parents = self.index.parents
        for expr in self.index.loads_in(node):
            key = dotted_name(expr)
            if key is None:
                continue
            holder = parents.get(expr)
            if type(holder) is cst.Subscript and holder.value is expr:
                item = item_key(holder)
                held = self.lookup(item, env, self._scope) if item is not None else None
                if held is None and item is not None:
                    held = item_of(self.lookup(key, env, self._scope), _item_name(holder))
                if held is None and item is None:
                    whole = self.lookup(key, env, self._scope)
                    if whole is not None and whole.container and whole.kind is not None:
                        # `nets[k]` of a dict of modules: any of them
                        held = replace(whole, container=False, items=None, attribute_items=False)
                if held is not None:
                    self._current.values[holder] = held
            v = self.lookup(key, env, self._scope)
            if v is None and type(expr) is cst.Attribute:
                v = self._attribute_item(expr, env)
            if _unknown(v) and self._used_as_accelerator(expr) and not self.is_binding(expr):
                v = Value(is_acc=True, origin=expr)
            if v is not None:
                self._current.values[expr] = v
        for call in self.index.calls_in(node):
            self._note_call(call, env)

    def _freezing(self, fn: cst.FunctionDef) -> dict[str, str]:
        found = self._freezing_cache.get(fn)
        if found is None:
            found = self._freezing_cache[fn] = freezing_parameters(fn, self.index)
        return found

    def _thaw(self, key: str | None, env: Env) -> None:
        """A frozen module some call may have given trainable parameters is frozen no longer."""
        if key and key in env and env[key] is not None and env[key].frozen:
            env[key] = replace(env[key], frozen=False)

    def _thaw_arguments(self, call: cst.Call, env: Env) -> None:
        """Frozen modules passed to a call that may add parameters to them (anything but
        ``prepare``, a same-file helper that only freezes, and the read-only builtins)."""
        func = call.func
        if isinstance(func, cst.Attribute):
            owner = self.value_of(func.value, env)
            if owner is not None and owner.is_acc:
                return  # prepare(), register_for_checkpointing(), unwrap_model(): none adds parameters
        if (self.index.imports.qualify_expr(func) or dotted_name(func) or "") in self.library.keeps_frozen_calls:
            return
        target = self.index.resolve_call(call)
        freezes = self._freezing(target) if target is not None else {}
        freezing_args = {id(arg) for name, arg in arguments_by_parameter(call, target, isinstance(func, cst.Attribute))
                         if name in freezes} if freezes else set()
        for arg in call.args:
            if id(arg) in freezing_args:
                continue
            values = arg.value.elements if isinstance(arg.value, (cst.List, cst.Tuple)) else [arg.value]
            for value in values:
                self._thaw(dotted_name(value.value if isinstance(value, cst.BaseElement) else value), env)

    def _freeze_through(self, target: cst.FunctionDef, call: cst.Call, env: Env) -> None:
        """``freeze_models([vae, text_encoder])``: a same-file helper that freezes its argument
        (or each element of the list it is given) freezes what the call passes."""
        freezes = self._freezing(target)
        if not freezes:
            return
        for pname, arg in arguments_by_parameter(call, target, isinstance(call.func, cst.Attribute)):
            how = freezes.get(pname)
            if how == "object":
                items = [arg.value]
            elif how == "elements" and isinstance(arg.value, (cst.List, cst.Tuple)):
                items = [e.value for e in arg.value.elements]
            else:
                continue
            for item in items:
                key = dotted_name(item)
                if key and key in env and env[key] is not None:
                    env[key] = replace(env[key], frozen=True)

    def is_binding(self, expr: cst.BaseExpression) -> bool:
        """``expr`` is the name being bound (``accelerator = "CUDA"``): what it will hold is the
        assigned value, not a guess from its name."""
        parent = self.index.parents.get(expr)
        return isinstance(parent, cst.AssignTarget) or (
            isinstance(parent, (cst.AnnAssign, cst.AugAssign, cst.For)) and parent.target is expr)

    def _note_call(self, call: cst.Call, env: Env) -> None:
        if self.is_acc_constructor(call):
            self._current.acc_constructors.append(call)
        func = call.func
        if self._items_known and any("[" in k for k in env):
            # a container whose items are known by key, handed to a call or changed by one of
            # its methods (`loaders.update(...)`, `setup(loaders)`): its items are unknown after
            if isinstance(func, cst.Attribute) and func.attr.value not in _READING_METHODS:
                _forget_items(dotted_name(func.value), env)
            for arg in call.args:
                _forget_items(dotted_name(arg.value), env)
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            owner = self.value_of(func.value, env)
            if owner is not None and owner.is_acc and method in PREPARE_METHODS:
                self._current.prepare_calls.append(call)
                discarded = self.discarded_results(call)
                for position, arg in enumerate(call.args):
                    if position in discarded:
                        continue  # `model, opt, _ = prepare(model, opt, loader)`: the loader stays as it was
                    inner = self.value_of(arg.value, env)
                    if inner is not None:
                        self._current.prepared_origins.update(inner.origins())
                    self._current.prepared_origins.add(arg.value)
                    if isinstance(self._scope, cst.FunctionDef):
                        pname = dotted_name(arg.value)
                        if pname and pname in {p.name.value for p in self.index.functions[self._scope].params}:
                            self.summaries[self._scope].prepares_params.add(pname)
            if method == "requires_grad_" and call.args and isinstance(call.args[0].value, cst.Name) and call.args[0].value.value == "False":
                key = dotted_name(func.value)
                if key and key in env:
                    env[key] = replace(env[key], frozen=True)
            elif method not in self.library.keeps_frozen_methods:
                self._thaw(dotted_name(func.value), env)
        self._thaw_arguments(call, env)
        target = self.index.resolve_call(call)
        if target is not None and self._current is not None and self._current.deferred:
            for key, (setters, value) in list(self._current.deferred.items()):
                if any(self.index.reaches(target, s) for s in setters):
                    env[key] = value
        if target is not None:
            self._freeze_through(target, call, env)
        constructed = self.index.constructor_of(call) if target is None else None
        if constructed is not None:
            target = constructed  # `Trainer(model, accelerator=acc)`: what its `__init__` receives
        if target is not None:
            pending = self._current.passed.setdefault(target, {})
            self._read(("prepares", target))
            for pname, arg in arguments_by_parameter(call, target, isinstance(func, cst.Attribute) or constructed is not None,
                                                     self.index.spread_keywords(call)):
                v = self.value_of(arg.value, env)
                pending.setdefault(pname, []).append(v if v is not None else Value(origin=arg.value))
                if pname in self.summaries[target].prepares_params:
                    inner = self.value_of(arg.value, env)
                    if inner is not None and inner.origin is not None:
                        self._current.prepared_origins.add(inner.origin)
                    self._current.prepared_origins.add(arg.value)

    def _bind(self, target: cst.BaseExpression, value: Value | None, env: Env) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind(el.value, None, env)
            return
        if isinstance(target, cst.StarredElement):
            self._bind(target.value, None, env)
            return
        if isinstance(target, cst.Subscript):
            # `loaders["train"] = accelerator.prepare(loaders["train"])`: the container no longer
            # holds what the model knew of it as a whole; the item assigned by a constant key
            # holds the new value, and the other items keep theirs
            base = dotted_name(target.value)
            item = item_key(target)
            if base is not None and base in env and env[base].container:
                held = env[base]
                del env[base]
                if item is not None:
                    # the items not assigned by their own key still hold what the container held
                    env[_other_items(base)] = replace(held, container=False, items=None)
                if item is None and value is not None and value.kind is not None and not value.is_acc \
                        and not value.container and (_empty(held) or held.kind == value.kind):
                    # `loaders[split] = DataLoader(...)` in a loop: a container of loaders
                    joined = value if _empty(held) else merge(replace(held, container=False), value)
                    env[base] = replace(joined, container=True, origin=None, alternatives=joined.origins())
                    _forget_items(base, env)  # any item known by its key may be the one replaced
                    return
            if item is not None:
                env[item] = value if value is not None else Value()
                self._items_known = True
                self._bind_class_item(item, env[item])
            elif base is not None:
                _forget_items(base, env)  # `loaders[k] = ...`: any item may have changed
            return
        key = dotted_name(target)
        if key is None:
            return
        deferred = self._current.deferred if self._current is not None else {}
        if self._items_known:
            _forget_items(key, env)  # the items of what it held before
        for k in [k for k in env if k.startswith(key + ".")]:
            if k in deferred:
                env[k] = Value()  # a new object: its attribute is not the one prepared later
            else:
                del env[k]
        if value is None:
            value = Value()
        env[key] = value
        if key.startswith("self.") and isinstance(self._scope, cst.FunctionDef):
            cls = self.index.class_of(self._scope)
            if cls is not None:
                self._current.class_binds.append((cls.name, key, value))

    def _assign(self, targets: list[cst.BaseExpression], value_expr: cst.BaseExpression, env: Env) -> None:
        call = value_expr if isinstance(value_expr, cst.Call) else None
        multi_prepare = None
        if call is not None and isinstance(call.func, cst.Attribute) and call.func.attr.value == "prepare":
            owner = self.value_of(call.func.value, env)
            positional = [a for a in call.args if a.keyword is None]
            if owner is not None and owner.is_acc and len(positional) > 1:
                if all(not a.star for a in positional):
                    multi_prepare = [self._prepared(call, a.value, env) for a in positional]
                else:
                    multi_prepare = []
        for target in targets:
            if multi_prepare is not None and isinstance(target, (cst.Tuple, cst.List)):
                elems = list(target.elements)
                stars = [i for i, e in enumerate(elems) if isinstance(e, cst.StarredElement)]
                if not stars and len(elems) == len(multi_prepare):
                    for el, v in zip(elems, multi_prepare):
                        self._bind(el.value, v, env)
                    continue
                if len(stars) == 1 and len(elems) - 1 <= len(multi_prepare):
                    star = stars[0]
                    after = len(elems) - star - 1
                    for el, v in zip(elems[:star], multi_prepare):
                        self._bind(el.value, v, env)
                    for el, v in zip(elems[star + 1 :], multi_prepare[len(multi_prepare) - after :]):
                        self._bind(el.value, v, env)
                    self._bind(elems[star].value, None, env)
                    continue
                self._bind(target, None, env)
                continue
            if isinstance(target, (cst.Tuple, cst.List)) and not isinstance(value_expr, (cst.Tuple, cst.List)):
                returned = self.value_of(value_expr, env)
                if returned is not None and returned.elements is not None and len(returned.elements) == len(
                        target.elements) and not any(isinstance(e, cst.StarredElement) for e in target.elements):
                    for el, v in zip(target.elements, returned.elements):
                        self._bind(el.value, v, env)
                    continue
            if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value_expr, (cst.Tuple, cst.List)) and len(
                target.elements
            ) == len(value_expr.elements):
                vals = [self.value_of(e.value, env) for e in value_expr.elements]
                for el, v in zip(target.elements, vals):
                    self._bind(el.value, v, env)
                continue
            self._bind(target, self.value_of(value_expr, env) or Value(origin=value_expr), env)
            if isinstance(value_expr, cst.Dict):
                self._bind_items(target, value_expr, env)
            elif isinstance(value_expr, cst.Call) and self._keyword_dict(value_expr) is not None:
                base = dotted_name(target)
                held = env.get(base) if base is not None else None
                for key, item in (held.items or ()) if held is not None else ():
                    if item.kind is not None:
                        self._bind_item(base, key, item, env)
            elif isinstance(value_expr, cst.DictComp):
                self._bind_comprehension_items(target, value_expr, env)

    def _augment(self, aug: cst.AugAssign, env: Env) -> None:
        """``name += part``: the new value is made from the old one and ``part`` (both are its
        origins: a name extended with ``str(accelerator.process_index)`` differs per rank). An
        object of a known kind, an accelerator or a container keeps its value."""
        key = dotted_name(aug.target)
        if key is None:
            return
        old = env.get(key)
        if old is None:
            env[key] = Value(origin=aug.value)
        elif old.kind is None and not old.is_acc and not old.container and old.prepared == NO:
            env[key] = Value(alternatives=old.origins() | {aug.value})

    def _bind_comprehension_items(self, target: cst.BaseExpression, comp: cst.DictComp, env: Env) -> None:
        """``loaders = {split: DataLoader(data[split]) for split in ("train", "val")}``: one item
        per constant key the comprehension runs over, each holding what its value makes."""
        base = dotted_name(target)
        loop = comp.for_in
        if base is None or loop.inner_for_in is not None or loop.ifs or type(loop.target) is not cst.Name \
                or type(comp.key) is not cst.Name or comp.key.value != loop.target.value \
                or type(loop.iter) not in (cst.Tuple, cst.List):
            return
        keys = [e.value.evaluated_value for e in loop.iter.elements if type(e.value) is cst.SimpleString]
        if len(keys) != len(loop.iter.elements):
            return
        value = self.value_of(comp.value, env)
        if value is None or value.kind is None:
            return
        for key in keys:
            self._bind_item(base, key, value, env)

    def _bind_item(self, base: str, key: str, value: Value, env: Env) -> None:
        """``base[key]`` holds ``value`` (``item_key``'s form), for this method and, on ``self``,
        the class's other methods."""
        item = f"{base}[{key!r}]"
        env[item] = value
        self._items_known = True
        self._bind_class_item(item, value)

    def _bind_class_item(self, item: str, value: Value) -> None:
        """``self.loaders["train"] = ...`` in a method: the item is the object's, and the other
        methods read it (as they read ``self.loaders``)."""
        if item.startswith("self.") and isinstance(self._scope, cst.FunctionDef):
            cls = self.index.class_of(self._scope)
            if cls is not None:
                self._current.class_binds.append((cls.name, item, value))

    def _bind_items(self, target: cst.BaseExpression, display: cst.Dict, env: Env) -> None:
        """``loaders = {"train": DataLoader(...), "val": DataLoader(...)}``: each item under a
        constant key is known by that key (``loaders["val"]``), whatever the others hold."""
        base = dotted_name(target)
        if base is None:
            return
        for element in display.elements:
            if isinstance(element, cst.DictElement) and type(element.key) is cst.SimpleString:
                key = element.key.evaluated_value
                value = self.value_of(element.value, env)
                if isinstance(key, str) and value is not None and value.kind is not None:
                    self._bind_item(base, key, value, env)

    def _block(self, stmts, env: Env | None) -> Env | None:
        for stmt in stmts:
            if env is None:
                return None
            env = self._stmt(stmt, env)
        return env

    def _stmt(self, stmt: cst.CSTNode, env: Env) -> Env | None:
        if isinstance(stmt, cst.BaseSmallStatement):
            return self._small(stmt, env)
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                env = self._small(small, env)
                if env is None:
                    return None
            return env
        if isinstance(stmt, cst.If):
            self._record(stmt.test, env)
            known = self.index.known_test(stmt.test)
            if known is True:
                return self._block(stmt.body.body, env)
            if known is False:
                if stmt.orelse is None:
                    return env
                if isinstance(stmt.orelse, cst.If):
                    return self._stmt(stmt.orelse, env)
                return self._block(stmt.orelse.body.body, env)
            then = self._block(stmt.body.body, dict(env))
            if stmt.orelse is None:
                other: Env | None = env
            elif isinstance(stmt.orelse, cst.If):
                other = self._stmt(stmt.orelse, dict(env))
            else:
                other = self._block(stmt.orelse.body.body, dict(env))
            return self._join(then, other)
        if isinstance(stmt, (cst.For, cst.While)):
            head = stmt.iter if isinstance(stmt, cst.For) else stmt.test
            self._record(head, env)
            entry = dict(env)
            if isinstance(stmt, cst.For):
                self._bind(stmt.target, self._iter_value(stmt.iter, env), entry)
            # the states at `break` join the state after the loop (past its `else`), those at
            # `continue` the next iteration's start
            exits: tuple[list[Env], list[Env]] = ([], [])
            self._loop_exits.append(exits)
            try:
                first = self._block(stmt.body.body, dict(entry))
                second_entry = entry
                for state in (first, *exits[1]):
                    second_entry = self._join(second_entry, state) or second_entry
                second = self._block(stmt.body.body, dict(second_entry))
                for state in exits[1]:
                    second = _merge_envs(second, state)
            finally:
                self._loop_exits.pop()
            out = self._join(env, second) or env
            if stmt.orelse is not None:
                out = self._block(stmt.orelse.body.body, out) or out
            leaving = self._breaks_out_after(stmt)
            for state in exits[0]:
                if leaving is not None and self._loop_exits and _flag_is(state, *leaving):
                    # `stop = True; break` then `if stop: break` right after the loop: this
                    # state leaves the enclosing loop too, and never reaches what follows
                    self._loop_exits[-1][0].append(state)
                    continue
                out = _merge_envs(out, state) or out
            if isinstance(stmt, cst.For):
                self._prepare_every_item(stmt, env, out)
            frozen = _freezes_every_parameter(stmt)
            if frozen is not None and frozen in out and out[frozen] is not None:
                out[frozen] = replace(out[frozen], frozen=True)
            elif "requires_grad" in self.index.identifiers or "requires_grad_" in self.index.identifiers:
                self._thaw(_thaws_some_parameter(stmt, self.index.walk), out)
            return out
        if isinstance(stmt, cst.With):
            for item in stmt.items:
                self._record(item.item, env)
                if item.asname is not None:
                    self._bind(item.asname.name, Value(origin=item.item), env)
            return self._block(stmt.body.body, env)
        if isinstance(stmt, cst.Try):
            body_end = self._block(stmt.body.body, dict(env))
            start = _merge_envs(env, body_end) or env
            out = body_end
            for handler in stmt.handlers:
                out = _merge_envs(out, self._block(handler.body.body, dict(start)))
            if stmt.orelse is not None and body_end is not None:
                out = _merge_envs(out, self._block(stmt.orelse.body.body, dict(body_end)))
            if stmt.finalbody is not None:
                out = self._block(stmt.finalbody.body.body, out if out is not None else dict(start))
            return out
        if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
            env[stmt.name.value] = Value(origin=stmt)
            return env
        if isinstance(stmt, cst.Match):
            self._record(stmt.subject, env)
            out: Env | None = None
            for case in stmt.cases:
                out = _merge_envs(out, self._block(case.body.body, dict(env)))
            return _merge_envs(out, env)
        # other compound statements (TryStar, etc.): record and keep going
        self._record(stmt, env)
        return env

    def _join(self, a: Env | None, b: Env | None) -> Env | None:
        """``_merge_envs``, where an attribute of ``self`` that one path binds and the other does
        not holds, on the other, what the class's methods bind (``self.model =
        unwrap_model(self.model)`` in a loop: the first pass read the prepared model)."""
        if a is not None and b is not None and self._scope is not None:
            for key in a.keys() ^ b.keys():
                if key.startswith(("self.", "cls.")):
                    side = b if key in a else a
                    held = self.lookup(key, side, self._scope)
                    if held is not None:
                        if side is a:
                            a = dict(a)
                            a[key] = held
                        else:
                            b = dict(b)
                            b[key] = held
        return _merge_envs(a, b)

    def _prepare_every_item(self, loop: cst.For, before: Env, out: Env) -> None:
        """``for k in nets: nets[k] = accelerator.prepare(nets[k])`` (also over ``nets.keys()`` or
        ``nets.items()``): the loop replaces every item of the container by its prepared self, so
        after it each item is prepared (not merely maybe, as a loop that may run no pass leaves
        it), those known by key included."""
        found = _item_prepare_loop(loop)
        if found is None:
            return
        base, call = found
        owner = self.value_of(call.func.value, before)
        held = before.get(base)
        if owner is None or not owner.is_acc:
            return
        if held is None or (not held.container and held.kind is None and not held.is_acc and held.items is None):
            # a mapping the file does not show the items of (a Munch of outside classes another
            # module built): each item, read by key or as an attribute, went through prepare
            out[base] = Value(container=True, attribute_items=True, prepared=MAYBE, prepared_unknown_kind=True,
                              prepared_at=call)
            return
        def prepared(value: Value | None) -> Value | None:
            if value is None or value.kind not in WRAPPED_KINDS or value.is_acc:
                # of an object the file does not show the kind of: prepared, kind unknown
                unknown = value is None or (value.kind is None and not value.is_acc and not value.container
                                            and value.prepared == NO)
                return Value(prepared=MAYBE, prepared_at=call, prepared_unknown_kind=True,
                             origin=value.origin if value is not None else None) if unknown else None
            return replace(value, prepared=YES, prepared_at=call)
        if held.container:
            whole = prepared(replace(held, container=False, items=None))
            if whole is None:
                return
            out[base] = replace(whole, container=True, items=tuple(
                (key, prepared(v) or Value()) for key, v in held.items) if held.items else None)
        for key in [k for k in before if k.startswith(base + "[")]:
            out[key] = prepared(before[key]) or Value()
        for key, item in (held.items or ()) if held.attribute_items else ():
            out[f"{base}.{key}"] = prepared(item) or Value()  # `nets.gen` of a Munch

    def _breaks_out_after(self, loop: cst.CSTNode) -> tuple[str, bool] | None:
        """For a loop followed by ``if stop: break`` (or ``if not go_on: break``): the flag and
        the value that takes that ``break``; ``None`` otherwise."""
        block = self.index.parents.get(loop)
        body = getattr(block, "body", None)
        if not isinstance(body, (list, tuple)) or loop not in body:
            return None
        position = list(body).index(loop)
        follower = body[position + 1] if position + 1 < len(body) else None
        if type(follower) is not cst.If or follower.orelse is not None or len(follower.body.body) != 1:
            return None
        only = follower.body.body[0]
        if not (type(only) is cst.SimpleStatementLine and len(only.body) == 1 and type(only.body[0]) is cst.Break):
            return None
        test, wanted = follower.test, True
        if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not:
            test, wanted = test.expression, False
        return (test.value, wanted) if type(test) is cst.Name else None

    def _iter_value(self, it: cst.BaseExpression, env: Env) -> Value | None:
        """The loop variable of ``for x in <container of prepared objects>`` (or its ``.values()``)."""
        if isinstance(it, cst.Call) and isinstance(it.func, cst.Attribute) and it.func.attr.value == "values":
            it = it.func.value
        base = self.value_of(it, env)
        if base is not None and base.container:
            return replace(base, container=False, origin=None)
        return None

    def _small(self, small: cst.BaseSmallStatement, env: Env) -> Env | None:
        self._record(small, env)
        if isinstance(small, cst.Assign):
            self._assign([t.target for t in small.targets], small.value, env)
        elif isinstance(small, cst.AnnAssign) and small.value is not None:
            self._assign([small.target], small.value, env)
            key = dotted_name(small.target)
            declared = declared_kind(small.annotation.annotation)
            if key in env and declared is not None and env[key].kind is None and not env[key].is_acc:
                env[key] = replace(env[key], kind=declared)  # `loader: DataLoader = make_loader()`
        elif isinstance(small, cst.AugAssign):
            self._augment(small, env)
        elif isinstance(small, cst.Return):
            if isinstance(self._scope, cst.FunctionDef) and small.value is not None:
                v = self.value_of(small.value, env)
                walk = self._current
                walk.returns = merge(walk.returns, v) if walk.has_return and walk.returns is not v else v
                walk.has_return = True
                walk.return_exprs.append(small.value)
            return None
        elif isinstance(small, (cst.Break, cst.Continue)):
            if self._loop_exits:
                self._loop_exits[-1][0 if type(small) is cst.Break else 1].append(dict(env))
            return None
        elif isinstance(small, cst.Raise):
            return None
        elif isinstance(small, cst.Del):
            key = dotted_name(small.target)
            if key:
                env.pop(key, None)
        return env
