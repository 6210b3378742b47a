"""Kinds across modules: what a function or class of another module of the tree makes is known
where a script binds its result, read from that module even when it never mentions Accelerate."""

from __future__ import annotations

import textwrap

import pytest
from pathlib import Path

from conftest import json_findings

MODELS = """\
import torch
from torch.utils.data import DataLoader, DistributedSampler


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)

    def forward(self, x):
        return self.layer(x)

    def head(self):
        return self.layer


def build_loader(dataset):
    return DataLoader(dataset, batch_size=4, shuffle=True)


def build_sharded_loader(dataset):
    return DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset))
"""

TRAIN = """\
import torch
from accelerate import Accelerator
from models import Net, build_loader, build_sharded_loader

accelerator = Accelerator()
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train_loader = {make}(dataset)
model, optimizer, _ = accelerator.prepare(model, optimizer, {make}(dataset))
for batch in train_loader:
    accelerator.backward(model(batch).sum())
    optimizer.step()
head = model.head()
"""


def project(tmp_path: Path, make: str) -> Path:
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "train.py").write_text(TRAIN.format(make=make))
    return tmp_path


def test_a_loader_made_in_another_module_and_never_prepared_is_reported_with_its_maker(tmp_path: Path):
    _, found = json_findings("--no-cache", ".", cwd=project(tmp_path, "build_loader"))
    by_code = {d["code"]: d for d in found}
    assert set(by_code) == {"AL201", "AL501"}, found
    assert by_code["AL201"]["line"] == 10
    facts = [e["fact"] for e in by_code["AL201"]["evidence"]]
    assert any("build_loader(dataset)" in f and "another module" in f for f in facts), facts
    # the class of another module is a model: the wrapper has no `head`
    assert by_code["AL501"]["line"] == 13


def test_a_loader_another_module_shards_itself_stays_unknown(tmp_path: Path):
    _, found = json_findings("--no-cache", ".", cwd=project(tmp_path, "build_sharded_loader"))
    assert [d["code"] for d in found] == ["AL501"], found


def test_a_single_process_tool_importing_a_model_class_is_still_single_process(tmp_path: Path):
    """An inference script that builds an accelerator only for its device: knowing what an
    imported class makes must not turn it into a multi-process program."""
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "infer.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from models import Net
        accelerator = Accelerator()
        net = Net().to(accelerator.device)
        torch.save(net.state_dict(), "out.pt")
        print("saved")
    """))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert found == []


CLIPS = """\
from torch.utils.data import Dataset


class Clips(Dataset):
    def __init__(self, path, accelerator=None):
        self.world = accelerator.num_processes
        self.rank = accelerator.process_index
        self.rows = []
        for i, row in enumerate(open(path)):
            if {keep}:
                self.rows.append(row)

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]
"""

TRAIN_ON_CLIPS = """\
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from clips import Clips
from mylib import Net

