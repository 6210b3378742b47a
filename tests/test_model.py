"""The semantic model, query by query: accelerators, prepared objects, rank regions, collectives."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest

from accel_lint.model import NO, YES, MAYBE, FileModel
from conftest import FIXTURES


def build(source: str) -> FileModel:
    return FileModel(cst.parse_module(textwrap.dedent(source)))


def reads(model: FileModel, text: str, line: int | None = None) -> list[cst.CSTNode]:
    """Name/attribute reads whose source is ``text`` (optionally on one line)."""
    found = []
    for node in model.objects.values:
        if model.code(node) == text and (line is None or model.line_of(node) == line):
            found.append(node)
    return found


def value_at(model: FileModel, text: str, line: int):
    nodes = reads(model, text, line)
    assert nodes, f"no read of {text} on line {line}"
    return model.value_at(nodes[0])


def calls(model: FileModel, text: str) -> list[cst.Call]:
    return [c for c in model.index.calls if model.code(c.func) == text]


# -- accelerators ---------------------------------------------------------------------------

ACC_SOURCE = """
import accelerate
import accelerate as acc_mod
from accelerate import Accelerator as A
from accelerate.state import AcceleratorState
from accelerate import PartialState
from accelerate import Accelerator

a = A()
b = accelerate.Accelerator()
c = acc_mod.PartialState()
s = AcceleratorState()
alias = a
st = a.state

def make():
    return Accelerator()

made = make()

class Runner:
    def setup(self):
        self.acc = Accelerator()
    def run(self):
        return self.acc

def helper(acc):
    acc.wait_for_everyone()
    return acc

def typed(x: Accelerator, y: "int"):
    return x, y

a, b, c, s, alias, st, made
idx = PartialState().process_index
"""


@pytest.mark.parametrize("name,line", [("a", 34), ("b", 34), ("c", 34), ("s", 34), ("alias", 34), ("st", 34),
                                       ("made", 34), ("self.acc", 25), ("acc", 29), ("x", 32)])
def test_accelerator_like_expressions(name, line):
    model = build(ACC_SOURCE)
    assert value_at(model, name, line).is_acc
    assert model.is_accelerate_file


def test_non_accelerators_are_not():
    model = build(ACC_SOURCE)
    nodes = reads(model, "y", 32)
    assert all(not model.value_at(n).is_acc for n in nodes)


def test_plain_torch_file_is_not_an_accelerate_file():
    model = build("import torch\nmodel = torch.nn.Linear(2, 2)\nmodel(torch.ones(2)).sum().backward()\n")
    assert not model.is_accelerate_file


def test_a_name_spelled_like_an_accelerator_is_nothing_by_its_name():
    # a Lightning script: `cfg.trainer.accelerator` is Lightning's device string, not Accelerate's,
    # also in a file that imports Accelerate
    lightning = ("import pytorch_lightning as pl\n"
                 "def main(cfg):\n"
                 "    trainer = pl.Trainer(accelerator=cfg.trainer.accelerator, devices=2)\n"
                 "    print('start')\n")
    assert not build(lightning).is_accelerate_file
    assert not build("import accelerate\n" + lightning).is_accelerate_file
    # a parameter or attribute whose maker is not seen is an accelerator by how it is used: the
    # protocol (`wait_for_everyone`), not the spelling; `print` is not Accelerate's own
    assert not build("class T:\n    def run(self):\n        self.accelerator.print('x')\n").is_accelerate_file
    used = build("class T:\n    def run(self):\n        self.acc.wait_for_everyone()\n"
                 "    def save(self):\n        return self.acc\n")
    assert used.is_accelerate_file and value_at(used, "self.acc", 5).is_acc
    # a parameter every caller of the file passes an accelerator to, whatever its name
    passed = build("from accelerate import Accelerator\n"
                   "def save(thing, out):\n    return thing\n"
                   "save(Accelerator(), 'out')\n")
    assert value_at(passed, "thing", 3).is_acc
    # a name the project declares (`accelerator-names`) still counts
    declared = FileModel(cst.parse_module("def run(worker):\n    return worker\n"), ("worker",))
    assert declared.value_at(reads(declared, "worker", 2)[0]).is_acc


def test_a_class_built_with_an_accelerator_holds_it_in_its_methods():
    # `Trainer(model, accelerator=acc)`: its `__init__` receives what the construction passes
    model = build("from accelerate import Accelerator\n"
                  "class Trainer:\n"
                  "    def __init__(self, net, accel):\n        self.accel = accel\n"
                  "    def save(self):\n        return self.accel\n"
                  "Trainer(None, accel=Accelerator())\n")
    assert value_at(model, "self.accel", 6).is_acc


def test_an_annotation_that_admits_none_still_names_an_accelerator():
    model = build("from typing import Optional\nfrom accelerate import Accelerator\n"
                  "def a(x: Accelerator | None = None):\n    return x\n"
                  "def b(y: Optional[Accelerator] = None):\n    return y\n")
    assert value_at(model, "x", 4).is_acc and value_at(model, "y", 6).is_acc


def test_an_object_that_sets_a_protocol_member_itself_is_not_an_accelerator():
    # `args.is_main_process = ...`: the code's own namespace, read later
    model = build("import accelerate\ndef run(args):\n    args.is_main_process = True\n"
                  "    if args.is_main_process:\n        print(args)\n")
    assert not model.is_accelerate_file


# -- prepared objects -------------------------------------------------------------------------

PREP_SOURCE = """
import torch; from accelerate import Accelerator
from torch.utils.data import DataLoader
accelerator = Accelerator(); model = torch.nn.Linear(4, 2)
train_dl = DataLoader(ds, shuffle=True); optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
raw = model; scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10)
model, optimizer, train_dl, scheduler = accelerator.prepare(model, optimizer, train_dl, scheduler)
model, optimizer, train_dl, scheduler, raw
first, *rest = accelerator.prepare(torch.nn.Linear(2, 2), opt2, dl2)
first, rest
net = torch.nn.Linear(2, 1); wrapped = accelerator.prepare(net)
net, wrapped
model = build_another()
model
if flag:
    maybe_model = accelerator.prepare(m)
