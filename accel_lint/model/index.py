"""One pass over the tree that records what later analyses look up by node.

Parents, enclosing functions and classes, imports, function and class definitions,
and every call. Built once per file; everything else in the model queries it.
"""

from __future__ import annotations

from functools import cached_property

from dataclasses import dataclass, field

import libcst as cst

from .names import ImportMap, bound_targets, dotted_name, none_comparison
from .syntax import syntax_children

ScopeNode = cst.Module | cst.FunctionDef

# Exact node types (libcst's node classes are final); ``type(n) in`` a set is several
# times cheaper than isinstance on libcst's ABC-based classes, and these run per node.
_NESTED_SCOPES = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda})
_NAME_READS = frozenset({cst.Name, cst.Attribute})
_POST_ORDER_STOPS = frozenset({cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.IndentedBlock})


@dataclass
class FunctionInfo:
    """A ``def`` in the file: its node, qualified name, enclosing class and scope."""

    node: cst.FunctionDef
    qualname: str
    class_name: str | None
    parent_scope: ScopeNode
    params: list[cst.Param] = field(default_factory=list)


@dataclass
class ClassInfo:
    node: cst.ClassDef
    name: str
    bases: list[str]
    methods: dict[str, cst.FunctionDef] = field(default_factory=dict)


class FileIndex:
    """Parents, scopes, definitions, imports and calls of one module."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self._spread_dicts: dict[tuple[str, ScopeNode], list[cst.Arg]] = {}  # (see spread_keywords)
        # Only syntax nodes are recorded (no whitespace, brackets, commas or operator tokens):
        # the analyses walk subtrees many times, and those tokens are most of a tree's nodes.
        self.children: dict[cst.CSTNode, list[cst.CSTNode]] = {}
        self._loads: dict[cst.CSTNode, list[cst.BaseExpression]] = {}
        self._calls_in: dict[cst.CSTNode, list[cst.Call]] = {}
        self._post_order: dict[cst.CSTNode, list[cst.Call]] = {}
        self._scope_of: dict[cst.CSTNode, ScopeNode] = {}
        self._call_order: dict[cst.Call, int] | None = None
        self.imports = ImportMap()
        self.functions: dict[cst.FunctionDef, FunctionInfo] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.module_functions: dict[str, cst.FunctionDef] = {}
        self.nested_functions: dict[ScopeNode, dict[str, cst.FunctionDef]] = {}
        self.calls: list[cst.Call] = []
        self.loops: list[cst.For | cst.While] = []
        self.branches: list[cst.If | cst.While] = []  # every if and while, in source order
        self.conditional_expressions: list[cst.IfExp] = []
        self.exits: list[cst.Break | cst.Continue | cst.Return] = []
        self.string_literals: set[str] = set()
        self.import_froms: list[cst.ImportFrom] = []
        self.identifiers: set[str] = set()  # every Name in the file (names and attribute names)
        self._scopes: list[ScopeNode] = [module]
        self._class_stack: list[ClassInfo] = []
        self._build(module)

    def _build(self, module: cst.Module) -> None:
        """Pre-order walk in source order with enter/leave events; an explicit stack,
        not libcst's visitor, which rebuilds every node it passes and costs 5x more."""
        parents, children = self.parents, self.children
        enter, leave = self._ENTER, self._LEAVE
        stack: list[tuple[cst.CSTNode, bool]] = [(module, False)]
        while stack:
            node, leaving = stack.pop()
            kind = type(node)
            if leaving:
                leave[kind](self, node)
                continue
            handler = enter.get(kind)
            if handler is not None:
                handler(self, node)
                if kind in leave:
                    stack.append((node, True))
            kids = syntax_children(node)
            if kids:
                children[node] = kids
                for kid in kids:
                    parents[kid] = node
                stack.extend((kid, False) for kid in reversed(kids))

    # definitions -----------------------------------------------------------------
    def _enter_class(self, node: cst.ClassDef) -> None:
        bases = [dotted_name(arg.value) or "" for arg in node.bases]
        info = ClassInfo(node, node.name.value, bases)
        self.classes.setdefault(node.name.value, info)
        self._class_stack.append(info)

    def _leave_class(self, node: cst.ClassDef) -> None:
        self._class_stack.pop()

    def _enter_function(self, node: cst.FunctionDef) -> None:
        parent_scope = self._scopes[-1]
        # A method is a def whose nearest enclosing definition is a class.
        cls = None
        parent = self.parents.get(node)
        while parent is not None and not isinstance(parent, (cst.ClassDef, cst.FunctionDef, cst.Module)):
            parent = self.parents.get(parent)
        if isinstance(parent, cst.ClassDef) and self._class_stack:
            cls = self._class_stack[-1]
            cls.methods.setdefault(node.name.value, node)
        prefix = ""
        if cls is not None:
            prefix = cls.name + "."
        elif isinstance(parent_scope, cst.FunctionDef):
            prefix = self.functions[parent_scope].qualname + "."
        params = list(node.params.posonly_params) + list(node.params.params) + list(node.params.kwonly_params)
        self.functions[node] = FunctionInfo(node, prefix + node.name.value, cls.name if cls else None, parent_scope, params)
        if cls is None:
            if isinstance(parent_scope, cst.Module):
                self.module_functions.setdefault(node.name.value, node)
            else:
                self.nested_functions.setdefault(parent_scope, {})[node.name.value] = node
        self._scopes.append(node)

    def _leave_function(self, node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def _enter_import(self, node: cst.Import | cst.ImportFrom) -> None:
        self.imports.add(node)
        if type(node) is cst.ImportFrom:
            self.import_froms.append(node)

    def _enter_call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def _enter_loop(self, node: cst.For | cst.While) -> None:
        self.loops.append(node)
        if type(node) is cst.While:
            self.branches.append(node)

    def _enter_if(self, node: cst.If) -> None:
        self.branches.append(node)

    def _enter_ifexp(self, node: cst.IfExp) -> None:
        self.conditional_expressions.append(node)

    def _enter_exit(self, node: cst.Break | cst.Continue | cst.Return) -> None:
        self.exits.append(node)

    def _enter_name(self, node: cst.Name) -> None:
        self.identifiers.add(node.value)

    def _enter_string(self, node: cst.SimpleString) -> None:
        if len(node.value) < 40:
            self.string_literals.add(node.value.strip("\"'"))

    _ENTER = {
        cst.ClassDef: _enter_class, cst.FunctionDef: _enter_function, cst.Import: _enter_import,
        cst.ImportFrom: _enter_import, cst.Call: _enter_call, cst.For: _enter_loop, cst.While: _enter_loop,
        cst.SimpleString: _enter_string, cst.Name: _enter_name, cst.If: _enter_if, cst.Break: _enter_exit,
        cst.Continue: _enter_exit, cst.Return: _enter_exit, cst.IfExp: _enter_ifexp,
    }
    _LEAVE = {cst.ClassDef: _leave_class, cst.FunctionDef: _leave_function}

    # queries ---------------------------------------------------------------------
    @property
    def call_order(self) -> dict[cst.Call, int]:
        """Each call's position in source order (built once, on first use)."""
        if self._call_order is None:
            self._call_order = {call: i for i, call in enumerate(self.calls)}
        return self._call_order

    @cached_property
    def by_scope(self) -> dict[ScopeNode, tuple[list[cst.If | cst.While], list[cst.Call]]]:
        """The ``if``/``while`` statements and calls that :meth:`walk` of each scope meets (its
        own: not those of nested functions, classes or lambdas), in source order."""
        out: dict[ScopeNode, tuple[list, list]] = {}
        for slot, nodes in ((0, self.branches), (1, self.calls)):
            for node in nodes:
                owner = self.walk_owner(node)
                if owner is not None:
                    out.setdefault(owner, ([], []))[slot].append(node)
        return out

    def walk_owner(self, node: cst.CSTNode) -> ScopeNode | None:
        parent = self.parents.get(node)
        while parent is not None:
            kind = type(parent)
            if kind is cst.FunctionDef:
                return parent
            if kind is cst.ClassDef or kind is cst.Lambda:
                return None
            parent = self.parents.get(parent)
        return self.module

    def walk(self, node: cst.CSTNode):
        """Pre-order walk of ``node``'s subtree, not entering nested functions, classes, lambdas."""
        stack = [node]
        children = self.children
        while stack:
            n = stack.pop()
            if n is not node and type(n) in _NESTED_SCOPES:
                continue
            yield n
            kids = children.get(n)
            if kids:
                stack.extend(reversed(kids))

    def live_walk(self, node: cst.CSTNode):
        """:meth:`walk` that does not enter :attr:`dead_arms` (``node`` itself excepted)."""
        dead = self.dead_arms
        stack = [node]
        children = self.children
        while stack:
            n = stack.pop()
            if n is not node and (type(n) in _NESTED_SCOPES or n in dead):
                continue
            yield n
            kids = children.get(n)
            if kids:
                stack.extend(reversed(kids))

    @cached_property
    def cli_defaults_not_none(self) -> frozenset[str]:
        """Destinations of ``parser.add_argument("--name", default=<number or string>)`` whose
        value can never be ``None``: argparse fills the default, and the command line can only
        give a value of the option's type. An option the file assigns ``None`` anywhere is
        left out."""
        if "add_argument" not in self.identifiers:
            return frozenset()
        declared = set()
        for call in self.calls:
            if not (type(call.func) is cst.Attribute and call.func.attr.value == "add_argument"):
                continue
            options = [a.value.evaluated_value for a in call.args if a.keyword is None
                       and type(a.value) is cst.SimpleString and isinstance(a.value.evaluated_value, str)]
            longs = [o for o in options if o.startswith("--")]
            keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
            dest = keywords.get("dest")
            if type(dest) is cst.SimpleString:
                name = dest.evaluated_value
            elif longs:
                name = longs[0][2:].replace("-", "_")
            else:
                continue
            default = keywords.get("default")
            if type(default) in (cst.Integer, cst.Float) or (type(default) is cst.SimpleString):
                declared.add(name)
        for node in self.parents:
            if type(node) is cst.Assign and type(node.value) is cst.Name and node.value.value == "None":
                for target in node.targets:
                    if type(target.target) is cst.Attribute:
                        declared.discard(target.target.attr.value)
        return frozenset(declared)

    @cached_property
    def defaults_never_overridden(self) -> dict[cst.FunctionDef, dict[str, bool]]:
        """For a nested function (a ``def`` inside a function) that is only ever called by name,
        each flag parameter (default ``True``, ``False`` or ``None``) that no call passes and the
        body never rebinds: its truth value on every run (``save_checkpoint(epoch)`` with
        ``is_best=False``). A nested function is seen whole: nothing outside its enclosing
        function can call it unless the function hands it out, which a reference other than a
        call would show."""
        fixed: dict[cst.FunctionDef, dict[str, bool]] = {}
        for scope, nested in self.nested_functions.items():
            for name, fn in nested.items():
                flags = {p.name.value: p.default.value == "True" for p in self.functions[fn].params
                         if type(p.default) is cst.Name and p.default.value in ("True", "False", "None")}
                if not flags:
                    continue
                sites = []
                for node in self.walk(scope):
                    if type(node) is cst.Name and node.value == name and node is not fn.name:
                        call = self.parents.get(node)
                        if not (type(call) is cst.Call and call.func is node):
                            sites = None  # handed out or rebound: its callers are unknown
                            break
                        sites.append(call)
                if not sites:
                    continue
                positions = [p.name.value for p in fn.params.posonly_params + fn.params.params]
                for call in sites:
                    if any(arg.star for arg in call.args):
                        flags = {}
                        break
                    for position, arg in enumerate(call.args):
                        given = arg.keyword.value if arg.keyword is not None else (
                            positions[position] if position < len(positions) else None)
                        flags.pop(given, None)
                for node in self.walk(fn.body):
                    if type(node) in (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.NamedExpr):
                        target = node.target
                        if type(target) is cst.Name:
                            flags.pop(target.value, None)
                if flags:
                    fixed[fn] = flags
        return fixed

    @cached_property
    def bindings(self) -> dict[str, list[bool]]:
        """Plain name -> one entry per place the file binds it (assignment, loop, ``with``/
        ``except`` and walrus targets, parameters, ``def``s, classes, imports, ``global``): whether
        that binding is ``name = <string or number literal>``."""
        found: dict[str, list[bool]] = {}
        for node, parent in self.parents.items():
            if type(node) is not cst.Name:
                continue
            child = node
            while type(parent) in (cst.Element, cst.Tuple, cst.List, cst.StarredElement):
                child, parent = parent, self.parents.get(parent)
            kind = type(parent)
            if kind is cst.AssignTarget:
                statement = self.parents.get(parent)
                found.setdefault(node.value, []).append(
                    child is node and type(statement) is cst.Assign and len(statement.targets) == 1
                    and type(statement.value) in (cst.SimpleString, cst.ConcatenatedString, cst.Integer, cst.Float))
            elif kind in (cst.AsName, cst.Global, cst.Nonlocal, cst.NameItem, cst.ImportAlias) or (
                    kind in (cst.For, cst.CompFor, cst.AnnAssign, cst.AugAssign, cst.NamedExpr)
                    and parent.target is child) or (
                    kind in (cst.Param, cst.FunctionDef, cst.ClassDef) and parent.name is child):
                found.setdefault(node.value, []).append(False)
        return found

    @cached_property
    def names_bound_once_to_literals(self) -> frozenset[str]:
        """Plain names the whole file binds exactly once, by ``name = <string or number>``
        (``wandb_project = "runs"``): wherever they are read they are that literal, never
        ``None``. A second binding of the name anywhere (another function's parameter, a loop
        target, ``global``) leaves it out."""
        return frozenset(name for name, literal in self.bindings.items() if literal == [True])

    @cached_property
    def names_bound_to_one_boolean(self) -> dict[str, bool]:
        """Plain names every binding of which in the file is ``name = True`` or every one
        ``name = False``, inside functions (``use_wandb = False  # args.use_wandb`` in
        ``main()``: code switched off by hand): wherever they are read they hold that value. Any
        other binding of the name (a parameter, a loop target, another value) leaves it out, and
        so does one at module level (``EVAL_ONLY = False`` in the ``__main__`` block is the
        script's setting, which its user edits)."""
        literal: dict[str, set[str]] = {}
        counts: dict[str, int] = {}
        for node in self.parents:
            if type(node) is cst.Assign and len(node.targets) == 1 and type(node.targets[0].target) is cst.Name \
                    and type(node.value) is cst.Name and node.value.value in ("True", "False") \
                    and type(self.scope_of(node)) is cst.FunctionDef:
                name = node.targets[0].target.value
                literal.setdefault(name, set()).add(node.value.value)
                counts[name] = counts.get(name, 0) + 1
        return {name: values.pop() == "True" for name, values in literal.items()
                if len(values) == 1 and len(self.bindings.get(name, ())) == counts[name]}

    @cached_property
    def dead_arms(self) -> frozenset[cst.CSTNode]:
        """The arms of conditional expressions and ``if`` statements that no launch runs, by
        :meth:`known_test`: what they read and call is never evaluated."""
        if not self.cli_defaults_not_none and not self.defaults_never_overridden \
                and not self.names_bound_once_to_literals and not self.constant_flags \
                and not self.names_bound_to_one_boolean \
                and "__name__" not in self.identifiers and "False" not in self.identifiers \
                and "True" not in self.identifiers:
            return frozenset()
        dead = set()
        for node in (*self.conditional_expressions, *self.branches):
            if type(node) is cst.While:
                continue
            known = self.known_test(node.test)
            if known is True and node.orelse is not None:
                dead.add(node.orelse)
            elif known is False:
                dead.add(node.body)
        return frozenset(dead)

    @cached_property
    def constant_flags(self) -> dict[tuple[str, str], bool]:
        """``self.<name>`` attributes of a class of this file that the file only ever assigns one
        and the same boolean literal (``self.in_evaluation = False`` in ``__init__``, the lines
        that set it ``True`` commented out), keyed (class, name): the attribute holds that value
        wherever a method reads it. Any other binding of an attribute of that name anywhere in
        the file (a second literal, a computed value, an augmented assignment, one on another
        object), or a ``setattr`` in the class, leaves it out."""
        values: dict[tuple[str, str], set] = {}
        spoiled: set[str] = set()  # attribute names bound some other way
        unknown_classes: set[str] = set()
        for node in self.parents:
            kind = type(node)
            if kind is cst.Assign:
                literal = node.value.value if type(node.value) is cst.Name and node.value.value in ("True", "False") \
                    else None
                for target in node.targets:
                    for element in bound_targets(target.target):
                        if type(element) is not cst.Attribute:
                            continue
                        owner = self._self_class(element)
                        if owner is None or literal is None:
                            spoiled.add(element.attr.value)
                        else:
                            values.setdefault((owner, element.attr.value), set()).add(literal)
            elif kind in (cst.AugAssign, cst.AnnAssign) and type(node.target) is cst.Attribute:
                spoiled.add(node.target.attr.value)
            elif kind is cst.Call and type(node.func) is cst.Name and node.func.value == "setattr":
                cls = self.class_of(self.scope_of(node))
                if cls is None:
                    return {}  # attributes named at run time on any object: none is known
                unknown_classes.add(cls.name)
        return {key: found.pop() == "True" for key, found in values.items()
                if len(found) == 1 and key[1] not in spoiled and key[0] not in unknown_classes}

    @cached_property
    def self_attribute_values(self) -> dict[tuple[str, str], tuple[cst.BaseExpression, ...]]:
        """``self.<name>`` attributes of a class of this file, keyed (class, name), that every
        binding in the file assigns alone (``self.writer = SummaryWriter(...)``,
        ``self.writer = None``): the assigned expressions, in source order. An attribute of
        that name bound any other way anywhere (in a tuple, augmented, on another object), and
        every attribute of a class that calls ``setattr(self, ...)``, is left out."""
        values: dict[tuple[str, str], list[cst.BaseExpression]] = {}
        spoiled: set[str] = set()
        unknown_classes: set[str] = set()
        for node in self.parents:
            kind = type(node)
            if kind is cst.Assign:
                for target in node.targets:
                    if type(target.target) is cst.Attribute:
                        owner = self._self_class(target.target)
                        if owner is None or len(node.targets) > 1:
                            spoiled.add(target.target.attr.value)
                        else:
                            values.setdefault((owner, target.target.attr.value), []).append(node.value)
                        continue
                    spoiled.update(e.attr.value for e in bound_targets(target.target) if type(e) is cst.Attribute)
            elif kind in (cst.AugAssign, cst.AnnAssign) and type(node.target) is cst.Attribute:
                spoiled.add(node.target.attr.value)
            elif kind is cst.Call and type(node.func) is cst.Name and node.func.value == "setattr" and node.args \
                    and type(node.args[0].value) is cst.Name and node.args[0].value.value == "self":
                cls = self.class_of(self.scope_of(node))
                if cls is None:
                    return {}
                unknown_classes.add(cls.name)  # (attributes named at run time)
        return {key: tuple(found) for key, found in values.items()
                if key[1] not in spoiled and key[0] not in unknown_classes}

    def _self_class(self, attribute: cst.Attribute) -> str | None:
        """The class whose method binds ``self.<attr>`` here, or ``None``."""
        if type(attribute.value) is not cst.Name or attribute.value.value != "self":
            return None
        cls = self.class_of(self.scope_of(attribute))
        return cls.name if cls is not None else None

    def known_test(self, test: cst.BaseExpression) -> bool | None:
        """The value a branch test has on every launch, when the file tells: ``<args>.<option>
        is None`` is ``False`` (and ``is not None`` is ``True``) where the file's argparse
        declares that option with a number or string default and never assigns it ``None``
        (``cli_defaults_not_none``); a flag parameter no call of its nested function passes is
        its default (``defaults_never_overridden``); a name bound once, to a string or number
        literal, is never ``None`` (``names_bound_once_to_literals``); a name every binding of which
        is the same boolean literal is that value (``names_bound_to_one_boolean``); ``True`` and
        ``False`` themselves, and ``... and False`` / ``True or ...`` by a side that decides. ``None`` otherwise. Every walk that splits paths at a
        branch asks this, so a dead arm is dead for every rule. ``__name__ == "__main__"`` at
        the top of the module is ``True``: the file is linted as the program that is run."""
        if type(test) is cst.Name and test.value in ("True", "False"):
            return test.value == "True"  # `if False:` (code switched off by hand)
        if type(test) is cst.BooleanOperation:
            # `if False and (...)`, `if accelerator.is_main_process and use_wandb:` with
            # `use_wandb = False`: a side that decides the whole test
            deciding = type(test.operator) is cst.Or
            if self.known_test(test.left) is deciding or self.known_test(test.right) is deciding:
                return deciding
            return None
        if type(test) is cst.Comparison and self._is_main_test(test):
            return type(test.comparisons[0].operator) is cst.Equal
        if type(test) is cst.Name or (type(test) is cst.UnaryOperation and type(test.operator) is cst.Not
                                      and type(test.expression) is cst.Name):
            name = test.value if type(test) is cst.Name else test.expression.value
            scope = self.scope_of(test)
            value = self.defaults_never_overridden.get(scope, {}).get(name) if type(scope) is cst.FunctionDef else None
            if value is None:
                value = self.names_bound_to_one_boolean.get(name)
            if value is None:
                return None
            return value if type(test) is cst.Name else not value
        flag = test.expression if type(test) is cst.UnaryOperation and type(test.operator) is cst.Not else test
        if type(flag) is cst.Attribute and self.constant_flags:
            owner = self._self_class(flag)
            value = self.constant_flags.get((owner, flag.attr.value)) if owner is not None else None
            if value is not None:
                return value if flag is test else not value
        compared = none_comparison(test)
        if compared is not None and type(compared[0]) is cst.Name \
                and compared[0].value in self.names_bound_once_to_literals:
            return not compared[1]
        if compared is None or type(compared[0]) is not cst.Attribute:
            return None
        subject, is_none = compared
        if subject.attr.value not in self.cli_defaults_not_none:
            return None
        return not is_none

    def _is_main_test(self, test: cst.Comparison) -> bool:
        """``__name__ == "__main__"`` (or ``!=``) in the module's own code."""
        if len(test.comparisons) != 1 or type(test.comparisons[0].operator) not in (cst.Equal, cst.NotEqual):
            return False
        sides = (test.left, test.comparisons[0].comparator)
        names = [s for s in sides if type(s) is cst.Name and s.value == "__name__"]
        strings = [s for s in sides if type(s) is cst.SimpleString and s.evaluated_value == "__main__"]
        return len(names) == 1 and len(strings) == 1 and type(self.scope_of(test)) is cst.Module

    def loads_in(self, node: cst.CSTNode) -> list[cst.BaseExpression]:
        """Every ``Name``/``Attribute`` inside ``node`` (outside nested scopes), cached."""
        found = self._loads.get(node)
        if found is None:
            parents = self.parents
            # the ``attr`` of ``torch.accelerator`` is part of that attribute, and the keyword of
            # ``f(accelerator=stub)`` names a parameter: neither reads a variable ``accelerator``
            found = [n for n in (self.live_walk(node) if self.dead_arms else self.walk(node)) if type(n) in _NAME_READS
                     and not (type(n) is cst.Name and type(parents.get(n)) is cst.Attribute and parents[n].attr is n)
                     and not (type(n) is cst.Name and type(parents.get(n)) is cst.Arg and parents[n].keyword is n)
                     and not self._in_import_path(n)]
            self._loads[node] = found
        return found

    def _in_import_path(self, node: cst.CSTNode) -> bool:
        """``toolkit.accelerator`` in ``from toolkit.accelerator import get_accelerator``: a
        module path, not a read."""
        parent = self.parents.get(node)
        while type(parent) is cst.Attribute:
            parent = self.parents.get(parent)
        return type(parent) in (cst.ImportFrom, cst.ImportAlias)

    def calls_in(self, node: cst.CSTNode) -> list[cst.Call]:
        """Every call inside ``node`` (outside nested scopes), in source order, cached."""
        found = self._calls_in.get(node)
        if found is None:
            found = [n for n in (self.live_walk(node) if self.dead_arms else self.walk(node)) if type(n) is cst.Call]
            self._calls_in[node] = found
        return found

    def calls_post_order(self, node: cst.CSTNode) -> list[cst.Call]:
        """Calls in evaluation order: arguments before the call that receives them (cached)."""
        cached = self._post_order.get(node)
        if cached is not None:
            return cached
        out: list[cst.Call] = []
        children = self.children
        # iterative post-order (a recursive closure would be cyclic garbage on every call)
        stack: list[tuple[cst.CSTNode, bool]] = [(node, False)]
        while stack:
            n, done = stack.pop()
            if done:
                if type(n) is cst.Call:
                    out.append(n)
                continue
            stack.append((n, True))
            for child in reversed(children.get(n, ())):
                if type(child) not in _POST_ORDER_STOPS:
                    stack.append((child, False))
        self._post_order[node] = out
        return out

    def scope_of(self, node: cst.CSTNode) -> ScopeNode:
        """The innermost function (or the module) whose body contains ``node`` (cached)."""
        found = self._scope_of.get(node)
        if found is not None:
            return found
        found = self.module
        parent = self.parents.get(node)
        while parent is not None:
            if type(parent) is cst.FunctionDef:
                found = parent
                break
            parent = self.parents.get(parent)
        self._scope_of[node] = found
        return found

    def ancestors(self, node: cst.CSTNode):
        parent = self.parents.get(node)
        while parent is not None:
            yield parent
            parent = self.parents.get(parent)

    def class_of(self, scope: ScopeNode) -> ClassInfo | None:
        if isinstance(scope, cst.FunctionDef):
            info = self.functions.get(scope)
            if info and info.class_name:
                return self.classes.get(info.class_name)
        return None

    def resolve_property(self, expr: cst.BaseExpression) -> cst.FunctionDef | None:
        """The same-class ``@property`` that ``self.<name>`` reads, or ``None``."""
        if type(expr) is not cst.Attribute or dotted_name(expr.value) != "self":
            return None
        cls = self.class_of(self.scope_of(expr))
        if cls is None:
            return None
        for fn, info in self.functions.items():
            if info.class_name == cls.name and fn.name.value == expr.attr.value and any(
                    dotted_name(d.decorator) in ("property", "functools.cached_property", "cached_property")
                    for d in fn.decorators):
                return fn
        return None

    @cached_property
    def _call_sites(self) -> dict[cst.FunctionDef, list[cst.Call]]:
        sites: dict[cst.FunctionDef, list[cst.Call]] = {}
        for call in self.calls:
            target = self.resolve_call(call)
            if target is not None:
                sites.setdefault(target, []).append(call)
        return sites

    def spread_keywords(self, call: cst.Call) -> list[cst.Arg]:
        """The keyword arguments a ``**name`` argument of ``call`` spreads, where ``name`` is bound
        once in the call's scope to ``dict(a=..., b=...)`` or ``{"a": ..., "b": ...}`` and used
        nowhere else but in such spreads (``kwargs = dict(model=model, loader=val_dl)`` then
        ``evaluate(**kwargs)``): one argument per key, the key as its keyword. Empty otherwise."""
        out: list[cst.Arg] = []
        for arg in call.args:
            if arg.star == "**" and type(arg.value) is cst.Name:
                out += self._spread_dict(arg.value.value, self.scope_of(call))
        return out

    def _spread_dict(self, name: str, scope: ScopeNode) -> list[cst.Arg]:
        # asked at every pass of the walk over the call's scope: resolved once per name and scope
        key = (name, scope)
        if key not in self._spread_dicts:
            self._spread_dicts[key] = self._resolve_spread_dict(name, scope)
        return self._spread_dicts[key]

    def _resolve_spread_dict(self, name: str, scope: ScopeNode) -> list[cst.Arg]:
        made = None
        for node in self.walk(scope):
            if type(node) is not cst.Name or node.value != name:
                continue
            parent = self.parents.get(node)
            if type(parent) is cst.AssignTarget and made is None and len(self.parents[parent].targets) == 1:
                made = self.parents[parent].value
            elif not (type(parent) is cst.Arg and parent.star == "**"):
                return []  # read, changed or bound again elsewhere: what it holds is unknown
        if type(made) is cst.Call and type(made.func) is cst.Name and made.func.value == "dict" \
                and made.args and all(a.keyword is not None and not a.star for a in made.args):
            return list(made.args)
        if type(made) is cst.Dict and made.elements and all(
                type(e) is cst.DictElement and type(e.key) is cst.SimpleString
                and isinstance(e.key.evaluated_value, str) and e.key.evaluated_value.isidentifier()
                for e in made.elements):
            return [cst.Arg(value=e.value, keyword=cst.Name(e.key.evaluated_value)) for e in made.elements]
        return []

    def call_sites(self, fn: cst.FunctionDef) -> list[cst.Call]:
        """The calls of this file that reach ``fn`` (as ``resolve_call`` resolves them)."""
        return self._call_sites.get(fn, [])

    def reaches(self, fn: cst.FunctionDef, target: cst.FunctionDef) -> bool:
        """Whether calling ``fn`` may run ``target`` (through same-file calls)."""
        memo = self.__dict__.setdefault("_reachable", {})
        if fn not in memo:
            found: set[cst.FunctionDef] = {fn}
            stack = [fn]
            while stack:
                for call in self.calls_in(stack.pop()):
                    callee = self.resolve_call(call)
                    if callee is not None and callee not in found:
                        found.add(callee)
                        stack.append(callee)
            memo[fn] = found
        return target in memo[fn]

    def runs_only_before(self, fn: cst.FunctionDef, target: cst.FunctionDef, _depth: int = 0) -> bool:
        """Whether every run of ``fn`` comes before ``target`` runs: ``fn`` never reaches
        ``target``, and each of its calls in this file is followed, in the same function and
        outside any loop around both, by a call that reaches ``target`` (``fit()`` calling
        ``self.setup_models()`` then ``self.prepare_for_training()``), or sits in a function
        that itself runs only before ``target``. A function nobody here calls may run any time."""
        memo = self.__dict__.setdefault("_only_before", {})
        if (fn, target) not in memo:
            memo[(fn, target)] = self._runs_only_before(fn, target, _depth)
        return memo[(fn, target)]

    def _runs_only_before(self, fn: cst.FunctionDef, target: cst.FunctionDef, _depth: int) -> bool:
        if _depth > 3 or self.reaches(fn, target):
            return False
        sites = self.call_sites(fn)
        if not sites:
            return False
        order = self.call_order
        for site in sites:
            caller = self.scope_of(site)
            if caller is fn or type(caller) is not cst.FunctionDef:
                return False
            loops = {a for a in self.ancestors(site) if type(a) in (cst.For, cst.While)}
            followed = False
            for later in self.calls_in(caller):
                if order[later] <= order[site] or self.scope_of(later) is not caller:
                    continue
                callee = self.resolve_call(later)
                if callee is not None and self.reaches(callee, target) and not loops & set(self.ancestors(later)):
                    followed = True
                    break
            if not followed and self._constructs_before(caller, target):
                followed = True
            if not followed and not self.runs_only_before(caller, target, _depth + 1):
                return False
        return True

    def _constructs_before(self, caller: cst.FunctionDef, target: cst.FunctionDef) -> bool:
        """``caller`` is the ``__init__`` of ``target``'s class and never reaches it: no other
        method of an instance runs before its ``__init__`` returns (``setup_tokenizer()`` called
        from ``__init__`` runs before the ``generate()`` that prepares the model)."""
        if caller.name.value != "__init__" or self.reaches(caller, target):
            return False
        cls = self.functions[caller].class_name
        return cls is not None and self.functions[target].class_name == cls

    def resolve_call(self, call: cst.Call) -> cst.FunctionDef | None:
        """The same-file ``def`` a call reaches: module functions, nested functions,
        ``self.m()`` inside a class and ``Cls.m()``. Anything else is unknown."""
        func = call.func
        scope = self.scope_of(call)
        if isinstance(func, cst.Name):
            return self.resolve_function_name(func.value, scope)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            owner = func.value.value
            if owner in ("self", "cls"):
                cls = self.class_of(scope)
                if cls is not None:
                    return self._method(cls, func.attr.value)
                return None
            cls = self.classes.get(owner)
            if cls is not None:
                return self._method(cls, func.attr.value)
        return None

    def constructor_of(self, call: cst.Call) -> cst.FunctionDef | None:
        """The ``__init__`` (of the class or a same-file base) that ``Cls(...)`` runs, for a
        class of this file; its arguments bind to the parameters after ``self``."""
        if not isinstance(call.func, cst.Name):
            return None
        cls = self.classes.get(call.func.value)
        if cls is None or self.resolve_function_name(call.func.value, self.scope_of(call)) is not None:
            return None
        return self._method(cls, "__init__")

    def body_of(self, scope: ScopeNode) -> list:
        """The statements of a module or function (a one-line ``def f(): return x`` too)."""
        if isinstance(scope, cst.Module):
            return list(scope.body)
        return list(scope.body.body) if isinstance(scope.body, cst.IndentedBlock) else [scope.body]

    def enclosing_scopes(self, scope: ScopeNode):
        """The scopes around a function, innermost first, up to the module."""
        while type(scope) is cst.FunctionDef:
            scope = self.functions[scope].parent_scope
            yield scope

    def resolve_function_name(self, name: str, scope: ScopeNode) -> cst.FunctionDef | None:
        """The same-file ``def`` a bare name refers to from ``scope`` (nested, then module level)."""
        s: ScopeNode | None = scope
        while isinstance(s, cst.FunctionDef):
            found = self.nested_functions.get(s, {}).get(name)
            if found is not None:
                return found
            s = self.functions[s].parent_scope
        return self.module_functions.get(name)

    def _method(self, cls: ClassInfo, name: str, depth: int = 0) -> cst.FunctionDef | None:
        if name in cls.methods:
            return cls.methods[name]
        if depth > 5:
            return None
        for base in cls.bases:
            base_cls = self.classes.get(base.split(".")[-1])
            if base_cls is not None and base_cls is not cls:
                found = self._method(base_cls, name, depth + 1)
                if found is not None:
                    return found
        return None