accelerator = Accelerator()
model = Net()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
loader = DataLoader(Clips("rows.csv", accelerator=accelerator), batch_size=4, shuffle=True)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
"""


def test_a_dataset_class_of_another_module_that_keeps_its_ranks_rows_is_sharded_twice(tmp_path: Path):
    (tmp_path / "clips.py").write_text(CLIPS.format(keep="i % self.world == self.rank"))
    (tmp_path / "train.py").write_text(TRAIN_ON_CLIPS)
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    (finding,) = [d for d in found if d["code"] == "AL205"]
    assert finding["path"].endswith("train.py") and finding["line"] == 10
    assert "`Clips` keeps only the rows where `i % self.world == self.rank`" in finding["message"]
    assert {"line": 10, "fact": "made by `Clips(...)`: its class keeps this rank's rows only"} in finding["evidence"]


def test_a_dataset_class_that_keeps_every_row_is_not(tmp_path: Path):
    (tmp_path / "clips.py").write_text(CLIPS.format(keep="row.strip()"))
    (tmp_path / "train.py").write_text(TRAIN_ON_CLIPS)
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert not [d for d in found if d["code"] == "AL205"], found


def test_a_method_of_a_model_class_of_another_package_that_runs_the_forward_is_a_forward(tmp_path: Path):
    """`unwrap_model(model).draw(...)` on the main process only: `draw` calls `sample`, which a
    base class defines and which calls `self(...)`; the class comes through the package's
    ``__init__.py`` and ``from_pretrained``."""
    package = tmp_path / "models"
    package.mkdir()
    (package / "__init__.py").write_text("from .net import Net\n")
    (package / "net.py").write_text(textwrap.dedent("""\
        import torch

        class Base(torch.nn.Module):
            def sample(self, x):
                return self(x)

        class Net(Base):
            def forward(self, x):
                return x

            def draw(self, x):
                return self.sample(x)

            def describe(self):
                return "net"
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from models import Net

        def show(model, accelerator):
            accelerator.unwrap_model(model).describe()
            return accelerator.unwrap_model(model).draw(torch.ones(1, 2))

        accelerator = Accelerator()
        model = Net.from_pretrained("weights")
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        if accelerator.is_main_process:
            show(model, accelerator)
    """))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert [(d["code"], d["line"]) for d in found] == [("AL305", 7)], found


def test_a_helper_given_only_the_bare_module_or_a_frozen_one_reads_its_attributes_freely(tmp_path: Path):
    """The callers pass the prepared model only where it is not a wrapper (the `else` of
    `isinstance(m, DistributedDataParallel)`, where the wrapper's `.module` goes instead), and a
    frozen model, which `prepare` returns unwrapped: the helper's attribute reads are fine."""
    (tmp_path / "sampling.py").write_text(textwrap.dedent("""\
        def sample(model, x):
            return model.decode(model.encode(x))
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from diffusers import AutoencoderKL, UNet2DConditionModel
        from sampling import sample
        accelerator = Accelerator()
        unet = UNet2DConditionModel.from_pretrained("sd", subfolder="unet")
        vae = AutoencoderKL.from_pretrained("sd", subfolder="vae")
        vae.requires_grad_(False)
        optimizer = torch.optim.AdamW(unet.parameters(), lr=1e-4)
        unet, optimizer, vae = accelerator.prepare(unet, optimizer, vae)
        if isinstance(unet, torch.nn.parallel.DistributedDataParallel):
            out = sample(unet.module, torch.ones(1))
        else:
            out = sample(unet, torch.ones(1))
        latents = sample(vae, torch.ones(1))
    """))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert not [d for d in found if d["code"] == "AL501"], found


def test_a_warm_run_reads_what_helper_modules_make_from_the_cache(tmp_path: Path, monkeypatch):
    """The modules the first pass does not analyse are read for what they make once; a warm run
    takes that from the on-disk cache instead of parsing them again."""
    from accel_lint import engine
    from accel_lint.config import Config

    root = project(tmp_path, "build_loader")
    config = Config(cache_dir=tmp_path / ".cache")
    files = sorted(root.glob("*.py"))
    cold = engine.lint_paths(files, config)
    engine._HELPER_FACTS.clear()  # a new process: nothing in memory

    def parse_again(data):
        raise AssertionError("a helper module was parsed again")

    monkeypatch.setattr(engine, "_made_facts", parse_again)
    warm = engine.lint_paths(files, config)
    assert [(d.code, d.line) for d in warm.diagnostics] == [(d.code, d.line) for d in cold.diagnostics]
    assert {"AL201", "AL501"} <= {d.code for d in warm.diagnostics}


RANK_CONSTANTS = """\
import os
RANK = int(os.getenv("RANK", 0))
MASTER_PROCESS = RANK == 0
DEBUG = os.getenv("DEBUG") == "1"
"""

GUARDED_BY_A_CONSTANT = """\
import torch
from accelerate import Accelerator
from .settings import DEBUG, MASTER_PROCESS

accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(2, 2))
if MASTER_PROCESS:
    torch.save({"step": 1}, "meta.pt")
if MASTER_PROCESS:
    accelerator.wait_for_everyone()
if DEBUG:
    torch.save({"step": 1}, "debug.pt")
"""


def test_a_rank_predicate_bound_to_a_constant_of_another_module_guards_like_one(tmp_path):
    """`MASTER_PROCESS = RANK == 0` in a module with no Accelerate: where another module tests
    it, only rank 0 runs the block (no AL401 for the guarded write; AL301 for the guarded
    barrier). `DEBUG` is the same on every rank: its block runs everywhere."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "settings.py").write_text(RANK_CONSTANTS)
    (tmp_path / "pkg" / "train.py").write_text(GUARDED_BY_A_CONSTANT)
    _, found = json_findings("--no-cache", "--select", "AL301,AL401", str(tmp_path))
    assert sorted((d["code"], d["line"]) for d in found) == [("AL301", 10), ("AL401", 12)], found


RANK_HELPERS = """\
import os
import torch.distributed as dist

RANK = int(os.getenv("RANK", 0))


def get_rank() -> int:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", 0))
"""

USES_RANK_VALUES = """\
import torch
from accelerate import Accelerator
from .dist_utils import RANK, get_rank

accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(2, 2))
if RANK == 0:
    torch.save({"step": 1}, "meta.pt")
torch.save({"step": 1}, f"shard_{get_rank()}.pt")
torch.save({"step": 1}, "every_rank.pt")
"""


def test_a_rank_exported_by_another_module_is_a_rank_where_it_is_read(tmp_path):
    """`RANK = int(os.getenv("RANK"))` and a `get_rank()` helper in another module: `RANK == 0`
    guards a block, and a path with `get_rank()` in it is each rank's own; the plain path is
    still every rank's."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "dist_utils.py").write_text(RANK_HELPERS)
    (tmp_path / "pkg" / "train.py").write_text(USES_RANK_VALUES)
    _, found = json_findings("--no-cache", "--select", "AL401", str(tmp_path))
    assert [d["line"] for d in found] == [10], found


WRITERS = """\
import json
import os


def save_json(obj, path):
    with open(path, "w") as f:
        json.dump(obj, f)


def write_predictions(preds, output_dir):
    out = os.path.join(output_dir, "predictions.json")
    with open(out, "w") as f:
        json.dump(preds, f)


def save_if_any(obj, path):
    if obj:
        with open(path, "w") as f:
            json.dump(obj, f)
"""