else:
    maybe_model = m
maybe_model
models = [accelerator.prepare(torch.nn.Linear(4, n)) for n in sizes]
models[0]
for each in models:
    each
objs = accelerator.prepare(*things)
objs
"""


def test_tuple_unpacking_maps_by_position_with_kinds():
    model = build(PREP_SOURCE)
    kinds = {name: (value_at(model, name, 8).prepared, value_at(model, name, 8).kind)
             for name in ("model", "optimizer", "train_dl", "scheduler")}
    assert kinds == {"model": (YES, "model"), "optimizer": (YES, "optimizer"),
                     "train_dl": (YES, "loader"), "scheduler": (YES, "scheduler")}


def test_earlier_alias_stays_raw_and_new_name_leaves_old_raw():
    model = build(PREP_SOURCE)
    assert value_at(model, "raw", 8).prepared == NO
    assert value_at(model, "wrapped", 12).prepared == YES
    assert value_at(model, "net", 12).prepared == NO


def test_starred_unpacking():
    model = build(PREP_SOURCE)
    assert value_at(model, "first", 10).prepared == YES
    assert value_at(model, "rest", 10).prepared == NO


def test_rebinding_after_prepare_makes_the_name_raw_again():
    model = build(PREP_SOURCE)
    assert value_at(model, "model", 14).prepared == NO


def test_prepared_on_one_branch_only_is_maybe():
    model = build(PREP_SOURCE)
    assert value_at(model, "maybe_model", 19).prepared == MAYBE


def test_comprehension_of_prepared_objects():
    model = build(PREP_SOURCE)
    assert value_at(model, "models[0]".split("[")[0], 21).container
    assert value_at(model, "each", 23).prepared == YES


def test_starred_prepare_arguments_are_unknown():
    model = build(PREP_SOURCE)
    assert value_at(model, "objs", 25).prepared == NO


def test_self_attributes_prepared_in_one_method_are_prepared_in_every_method():
    model = build("""
    import torch; from accelerate import Accelerator
    class T:
        def __init__(self, model, lr):
            self.accelerator = Accelerator()
            self.model, self.opt = self.accelerator.prepare(model, torch.optim.AdamW(model.parameters(), lr=lr))
        def step(self):
            self.model, self.opt
    """)
    assert value_at(model, "self.model", 8).prepared == YES
    assert value_at(model, "self.opt", 8).kind == "optimizer"


def test_same_file_factory_and_caller_arguments():
    model = build("""
    from accelerate import Accelerator
    accelerator = Accelerator()
    def build(ds):
        return accelerator.prepare(DataLoader(ds))
    def train(loader):
        loader
    dl = build(ds)
    train(dl)
    """)
    assert value_at(model, "loader", 7).prepared == YES
    assert value_at(model, "dl", 9).kind == "loader"


def test_values_reach_the_fixpoint_through_a_long_chain_of_helpers():
    # each helper returns what the next one (defined below it) returns: every link needs the
    # walk of the next, so a fixed number of whole-file walks (there were five) stopped short
    links = "\n".join(f"def make_{i}():\n    return make_{i + 1}()" for i in range(8))
    model = build(links + "\ndef make_8():\n    return Accelerator()\nacc = make_0()\nacc\n")
    assert model.objects.converged
    assert value_at(model, "acc", 20).is_acc


def test_the_fixpoint_walks_again_only_the_scopes_whose_facts_changed():
    # 40 methods of one class read self.accelerator, which __init__ (walked first) binds: one
    # walk each, and one more of __init__, which read the attribute before it bound it
    methods = "".join(f"    def m{i}(self):\n        self.accelerator.wait_for_everyone()\n" for i in range(40))
    model = build("from accelerate import Accelerator\nclass T:\n    def __init__(self):\n"
                  "        self.accelerator = Accelerator()\n" + methods)
    assert model.objects.walk_count == 1 + 41 + 1
    # a value the walks must revisit: prepared in the last method, read in the first
    model = build("""
    from accelerate import Accelerator; from torch.utils.data import DataLoader
    class T:
        def evaluate(self):
            self.loader
        def setup(self, dataset):
            self.accelerator = Accelerator()
            self.loader = self.accelerator.prepare(DataLoader(dataset, batch_size=8))
    """)
    assert value_at(model, "self.loader", 5).prepared == YES
    # evaluate once more for the prepared loader, setup for the attributes it assigns
    assert model.objects.walk_count == 1 + 2 + 2


# -- rank predicates and regions ------------------------------------------------------------------

RANK_SOURCE = """
import os
import argparse
import torch.distributed as dist
from accelerate import Accelerator, PartialState
parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", type=int)
args = parser.parse_args()
accelerator = Accelerator()
is_main = accelerator.is_main_process
rank = dist.get_rank()
if accelerator.is_main_process: pass  # R
if accelerator.is_local_main_process: pass  # R
if accelerator.is_last_process: pass  # R
if accelerator.process_index == 0: pass  # R
if accelerator.local_process_index != 0: pass  # R
if accelerator.state.process_index == 1: pass  # R
if PartialState().is_main_process: pass  # R
if dist.get_rank() == 0: pass  # R
if rank > 0: pass  # R
if rank % 2 == 0: pass  # R
if os.environ["RANK"] == "0": pass  # R
if int(os.environ.get("LOCAL_RANK", 0)) == 0: pass  # R
if os.getenv("SLURM_PROCID") == "0": pass  # R
if args.local_rank in (-1, 0): pass  # R
if is_main: pass  # R
if not is_main: pass  # R
if is_main and args.do_eval: pass  # R
if is_main or accelerator.distributed_type == "DEEPSPEED": pass  # R
if accelerator.sync_gradients: pass  # U
if step % 10 == 0: pass  # U
if accelerator.num_processes > 1: pass  # U
if accelerator.distributed_type == "MULTI_GPU": pass  # U
if args.do_eval: pass  # U
if accelerator.gather(torch.tensor(rank)).sum() > 0: pass  # U
if accelerator.check_trigger(): pass  # U
"""


def _marked_ifs():
    source = textwrap.dedent(RANK_SOURCE)
    model = build(source)
    for node in model.index.parents:
        if isinstance(node, cst.If):
            line = source.splitlines()[model.line_of(node) - 1]
            yield pytest.param(model, node, line.endswith("# R"), id=line.split(":")[0])


@pytest.mark.parametrize("model,node,rank_dependent", list(_marked_ifs()))
def test_rank_dependent_and_uniform_conditions(model, node, rank_dependent):
    assert model.ranks.is_rank_dependent(node.test) is rank_dependent


def test_rank_predicate_stored_in_an_attribute_in_another_method():
    model = build("""
    from accelerate import Accelerator
    class Runner:
        def __init__(self):
            self.accelerator = Accelerator()
            self.is_main = self.accelerator.is_main_process
        def save(self):
            if self.is_main:
                self.accelerator.wait_for_everyone()
    """)
    [div] = model.divergences
    assert model.code(div.op.guard.condition) == "self.is_main"


REGION_SOURCE = """
from accelerate import Accelerator
accelerator = Accelerator()

