from __future__ import annotations

from collections.abc import Iterable


import libcst as cst

from ..model.objects import WRAPPED_KINDS
from ..model import FileModel, backend_compared, shorten
from ..model.names import dotted_name
from .base import Finding, Fix, Rule, guard_statement_fix, quote, wrap_in_guard



class UnguardedWrite(Rule):
    """A file write or delete that every rank performs on the same path.

    ## What it does
    Flags file-system mutations outside any rank-gated region of code that runs on every
    rank: `torch.save`, `safetensors` `save_file`, `np.save`, `open(..., "w"|"a"|"x")`,
    `Path.write_text`/`write_bytes`/`mkdir`/`open("w")`, `shutil.rmtree`/`copy*`/`move`, `os.remove`/
    `unlink`/`rename`/`replace`/`mkdir`/`makedirs`, `df.to_csv`, a PIL image's `.save(path)`
    (`Image.fromarray(a).convert("L").save(out)`), and `save_pretrained` on
    tokenizers, processors and configs made by their library class (`AutoTokenizer.from_pretrained`;
    unlike transformers 5 models, they do not gate themselves) and on diffusers models and
    pipelines (also through `unwrap_model`), unless given `is_main_process=`: a diffusers model
    writes its config and weights on every rank that calls it; and on a class of the project
    that inherits `save_pretrained` from huggingface_hub's `PyTorchModelHubMixin` (no rank
    check: every rank writes, and pushes with `push_to_hub=True`). Which calls write, where their
    path is and which keywords make them safe is the library table (`accel_lint/library.toml`,
    extended by `extend-writes` in `[tool.accel-lint]`). A call of a function of another module
    of the linted tree (imported by name, or through `from module import *`, also passed on by
    a module that star-imports it) that always writes a fixed path or the path it is given is a
    write at the call.
    Under a guard whose `or` also lets every rank in where a uniform flag or backend holds
    (`if args.use_deepspeed or accelerator.is_main_process:`, `AcceleratorState().deepspeed_plugin
    is not None or ...`), the write is flagged as racing there. Not flagged: calls made safe on every rank by a keyword (`os.makedirs(d, exist_ok=True)`,
    `shutil.rmtree(d, ignore_errors=True)`), a directory creation inside a `try` that catches
    `FileExistsError` (or `OSError`, `Exception`), and appending (`open(log, "a")`: the lines
    interleave, nothing is truncated); a file per item of a loop over a loader the function is
    handed (`for batch in loader: np.save(f"{out}/{batch['name'][0]}.npy", ...)`: each rank
    writes its own items' files when the caller's loader is prepared, the same ones when it is
    not: unknown); paths that contain the rank (`f"out_{accelerator.process_index}.pt"`,
    also passed to a helper that writes its parameter, or bound to such a name on one branch
    (`if accelerator is not None: path = f"..._{rank}.json"`: unknown); paths inside a directory this rank created
    exclusively, `d.mkdir()` or `os.makedirs(d)` without `exist_ok` outside a `try`, where a second
    rank raises: that creation is the finding;
    the accelerator's device index or the device itself in an f-string, which differ between the
    GPU processes of one node, leave it unknown) or
    are computed from the rank's own data (a dataset's `__getitem__` caching each sample, a
    batch of a prepared loader; a loader never prepared and built with `shuffle=False` gives every
    rank the same batches, so a path from its batch is shared),
    writes inside `with accelerator.split_between_processes(...)` or
    `with accelerator.main_process_first():` (the main process fills a cache before the others
    run the same code), temporary files,
    helpers only called under a guard, `accelerator.save` and `save_state`, writes after the
    program stops unless it runs as one process (`assert torch.cuda.device_count() == 1`, `if
    world_size > 1: raise ...`), and programs that
    use nothing of several processes (an inference or caching tool that builds an
    `Accelerator` for its device and autocast, and prepares, gathers and asks for no rank).

    ## Why is this bad?
    Every rank writes or deletes the same path at once. On a shared file system that
    gives corrupt checkpoints (`PytorchStreamReader failed reading zip archive`),
    half-written JSON, and `FileNotFoundError`/`FileExistsError` during checkpoint
    rotation.

    ## Example
    ```python
    with open(os.path.join(out, "all_results.json"), "w") as f:
        json.dump(results, f)
    ```

    ## Use instead
    ```python
    if accelerator.is_main_process:
        with open(os.path.join(out, "all_results.json"), "w") as f:
            json.dump(results, f)
    ```

    ## Fix safety
    Unsafe: the statement that writes (or the call to the helper that writes, or the whole
    `with open(...)` block) is wrapped in `if <accelerator>.is_main_process:`. The other ranks
    then skip it; if they read the file afterwards, add `accelerator.wait_for_everyone()`
    between the write and the read. Not offered where the write is part of a larger statement
    (an assignment would leave its name unbound on the other ranks).
    It assumes no other rank reads the file later without a barrier; the model cannot show
    that, hence unsafe. The accelerator it names must be bound on every path to the write.
    """

    code = "AL401"
    name = "unguarded-write"
    severity = "warning"
    summary = "a file write/delete runs on every rank against the same path"

    VALID = [
        # a method that takes the accelerator only for its signature (`del accelerator`) and
        # that nothing in the file calls: who runs it, and on which ranks, is not known
        """\
        import torch
        from accelerate import Accelerator
        class Adapter:
            def save_checkpoint(self, accelerator: Accelerator, model, output_dir):
                del accelerator
                torch.save(model.state_dict(), output_dir + "/model.pt")
        """,
        # the script's entry point runs `encode()`, which builds no accelerator: one process
        """\
        import torch
        from accelerate import Accelerator
        def train():
            accelerator = Accelerator()
            model = accelerator.prepare(build_model())
            if accelerator.is_main_process:
                torch.save(model.state_dict(), "model.pt")
        def encode(name):
            embeddings = embed_corpus(name)
            torch.save(embeddings, f"embeddings/{name}.pt")
        if __name__ == "__main__":
            encode("corpus")
        """,
        # one file per sample of the loader the caller hands in (prepared there or not: unknown)
        """\
        import numpy as np
        from accelerate import Accelerator
        accelerator = Accelerator()
        def dump_predictions(model, loader, out_dir):
            for batch in loader:
                preds = loader.dataset.denormalize(model(batch["x"]).detach().cpu().numpy())
                names = batch["name"]
                for i in range(len(names)):
                    np.save(f"{out_dir}/{names[i]}.npy", preds[i])
        model = accelerator.prepare(build_model())
        dump_predictions(model, make_eval_loader(), "predictions")
        """,
        # switched off by hand: `False and ...` never runs its block
        """\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(make_model())
        for step in range(100):
            if False and step % 10 == 0:
                torch.save(accelerator.get_state_dict(model), "snapshot.pt")
        """,
        # the shared name only where no accelerator is given; with one, each rank its own file
        """\
        import json, os
        from accelerate import Accelerator
        def score_folder(out_dir, accelerator=None):
            report = os.path.join(out_dir, "scores.json")
            if accelerator is not None:
                report = os.path.join(out_dir, f"scores_{accelerator.process_index}.json")
            with open(report, "w") as f:
                json.dump(compute_scores(out_dir), f)
        accelerator = Accelerator()
        score_folder("eval", accelerator)
        """,
        """
import pandas as pd
from accelerate import Accelerator
def score(model, out_dir):
    rows = pd.DataFrame({"score": [1.0]})
    rows.to_csv(f"{out_dir}/scores_on_{device}.csv")  # "cuda:0", "cuda:1": one file per GPU process
if __name__ == "__main__":
    accelerator = Accelerator()
    device = accelerator.device
    model = accelerator.prepare(model)
    score(model, "out")
""",
        """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
assert torch.cuda.device_count() == 1  # one GPU, so one process: nothing to race with
torch.save(model.state_dict(), "embeddings.pt")
""",
        """
import os
import numpy as np
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
log = open(os.path.join("runs", "train.log"), "a")  # appended to, never truncated
def save_points(points, filename):
    np.save(filename, points)
for step in range(3):
    points = model(step)
    save_points(points, os.path.join("samples", "_".join((f"{accelerator.process_index:04d}", f"{step:04d}.npy"))))
""",
        """
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(torch.nn.Linear(2, 2))
def save(state, step=None):
    if step is not None:
        if accelerator.is_main_process:
            torch.save(state, f"ckpt-{step}.pt")
    else:
        torch.save(state, "final.pt")  # only the guarded call below leaves `step` out
step = 0
for _ in range(3):
    step += 1
    save(model.state_dict(), step)
if accelerator.is_main_process:
    save(model.state_dict())
""",
        """
import shutil
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
if not args.distributed or accelerator.is_main_process:
    shutil.rmtree("checkpoint-100")  # one process, or the main one
""",
        """
import json, torch
from accelerate import Accelerator
accelerator = Accelerator()
if accelerator.is_main_process:
    with open("results.json", "w") as f:
        json.dump({}, f)
torch.save(state, f"random_states_{accelerator.process_index}.pkl")
accelerator.save(state, "model.pt")
def write_report(path):
    open(path, "w").write("ok")
if accelerator.is_local_main_process:
    write_report("report.txt")
with open("config.json") as f:
    cfg = json.load(f)
""",
        # early return on non-main ranks guards the rest of the function
        """
import shutil
from accelerate import Accelerator
def rotate(accelerator, old):
    if not accelerator.is_main_process:
        return
    shutil.rmtree(old)
""",
        # tolerant on every rank at once; a path unique to the rank
        """
import os, shutil, uuid
import torch
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
shutil.rmtree("scratch", ignore_errors=True)
os.makedirs("out", exist_ok=True)
torch.save(model.state_dict(), f"/tmp/{uuid.uuid4()}.pt")
""",
    ]
    INVALID = [
        # `Path.open("w")`: the receiver is the path; reading it is no write
        """\
        import json
        from pathlib import Path
        from accelerate import Accelerator
        accelerator = Accelerator()
        model = accelerator.prepare(model)
        out = Path("runs")
        with (out / "model_info.json").open("w") as f:  # expect: AL401
            json.dump({"layers": 4}, f)
        with (out / "model_info.json").open() as f:
            info = json.load(f)
        """,
        # a model class that inherits huggingface_hub's save_pretrained, which checks no rank
        """\
        import torch
        from accelerate import Accelerator
        from huggingface_hub import PyTorchModelHubMixin
        class Detector(torch.nn.Module, PyTorchModelHubMixin):
            def __init__(self):
                super().__init__()
                self.accelerator = Accelerator()
                self.net = torch.nn.Linear(2, 2)
            def fit(self, loader, out_dir):
                net, loader = self.accelerator.prepare(self.net, loader)
                for batch in loader:
                    self.accelerator.backward(net(batch).sum())
                self.save_pretrained(out_dir)  # expect: AL401
        """,
        # the accelerator only logs, but a library trainer trains on every launched process
        """\
        from accelerate import Accelerator
        from transformers import AutoTokenizer
        from trl import SFTTrainer
        accelerator = Accelerator()
        tokenizer = AutoTokenizer.from_pretrained("gpt2")
        trainer = SFTTrainer(model=model, train_dataset=dataset)
        trainer.train()
        tokenizer.save_pretrained("out/adapter")  # expect: AL401
        """,
        # the accelerator on one path, a stand-in of the project's own on the other: the
        # program is an Accelerate one where it runs the accelerator (and other modules call
        # this function, as they call any that uses an accelerator)
        """\
        from accelerate import Accelerator
        from utils import DummyAccelerator
        def run_experiment(args):
            if args.no_accelerate:
                accelerator = DummyAccelerator(device="cuda:0")
            else:
                accelerator = Accelerator()
            if accelerator.is_local_main_process:
                make_folders(args.out)
            with open(f"{args.out}/console_logs.txt", "w") as log:  # expect: AL401
                log.write("start")
        """,
        """
import joblib
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
accelerator = Accelerator()
model = get_peft_model(base_model, LoraConfig(r=8))
model, optimizer = accelerator.prepare(model, optimizer)
train(model, optimizer)
accelerator.unwrap_model(model).save_pretrained("adapter")  # expect: AL401
joblib.dump(accelerator.gather(scores), "scores.joblib")  # expect: AL401
""",
        """
from accelerate import Accelerator
from datasets import load_dataset
accelerator = Accelerator()
model = accelerator.prepare(build_model())
tokenized = load_dataset("json", data_files="train.jsonl").map(tokenize, batched=True)
tokenized.save_to_disk("cache/tokenized")  # expect: AL401
""",
        """
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
accelerator = Accelerator()
model = accelerator.prepare(model)
if AcceleratorState().deepspeed_plugin is not None or accelerator.is_main_process:
    torch.save(adapter.state_dict(), "adapter.pt")  # expect: AL401
""",
        """
import json, torch
from datetime import datetime
from pathlib import Path
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
run_dir = Path("runs") / datetime.now().strftime("%H%M%S")
run_dir.mkdir(parents=True)  # expect: AL401
with open(run_dir / "config.json", "w") as f:  # this rank created run_dir: a second rank raised above
    json.dump({}, f)
def save_weights(model, out):
    torch.save(model.state_dict(), out / "model.pt")
save_weights(model, run_dir)
""",
        """
import json, os
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
try:
    os.makedirs("runs/last")
except FileExistsError:
    pass  # the ranks that lost the race go on, into the same directory
with open(os.path.join("runs/last", "config.json"), "w") as f:  # expect: AL401
    json.dump({}, f)
""",
        """
from accelerate import Accelerator
from diffusers import UNet2DConditionModel
accelerator = Accelerator()
unet = accelerator.prepare(UNet2DConditionModel.from_pretrained("sd", subfolder="unet"))
accelerator.unwrap_model(unet).save_pretrained("out/unet")  # expect: AL401
if accelerator.is_main_process:
    accelerator.unwrap_model(unet).save_pretrained("out/unet-main")
accelerator.unwrap_model(unet).save_pretrained("out/unet-gated", is_main_process=accelerator.is_main_process)
""",
        """
from accelerate import Accelerator
from transformers import AutoModelForSpeechSeq2Seq
accelerator = Accelerator()
model = accelerator.prepare(AutoModelForSpeechSeq2Seq.from_pretrained("whisper-tiny"))
unwrapped = accelerator.unwrap_model(model)
unwrapped.save_pretrained("out", is_main_process=accelerator.is_main_process)
unwrapped.config.save_pretrained("out", is_main_process=accelerator.is_main_process)  # expect: AL401
""",
        """
import json, torch
from accelerate import Accelerator
from transformers import AutoTokenizer
accelerator = Accelerator()
optimizer, loader = accelerator.prepare(optimizer, loader)
with open("all_results.json", "w") as f:  # expect: AL401
    json.dump(results, f)
torch.save(model.state_dict(), "model.pt")  # expect: AL401
tokenizer = AutoTokenizer.from_pretrained("gpt2")
tokenizer.save_pretrained("out")  # expect: AL401
""",
        """
import os
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
if not os.path.exists("out"):
    os.makedirs("out")  # expect: AL401
with open(os.path.join("out", "log.txt"), "w") as f:  # expect: AL401
    f.write("ok")  # (where "out" exists, no rank makes it: the creation does not make it this rank's)
""",
        """
import shutil
from accelerate import Accelerator
from accelerate.utils import DistributedType
accelerator = Accelerator()
model = accelerator.prepare(model)
if accelerator.is_main_process or accelerator.distributed_type == DistributedType.DEEPSPEED:
    shutil.rmtree("checkpoint-100")  # expect: AL401
    accelerator.save_state("checkpoint-200")
""",
        """
import shutil
from accelerate import Accelerator
accelerator = Accelerator()
model = accelerator.prepare(model)
if args.use_deepspeed or accelerator.is_main_process:
    shutil.rmtree("checkpoint-100")  # expect: AL401
""",
    ]

    def check(self, model: FileModel) -> Iterable[Finding]:
        for write in model.writes:
            call = write.call
            if write.tolerant:
                continue  # `exist_ok=True`, `ignore_errors=True`: every rank may run it at once
            admitted = model.guard_admits_every_rank_where(model.rank_guard_of(call))
            if model.under_rank_condition(call) and admitted is None:
                continue
            scope = model.scope_of(call)
            if not model.runs_on_every_rank(scope):
                continue
            reaching = model.call_sites_reaching(call)
            if reaching is not None and model.ops.call_sites(scope) and all(
                    model.rank_guard_of(site) is not None for site in reaching):
                continue  # `if step is None:` taken only by the calls under a rank guard
            if reaching and all(model.single_process_at(site) or _inside_split(model, site) for site in reaching):
                continue  # called with one process, or with each rank's own share of the items
            if _rank_unique(model, call, 0, write.path) or _rank_unique_from_callers(model, scope, write.path) \
                    or _inside_split(model, call) or model.single_process_at(call) or model.rank_undecided_at(call) \
                    or _main_writes_first(model, call):
                continue
            if write.path is not None and model.inside_exclusive_directory(write.path, call) is not None:
                continue  # a directory this rank created exclusively: the creation is the race
            if write.path is not None and _in_memory(model, write.path):
                continue  # `torch.save(t, buffer)` into an io.BytesIO: no file
            if write.path is not None and _from_items_of_a_parameter(model, write.path):
                continue  # a file per item of a loader the caller hands in: sharded or not is unknown
            if write.path is not None and model.rank_data.varies(write.path):
                # a path computed from this rank's own data (a sample's cache file): each rank
                # writes its own files
                continue
            acc = model.accelerator_name_in(scope)
            path = quote(model.code(write.path), 40) if write.path is not None else "its target"
            site = model.unguarded_call_site(scope)
            caller = model.every_rank_caller(scope) if site is None else None
            via = f" (through the unguarded call on line {model.line_of(site)})" if site is not None else \
                f" (through the unguarded call at {caller})" if caller is not None else ""
            if admitted is not None:
                guard = model.rank_guard_of(call)
                yield Finding(
                    call,
                    f"`{write.what}` writes {path} on every rank at once {_where(model, admitted)}: the guard "
                    f"{quote(model.code(guard.condition), 60)} (line {model.line_of(guard.node)}) lets every rank in "
                    f"there, so the ranks race on the same path; test `{acc}.is_main_process` alone around the file "
                    f"I/O",
                    evidence=(*model.guard_evidence(guard),
                              (admitted, f"`{shorten(model.code(admitted))}` is the same on every rank: where it "
                                         f"holds, every rank enters")),
                )
                continue
            # no rank guard holds it: every rank that gets there runs it
            every_rank = ((site if site is not None else call),
                          "called here with no rank guard around it: every rank runs the write" if site is not None
                          else f"called at {caller} with no rank guard around it: every rank runs it" if caller
                          else "no rank guard around it: every rank runs it")
            if write.creates_directory:
                yield Finding(
                    call,
                    f"`{write.what}` creates {path} on every rank at once{via}: where it does not exist yet the "
                    f"ranks race, and the ones that lose raise `FileExistsError` (an `exists()` check before it does "
                    f"not help); pass `exist_ok=True`",
                    evidence=(every_rank,),
                )
                continue
            yield Finding(
                call,
                f"`{write.what}` writes {path} on every rank at once{via}, which corrupts or races on a shared "
                f"file system; guard it with `if {acc}.is_main_process:` or use `{acc}.save()`",
                fix=_guard(model, call, site),
                evidence=(every_rank, *(((call, f"`{write.what}` always writes: {write.origin}"),)
                                        if write.origin else ())),
            )