EVALUATE = """\
import torch
from accelerate import Accelerator
from writers import save_if_any, save_json, write_predictions


def main(args):
    accelerator = Accelerator()
    model = accelerator.prepare(torch.nn.Linear(2, 2))
    save_json({"loss": 1.0}, args.out)
    write_predictions([1, 2], args.output_dir)
    save_if_any({}, args.out)
    if accelerator.is_main_process:
        save_json({"loss": 1.0}, args.out)
    save_json({}, f"{args.out}.{accelerator.process_index}")
"""


def test_a_function_of_another_module_that_always_writes_is_a_write_where_every_rank_calls_it(tmp_path: Path):
    (tmp_path / "writers.py").write_text(WRITERS)
    (tmp_path / "evaluate.py").write_text(EVALUATE)
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert [(d["line"], d["code"]) for d in found] == [(9, "AL401"), (10, "AL401")], found
    facts = [e["fact"] for e in found[0]["evidence"]]
    assert any("always writes" in f and "line 6 of its module" in f for f in facts), facts


PROMPTS = """\
import os

import torch


class PromptEncoder(torch.nn.Module):
    def save(self, save_dir):
        path = os.path.join(save_dir, "model.pt")
        torch.save(self.state_dict(), path)

    def save_if_asked(self, save_dir, asked):
        if asked:
            torch.save(self.state_dict(), save_dir)

    def save_own(self, name):
        torch.save(self.state_dict(), os.path.join(self.root, name))


class Other:
    def save(self, save_dir):
        return save_dir


class Head(torch.nn.Module):
    def save(self, save_dir):
        torch.save(self.state_dict(), save_dir)
"""

SAVES = """\
import torch
from accelerate import Accelerator
from prompts import Head, Other, PromptEncoder


def main(args):
    accelerator = Accelerator()
    encoder = PromptEncoder()
    other = Other()
    encoder.save(args.out)
    encoder.save_if_asked(args.out, True)
    encoder.save_own("x.pt")
    other.save(args.out)
    if accelerator.is_main_process:
        encoder.save(args.out)
    encoder.save(f"{args.out}.{accelerator.process_index}")
    moved = Head().to("cpu")
    moved.save(args.out)
"""


def test_a_method_of_a_class_of_another_module_that_always_writes_is_a_write_on_its_instances(tmp_path: Path):
    # the receiver's value decides: `encoder` was made by PromptEncoder(), whose `save` writes
    # the path it is given on every call; `other.save` of a class that does not write is no write
    (tmp_path / "prompts.py").write_text(PROMPTS)
    (tmp_path / "saves.py").write_text(SAVES)
    _, found = json_findings("--no-cache", "--select", "AL401", ".", cwd=tmp_path)
    # (also through methods that return the module itself: `Head().to("cpu")`)
    assert [(d["path"], d["line"]) for d in found] == [("saves.py", 10), ("saves.py", 18)], found
    facts = [e["fact"] for e in found[0]["evidence"]]
    assert any("line 9 of its module" in f for f in facts), facts


TRACKING = """\
import wandb
from accelerate.tracking import on_main_process


class RunLogger:
    def __init__(self, project):
        wandb.login()
        wandb.init(project=project)


def start_run(project):
    wandb.init(project=project)


def maybe_start(project, on):
    if on:
        wandb.init(project=project)


class MainOnlyLogger:
    @on_main_process
    def __init__(self, project):
        wandb.init(project=project)
"""

TRACKED = """\
from accelerate import Accelerator
from tracking import MainOnlyLogger, RunLogger, maybe_start, start_run

accelerator = Accelerator()
logger = RunLogger("p")
start_run("p")
maybe_start("p", True)
if accelerator.is_main_process:
    start_run("p")
main_only = MainOnlyLogger("p")
"""


def test_a_function_or_class_of_another_module_that_always_starts_a_run_is_a_tracker_call(tmp_path: Path):
    # a class whose __init__ and a function whose body call wandb.init unconditionally start a
    # run on every rank that calls them; one that starts it only under its own condition, or in an
    # __init__ a decorator gates (accelerate's `on_main_process`), does not
    (tmp_path / "tracking.py").write_text(TRACKING)
    (tmp_path / "train.py").write_text(TRACKED)
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert [(d["line"], d["code"]) for d in found] == [(5, "AL402"), (6, "AL402")], found
    facts = [e["fact"] for e in found[0]["evidence"]]
    assert any("wandb.init on line 8 of its module" in f for f in facts), facts


def test_a_writer_reached_through_a_star_import_is_a_write_and_a_local_name_is_not(tmp_path: Path):
    # `from writers import *` binds every public name of the module: a called name nothing in the
    # file binds is asked of it; a local `save_if_any` (defined here) shadows the module's
    (tmp_path / "writers.py").write_text(WRITERS)
    (tmp_path / "evaluate.py").write_text(EVALUATE.replace("from writers import save_if_any, save_json, write_predictions",
                                                           "from writers import *")
                                          + "\n\ndef write_predictions(preds, output_dir):\n    return None\n")
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert [(d["line"], d["code"]) for d in found] == [(9, "AL401")], found


