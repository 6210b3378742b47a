from __future__ import annotations

from collections.abc import Iterable

import libcst as cst

from ..collectives import CKPT
from ..model import FileModel
from ..model.moves import plan_move
from .base import Finding, Fix, Rule, describe_guard, quote

_CONSEQUENCES = {
    "save_state": "deadlocks under FSDP and DeepSpeed, and under DDP saves only rank 0's RNG state so a resume "
    "silently skips it on the other ranks",
    "load_state": "leaves the other ranks with stale weights under DDP and DeepSpeed ZeRO-1/2 and deadlocks under FSDP "
    "and ZeRO-3",
    "save_model": "deadlocks under FSDP and DeepSpeed ZeRO-3, where gathering the weights needs every rank",
    "get_state_dict": "deadlocks under FSDP and DeepSpeed ZeRO-3, where gathering the weights needs every rank",
    "state_dict": "deadlocks under FSDP1, where a full state dict is gathered on every rank, and under FSDP2 and "
    "ZeRO-3 returns sharded or empty tensors",
}


class RankGatedCheckpoint(Rule):
    """A checkpoint call that is collective on some backends, run on some ranks only.

    ## What it does
    Flags `save_state`, `load_state`, `save_model`, `get_state_dict` (also as an
    argument, e.g. `save_pretrained(..., state_dict=accelerator.get_state_dict(m))`)
    and a prepared model's `.state_dict()` when only some ranks reach them: under
    `if accelerator.is_main_process:` (also `or distributed_type == DEEPSPEED`), after
    an early exit, in an `@accelerator.on_main_process` function, or in a same-file
    helper called under such a guard.
    Not flagged: `get_state_dict` under `if ...deepspeed_plugin.zero_stage != 3:` (only DeepSpeed
    ZeRO-1/2 runs it, where every rank holds the whole weights). A project that names no FSDP or
    ZeRO-3 anywhere still gets the finding: Accelerate requires these calls on every process,
    and a launch config switches the backend without a change to the code.

    ## Why is this bad?
    Under FSDP and DeepSpeed ZeRO-3 these calls gather shards from every rank, and under
    DeepSpeed `save_state` is the engine's collective `save_checkpoint` at every stage, so a
    main-only call deadlocks. Under DDP, a main-only `save_state` writes only
    `random_states_0.pkl` and a later `load_state` silently skips the RNG and step
    restore on the other ranks; a main-only `load_state` leaves them with stale weights.
    `accelerator.save(...)`, and `torch.save` of a state dict computed on every rank,
    are fine under the guard. A guard of the form `is_main_process or distributed_type ==
    DistributedType.DEEPSPEED` lets every rank in under DeepSpeed; the message then says that
    only FSDP deadlocks.

    Measured on 2 H100s per backend ([docs/backends.md](../backends.md), rows `al302_*`): a
    main-only `save_state` hung under FSDP1/2 and ZeRO-2/3 and under DDP left a checkpoint
    with rank 0's RNG state only; `save_model` and `get_state_dict` hung under FSDP and
    ZeRO-3 and completed under DDP and ZeRO-2; `load_state` hung under FSDP and ZeRO-3 and
    under DDP and ZeRO-2 left the replicas with different weights; `state_dict()` hung under
    FSDP1 and returned DTensor shards under FSDP2 and empty tensors under ZeRO-3.

    ## Example
    ```python
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        accelerator.save_state(ckpt_dir)
        shutil.copy("config.yaml", ckpt_dir)
    ```

    ## Use instead
    ```python
    accelerator.wait_for_everyone()
    accelerator.save_state(ckpt_dir)          # every rank
    if accelerator.is_main_process:
        shutil.copy("config.yaml", ckpt_dir)
    ```

    ## Fix safety
    Unsafe: the checkpoint statement is moved out of its `if <rank predicate>:`; the statements
    before and after it stay guarded, in order, and `wait_for_everyone()` after those before it
    keeps them finished before any rank saves (checkpoint rotation must not count or delete the
    folder another rank is creating). What the call reads from the guarded block comes along
    when it is a plain assignment of a value that is the same on every rank, computed without
    side effects (`save_path = os.path.join(args.output_dir, f"checkpoint-{global_step}")`);
    anything else (a helper call, a rank-dependent value, a name the other ranks also set) and
    the fix is refused with a notice that says why. Only offered for a direct call (not through
    a helper) in an `if` without `else`.
    It assumes what the guard kept main-only besides the checkpoint (logging, rotation)
    may stay main-only, and that nothing between the guard and the barrier depends on
    another rank's file; every moved read is checked to be bound on every rank.
    """

    code = "AL302"
    name = "rank-gated-checkpoint"
    severity = "error"
    fix_may_refuse = True
    summary = "a checkpoint call (save_state, load_state, get_state_dict, ...) runs on some ranks only"
    scope = "distributed"

    VALID = [
        """
import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM
accelerator = Accelerator()
model = AutoModelForCausalLM.from_pretrained("gpt2")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
model, optimizer = accelerator.prepare(model, optimizer)
if accelerator.is_main_process:
    if accelerator.state.deepspeed_plugin.zero_stage != 3:  # ZeRO-1/2: every rank holds the whole weights
        model.save_pretrained("out", state_dict=accelerator.get_state_dict(model))
if accelerator.state.deepspeed_plugin.zero_stage == 3:
    state = accelerator.get_state_dict(model)  # every rank takes part
""",
        # an EMA copy nobody prepared: saving it gathers nothing
        """\
        import copy
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        net = torch.nn.Linear(4, 4)
        ema = copy.deepcopy(net)
        net = accelerator.prepare(net)
        if accelerator.is_main_process:
            accelerator.save_model(ema, "ema")
        """,
        """
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
accelerator.save_state("ckpt")
state_dict = accelerator.get_state_dict(model)
if accelerator.is_main_process:
    accelerator.save(state_dict, "model.pt")
    torch.save(state_dict, "copy.pt")
accelerator.unwrap_model(model).save_pretrained(
    "out", is_main_process=accelerator.is_main_process, state_dict=accelerator.get_state_dict(model)
)
""",
    ]
    INVALID = [
        """
from accelerate import Accelerator
accelerator = Accelerator()
accelerator.wait_for_everyone()
if accelerator.is_main_process:
    accelerator.save_state("ckpt")  # expect: AL302
""",
        """
from accelerate import Accelerator
accelerator = Accelerator()
def save_checkpoint(path):
    accelerator.save_state(path)
for epoch in range(3):
    if accelerator.is_main_process or accelerator.distributed_type == "DEEPSPEED":
        save_checkpoint("ckpt")  # expect: AL302
""",
        # the model an outside helper returns, bound over the one the constructor was given
        """
import torch
from accelerate import Accelerator
from helpers import build_model, setup_distributed
accelerator = Accelerator()
class Trainer:
    def __init__(self, model, accelerator):
        self.model = model
        self.accelerator = accelerator
    def setup(self):
        self.model, self.optimizer = setup_distributed(self.accelerator, self.model)
    def save(self):
        if self.accelerator.is_main_process:
            state = self.accelerator.get_state_dict(self.model)  # expect: AL302
            torch.save(state, "model.pt")
def main():
    trainer = Trainer(model=build_model(), accelerator=accelerator)
    trainer.setup()
    trainer.save()
""",
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for divergence in model.divergences:
            op = divergence.op
            if op.kind != CKPT:
                continue
            method = op.origin.func.attr.value if isinstance(op.origin.func, cst.Attribute) else ""
            if method == "get_state_dict" and _below_zero_stage_3(model, op.origin):
                continue  # `if ...deepspeed_plugin.zero_stage != 3:`: DeepSpeed ZeRO-1/2, where it is local
            consequence = _CONSEQUENCES.get(method, "deadlocks under FSDP and DeepSpeed")
            evidence = list(model.guard_evidence(op.guard))
            naming = _automatic_naming(model) if method == "save_state" else None
            if naming is not None:
                # save_state then waits for every rank before it writes (Accelerate's save_state)
                consequence = ("on every backend calls `wait_for_everyone()` (`automatic_checkpoint_naming=True`), which "
                               "the other ranks do not call there, so the ranks' collectives fall out of step "
                               "(a hang or a crash)")
                evidence.append((naming, "`automatic_checkpoint_naming=True` makes `save_state` wait for every rank"))
            elif model.guard_admits_every_rank(op.guard) == "DEEPSPEED":
                # `is_main_process or distributed_type == DEEPSPEED`: every rank under DeepSpeed
                consequence = ("deadlocks under FSDP, where it needs every rank (the guard lets every rank in only "
                               "under DeepSpeed)")
            what = quote(model.code(op.node), 70)
            if op.chain:
                what = f"{what} (which calls {quote(model.code(op.origin.func) + '()')})"
            yield Finding(
                op.node,
                f"{what} runs {describe_guard(model, op.guard)} and {consequence}; call it on every rank and guard "
                f"only plain file I/O",
                fix=_hoist(model, op),
                tag=method or "state_dict",
                evidence=tuple(evidence),
            )


def _automatic_naming(model: FileModel) -> cst.CSTNode | None:
    """The ``automatic_checkpoint_naming=True`` argument of a ``ProjectConfiguration`` that every
    accelerator of the file is built with (directly, or through a name bound only to it)."""
    configs = {}
    for call in model.index.calls:
        if (model.index.imports.qualify_expr(call.func) or "").endswith(".ProjectConfiguration"):
            flag = next((a for a in call.args if a.keyword is not None
                         and a.keyword.value == "automatic_checkpoint_naming"), None)
            configs[call] = flag if flag is not None and model.code(flag.value) == "True" else None
    if not configs or not model.objects.acc_constructors:
        return None
    found = None
    for constructor in model.objects.acc_constructors:
        given = next((a.value for a in constructor.args if a.keyword is not None
                      and a.keyword.value == "project_config"), None)
        if isinstance(given, cst.Name):
            bound = [n.value for n in model.index.walk(model.scope_of(constructor)) if isinstance(n, cst.Assign)
                     and any(isinstance(t.target, cst.Name) and t.target.value == given.value for t in n.targets)]
            given = bound[0] if len(bound) == 1 else None
        flag = configs.get(given) if isinstance(given, cst.Call) else None
        if flag is None:
            return None
        found = flag
    return found


def _hoist(model: FileModel, op) -> Fix | None:
    """Unsafe: move the checkpoint statement out of its ``if <rank predicate>:`` and keep the
    statements before and after it guarded, in order. Only for a call made directly (not
    through a helper) as its own statement (or the value of an assignment) in the body of an
    ``if`` without ``else``. What the call reads from the guarded block comes along when it is
    a rank-uniform, effect-free assignment (``save_path = os.path.join(...)``); otherwise the
    fix is refused. The statements left guarded before it may be prerequisites
    (``makedirs``), which is why the fix is unsafe."""
    guard = op.guard
    if op.chain or guard is None or guard.how != "if" or not isinstance(guard.node, cst.If):
        return None
    branch = guard.node
    if branch.orelse is not None or not isinstance(branch.body, cst.IndentedBlock):
        return None
    statement = model.statement_of(op.node)
    body = list(branch.body.body)
    if statement not in body or not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
        return None
    small = statement.body[0]
    value = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
    if value is not op.node:
        return None
    at = body.index(statement)
    before, after = body[:at], body[at + 1:]
    plan = plan_move(model, statement, before, branch)
    description = "run the checkpoint call on every rank; keep the rest guarded"
    if plan.refusal is not None:
        return Fix.refused("unsafe", description,
                           f"{plan.refusal}; move that computation out of the guard by hand, then the call")
    left = [s for s in before if s not in plan.brought]
    moved = list(plan.brought)
    pieces: list[cst.BaseStatement] = []
    if plan.ahead_of_guard:
        pieces += moved
    if left:
        pieces.append(branch.with_changes(leading_lines=[], body=branch.body.with_changes(body=left)))
        # what stays guarded ahead of the call (checkpoint rotation, makedirs) must be done
        # before any rank saves: rank 1 would otherwise create the new checkpoint folder while
        # rank 0 still counts or deletes folders
        barrier = cst.parse_statement(f"{model.code(op.origin.func.value)}.wait_for_everyone()")
        pieces.append(barrier)
    if not plan.ahead_of_guard:
        pieces += moved
    pieces.append(statement)
    if after:
        pieces.append(branch.with_changes(leading_lines=[], body=branch.body.with_changes(body=after)))
    # the first piece takes the `if`'s blank lines and comments; the others keep their own
    pieces[0] = pieces[0].with_changes(leading_lines=[*branch.leading_lines, *pieces[0].leading_lines])
    return Fix("unsafe", description, ((branch, cst.FlattenSentinel(pieces)),))


def _below_zero_stage_3(model: FileModel, node: cst.CSTNode) -> bool:
    """``node`` runs only where a test on the DeepSpeed plugin's ZeRO stage excludes stage 3
    (``if accelerator.state.deepspeed_plugin.zero_stage != 3:``, ``< 3``): only under DeepSpeed
    (elsewhere the plugin is ``None`` and the test raises), at a stage whose weights every rank
    holds whole, so ``get_state_dict`` gathers nothing."""
    child = node
    for parent in model.ancestors(node):
        if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
            return False
        if isinstance(parent, cst.If) and child is parent.body:
            test = parent.test
            if type(test) is cst.Comparison and len(test.comparisons) == 1 and type(test.left) is cst.Attribute \
                    and test.left.attr.value == "zero_stage" and type(test.comparisons[0].comparator) is cst.Integer \
                    and test.comparisons[0].comparator.evaluated_value == 3 \
                    and type(test.comparisons[0].operator) in (cst.NotEqual, cst.LessThan):
                return True
        child = parent
    return False