_BACKENDS = {"DEEPSPEED": "DeepSpeed", "MULTI_GPU": "DDP", "FSDP": "FSDP", "MULTI_CPU": "DDP on CPUs", "XLA": "XLA"}


def _where(model: FileModel, admitted: cst.BaseExpression) -> str:
    """``under DeepSpeed`` for a backend comparison, ``where `args.use_deepspeed` is true`` else."""
    backend = backend_compared(admitted)
    if backend is not None:
        return f"under {_BACKENDS.get(backend, backend)}"
    return f"where {quote(model.code(admitted), 40)} is true"


def _rank_unique(model: FileModel, node: cst.CSTNode, depth: int, path: cst.BaseExpression | None = None) -> bool:
    """The path (any argument), or what its names were assigned from, mentions the rank
    or a temporary location."""
    if depth > 6:
        return False
    # the call's positional arguments and its path: a keyword such as
    # `is_main_process=accelerator.is_main_process` to a saver that ignores it names no file
    exprs = [node]
    if isinstance(node, cst.Call) and depth == 0:
        exprs = [a.value for a in node.args if a.keyword is None] + [p for p in (path,) if p is not None]
    for expr in exprs:
        if model.reads_rank(expr) or model.made_by_rank_unique_source(expr) or _names_the_device(model, expr):
            return True
        for name in model.index.loads_in(expr):
            value = model.value_at(name)
            parent = model.index.parents.get(name)
            if value is not None and (value.is_acc or value.kind in WRAPPED_KINDS) \
                    or (type(parent) is cst.Attribute and parent.value is name):
                # an object built with the rank (`get_loader(..., rank=r)`): what the path reads
                # of it (`loader.dataset.file_path`) is not thereby per rank
                continue
            # where branches bound it differently (`fname = shared`, then under `if accelerator
            # is not None:` a per-rank name), one rank-unique binding makes the path unknown
            for origin in (value.origins() if value is not None else ()):
                if isinstance(origin, cst.BaseExpression) and origin is not name \
                        and _rank_unique(model, origin, depth + 1):
                    return True
    return False