DATASETS = """\
from torchvision import datasets


class Cifar:
    def __init__(self, root):
        self.train = datasets.CIFAR10(root, train=True, download=True)


class Folder:
    def __init__(self, root):
        self.root = root


def get_dataset(name, root):
    if name == "cifar":
        return Cifar(root)
    return Folder(root)


def get_folder(root):
    return Folder(root)


def get_cifar(root):
    return Cifar(root)
"""

TRAIN_ON_DATASETS = """\
from accelerate import Accelerator
from data import get_cifar, get_dataset, get_folder


def train(opts):
    accelerator = Accelerator()
    first = get_cifar(opts.root)
    with accelerator.main_process_first():
        second = get_cifar(opts.root)
    third = get_folder(opts.root)
    fourth = get_dataset(opts.name, opts.root)  # downloads for one name only: the config decides
    return first, second, third, fourth
"""


def test_a_function_of_another_module_that_downloads_through_its_classes_races_on_every_rank(tmp_path: Path):
    (tmp_path / "data.py").write_text(DATASETS)
    (tmp_path / "train.py").write_text(TRAIN_ON_DATASETS)
    _, found = json_findings("--no-cache", "--show-evidence", ".", cwd=tmp_path)
    assert [(d["path"], d["line"], d["code"]) for d in found] == [("train.py", 7, "AL404")], found
    facts = [e["fact"] for e in found[0]["evidence"]]
    assert any("torchvision.datasets.CIFAR10(download=True)" in f and "line 6 of its module" in f for f in facts), facts


MIXING = """\
class Interleave:
    def __init__(self, first, second, every=4):
        self.first = first
        self.second = second
        self.every = every

    def __iter__(self):
        self.first_batches = iter(self.first)
        self.second_batches = iter(self.second)
        return self

    def __next__(self):
        return next(self.first_batches)
"""

TRAIN_ON_MIXED = """\
import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from mixing import Interleave

accelerator = Accelerator()
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
near = DataLoader(near_set, batch_size=4, shuffle=True)
far = DataLoader(far_set, batch_size=4, shuffle=True)
{before}
model, optimizer, {prepared} = accelerator.prepare(model, optimizer, {prepared})
{after}
for batch in loader:
    accelerator.backward(model(batch).sum())
    optimizer.step()
"""


def test_a_class_of_another_module_that_iterates_unprepared_loaders_is_reported_through_prepare(tmp_path: Path):
    """`prepare` returns an object of a class that is no DataLoader unchanged: the loaders it was
    built from are iterated unsharded. Built from the prepared loaders, the same class reads
    their shards."""
    (tmp_path / "mixing.py").write_text(MIXING)
    (tmp_path / "train.py").write_text(TRAIN_ON_MIXED.format(before="loader = Interleave(near, far)", prepared="loader",
                                                             after=""))
    _, found = json_findings("--no-cache", "--show-evidence", ".", cwd=tmp_path)
    assert [(d["path"], d["line"], d["code"]) for d in found] == [("train.py", 14, "AL201")], found
    assert "`near`, `far`" in found[0]["message"] and "`Interleave` unchanged" in found[0]["message"]
    assert sorted(e["line"] for e in found[0]["evidence"]) == [9, 10, 11], found[0]["evidence"]

    (tmp_path / "train.py").write_text(TRAIN_ON_MIXED.format(before="", prepared="near, far",
                                                             after="loader = Interleave(near, far)"))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert found == [], found


CARDS = """\
import json


class Card:
    def write_card(self, folder):
        with open(folder + "/card.json", "w") as f:
            json.dump(self.fields, f)

    def write_notes(self, folder):
        with open(folder + "/notes.txt", "w") as f:
            f.write("notes")
"""

USES_CARDS = """\
from accelerate import Accelerator
from cards import Card

accelerator = Accelerator()
model = accelerator.prepare(make_model())
card = Card()
card.write_card("out")
card.write_notes("out")
"""


def test_writes_whose_names_hold_spaces_travel_between_modules(tmp_path: Path):
    # two methods of one class whose writes are `open(..., 'w')`: the facts another module gets
    # keep each write whole (they crashed AL401 when split on spaces)
    (tmp_path / "cards.py").write_text(CARDS)
    (tmp_path / "uses_cards.py").write_text(USES_CARDS)
    code, found = json_findings("--no-cache", "--select", "AL401", ".", cwd=tmp_path)
    assert code == 1  # findings, no internal error (exit 2)
    assert [(d["path"], d["line"]) for d in found] == [("uses_cards.py", 7), ("uses_cards.py", 8)], found


HELPERS = """\
from accelerate import Accelerator
from torch.utils.data import DistributedSampler


def sampler_for(dataset, accelerator):
    if accelerator.num_processes > 1:
        return DistributedSampler(dataset, num_replicas=accelerator.num_processes, rank=accelerator.process_index)
    return None


def clip_if_asked(accelerator, model, max_norm):
    if max_norm:
        accelerator.clip_grad_norm_(model.parameters(), max_norm)


def close(accelerator):
    accelerator.log({"finished": 1})
    accelerator.end_training()
"""

