"""Which values are computed from rank-local data.

Every rank runs the same program on different data. A value is *varying* (it may differ
between ranks) when it is computed from:

* a batch: the loop variable of a ``for`` over a loader (``enumerate``'s counter stays uniform);
* a forward of a model (``model(**batch)``, ``model.generate(...)``) and anything read from its
  output (``outputs.loss``, ``loss.item()``, ``torch.isnan(loss)``);
* the clock (``time.time()``);
* the index a dataset's ``__getitem__`` receives (the sampler hands each rank its own indices);
* an assignment made under a condition that is itself varying (``if val_loss > best:
  patience += 1``: the counter now differs between ranks), or after a ``continue`` or ``break``
  that some ranks take and others do not (one under a varying condition, or in an ``except``
  handler: an exception is one rank's event). ``try: backward() except: continue`` then
  ``step += 1``: the failing rank's counter falls behind.

What a collective returns is the same on every rank whatever went into it (``gather``,
``reduce``, ``broadcast``, ``check_trigger``, an accelerator's ``clip_grad_norm_``, the list
``torch.distributed.all_gather`` fills, a helper of another module that returns such a value).
A branch taken only where one process runs (the ``else`` of ``if accelerator.num_processes > 1:``)
has no other rank to differ from: its values do not join. Everything
else (constants, CLI arguments, counters every rank advances, parameters) is not known to vary.
The walk is per scope, in statement order, loops twice, branches joined (varying on any path
is varying).
"""

from __future__ import annotations

import libcst as cst

from .index import FileIndex, ScopeNode
from .names import bound_names, dotted_name

# Random draws are left out on purpose: after `set_seed(seed)` every rank draws the same numbers.
# So is the file system: on the shared file systems training jobs use, every rank lists the same
# checkpoint folder (the resume logic of every training script would otherwise look divergent).
_CLOCK = ("time.time", "time.perf_counter", "time.monotonic")
# collectives that overwrite their first argument with what every rank agrees on
IN_PLACE = frozenset({"torch.distributed.broadcast", "torch.distributed.all_reduce",
                       "torch.distributed.broadcast_object_list",
                       # (the output list or tensor: every rank's pieces, in rank order)
                       "torch.distributed.all_gather", "torch.distributed.all_gather_object",
                       "torch.distributed.all_gather_into_tensor"})
# what names a module must use for one of its functions to return an agreed value
COLLECTIVE_WORDS = frozenset({"all_gather", "all_gather_object", "all_gather_into_tensor", "all_reduce",
                              "broadcast", "broadcast_object_list", "gather", "reduce", "gather_for_metrics"})
_INITIALIZED = frozenset({"torch.distributed.is_initialized"})
# list and set methods that put their argument into the object
_FILLING = frozenset({"append", "extend", "insert", "add", "update"})