def body():
    if accelerator.is_main_process:
        a()  # gated
    else:
        b()  # gated
    c()  # all
    for x in range(3):
        if not accelerator.is_main_process:
            continue
        d()  # gated
    e()  # all
    if not accelerator.is_local_main_process:
        return
    f()  # gated

@accelerator.on_main_process
def decorated():
    g()  # gated

def helper():
    h()  # gated

def caller():
    if accelerator.is_main_process:
        helper()  # gated
    with accelerator.main_process_first():
        i()  # all
"""


def test_regions_if_else_early_exits_decorators_and_helpers():
    source = textwrap.dedent(REGION_SOURCE)
    model = build(source)
    lines = source.splitlines()
    checked = 0
    for call in model.index.calls:
        line = lines[model.line_of(call) - 1]
        if line.endswith("# gated"):
            assert model.rank_guard_of(call) is not None, line
            checked += 1
        elif line.endswith("# all"):
            assert model.rank_guard_of(call) is None, line
            checked += 1
    assert checked == 10


def test_guard_kinds_name_the_condition():
    source = textwrap.dedent(REGION_SOURCE)
    model = build(source)
    how = {model.code(c.func): model.rank_guard_of(c).how for c in model.index.calls
           if model.code(c.func) in ("a", "b", "d", "g") }
    assert how == {"a": "if", "b": "else", "d": "early-exit", "g": "decorator"}


# -- collectives and op sequences --------------------------------------------------------------------


def test_collective_table_and_non_collectives():
    model = build("""
    import torch.distributed as dist
    from accelerate import Accelerator
    from accelerate.utils import gather_object, broadcast
    accelerator = Accelerator()
    accelerator.wait_for_everyone(); accelerator.gather(x); accelerator.gather_for_metrics(x)
    accelerator.gather_for_metrics(x, use_gather_object=True); accelerator.reduce(x); accelerator.check_trigger()
    accelerator.pad_across_processes(x); accelerator.save_state("d"); dist.all_reduce(x); dist.barrier()
    gather_object(x); broadcast(x); accelerator.split_between_processes(x, apply_padding=True)
    accelerator.print(x); accelerator.save(x, "f"); accelerator.log({}); accelerator.unwrap_model(m)
    accelerator.set_trigger(); accelerator.split_between_processes(items); dist.send(x, 1); other.gather(x)
    """)
    kinds = [model.op_kind(c) for c in model.index.calls if model.code(c.func) not in ("Accelerator",)]
    assert kinds == ["BARRIER", "ALLGATHER", "ALLGATHER", "ALLGATHER_OBJ", "ALLREDUCE", "ALLREDUCE", "ALLGATHER",
                     "CKPT", "ALLREDUCE", "BARRIER", "ALLGATHER_OBJ", "BROADCAST", "ALLGATHER",
                     None, None, None, None, None, None, None, None]


def test_balanced_sequences_have_no_divergence_and_unbalanced_ones_name_the_guard():
    model = build("""
    from accelerate import Accelerator
    accelerator = Accelerator()
    def balanced():
        if accelerator.is_main_process:
            work()
            accelerator.wait_for_everyone()
        else:
            accelerator.wait_for_everyone()
    def unbalanced():
        if accelerator.is_main_process:
            accelerator.wait_for_everyone()
            accelerator.wait_for_everyone()
        else:
            accelerator.wait_for_everyone()
    """)
    assert len(model.divergences) == 1
    op = model.divergences[0].op
    assert model.code(op.guard.condition) == "accelerator.is_main_process"
    assert model.index.functions[model.divergences[0].scope].qualname == "unbalanced"


def test_collective_through_two_helpers_reports_the_guarded_call_with_the_chain():
    model = build("""
    from accelerate import Accelerator
    accelerator = Accelerator()
    def compute_metrics(x):
        return accelerator.gather_for_metrics(x)
    def evaluate(x):
        return compute_metrics(x)
    def main(x):
        if accelerator.is_main_process:
            evaluate(x)
    """)
    [div] = model.divergences
    assert model.code(div.op.node) == "evaluate(x)"
    assert div.op.chain == ("evaluate", "compute_metrics")
    assert model.code(div.op.origin.func) == "accelerator.gather_for_metrics"


def test_recursion_terminates_and_is_consistent():
    model = build("""
    from accelerate import Accelerator
    accelerator = Accelerator()
    def a(n):
        accelerator.wait_for_everyone()
        return b(n - 1)
    def b(n):
        return a(n) if n else None
    def main():
        a(3)
        b(3)
    """)
    assert model.divergences == []


# -- the syntax walk ---------------------------------------------------------------------

SYNTAX_SAMPLE = '''\
from __future__ import annotations
from torch import (nn, distributed as dist)
import accelerate.utils as au
@decorator(x=1)
async def f(a, /, b: int = 2, *args, c, d=-1, **kw) -> dict[str, int]:
    async with ctx() as (x, y), other:
        yield [i async for i in it if i] + {k: v for k, v in d.items()} - {*s}
    x: list = lambda q=1: q ** 2
    global g
    del a[1:2, ::3], b.c
    try:
        raise E from None
    except* (A, B) as e:
        pass
    else:
        assert not x, f"{x!r:>{w}} {y=}"
    finally:
        return (yield)
match command.split():
    case [action, *rest] if action in ("a", "b"):
        pass
    case {"k": 1, **kw} | Point(x=0) as p:
        pass
class C(Base, metaclass=M):
    def m(self): return self.x if self.y else not self.z
w = a < b <= c is not d; x += 1; y @= z
print(*args, **kwargs); t = 1, *u
type Alias[T] = list[T]
'''


def test_syntax_children_are_libcst_children_in_order_without_layout():
    from accel_lint.model.syntax import syntax_children, _classify

    class Recorder(cst.CSTVisitor):
        def __init__(self):
            self.stack, self.children = [], {}

        def on_visit(self, node):
            if self.stack:
                self.children.setdefault(self.stack[-1], []).append(node)
            self.stack.append(node)
            return True

        def on_leave(self, node):
            self.stack.pop()

    sources = [SYNTAX_SAMPLE] + [p.read_text() for p in sorted(FIXTURES.glob("*.py"))]
    checked = 0
    for source in sources:
        module = cst.parse_module(source)
        recorder = Recorder()
        module.visit(recorder)
        for parent, kids in recorder.children.items():
            if not _classify(type(parent)):
                continue
            expected = [k for k in kids if _classify(type(k))]
            assert [id(k) for k in syntax_children(parent)] == [id(k) for k in expected], type(parent).__name__
            checked += 1
    assert checked > 1000


def test_divergence_blames_the_guarded_call_not_the_one_every_rank_makes():
    # ops: main [save_state, state_dict], others [state_dict]: a kind-only alignment
    # matched the guarded save_state with the shared state_dict and blamed the latter
    from accel_lint.config import Config
    from accel_lint.engine import lint_source

    source = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        def train():
            if accelerator.is_main_process:
                accelerator.save_state("ckpt")
            torch.save(model.state_dict(), "w.pt")
        """)
    found = [(d.line, d.code) for d in lint_source(source, "t.py", Config()).diagnostics if d.code == "AL302"]
    assert found == [(7, "AL302")]