LOOP = """\
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator
from helpers import sampler_for, clip_if_asked, close

accelerator = Accelerator(gradient_accumulation_steps=4)
sampler = sampler_for(dataset, accelerator)
loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=sampler is None)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.AdamW(model.parameters())
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for batch in loader:
    with accelerator.accumulate(model):
        accelerator.backward(model(batch).sum())
        clip_if_asked({clip_owner}, model, 1.0)
        optimizer.step()
close(accelerator)
accelerator.wait_for_everyone()
"""


def test_a_helper_module_that_returns_a_sampler_clips_or_ends_training_is_known_where_it_is_called(tmp_path: Path):
    """What the helpers of another module do, read from their values: a sampler that shards per
    rank (AL205 on the loader it goes into), a clip on every call (AL104 at the call inside
    `accumulate`), and an `end_training()` as the last collective (AL306 on the barrier after)."""
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "train.py").write_text(LOOP.format(clip_owner="accelerator"))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert sorted((f["line"], f["code"]) for f in found) == [(8, "AL205"), (15, "AL104"), (18, "AL306")]
    clip = next(f for f in found if f["code"] == "AL104")
    assert "`accelerator.clip_grad_norm_`" in clip["message"]


def test_a_helper_that_clips_with_whatever_it_is_given_is_silent_when_no_accelerator_is_given(tmp_path: Path):
    """The helper clips through its parameter: handed something that is no accelerator, the
    model cannot say it clips, and nothing is reported there."""
    (tmp_path / "helpers.py").write_text(HELPERS)
    (tmp_path / "train.py").write_text(LOOP.format(clip_owner="make_clipper()"))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert sorted((f["line"], f["code"]) for f in found) == [(8, "AL205"), (18, "AL306")]


NETS = """\
import torch
from munch import Munch


class Generator(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.body(x)


def build_nets():
    return Munch(gen=Generator(), disc=Generator())
"""

TRAIN_NETS = """\
import torch
from accelerate import Accelerator
from nets import build_nets

accelerator = Accelerator()
nets = build_nets()
for key in nets:
    nets[key] = accelerator.prepare(nets[key])
for batch in range(3):
    accelerator.backward(nets.disc(nets.gen(batch)).sum())
if accelerator.is_main_process:
    torch.save({key: nets[key].state_dict() for key in nets}, "nets.pt")
    print(nets.gen.body)
"""


def test_a_dict_of_modules_made_in_another_module_and_prepared_item_by_item(tmp_path: Path):
    """`build_nets()` of another module returns a Munch of its own module classes: a dict of
    models, whose items a loop prepares one by one; each item is then a prepared model, read by
    key or as an attribute."""
    (tmp_path / "nets.py").write_text(NETS)
    (tmp_path / "train.py").write_text(TRAIN_NETS)
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert sorted((f["line"], f["code"]) for f in found) == [(12, "AL302"), (12, "AL501"), (13, "AL501")]


VISUALIZE = """\
import torch


def show_samples(model, loader):
    model.eval()
    with torch.no_grad():
        for batch in loader:
            return model(batch)
"""

TRAIN_VISUALIZE = """\
import torch
from torch.utils.data import DataLoader
from accelerate import Accelerator
from visualize import show_samples

accelerator = Accelerator()
model = torch.nn.BatchNorm1d(4)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data, batch_size=4))
for epoch in range(3):
    for batch in loader:
        accelerator.backward(model(batch).sum())
        optimizer.step()
    if {guard}:
        show_samples(model, loader)
"""


@pytest.mark.parametrize("guard,expected", [("accelerator.is_main_process", [("visualize.py", 8, "AL305")]),
                                            ("epoch % 2 == 0", [])])
def test_a_helper_of_another_module_called_under_a_rank_guard_with_the_prepared_model(tmp_path: Path, guard, expected):
    """The helper forwards the prepared model it is handed; every caller runs it only on the main
    process, so its forward is rank-gated (AL305, explained by the caller's guard). Called on
    every rank, it is not."""
    (tmp_path / "visualize.py").write_text(VISUALIZE)
    (tmp_path / "train.py").write_text(TRAIN_VISUALIZE.format(guard=guard))
    _, found = json_findings("--no-cache", "--show-evidence", ".", cwd=tmp_path)
    assert [(f["path"], f["line"], f["code"]) for f in found] == expected
    if expected:
        assert "under `accelerator.is_main_process` (train.py:14)" in found[0]["message"]


def _findings_in_tree(root: Path, files: dict[str, str], select: str) -> list[dict]:
    """Write ``files`` (path under ``root`` -> text) and lint the tree with only ``select``."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _, found = json_findings("--no-cache", "--select", select, ".", cwd=root)
    return found


REPORTS = """\
import os
from accelerate import Accelerator


def predict(model, loader):
    accelerator = Accelerator()
    return [model(batch.to(accelerator.device)) for batch in loader]


def write_report(scores):
    if not os.path.exists("plots"):
        os.makedirs("plots")
    with open("plots/scores.txt", "w") as f:
        f.write(str(scores))


def write_summary(scores):
    with open("summary.txt", "w") as f:
        f.write(str(scores))
"""

ENTRY = """\
import torch
from accelerate import Accelerator
from reports import predict, write_report, write_summary

accelerator = Accelerator()
model, loader = accelerator.prepare(torch.nn.Linear(2, 2), batches)
scores = predict(model, loader)
write_report(scores)
if accelerator.is_main_process:
    write_summary(scores)