def _rank_unique_from_callers(model: FileModel, scope, path: cst.BaseExpression | None) -> bool:
    """The path is built from a parameter of the helper that writes it, and every call of the
    helper in this file passes a path that names the rank there (``save_mesh(mesh,
    os.path.join(out, f"{accelerator.process_index}_{i}.ply"))``) or lies in a directory the
    caller created exclusively."""
    if path is None or not isinstance(scope, cst.FunctionDef):
        return False
    params = [p.name.value for p in (*scope.params.posonly_params, *scope.params.params)]
    if params and params[0] in ("self", "cls"):
        params = params[1:]
    used = [name for name in params if name in {n.value for n in model.index.loads_in(path) if type(n) is cst.Name}]
    sites = model.index.call_sites(scope)
    if len(used) != 1 or not sites:
        return False
    position = params.index(used[0])
    for site in sites:
        if any(a.star for a in site.args):
            return False
        keyword = next((a.value for a in site.args if a.keyword is not None and a.keyword.value == used[0]), None)
        positional = [a.value for a in site.args if a.keyword is None]
        passed = keyword if keyword is not None else positional[position] if position < len(positional) else None
        if passed is None or not (_rank_unique(model, passed, 1)
                                  or model.inside_exclusive_directory(passed, site) is not None):
            return False
    return True