FREEZE_SOURCE = """
from accelerate import Accelerator
from diffusers import UNet2DConditionModel
from transformers import CLIPTextModel
def freeze_models(models_to_freeze):
    for model in models_to_freeze:
        if model is not None:
            model.requires_grad_(False)
accelerator = Accelerator()
unet = UNet2DConditionModel.from_pretrained("x")
unet.requires_grad_(False)
unet.add_adapter(lora_config)
text_encoder = CLIPTextModel.from_pretrained("x")
freeze_models([text_encoder])
text_encoder.to("cuda")
encoder_2 = CLIPTextModel.from_pretrained("x")
freeze_models([encoder_2])
inject_trainable_lora(encoder_2)
unet, text_encoder, encoder_2 = accelerator.prepare(unet, text_encoder, encoder_2)
unet, text_encoder, encoder_2
"""


def test_a_module_frozen_through_a_helper_is_returned_unwrapped():
    model = build(FREEZE_SOURCE)
    assert value_at(model, "text_encoder", 20).not_wrapped


def test_a_frozen_module_given_parameters_afterwards_is_wrapped():
    # `unet.add_adapter(...)` and `inject_trainable_lora(encoder_2)` may add trainable
    # parameters: `prepare` then wraps them, as it would any trainable module
    model = build(FREEZE_SOURCE)
    assert not value_at(model, "unet", 20).not_wrapped
    assert not value_at(model, "encoder_2", 20).not_wrapped