"""


def test_a_helper_of_another_accelerate_module_runs_where_its_caller_runs_it(tmp_path: Path):
    # the evaluation module builds its own accelerator, so its writes are reported there, not
    # at the call; nothing in it calls `write_report`, the entry script calls it on every rank:
    # the helper runs on every rank. `write_summary` is called under the main-process test only.
    found = _findings_in_tree(tmp_path, {"reports.py": REPORTS, "train.py": ENTRY}, "AL401")
    assert [(d["path"], d["line"]) for d in found] == [("reports.py", 12), ("reports.py", 13)], found
    assert all("through the unguarded call at train.py:8" in d["message"] for d in found), found
    facts = [e["fact"] for e in found[1]["evidence"]]
    assert facts == ["called at train.py:8 with no rank guard around it: every rank runs it"], facts


TRAINER = """\
from accelerate import Accelerator


class Trainer:
    def __init__(self, model, loader, accelerator: Accelerator):
        self.model = model
        self.loader = loader
        self.accelerator = accelerator

    def train(self):
        for batch in self.loader:
            self.accelerator.backward(self.model(batch).sum())
        self.accelerator.log({"done": 1})
        self.accelerator.end_training()

    def evaluate(self):
        return self.accelerator.gather_for_metrics(self.model(1))
"""

RUN = """\
import torch
from accelerate import Accelerator
from trainer import Trainer

accelerator = Accelerator()
model, loader = accelerator.prepare(torch.nn.Linear(2, 2), data)
trainer = Trainer(model, loader, accelerator)
trainer.evaluate()
accelerator.wait_for_everyone()
trainer.train()
accelerator.wait_for_everyone()
"""


def test_a_method_of_a_class_of_another_module_that_ends_training_ends_it_where_it_is_called(tmp_path: Path):
    # `train` ends with end_training(); `evaluate` gathers and leaves the group alone: only the
    # barrier after `trainer.train()` runs on a destroyed process group
    found = _findings_in_tree(tmp_path, {"trainer.py": TRAINER, "run.py": RUN}, "AL306")
    assert [(d["path"], d["line"]) for d in found] == [("run.py", 11)], found
    assert found[0]["evidence"][0]["fact"] == "`trainer.train()` ends with `end_training()`, which destroys the process group"


MODEL_UTILS = """\
from transformers import T5ForConditionalGeneration
from mymodels import SmallT5


def get_model(args, config):
    klass = {"hf": T5ForConditionalGeneration, "local": SmallT5}[args.klass]
    model = klass(config)
    args.n_params = sum(p.numel() for p in model.parameters())
    return model


def get_name(args):
    name = args.name
    return name
"""

TRAIN_UTILS = """\
def predict(model, loader):
    return [model.generate(**batch) for batch in loader]
"""

PACKAGE_MAIN = """\
import torch
from accelerate import Accelerator
from .utils import get_model, get_name, predict

accelerator = Accelerator()
model = get_model(args, config)
other = get_name(args)
model, other, loader = accelerator.prepare(model, other, loader)
if args.compile:
    model = torch.compile(model)
predict(model, loader)
predict(other, loader)
"""


def test_a_model_made_and_used_in_a_helper_reaches_a_helper_of_a_package_that_reexports_it(tmp_path: Path):
    # `get_model` builds its object from a class picked out of a dict, then reads its
    # parameters: a module. The package re-exports both helpers with star imports, so the
    # prepared model handed to `predict` arrives in train_utils.py; compiling it keeps the
    # wrapper's attributes. `get_name`'s object is never used as a module: unknown, silent.
    found = _findings_in_tree(tmp_path, {
        "proj/__init__.py": "", "proj/utils/__init__.py": "from .model_utils import *\nfrom .train_utils import *\n",
        "proj/utils/model_utils.py": MODEL_UTILS, "proj/utils/train_utils.py": TRAIN_UTILS, "proj/main.py": PACKAGE_MAIN,
    }, "AL501")
    assert [(d["path"], d["line"]) for d in found] == [("proj/utils/train_utils.py", 2)], found


STATES = """\
import torch
from accelerate import Accelerator


def checkpoint(state, out, process_index, is_main):
    torch.save(state, f"{out}/rng_{process_index}.pkl")
    if is_main:
        torch.save(state, f"{out}/model.pt")
    torch.save(state, f"{out}/scaler.pt")


def make():
    return Accelerator()
"""

SAVER = """\
from states import checkpoint, make

accelerator = make()
model = accelerator.prepare(model)
checkpoint({}, "out", accelerator.process_index, is_main=accelerator.is_main_process)
"""


def test_a_rank_handed_to_a_helper_of_another_module_is_a_rank_there(tmp_path: Path):
    # the caller passes its process index and its main-process flag: the helper's RNG file is
    # each rank's own and its model file the main process's; the scaler file is every rank's
    found = _findings_in_tree(tmp_path, {"states.py": STATES, "saver.py": SAVER}, "AL401")
    assert [(d["path"], d["line"]) for d in found] == [("states.py", 9)], found


CHAT_MODEL = """\
from transformers import T5ForConditionalGeneration