def _names_the_device(model: FileModel, expr: cst.CSTNode) -> bool:
    """``f"...-rank{accelerator.device.index}.png"`` (or the device itself in an f-string: its
    text names the index): each GPU process has its own device, so
    whether ranks share the path depends on the launch (one node: no; CPU, or the same local
    index on several nodes: yes). Unknown: no finding."""
    return any((type(node) is cst.Attribute and node.attr.value == "index" and model.is_accelerator_device(node.value))
               or (type(node) is cst.FormattedStringExpression and type(node.expression) in (cst.Name, cst.Attribute)
                   and model.is_accelerator_device(node.expression))  # `f"..._on_{device}.csv"`: "cuda:1"
               for node in model.index.walk(expr))


def _from_items_of_a_parameter(model: FileModel, path: cst.BaseExpression) -> bool:
    """The path reads an item of a loop over a parameter of the function that it uses as a
    loader (it reads its ``.dataset``; ``for batch in loader:`` ... ``name = batch[-1]`` ...
    ``np.save(f"{out}/{name[i]}.npy", ...)``): each rank
    writes the files of the items it iterates, which differ between ranks when the caller's
    loader is prepared and not otherwise. What the caller passes is not known here."""
    scope = model.scope_of(path)
    if not isinstance(scope, cst.FunctionDef):
        return False
    params = {p.name.value for p in model.index.functions[scope].params} if scope in model.index.functions else set()
    loops = [a for a in model.ancestors(path) if isinstance(a, cst.For)]
    # (a parameter used as a loader: the function reads its `.dataset`, `.sampler`, `.batch_size`)
    loaders = {n.value.value for n in model.index.walk(scope.body) if isinstance(n, cst.Attribute)
               and isinstance(n.value, cst.Name) and n.value.value in params
               and n.attr.value in ("dataset", "sampler", "batch_sampler", "batch_size")}
    names: set[str] = set()
    for loop in loops:
        iterable = model.iterated_source(loop.iter)
        if isinstance(iterable, cst.Name) and iterable.value in loaders:
            names |= {n.value for n in model.index.walk(loop.target) if isinstance(n, cst.Name)}
    if not names:
        return False
    assigns = [n for loop in loops for n in model.index.walk(loop.body) if isinstance(n, cst.Assign)]
    grew = True
    while grew:  # what the loop body computes from the item
        grew = False
        for assign in assigns:
            if any(isinstance(n, cst.Name) and n.value in names for n in model.index.walk(assign.value)):
                new = {n.value for t in assign.targets for n in model.index.walk(t.target) if isinstance(n, cst.Name)}
                if new - names:
                    names |= new
                    grew = True
    return any(isinstance(n, cst.Name) and n.value in names for n in model.index.walk(path))