def test_a_frozen_module_some_of_whose_parameters_are_made_trainable_is_wrapped():
    # freezing everything, then setting `requires_grad = True` on some parameters in a loop
    # over the module's parameters, leaves trainable parameters: `prepare` wraps the module
    model = build("""
from accelerate import Accelerator
from diffusers import UNet2DConditionModel
accelerator = Accelerator()
unet = UNet2DConditionModel.from_pretrained("x")
vae = UNet2DConditionModel.from_pretrained("x")
unet.requires_grad_(False)
vae.requires_grad_(False)
for name, param in unet.named_parameters():
    if "temporal" in name:
        param.requires_grad = True
for param in vae.parameters():
    param.requires_grad = False
unet, vae = accelerator.prepare(unet, vae)
unet, vae
""")
    assert not value_at(model, "unet", 15).not_wrapped
    assert value_at(model, "vae", 15).not_wrapped


def test_a_method_that_freezes_its_argument_freezes_what_a_call_on_self_passes():
    # `self.freeze(encoder)` fills `self` itself: the first argument is the method's second
    # parameter, which the method freezes
    model = build("""
from accelerate import Accelerator
from transformers import CLIPTextModel
class Trainer:
    def freeze(self, module):
        module.requires_grad_(False)
    def setup(self):
        accelerator = Accelerator()
        encoder = CLIPTextModel.from_pretrained("x")
        self.freeze(encoder)
        encoder = accelerator.prepare(encoder)
        encoder
""")
    assert value_at(model, "encoder", 12).not_wrapped