class ChatModel(T5ForConditionalGeneration):
    def my_generate(self, input_ids, max_len=64):
        result = self.generate(inputs=input_ids, max_new_tokens=max_len)
        return result

    def my_logits(self, input_ids):
        return self(input_ids).logits
"""

CHAT_EVAL = """\
from accelerate import Accelerator
from chat_model import ChatModel


def evaluate(accelerator: Accelerator, model: ChatModel, loader):
    for batch in loader:
        outputs = accelerator.unwrap_model(model).my_generate(batch["input_ids"])
        outputs = accelerator.gather_for_metrics(outputs)
        logits = accelerator.gather_for_metrics(model.my_logits(batch["input_ids"]))


def main(config, data):
    accelerator = Accelerator()
    model, loader = accelerator.prepare(ChatModel(config), data)
    evaluate(accelerator, model, loader)
"""


def test_a_model_method_of_another_module_that_returns_its_generate_output_is_generated(tmp_path: Path):
    # `my_generate` returns what the model's own generate() returned: its length is each rank's;
    # `my_logits` returns the forward's logits, of the batch's fixed shape
    found = _findings_in_tree(tmp_path, {"chat_model.py": CHAT_MODEL, "chat_eval.py": CHAT_EVAL}, "AL204")
    assert [(d["path"], d["line"]) for d in found] == [("chat_eval.py", 8)], found
    assert "comes from `my_generate()`" in found[0]["message"]


TUPLE_DATASETS = """\
from torch.utils.data import DataLoader


def prepare_dataset(root, batch_size):
    train_loader = DataLoader(Folder(root), batch_size=batch_size, shuffle=True)
    return train_loader, {"root": root}
"""

STEPS = """\
import math
from accelerate import Accelerator
from diffusers.optimization import get_scheduler
from datasets_util import prepare_dataset

accelerator = Accelerator()
train_loader, config = prepare_dataset("data", 8)
steps = args.epochs * math.ceil(len(train_loader) / args.accumulation)
scheduler = get_scheduler("cosine", optimizer=optimizer, num_warmup_steps=0,
                          num_training_steps=steps * accelerator.num_processes)
model, optimizer, train_loader, scheduler = accelerator.prepare(model, optimizer, train_loader, scheduler)
for batch in train_loader:
    accelerator.backward(model(batch).sum())
    optimizer.step()
    scheduler.step()
"""


def test_a_loader_returned_in_a_tuple_by_another_module_carries_its_length(tmp_path: Path):
    # `prepare_dataset` returns the loader beside a config dict: the first item is a loader, so
    # the horizon taken from its length before prepare, times the processes, is too long
    found = _findings_in_tree(tmp_path, {"datasets_util.py": TUPLE_DATASETS, "train.py": STEPS}, "AL202")
    assert [(d["path"], d["line"]) for d in found] == [("train.py", 10)], found


VENDORED = """\
import torch.distributed as dist


class Accelerator:
    def __init__(self, **kwargs):
        self.kwargs = kwargs

    @property
    def is_main_process(self):
        return dist.get_rank() == 0

    def wait_for_everyone(self):
        dist.barrier()

    def gather_for_metrics(self, x):
        return x

    def prepare_model(self, model):
        return model

    def end_training(self):
        dist.destroy_process_group()

    def get_state_dict(self, model):
        return model.state_dict()

    def save_state(self, path=None):
        self.wait_for_everyone()


class Helper:
    def wait_for_everyone(self):
        pass
"""

VENDORED_USER = """\
from my_pkg.accel import Accelerator, Helper

accelerator = Accelerator(mixed_precision="fp16")
helper = Helper()
for epoch in range(3):
    if accelerator.is_main_process:
        accelerator.save_state()
        helper.wait_for_everyone()
"""


def test_a_vendored_copy_of_the_accelerator_class_makes_accelerators(tmp_path: Path):
    # the class defines the accelerator's own protocol (is_main_process, wait_for_everyone,
    # gather_for_metrics, end_training, ...): its instances are accelerators where they are made;
    # a class with one such member is not
    found = _findings_in_tree(tmp_path, {"my_pkg/__init__.py": "", "my_pkg/accel.py": VENDORED,
                                         "train.py": VENDORED_USER}, "AL301,AL302")
    assert [(d["path"], d["line"], d["code"]) for d in found] == [("train.py", 7, "AL302")], found


ENCODERS = """\
from torch import nn


class Reranker(nn.Module):
    def __init__(self, backbone, tokenizer):
        super().__init__()
        self.backbone = backbone
        self.tokenizer = tokenizer

    def forward(self, batch):
        return self.backbone(batch)

    @classmethod
    def load(cls, path):
        backbone = nn.Linear(2, 2)
        made = cls(backbone, tokenizer=path)
        return made

    @classmethod
    def describe(cls, path):
        return {"path": path}
"""

ENCODER_USER = """\
import torch
from accelerate import Accelerator
from encoders import Reranker


def adamw(module, lr):
    return torch.optim.AdamW(module.parameters(), lr=lr)


def main():
    accelerator = Accelerator()
    model = Reranker.load("ckpt")
    info = Reranker.describe("ckpt")
    optimizer = adamw(model, lr=1e-4)
    model, optimizer, info = accelerator.prepare(model, optimizer, info)
    tokenizer = model.tokenizer
    path = info.path