def _in_memory(model: FileModel, path: cst.BaseExpression) -> bool:
    """The target is an in-memory buffer (``io.BytesIO()``/``StringIO()``), not a file."""
    value = model.value_at(path) if type(path) in (cst.Name, cst.Attribute) else None
    origins = value.origins() if value is not None else frozenset({path})
    return bool(origins) and all(
        isinstance(o, cst.Call) and (dotted_name(o.func) or "").rsplit(".", 1)[-1] in ("BytesIO", "StringIO")
        for o in origins)


def _main_writes_first(model: FileModel, node: cst.CSTNode, depth: int = 0) -> bool:
    """Inside ``with accelerator.main_process_first():`` (also through helpers every call of
    which is inside one): the main process writes the shared files (a cache) before the other
    ranks run the same code and find them."""
    for parent in model.ancestors(node):
        if isinstance(parent, cst.With) and any(
                isinstance(item.item, cst.Call) and (dotted_name(item.item.func) or "").endswith(
                    ("main_process_first", "local_main_process_first")) for item in parent.items):
            return True
    scope = model.scope_of(node)
    if depth >= 3 or not isinstance(scope, cst.FunctionDef):
        return False
    sites = model.index.call_sites(scope)
    return bool(sites) and all(_main_writes_first(model, site, depth + 1) for site in sites)


def _inside_split(model: FileModel, call: cst.Call) -> bool:
    for parent in model.ancestors(call):
        if isinstance(parent, cst.With):
            for item in parent.items:
                if "split_between_processes" in model.code(item.item):
                    return True
    return False


def _guard(model: FileModel, write: cst.Call, site: cst.Call | None) -> Fix | None:
    """Unsafe: wrap the write's statement (the call to the helper that writes, when the write
    is in a helper) in ``if <acc>.is_main_process:``. The other ranks then skip it: unsafe
    because they may read the file afterwards."""
    target = site if site is not None else write
    acc = model.accelerator_for_fix(target)
    fix = guard_statement_fix(model, target, acc, "is_main_process", "unsafe")
    if fix is not None or site is not None or acc is None:
        return fix
    # `with open(path, "w") as f:` -- the whole `with` statement
    statement = model.statement_of(write)
    if type(statement) is cst.With and any(item.item is write for item in statement.items):
        return wrap_in_guard(statement, acc, "is_main_process", "unsafe")
    return None