def test_a_parameter_given_the_accelerators_device_at_every_call_is_that_device():
    model = build("""
from accelerate import Accelerator
accelerator = Accelerator()
def place(module, device):
    module.to(device)
def place_anywhere(module, device):
    module.to(device)
place(net, device=accelerator.device)
place(head, accelerator.device)
place_anywhere(net, accelerator.device)
place_anywhere(net, "cuda:1")
""")
    first, second = (call.args[0].value for call in calls(model, "module.to"))
    assert model.is_accelerator_device(first)
    assert not model.is_accelerator_device(second)  # one call passes another device


def test_a_pass_of_a_loop_body_just_before_the_loop_is_the_same_as_one_just_after():
    from accel_lint.model.ops import _rotated

    # the main process: a loop of barriers, then one; the others: one, then the loop
    assert _rotated(["BARRIER", "(L1", "BARRIER", ")"]) == ["(L1", "BARRIER", ")", "BARRIER"]
    assert _rotated(["(L1", "BARRIER", ")", "BARRIER"]) == ["(L1", "BARRIER", ")", "BARRIER"]
    # a different op before the loop, or a body with structure in it, stays where it is
    assert _rotated(["GATHER", "(L1", "BARRIER", ")"]) == ["GATHER", "(L1", "BARRIER", ")"]
    assert _rotated(["BARRIER", "(L1", "(L2", ")", "BARRIER", ")"]) == ["BARRIER", "(L1", "(L2", ")", "BARRIER", ")"]


def test_what_a_sampler_expression_makes_is_computed_once_per_expression(monkeypatch):
    """Helpers that return other helpers' samplers on two paths fan out: each expression is
    read once (a torchdistill-like tree took 150 s in `sharding_sampler_functions` before)."""
    import libcst as cst

    from accel_lint.model import FileModel

    lines = ["from torch.utils.data import DistributedSampler", "def make0(ds, flag):",
             "    return DistributedSampler(ds) if flag else None"]
    for i in range(1, 12):
        lines += [f"def make{i}(ds, flag):", f"    return make{i - 1}(ds, flag) if flag else make{i - 1}(ds, not flag)"]
    model = FileModel(cst.parse_module("\n".join(lines) + "\n"))
    calls = []
    original = FileModel._made_sampler_shards_uncached
    monkeypatch.setattr(FileModel, "_made_sampler_shards_uncached",
                        lambda self, origin, depth: calls.append(origin) or original(self, origin, depth))
    assert "make11" in model.sharding_sampler_functions() or "make3" in model.sharding_sampler_functions()
    assert len(calls) == len(set(map(id, calls))) <= 60