"""


@pytest.mark.parametrize("one_module", [False, True])
def test_a_classmethod_returning_cls_is_an_alternative_constructor_of_its_class(tmp_path: Path, one_module: bool):
    # `Reranker.load(path)` returns `cls(...)`: a Reranker, a module (it defines forward), so
    # what prepare returns for it is the wrapper; `describe` returns a dict, which stays unknown
    files = ({"train.py": ENCODERS + ENCODER_USER.replace("from encoders import Reranker\n", "")} if one_module
             else {"encoders.py": ENCODERS, "train.py": ENCODER_USER})
    found = _findings_in_tree(tmp_path, files, "AL501")
    text = files["train.py"]
    line = text.count("\n", 0, text.index("tokenizer = model")) + 1
    assert [(d["path"], d["line"]) for d in found] == [("train.py", line)], found


TRAIN_STEP = """\
def do_train(model, optimizer, loader, accelerator):
    for batch in loader:
        with accelerator.accumulate(model):
            accelerator.backward(model(batch).sum())
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad()
"""

TRAIN_MAIN = """\
import torch
from accelerate import Accelerator
from engine import do_train

accelerator = Accelerator({arguments})
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(list(range(8)))
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
do_train(model, optimizer, loader, accelerator)
"""


@pytest.mark.parametrize(("callers", "reported"), [
    (("",), False),  # no accumulation set where the accelerator is built: every step syncs
    (("gradient_accumulation_steps=1",), False),
    (("gradient_accumulation_steps=4",), True),
    (("", "gradient_accumulation_steps=args.steps"), True),  # one caller accumulates
])
def test_an_accelerator_handed_to_another_module_says_whether_it_accumulates(tmp_path: Path, callers, reported):
    files = {"engine.py": TRAIN_STEP}
    files.update({f"main{i}.py": TRAIN_MAIN.format(arguments=arguments) for i, arguments in enumerate(callers)})
    found = _findings_in_tree(tmp_path, files, "AL104")
    assert [(d["path"], d["line"]) for d in found] == ([("engine.py", 5)] if reported else []), found


def test_a_subclass_of_accelerator_is_an_accelerator_in_its_module_and_in_those_that_import_it(tmp_path: Path):
    """`class SavingAccelerator(Accelerator)`: its instances are accelerators, here and where
    another module (one that never imports accelerate) builds one."""
    (tmp_path / "accs.py").write_text(textwrap.dedent("""\
        from accelerate import Accelerator


        class SavingAccelerator(Accelerator):
            def get_state_dict(self, model, unwrap=True):
                return super().get_state_dict(model, unwrap)


        class TrimmedAccelerator(SavingAccelerator):
            pass
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        from accs import TrimmedAccelerator

        accelerator = TrimmedAccelerator()
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            accelerator.save_state("ckpt")
    """))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert [(d["path"], d["line"], d["code"]) for d in found] == [("train.py", 6, "AL302")], found


def test_a_tracker_started_by_a_helper_of_an_accelerate_module_is_reported_where_every_rank_calls_it(tmp_path: Path):
    """A utilities module that also unwraps models (an Accelerate module) returns a TensorBoard
    writer it makes: the script that calls it on every rank starts one writer per rank."""
    (tmp_path / "utils.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from torch.utils.tensorboard import SummaryWriter


        def prepare_tensorboard(path):
            return SummaryWriter(path)


        def save_weights(accelerator: Accelerator, model, path):
            accelerator.save(accelerator.unwrap_model(model).state_dict(), path)
    """))
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from utils import prepare_tensorboard
        accelerator = Accelerator()
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        writer = prepare_tensorboard("runs")
        writer.add_scalar("loss", 1.0, 0)
    """))
    _, found = json_findings("--no-cache", ".", cwd=tmp_path)
    assert [(d["path"], d["line"], d["code"]) for d in found] == [("train.py", 6, "AL402")], found


def test_a_guarded_helper_keeps_its_guard_once_its_findings_have_appeared():
    """A helper module whose write is found only once a caller passes it the accelerator, and
    whose every caller guards it: the guard stays known in the later passes even after the
    finding it removed is gone (it alternated: guard, no finding, no guard, finding)."""
    from accel_lint.engine import LintResult, _incoming_arguments

    caller = LintResult(path="/p/train.py", passes=[
        (0, "utils", "evaluate", {"@called": "yes", "@guard": "7|accelerator.is_main_process",
                                  "accelerator": "accelerator"})])
    helper = LintResult(path="/p/utils.py")
    paths = ["/p/train.py", "/p/utils.py"]
    seen = {"/p/utils.py"}  # an earlier pass found AL401 there; this one found nothing
    incoming = _incoming_arguments([caller, helper], paths, {"utils", "train", "p"}, seen)
    assert incoming["/p/utils.py"]["evaluate"].get("@guarded") == "yes"
    # what one pass alone knows: no finding there now, so no guard
    assert "@guarded" not in _incoming_arguments([caller, helper], paths, {"utils", "train", "p"})["/p/utils.py"]["evaluate"]