class RankData:
    """For every name read, whether its value may differ between ranks."""

    def __init__(self, index: FileIndex, value_at, is_uniform_result, reads_rank=lambda expr: True,
                 external_attributes=lambda name: frozenset(), is_rank_test=lambda test: False) -> None:
        self.index = index
        # attributes of a class's instances that some method binds to rank-local data, or binds
        # only on some ranks (`if self.accelerator.is_main_process: self.should_stop = True`):
        # class name -> attribute names; and for classes of other modules, what they export
        self.varying_attributes: dict[str, set[str]] = {}
        self._uniform_attributes: dict[str, set[str]] = {}
        self._external_attributes = external_attributes
        self._is_rank_test = is_rank_test  # (a test true on some ranks only: `is_main_process`)
        self._local_names: dict[ScopeNode, frozenset[str]] = {}
        self._rank_gated = 0
        self._value_at = value_at
        self._reads_rank = reads_rank  # (an expression that differs between ranks by the rank model)
        self._is_uniform_result = is_uniform_result
        self.at: dict[cst.CSTNode, bool] = {}
        self._final: dict[ScopeNode, set[str]] = {}
        self._recording = True
        self._returns: list[bool] | None = None  # what a summary walk's returns evaluate to
        self._return_parts: list[list[bool] | None] | None = None  # and each item of a returned tuple
        self._uniform_returns: dict[cst.FunctionDef, bool] = {}
        self._varying_returns: dict[cst.FunctionDef, tuple[list[bool], list[bool] | None]] = {}
        # lists every rank fills with its own values on the same passes: their contents vary,
        # their lengths do not
        self._filled: set[tuple[ScopeNode, str]] = set()
        self._scope: ScopeNode = index.module
        # a `continue`/`break` that only some ranks may take was walked in the current statement
        self._left_locally: cst.CSTNode | None = None
        self._in_handler = 0
        # names bound after such an exit (in the statements some ranks skip), and that exit
        self._after_exit: cst.CSTNode | None = None
        self.left_behind: dict[tuple[ScopeNode, str], cst.CSTNode] = {}
        self._walk_scopes()
        if any(self.varying_attributes.values()):
            # a method may read what another method, walked later, binds: once more, with the
            # attributes known from the start
            self._reset_walk()
            self._walk_scopes()

    def _walk_scopes(self) -> None:
        for scope in [self.index.module, *self.index.functions]:
            self._scope = scope
            self._final[scope] = self._block(self.index.body_of(scope), self._varying_params(scope), False)

    def _reset_walk(self) -> None:
        self.at.clear()
        self._final.clear()
        self._filled.clear()
        self.left_behind.clear()
        self._uniform_returns.clear()
        self._varying_returns.clear()

    def _varying_params(self, scope: ScopeNode) -> set[str]:
        """A dataset's ``__getitem__(self, index)``: the sampler gives each rank its own
        indices, so the index and everything computed from it (the sample, its cache path)
        differ between ranks."""
        info = self.index.functions.get(scope)
        if info is None or info.class_name is None or scope.name.value not in ("__getitem__", "__getitems__"):
            return set()
        return {p.name.value for p in info.params[1:2]}

    # -- queries ---------------------------------------------------------------------------
    def varies(self, expr: cst.CSTNode) -> bool:
        """Whether ``expr`` may be computed from rank-local data (at its program point)."""
        return self._eval(expr, lambda load: self.at.get(load, False))

    # -- evaluation ------------------------------------------------------------------------
    def _eval(self, expr: cst.CSTNode, read) -> bool:
        kind = type(expr)
        if kind is cst.Call:
            if self._is_uniform_result(expr):
                return False
            if type(expr.func) is cst.Name and expr.func.value == "len" and len(expr.args) == 1 \
                    and (self.index.scope_of(expr), dotted_name(expr.args[0].value)) in self._filled:
                return False  # `len(val_losses)`: one item per pass on every rank
            target = self.index.resolve_call(expr)
            if target is not None and self._returns_uniform(target):
                return False  # a helper whose result every rank agrees on, whatever it is given
            if self._is_source(expr) or (target is not None and self._returns_varying(target)):
                return True  # (a helper that computes its result from this rank's data: `evaluate(model, loader)`)
            parts = [expr.func.value] if type(expr.func) is cst.Attribute else []
            return any(self._eval(p, read) for p in parts) or any(self._eval(a.value, read) for a in expr.args)
        if kind is cst.Name or kind is cst.Attribute:
            if read(expr):
                return True
            return kind is cst.Attribute and self._eval(expr.value, read)
        if kind is cst.Lambda:
            return False
        if kind in (cst.GeneratorExp, cst.ListComp, cst.SetComp):
            # `[policy(x) for x in batch]`: the items it makes, or the data it runs over
            return self._eval(expr.elt, read) or self._comprehension_iterables_vary(expr.for_in, read)
        if kind is cst.DictComp:
            return self._eval(expr.value, read) or self._comprehension_iterables_vary(expr.for_in, read)
        return any(self._eval(child, read) for child in self.index.children.get(expr, ()))

    def _comprehension_iterables_vary(self, comp: cst.CompFor | None, read) -> bool:
        while comp is not None:
            if self._eval(comp.iter, read):
                return True
            comp = comp.inner_for_in
        return False

    def _is_source(self, call: cst.Call) -> bool:
        """A call whose result is rank-local by itself: a model's forward or generate, the
        clock."""
        func = call.func
        target = func.value if type(func) is cst.Attribute and func.attr.value == "generate" else func
        value = self._value_at(target)
        if value is not None and value.kind == "model":
            return True
        qualified = self.index.imports.qualify_expr(func) or dotted_name(func) or ""
        return qualified.startswith(_CLOCK)

    def returns_uniform(self, fn: cst.FunctionDef) -> bool:
        """What ``fn`` returns is the same on every rank whatever it is given."""
        return self._returns_uniform(fn)

    def _returns_uniform(self, fn: cst.FunctionDef) -> bool:
        """Whether what ``fn`` returns is the same on every rank even when every argument
        differs (it broadcasts the value it returns): a walk of its body with every parameter
        varying, recording nothing."""
        if fn not in self._uniform_returns:
            self._uniform_returns[fn] = False  # recursion: not known
            returns, _ = self._summary_walk(fn, {p.name.value for p in self.index.functions[fn].params})
            self._uniform_returns[fn] = bool(returns) and not any(returns)
        return self._uniform_returns[fn]

    def _summary_walk(self, fn: cst.FunctionDef, varying: set[str]) -> tuple[list[bool], list[list[bool] | None]]:
        """Walk ``fn``'s body with the parameters ``varying`` varying, recording nothing: whether
        each of its returns may vary, and each item of each returned tuple (``None`` for a return
        that is no tuple)."""
        saved = (self._scope, self._recording, self._returns, self._return_parts)
        self._scope, self._recording, self._returns, self._return_parts = fn, False, [], []
        try:
            self._block(self.index.body_of(fn), varying, False)
            return self._returns, self._return_parts
        finally:
            self._scope, self._recording, self._returns, self._return_parts = saved

    def _returns_varying(self, fn: cst.FunctionDef) -> bool:
        """Whether what ``fn`` returns may be computed from rank-local data even when every
        argument is the same on every rank (a loss summed over its loader's batches, with no
        collective on the way): a walk of its body with no parameter varying, recording
        nothing."""
        return any(self._varying_return_parts(fn)[0])

    def _varying_return_parts(self, fn: cst.FunctionDef) -> tuple[list[bool], list[bool] | None]:
        """Whether each return of ``fn`` may vary (``_returns_varying``), and, where every return
        is a tuple of the same length, whether each of its items may (``return epoch_loss,
        metrics``: a loss summed on this rank, metrics a synced metric computed)."""
        if fn not in self._varying_returns:
            self._varying_returns[fn] = ([], None)  # recursion: not known
            returns, parts = self._summary_walk(fn, self._varying_params(fn))
            per_item = None
            if parts and all(p is not None and len(p) == len(parts[0]) for p in parts):
                per_item = [any(p[i] for p in parts) for i in range(len(parts[0]))]
            self._varying_returns[fn] = (returns, per_item)
        return self._varying_returns[fn]

    def _unpacked_parts(self, assign: cst.Assign, env: set[str]) -> list[bool] | None:
        """``loss, metrics = evaluate(model, loader)`` with uniform arguments, where ``evaluate``
        returns a tuple: whether each item varies, as the helper computes it."""
        call = assign.value
        if type(call) is not cst.Call or len(assign.targets) != 1 or type(assign.targets[0].target) not in (cst.Tuple, cst.List):
            return None
        target = self.index.resolve_call(call)
        if target is None or self._is_source(call):
            return None
        parts = self._varying_return_parts(target)[1]
        elements = assign.targets[0].target.elements
        if parts is None or len(parts) != len(elements) or any(type(e) is cst.StarredElement for e in elements):
            return None
        saved = self._recording
        self._recording = False
        try:  # (an argument that varies makes every item vary: not known per item)
            if any(self._eval(a.value, self._reader(env)) for a in call.args):
                return None
        finally:
            self._recording = saved
        return parts

    def _reader(self, env: set[str]):
        def read(load: cst.BaseExpression) -> bool:
            key = dotted_name(load)
            return key is not None and (self._lookup(key, env) or self._instance_attribute_varies(load))
        return read

    def _instance_attribute_varies(self, load: cst.BaseExpression) -> bool:
        """``self.flag`` in a method, or ``trainer.flag`` of ``trainer = Trainer(...)``, where some
        method of the class binds the attribute to rank-local data or on some ranks only."""
        if type(load) is not cst.Attribute:
            return False
        attr = load.attr.value
        owner = load.value
        if type(owner) is cst.Name and owner.value == "self":
            info = self.index.functions.get(self._scope)
            classes = [info.class_name] if info is not None and info.class_name is not None else []
            return any(attr in self.varying_attributes.get(c, ()) for c in classes)
        value = self._value_at(owner)
        for origin in (value.origins() if value is not None else ()):
            if type(origin) is cst.Call:
                made_by = dotted_name(origin.func)
                if made_by is None:
                    continue
                if made_by in self.index.classes and self.index.resolve_function_name(made_by, self._scope) is None:
                    if attr in self.varying_attributes.get(made_by, ()):
                        return True
                elif attr in self._external_attributes(made_by):
                    return True
        return False

    def attribute_behind(self, expr: cst.CSTNode) -> str | None:
        """An attribute read in ``expr`` that varies because methods of its class bind it so
        (``trainer.should_stop``), as written."""
        for load in self.index.loads_in(expr) if not isinstance(expr, cst.Attribute) else [expr]:
            scope, self._scope = self._scope, self.index.scope_of(load)
            try:
                if self._instance_attribute_varies(load):
                    return dotted_name(load)
            finally:
                self._scope = scope
        return None

    def exported_attributes(self) -> dict[str, frozenset[str]]:
        """For other modules: the classes of this module with such attributes."""
        return {name: frozenset(attrs) for name, attrs in self.varying_attributes.items()
                if attrs and self.index.classes[name].node in self.index.module.body}

    def _lookup(self, key: str, env: set[str]) -> bool:
        if key in env:
            return True
        if key.partition(".")[0] in self._locals(self._scope):
            return False  # a name the function binds is its own everywhere in it (Python's scoping)
        return any(key in self._final.get(scope, set()) for scope in self.index.enclosing_scopes(self._scope))

    def _locals(self, scope: ScopeNode) -> frozenset[str]:
        """The names a function binds itself (parameters, assignments, loop targets, imports),
        not those it declares ``global``/``nonlocal``; empty for the module."""
        found = self._local_names.get(scope)
        if found is None:
            names: set[str] = set()
            declared: set[str] = set()
            if type(scope) is cst.FunctionDef:
                info = self.index.functions.get(scope)
                names.update(p.name.value for p in info.params) if info is not None else None
                for node in self.index.walk(scope.body):
                    if type(node) in (cst.Global, cst.Nonlocal):
                        declared.update(n.name.value for n in node.names)
                    elif type(node) is cst.Assign:  # (the walk stays out of nested scopes)
                        for target in node.targets:
                            names.update(bound_names(target.target))
                    elif type(node) in (cst.AugAssign, cst.AnnAssign, cst.For):
                        names.update(bound_names(node.target))
                    elif type(node) is cst.WithItem and node.asname is not None:
                        names.update(bound_names(node.asname.name))
            found = frozenset(n for n in names if "." not in n) - declared
            self._local_names[scope] = found
        return found

    def _record(self, node: cst.CSTNode, env: set[str]) -> None:
        if not self._recording:
            return
        for load in self.index.loads_in(node):
            key = dotted_name(load)
            if key is not None and (self._lookup(key, env) or self._instance_attribute_varies(load)):
                self.at[load] = True

    # -- statements -----------------------------------------------------------------------
    def _block(self, stmts, env: set[str], tainted: bool) -> set[str]:
        after_exit = self._after_exit
        for stmt in stmts:
            outer, self._left_locally = self._left_locally, None
            env = self._stmt(stmt, env, tainted)
            if self._left_locally is not None:
                tainted = True  # the rest of the block runs only on the ranks that did not leave
                self._after_exit = self._left_locally
            self._left_locally = outer or self._left_locally
        self._after_exit = after_exit
        return env

    def _stmt(self, stmt: cst.CSTNode, env: set[str], tainted: bool) -> set[str]:
        kind = type(stmt)
        if kind is cst.SimpleStatementLine:
            for small in stmt.body:
                env = self._small(small, env, tainted)
            return env
        if kind is cst.If:
            self._record(stmt.test, env)
            inner = tainted or self._eval(stmt.test, self._reader(env))
            gated = self._is_rank_test(stmt.test)
            self._rank_gated += gated
            then = self._block(stmt.body.body, set(env), inner)
            self._rank_gated -= gated
            several = True if self._tests_initialized_group(stmt.test) else self._tests_several_processes(stmt.test)
            if several is True:
                return then  # several ranks exist only where the process group is initialized
            if several is False and stmt.orelse is not None and type(stmt.orelse) is not cst.If:
                return self._block(stmt.orelse.body.body, set(env), inner)  # (`if num_processes == 1:`)
            if stmt.orelse is None:
                other = env
            elif type(stmt.orelse) is cst.If:
                other = self._stmt(stmt.orelse, set(env), inner)
            else:
                other = self._block(stmt.orelse.body.body, set(env), inner)
            return then | other
        if kind in (cst.For, cst.While):
            head = stmt.iter if kind is cst.For else stmt.test
            self._record(head, env)
            inner = tainted or (kind is cst.While and self._eval(stmt.test, self._reader(env)))
            entry = set(env)
            if kind is cst.For:
                self._bind_loop_target(stmt.target, stmt.iter, entry, tainted)
            outer = self._left_locally
            first = self._block(stmt.body.body, set(entry), inner)
            second = self._block(stmt.body.body, entry | first, inner)
            self._left_locally = outer  # a `continue` or `break` ends at its own loop
            out = env | second
            if stmt.orelse is not None:
                out = self._block(stmt.orelse.body.body, out, tainted)
            return out
        if kind is cst.With:
            for item in stmt.items:
                self._record(item.item, env)
            return self._block(stmt.body.body, env, tainted)
        if kind is cst.Try:
            body = self._block(stmt.body.body, set(env), tainted)
            out = set(body)
            self._in_handler += 1
            for handler in stmt.handlers:
                out |= self._block(handler.body.body, env | body, tainted)
            self._in_handler -= 1
            if stmt.orelse is not None:
                out |= self._block(stmt.orelse.body.body, set(body), tainted)
            if stmt.finalbody is not None:
                out = self._block(stmt.finalbody.body.body, out, tainted)
            return out
        if kind in (cst.FunctionDef, cst.ClassDef):
            return env
        self._record(stmt, env)
        return env

    def _tests_several_processes(self, test: cst.BaseExpression) -> bool | None:
        """``True`` for a test that holds exactly where several processes run
        (``accelerator.num_processes > 1``, ``!= 1``, ``>= 2``, ``accelerator.use_distributed``),
        ``False`` for one that holds exactly where one runs (``num_processes == 1``), else ``None``.
        In the one-process branch no other rank exists: what it computes diverges from nothing."""
        if type(test) is cst.Attribute and test.attr.value == "use_distributed":
            value = self._value_at(test.value)
            return True if value is not None and value.is_acc else None
        if type(test) is not cst.Comparison or len(test.comparisons) != 1:
            return None
        left, target = test.left, test.comparisons[0]
        if type(left) is not cst.Attribute or left.attr.value != "num_processes" or type(target.comparator) is not cst.Integer:
            return None
        value = self._value_at(left.value)
        if value is None or not value.is_acc:
            return None
        bound, op = target.comparator.evaluated_value, type(target.operator)
        if (op is cst.GreaterThan and bound == 1) or (op is cst.NotEqual and bound == 1) \
                or (op is cst.GreaterThanEqual and bound == 2):
            return True
        return False if op is cst.Equal and bound == 1 else None

    def _tests_initialized_group(self, test: cst.BaseExpression) -> bool:
        """``if dist.is_initialized():`` (also ``dist.is_available() and dist.is_initialized()``)."""
        parts = [test.left, test.right] if type(test) is cst.BooleanOperation and type(test.operator) is cst.And else [test]
        return any(type(p) is cst.Call and (self.index.imports.qualify_expr(p.func) or "") in _INITIALIZED for p in parts)

    def _bind_loop_target(self, target: cst.BaseExpression, iterable: cst.BaseExpression, env: set[str],
                          tainted: bool) -> None:
        """``for batch in loader``: the batch varies. ``for step, batch in enumerate(loader)``: the
        counter does not."""
        inner = iterable
        counted = False
        while type(inner) is cst.Call and inner.args and (dotted_name(inner.func) or "").rsplit(".", 1)[-1] in (
                "enumerate", "tqdm", "iter"):
            counted = counted or (dotted_name(inner.func) or "").endswith("enumerate")
            inner = inner.args[0].value
        value = self._value_at(inner) if type(inner) in (cst.Name, cst.Attribute) else None
        loader = value is not None and value.kind == "loader" and not self._same_batches_everywhere(value)
        varies = tainted or loader or self._eval(iterable, self._reader(env))
        if counted and type(target) in (cst.Tuple, cst.List) and len(target.elements) == 2:
            self._bind(target.elements[0].value, tainted, env)
            self._bind(target.elements[1].value, varies, env)
            return
        self._bind(target, varies, env)

    def _same_batches_everywhere(self, value) -> bool:
        """A loader never prepared, made only by ``DataLoader(...)`` calls that keep the dataset's
        order (``shuffle=False``, or no shuffle, sampler or spread keywords): every rank iterates
        the same batches in the same order, so a batch is the same on every rank."""
        from .objects import NO

        origins = value.origins()
        return value.prepared == NO and bool(origins) and all(
            type(made) is cst.Call and (self.index.imports.qualify_expr(made.func) or dotted_name(made.func) or "")
            .rsplit(".", 1)[-1] == "DataLoader" and _keeps_order(made) and self._same_dataset_everywhere(made)
            for made in origins)

    def _same_dataset_everywhere(self, loader: cst.Call) -> bool:
        """The loader's dataset is known not to differ between ranks: not split by the rank
        (``prompts[rank::world]``, ``.shard(index=process_index)``), not from rank-local data."""
        dataset = next((a.value for a in loader.args if a.keyword is None or a.keyword.value == "dataset"), None)
        if dataset is None or self._reads_rank(dataset):
            return False
        held = self._value_at(dataset) if type(dataset) in (cst.Name, cst.Attribute) else None
        if held is not None and any(self._reads_rank(made) for made in held.origins()):
            return False  # `mine = prompts[accelerator.process_index::accelerator.num_processes]`
        return not any(self.at.get(node, False) for node in self.index.walk(dataset))

    def _small(self, small: cst.CSTNode, env: set[str], tainted: bool) -> set[str]:
        self._record(small, env)
        kind = type(small)
        if kind is cst.Assign:
            varies = tainted or self._eval(small.value, self._reader(env))
            parts = self._unpacked_parts(small, env) if varies and not tainted else None
            for target in small.targets:
                if parts is not None and type(target.target) in (cst.Tuple, cst.List):
                    for element, part in zip(target.target.elements, parts):
                        self._bind(element.value, part, env)
                    continue
                self._bind(target.target, varies, env)
        elif kind is cst.AnnAssign and small.value is not None:
            self._bind(small.target, tainted or self._eval(small.value, self._reader(env)), env)
        elif kind is cst.AugAssign:
            key = dotted_name(small.target)
            if key is not None and (tainted or self._eval(small.value, self._reader(env))):
                env.add(key)
                self._note_exit(key)
        elif kind is cst.Expr and type(small.value) is cst.Call and small.value.args and not tainted \
                and (self.index.imports.qualify_expr(small.value.func) or "") in IN_PLACE:
            key = dotted_name(small.value.args[0].value)
            if key is not None:
                env.discard(key)  # `dist.broadcast(indices, src=0)`: every rank now holds rank 0's
        elif kind is cst.Expr and type(small.value) is cst.Call and type(small.value.func) is cst.Attribute \
                and small.value.func.attr.value in _FILLING and (
                    tainted or any(self._eval(a.value, self._reader(env)) for a in small.value.args)):
            key = dotted_name(small.value.func.value)
            if key is not None:  # `val_losses.append(val_loss)`: the list now holds this rank's values
                if not tainted and key not in env:
                    self._filled.add((self._scope, key))  # (filled on every rank: its length is not)
                elif tainted:
                    self._filled.discard((self._scope, key))
                env.add(key)
                self._note_exit(key)
        elif kind in (cst.Continue, cst.Break) and (tainted or self._in_handler):
            self._left_locally = small
        elif kind is cst.Return and self._returns is not None and small.value is not None:
            self._returns.append(tainted or self._eval(small.value, self._reader(env)))
            if self._return_parts is not None:
                items = small.value.elements if type(small.value) is cst.Tuple else None
                self._return_parts.append(None if items is None or any(type(e) is cst.StarredElement for e in items)
                                          else [tainted or self._eval(e.value, self._reader(env)) for e in items])
        return env

    def _note_exit(self, key: str) -> None:
        if self._after_exit is not None and self._recording:
            self.left_behind.setdefault((self._scope, key), self._after_exit)

    def exit_behind(self, expr: cst.CSTNode) -> tuple[str, cst.CSTNode] | None:
        """A name read in ``expr`` that varies because some ranks skipped its update, and the
        ``continue``/``break`` they left by."""
        for load in self.index.loads_in(expr) if not isinstance(expr, (cst.Name, cst.Attribute)) else [expr]:
            key = (self.index.scope_of(load), dotted_name(load))
            if key in self.left_behind and self.at.get(load, False):
                return key[1], self.left_behind[key]
        return None

    def _bind(self, target: cst.BaseExpression, varies: bool, env: set[str]) -> None:
        self._note_attribute(target, varies)
        for key in bound_names(target):
            self._filled.discard((self._scope, key))
            for stale in [k for k in env if k.startswith(key + ".")]:
                env.discard(stale)
            if varies:
                env.add(key)
                self._note_exit(key)
            else:
                env.discard(key)


    def _note_attribute(self, target: cst.BaseExpression, varies: bool) -> None:
        """``self.<attr> = ...`` in a method under a rank predicate: instances hold a value there
        that some ranks set and the others do not.
        An attribute some method also binds on every rank to what every rank agrees on (a
        collective's result) is left unknown: which binding a later read sees is not modelled."""
        if type(target) is not cst.Attribute or type(target.value) is not cst.Name or target.value.value != "self":
            return
        info = self.index.functions.get(self._scope)
        if info is None or info.class_name is None:
            return
        attr = target.attr.value
        # (only a binding some ranks skip: a value computed from rank-local data in one method
        # and read in another would rest on the walk's over-approximation of unknown calls --
        # `self.control = self.callback_handler.on_step_end(args, self.state, ...)` -- with no
        # flow between the methods to bound it)
        if self._rank_gated:
            if attr not in self._uniform_attributes.get(info.class_name, ()):
                self.varying_attributes.setdefault(info.class_name, set()).add(attr)
        elif self._agreed_value(target):
            self._uniform_attributes.setdefault(info.class_name, set()).add(attr)
            self.varying_attributes.get(info.class_name, set()).discard(attr)

    def _agreed_value(self, target: cst.Attribute) -> bool:
        parent = self.index.parents.get(self.index.parents.get(target))
        value = getattr(parent, "value", None)
        return isinstance(value, cst.Call) and self._is_uniform_result(value)


def _keeps_order(loader: cst.Call) -> bool:
    """``DataLoader(dataset, ..., shuffle=False)`` with no sampler: batches in the dataset's
    order. No ``shuffle=`` at all is the same only where no ``**`` spread may carry one."""
    keywords = {arg.keyword.value: arg.value for arg in loader.args if arg.keyword is not None}
    if "sampler" in keywords or "batch_sampler" in keywords:
        return False
    positional = [arg for arg in loader.args if arg.keyword is None]
    if any(arg.star == "*" for arg in positional) or len(positional) > 2:
        return False  # (the third positional argument is `shuffle`)
    shuffle = keywords.get("shuffle")
    if shuffle is not None:
        return type(shuffle) is cst.Name and shuffle.value == "False"
    return not any(arg.star == "**" for arg in loader.args)
