"""One pass over the tree that records what later analyses look up by node.

Parents, enclosing functions and classes, imports, function and class definitions,
and every call. Built once per file; everything else in the model queries it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from .names import ImportMap, dotted_name

ScopeNode = cst.Module | cst.FunctionDef


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


class FileIndex(cst.CSTVisitor):
    """Parents, scopes, definitions, imports and calls of one module."""

    def __init__(self, module: cst.Module) -> None:
        self.module = module
        self.parents: dict[cst.CSTNode, cst.CSTNode] = {}
        self.imports = ImportMap()
        self.functions: dict[cst.FunctionDef, FunctionInfo] = {}
        self.classes: dict[str, ClassInfo] = {}
        self.module_functions: dict[str, cst.FunctionDef] = {}
        self.nested_functions: dict[ScopeNode, dict[str, cst.FunctionDef]] = {}
        self.calls: list[cst.Call] = []
        self.loops: list[cst.For | cst.While] = []
        self.string_literals: set[str] = set()
        self._stack: list[cst.CSTNode] = []
        self._scopes: list[ScopeNode] = [module]
        self._class_stack: list[ClassInfo] = []
        module.visit(self)

    # generic parent bookkeeping -------------------------------------------------
    def on_visit(self, node: cst.CSTNode) -> bool:
        if self._stack:
            self.parents[node] = self._stack[-1]
        self._stack.append(node)
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode) -> None:
        super().on_leave(original_node)
        self._stack.pop()

    # definitions -----------------------------------------------------------------
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        bases = [dotted_name(arg.value) or "" for arg in node.bases]
        info = ClassInfo(node, node.name.value, bases)
        self.classes.setdefault(node.name.value, info)
        self._class_stack.append(info)

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self._class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
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

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._scopes.pop()

    def visit_Import(self, node: cst.Import) -> None:
        self.imports.add(node)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        self.imports.add(node)

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)

    def visit_For(self, node: cst.For) -> None:
        self.loops.append(node)

    def visit_While(self, node: cst.While) -> None:
        self.loops.append(node)

    def visit_SimpleString(self, node: cst.SimpleString) -> None:
        if len(node.value) < 40:
            self.string_literals.add(node.value.strip("\"'"))

    # queries ---------------------------------------------------------------------
    def scope_of(self, node: cst.CSTNode) -> ScopeNode:
        """The innermost function (or the module) whose body contains ``node``."""
        parent = self.parents.get(node)
        while parent is not None:
            if isinstance(parent, cst.FunctionDef):
                return parent
            parent = self.parents.get(parent)
        return self.module

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

    def resolve_call(self, call: cst.Call) -> cst.FunctionDef | None:
        """The same-file ``def`` a call reaches: module functions, nested functions,
        ``self.m()`` inside a class and ``Cls.m()``. Anything else is unknown."""
        func = call.func
        scope = self.scope_of(call)
        if isinstance(func, cst.Name):
            name = func.value
            s: ScopeNode | None = scope
            while isinstance(s, cst.FunctionDef):
                found = self.nested_functions.get(s, {}).get(name)
                if found is not None:
                    return found
                s = self.functions[s].parent_scope
            return self.module_functions.get(name)
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
