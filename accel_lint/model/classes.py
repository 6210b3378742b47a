"""What the classes of one file do, for the rules and for other modules of the tree: which
methods of a model class run its forward (AL305 on ``unwrap_model(model).sample(...)``), and
which classes keep only their rank's share of the data (AL205 on a dataset split by hand)."""

from __future__ import annotations

from collections.abc import Callable

import libcst as cst

from .index import FileIndex

# what runs a module's forward without naming it: `generate` calls it in a loop
FORWARD = frozenset({"forward", "generate"})


def forward_methods(index: FileIndex) -> dict[str, frozenset[str]]:
    """Class name -> the methods that run the module's own forward: ``self(...)``,
    ``self.forward(...)``, ``self.generate(...)``, or another such method of the class or of a
    base class of this file."""
    calls = {name: {method_name: _self_calls(index, method) for method_name, method in cls.methods.items()}
             for name, cls in index.classes.items()}

    def methods_of(name: str, seen: frozenset = frozenset()) -> dict[str, set[str]]:
        own = dict(calls.get(name, {}))
        for base in index.classes[name].bases if name in index.classes else ():
            base = base.rsplit(".", 1)[-1]
            if base in calls and base not in seen:
                for method, called in methods_of(base, seen | {name}).items():
                    own.setdefault(method, called)
        return own

    out: dict[str, frozenset[str]] = {}
    for name in calls:
        methods = methods_of(name)
        forwarding = set(FORWARD)
        changed = True
        while changed:  # a method that calls one that runs the forward runs it too
            changed = False
            for method, called in methods.items():
                if method not in forwarding and called & forwarding:
                    forwarding.add(method)
                    changed = True
        out[name] = frozenset(forwarding)
    return out


def rank_split_tests(index: FileIndex, is_rank_dependent: Callable[[cst.BaseExpression], bool]
                     ) -> dict[str, cst.BaseExpression]:
    """Module-level classes whose instances keep only this rank's share of the data: a method
    adds to one of the instance's collections (``self.rows.append(...)``) only under a test on
    the rank (``if i % self.world == self.rank:``). Class name -> that test."""
    found: dict[str, cst.BaseExpression] = {}
    for name, cls in index.classes.items():
        if cls.node not in index.module.body:
            continue
        for method in cls.methods.values():
            test = next((node.test for node in index.walk(method.body) if type(node) is cst.If
                         and is_rank_dependent(node.test) and _fills_self(index, node.body)), None)
            if test is not None:
                found[name] = test
                break
    return found


def _self_calls(index: FileIndex, method: cst.FunctionDef) -> set[str]:
    """The methods of ``self`` a method calls (``self(...)`` is ``forward``)."""
    called: set[str] = set()
    for node in index.walk(method.body):
        if type(node) is not cst.Call:
            continue
        func = node.func
        if type(func) is cst.Name and func.value == "self":
            called.add("forward")
        elif type(func) is cst.Attribute and type(func.value) is cst.Name and func.value.value == "self":
            called.add(func.attr.value)
    return called


def _fills_self(index: FileIndex, block: cst.CSTNode) -> bool:
    """``block`` adds to a collection of the instance: ``self.rows.append(...)``,
    ``self.rows[-1].extend(...)``."""
    for node in index.walk(block):
        if type(node) is cst.Call and type(node.func) is cst.Attribute \
                and node.func.attr.value in ("append", "extend", "add", "insert"):
            base = node.func.value
            while type(base) in (cst.Subscript, cst.Attribute):
                if type(base) is cst.Attribute and type(base.value) is cst.Name and base.value.value == "self":
                    return True
                base = base.value
    return False
