"""Patterns found by the ecosystem check (bench/ecosystem.py) on outside training scripts, each
paraphrased into a small program of our own. Every case lists exactly the findings it must
give, as (line, code): an empty list is a false-positive class that must stay clean; a
non-empty one is a recall class."""

from __future__ import annotations

import json
import textwrap

import pytest

from accel_lint.config import Config
from accel_lint.engine import lint_source
from conftest import json_findings

_ACCUMULATED_HORIZON = """
        import torch
        from torch.utils.data import DataLoader
        from accelerate import Accelerator
        from diffusers.optimization import get_scheduler

        def train(args):
            accelerator = Accelerator(gradient_accumulation_steps=args.ga)
            model = torch.nn.Linear(2, 2)
            optimizer = torch.optim.AdamW(model.parameters())
            schedule = get_scheduler("linear", optimizer=optimizer, num_warmup_steps=0,
                                     num_training_steps=args.max_steps * args.ga)
            model, optimizer, loader, schedule = accelerator.prepare(model, optimizer, DataLoader(data), schedule)
            for batch in loader:
                with accelerator.accumulate(model):
                    accelerator.backward(model(batch).sum())
                    optimizer.step()
                    {last}
"""

CASES = {
    # A trainer keeps the accelerator and the prepared model on `self` and takes the state dict of
    # the unwrapped model under the main-process guard: the unwrapped module of a prepared model
    # still gathers under ZeRO-3 and FSDP. Of a module never prepared (an EMA copy) it does not.
    "the_state_dict_of_an_unwrapped_prepared_model_under_a_guard": ("""
        import torch
        from accelerate import Accelerator

        class Trainer:
            def save(self, tag):
                if self.accelerator.is_main_process:
                    weights = self.accelerator.get_state_dict(self.accelerator.unwrap_model(self.model))
                    torch.save(weights, f"model_{tag}.bin")

            def train(self):
                accelerator = Accelerator()
                model = accelerator.prepare(torch.nn.Linear(2, 2))
                self.model = model
                self.accelerator = accelerator
                for step in range(10):
                    accelerator.backward(model(torch.ones(2)).sum())
                    if step % 5 == 0:
                        self.save(step)

        accelerator = Accelerator()
        ema = torch.nn.Linear(2, 2)
        if accelerator.is_main_process:
            torch.save(accelerator.get_state_dict(accelerator.unwrap_model(ema)), "ema.bin")
    """, [(7, "AL302")]),
    # A scheduler whose horizon is multiplied by the accumulation steps (B4), but nothing ever
    # steps it: it keeps its first learning rate, and the horizon changes nothing. The same
    # scheduler stepped in the loop is reported.
    "a_scheduler_nothing_steps_has_no_horizon_to_get_wrong": (_ACCUMULATED_HORIZON.format(last="optimizer.zero_grad()"), []),
    "a_scheduler_stepped_with_an_accumulated_horizon": (_ACCUMULATED_HORIZON.format(last="schedule.step()"),
                                                        [(11, "AL202")]),
    # Accumulation by hand: the clip sits with the optimizer step under `(step + 1) % ga == 0`, so
    # it runs once per update on the accumulated gradients. Inside `accumulate()` a clip under a
    # test of its own (every tenth step) still runs on partial gradients.
    "a_clip_under_the_same_test_as_the_optimizer_step": ("""
        import torch
        from torch.utils.data import DataLoader
        from accelerate import Accelerator

        accelerator = Accelerator(gradient_accumulation_steps=4)
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.AdamW(model.parameters())
        model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(data))
        for step, batch in enumerate(loader):
            accelerator.backward(model(batch).sum())
            if (step + 1) % 4 == 0:
                accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
        for step, batch in enumerate(loader):
            with accelerator.accumulate(model):
                accelerator.backward(model(batch).sum())
                if step % 10 == 0:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
    """, [(18, "AL104")]),
    # The script picks the wrapper or the bare model by a flag of its own (`--multi_gpu`): which
    # arm a launch takes is unknown, so neither `.module` nor the plain read is reported; a
    # `.module` read with no such choice still is.
    "a_flag_of_the_script_chooses_between_the_wrapper_and_the_bare_model": ("""
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator()
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        if args.multi_gpu:
            weight = model.module.weight
        else:
            weight = model.weight
        bias = model.module.bias if args.ddp else model.bias
        again = model.module.bias
    """, [(11, "AL501")]),
    # A dict of modules, each item replaced by its prepared self in a loop over the dict: after the
    # loop every item is a prepared model, read by key or (for a Munch) as an attribute. The dict
    # itself is no model: reading an item as an attribute is no wrapper attribute.
    "a_dict_of_modules_prepared_item_by_item": ("""
        import torch
        from munch import Munch
        from accelerate import Accelerator

        accelerator = Accelerator()
        nets = Munch(gen=torch.nn.Linear(4, 4), disc=torch.nn.Linear(4, 1))
        parts = dict(head=torch.nn.Linear(4, 2))
        for name in nets:
            nets[name] = accelerator.prepare(nets[name])
        for name, _ in parts.items():
            parts[name] = accelerator.prepare(parts[name])
        for batch in range(3):
            accelerator.backward(nets.disc(nets.gen(batch)).sum())
            torch.nn.utils.clip_grad_norm_(nets.gen.parameters(), 1.0)
        if accelerator.is_main_process:
            torch.save({"gen": nets.gen.state_dict(), "head": parts["head"].weight}, "nets.pt")
    """, [(14, "AL103"), (16, "AL302"), (16, "AL501"), (16, "AL501")]),
    # Accuracy counted from an element-wise comparison of two gathers, summed with `+=`: the
    # comparison keeps one row per sample, so the padding the prepared loader added is counted.
    "an_accuracy_from_two_gathers_compared_and_summed": ("""
        import torch
        from torch.utils.data import DataLoader
        from accelerate import Accelerator

        accelerator = Accelerator()
        model, loader = accelerator.prepare(torch.nn.Linear(2, 2), DataLoader(data, batch_size=8))
        model.eval()
        correct = seen = 0
        for batch in loader:
            with torch.no_grad():
                guess = model(batch["x"]).argmax(dim=-1)
            hits = accelerator.gather(guess) == accelerator.gather(batch["y"])
            seen += hits.shape[0]
            correct += hits.long().sum()
    """, [(12, "AL203"), (12, "AL203")]),
    # A sampler chosen by a conditional expression (the per-rank one where several processes run,
    # none otherwise) in a loader that `prepare` shards again: the path a launch takes shards twice.
    # A helper of the same file that returns such a sampler is the same fact.
    "a_sampler_chosen_by_a_conditional_expression_or_returned_by_a_helper": ("""
        import torch
        from torch.utils.data import DataLoader, DistributedSampler
        from accelerate import Accelerator

        def per_rank_sampler(data, world):
            return DistributedSampler(data, num_replicas=world) if world > 1 else None

        accelerator = Accelerator()
        world = accelerator.num_processes
        sampler = DistributedSampler(train_set, num_replicas=world) if world > 1 else None
        train = DataLoader(train_set, batch_size=8, sampler=sampler, shuffle=sampler is None)
        valid = DataLoader(valid_set, batch_size=8, sampler=per_rank_sampler(valid_set, world))
        plain = DataLoader(test_set, batch_size=8, sampler=torch.utils.data.RandomSampler(test_set) if world else None)
        train, valid, plain = accelerator.prepare(train, valid, plain)
    """, [(11, "AL205"), (12, "AL205")]),
    # Validation images written inside a loop over the accelerator's trackers: only the main process
    # fills that list (init_trackers is main-only), so the body runs there alone. A state dict taken
    # in such a loop is a rank-gated collective; the write after the loop is on every rank.
    "a_loop_over_the_trackers_runs_on_the_main_process_only": ("""
        import os
        import torch
        from accelerate import Accelerator

        accelerator = Accelerator(log_with="tensorboard")
        accelerator.init_trackers("run")
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        for tracker in accelerator.trackers:
            if tracker.name == "tensorboard":
                os.makedirs("samples", exist_ok=True)
                with open("samples/grid.txt", "w") as handle:
                    handle.write("grid")
                weights = accelerator.get_state_dict(model)
        else:
            torch.save({"step": 1}, "progress.pt")
        torch.save({"step": 1}, "last.pt")
    """, [(13, "AL302"), (15, "AL401"), (16, "AL401")]),
    # A warmup-cosine schedule written as a subclass of torch's scheduler base in the script itself,
    # stepped only where the loss is logged: a scheduler by its class, so AL307 holds.
    "a_scheduler_class_of_the_script_stepped_on_the_main_process": ("""
        import torch
        from accelerate import Accelerator

        class WarmupCosine(torch.optim.lr_scheduler._LRScheduler):
            def get_lr(self):
                return [group["lr"] for group in self.optimizer.param_groups]

        accelerator = Accelerator()
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        schedule = WarmupCosine(optimizer)
        model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())
        for x in loader:
            accelerator.backward(model(x).sum())
            optimizer.step()
            if accelerator.is_main_process:
                schedule.step()
    """, [(17, "AL307")]),
    # Validation videos exported on every rank to one path per prompt (diffusers' export_to_video
    # writes the file it is given); a path left out goes to a temporary file of its own.
    "every_rank_exports_the_same_validation_video": ("""
        import os
        from accelerate import Accelerator
        from diffusers.utils import export_to_video

        def main(pipe, prompts, out):
            accelerator = Accelerator()
            pipe = accelerator.prepare(pipe)
            for prompt in prompts:
                frames = pipe(prompt).frames[0]
                export_to_video(frames, os.path.join(out, f"{prompt}.mp4"))
                export_to_video(frames)
    """, [(10, "AL401")]),
    # A helper called from `__init__` resizes the embeddings of the model a later method prepares:
    # no method of the instance runs before `__init__` returns, so the helper sees the bare model.
    # A method nobody here calls may run after the preparing one, and is still reported.
    "a_method_called_from_init_runs_before_the_method_that_prepares": ("""
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM, AutoTokenizer

        class Generator:
            def __init__(self, path):
                self.accelerator = Accelerator()
                self.model = AutoModelForCausalLM.from_pretrained(path)
                self.tokenizer = AutoTokenizer.from_pretrained(path)
                self.grow_vocabulary()

            def grow_vocabulary(self):
                self.tokenizer.add_tokens(["<tool>"])
                self.model.resize_token_embeddings(len(self.tokenizer))

            def run(self, loader):
                self.model, loader = self.accelerator.prepare(self.model, loader)
                for batch in loader:
                    self.model.generate(**batch)

            def shrink(self):
                self.model.resize_token_embeddings(8)
    """, [(18, "AL501"), (21, "AL501")]),
    # A notebook lesson's evaluation: the gathered predictions and labels go through a helper that
    # turns them into lists, and the lists into the metric; the duplicates travel with them. A
    # reduction to one number per batch (`torch.mean`) bound to a name does not count samples.
    "gathered_values_reach_the_metric_through_a_helper": ("""
        import torch
        import evaluate
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification

        def to_lists(predictions, labels):
            return predictions.tolist(), labels.tolist()

        def evaluate_model(eval_set):
            accelerator = Accelerator()
            metric = evaluate.load("accuracy")
            model = AutoModelForSequenceClassification.from_pretrained("bert-base-uncased")
            model, loader = accelerator.prepare(model, DataLoader(eval_set, batch_size=8))
            model.eval()
            losses = []
            for batch in loader:
                with torch.no_grad():
                    out = model(**batch)
                preds, refs = to_lists(accelerator.gather(out.logits.argmax(-1)), accelerator.gather(batch["labels"]))
                metric.add_batch(predictions=preds, references=refs)
                batch_loss = torch.mean(accelerator.gather(out.loss))
                losses.append(batch_loss)
            return metric.compute()
    """, [(20, "AL203"), (20, "AL203")]),
    # A hub repository cloned into the output folder by every rank: the ranks that lose the race
    # fail on a folder that exists and is not empty. Opening an existing clone (no `clone_from`)
    # writes nothing.
    "every_rank_clones_the_hub_repository_into_one_folder": ("""
        from accelerate import Accelerator
        from huggingface_hub import Repository

        def main(args):
            accelerator = Accelerator()
            repo = Repository(args.output_dir, clone_from=args.hub_model_id)
            existing = Repository(args.output_dir)
            if accelerator.is_main_process:
                mine = Repository(args.output_dir, clone_from=args.hub_model_id)
    """, [(6, "AL401")]),
    # Prompts split by hand, each rank its own slice, into a loader never prepared and not
    # shuffled: the batches differ between ranks, so files named after a batch's sample are each
    # rank's own (the in-order loader over the whole list is the shared case, reported above).
    "an_in_order_loader_over_each_ranks_own_slice_writes_its_own_files": ("""
        from PIL import Image
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def main(pipe, prompts):
            accelerator = Accelerator()
            pipe = accelerator.prepare(pipe)
            mine = prompts[accelerator.process_index::accelerator.num_processes]
            loader = DataLoader(mine, batch_size=1, shuffle=False)
            for batch in loader:
                Image.fromarray(pipe(batch["text"])).save(f"out/{batch['id'][0]}.png")
    """, []),
    # A demo script that builds no Accelerator: its helpers take one from a caller elsewhere, but
    # what `python demo.py` runs (main) reaches none of them, so it runs as one process and its
    # image save is no race. The file that builds one in main is reported.
    "a_demo_whose_entry_reaches_no_accelerator_runs_as_one_process": ("""
        import torch
        from PIL import Image
        from accelerate.utils import set_seed

        def sample(accelerator, model, n):
            images = model(torch.randn(n, 4, device=accelerator.device))
            accelerator.wait_for_everyone()
            return accelerator.gather(images)

        def main():
            set_seed(0)
            model = torch.nn.Linear(4, 4)
            grid = model(torch.randn(16, 4)).detach().numpy()
            Image.fromarray(grid).save("grid.jpg")

        if __name__ == "__main__":
            main()
    """, []),
    "a_script_whose_entry_builds_an_accelerator_writes_on_every_rank": ("""
        import torch
        from PIL import Image
        from accelerate import Accelerator

        def main():
            accelerator = Accelerator()
            model = accelerator.prepare(torch.nn.Linear(4, 4))
            grid = model(torch.randn(16, 4)).detach().numpy()
            Image.fromarray(grid).save("grid.jpg")

        if __name__ == "__main__":
            main()
    """, [(9, "AL401")]),
    # A sampler that saves images under names of the prompt's index: called with one process
    # (`num_processes <= 1`), or with each rank's own share of the prompts inside
    # `split_between_processes`: no two ranks save the same name. The same helper called by
    # every rank on every prompt is reported.
    "a_helper_called_with_one_process_or_each_ranks_share_writes_its_own_files": ("""
        import torch
        from PIL import Image
        from accelerate import Accelerator, PartialState

        def render(pipe, prompts, out_dir):
            img = Image.fromarray(pipe(prompts[0]))
            img.save(f"{out_dir}/first.png")

        def sample(pipe, prompts, out_dir):
            state = PartialState()
            if state.num_processes <= 1:
                for i, prompt in enumerate(prompts):
                    write(pipe, prompt, i, out_dir)
            else:
                with state.split_between_processes(list(enumerate(prompts))) as mine:
                    for i, prompt in mine:
                        write(pipe, prompt, i, out_dir)

        def write(pipe, prompt, index, out_dir):
            Image.fromarray(pipe(prompt)).save(f"{out_dir}/{index:02d}.png")

        def main(pipe, prompts):
            accelerator = Accelerator()
            pipe = accelerator.prepare(pipe)
            sample(pipe, prompts, "samples")
            render(pipe, prompts, "samples")
    """, [(7, "AL401")]),
    # A trainer that swaps its prepared model attribute for the unwrapped one after each epoch's
    # save, on every rank: the next epoch's training method runs the bare module (AL506). The
    # same swap after the last epoch trains nothing afterwards.
    "an_attribute_unwrapped_between_epochs_trains_the_next_epoch_bare": ("""
        import torch
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM

        class Trainer:
            def __init__(self, loader):
                self.accelerator = Accelerator()
                self.model = AutoModelForCausalLM.from_pretrained("gpt2")
                self.optimizer = torch.optim.AdamW(self.model.parameters())
                self.model, self.optimizer, self.loader = self.accelerator.prepare(
                    self.model, self.optimizer, loader)

            def train_one_epoch(self):
                for batch in self.loader:
                    self.accelerator.backward(self.model(**batch).loss)
                    self.optimizer.step()

            def train(self, epochs):
                for epoch in range(epochs):
                    self.train_one_epoch()
                    self.model = self.accelerator.unwrap_model(self.model)

            def train_then_unwrap(self, epochs):
                for epoch in range(epochs):
                    self.train_one_epoch()
                self.model = self.accelerator.unwrap_model(self.model)
                return self.model
    """, [(21, "AL506")]),
    # Evaluation helpers handed their arguments through `**kwargs` of a `dict(...)`: the loader
    # the helper iterates is the unprepared one (AL201). It keeps the dataset's order
    # (shuffle=False), so every rank walks the same samples and saves the same PIL image files
    # (AL401). The prepared loader's samples are each rank's own: their files are not shared.
    "helpers_called_with_a_dict_of_keyword_arguments": ("""
        import torch
        from PIL import Image
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def generate(model, loader, accelerator):
            with torch.no_grad():
                for batch in loader:
                    preds = model(batch["x"]).argmax(1).cpu().numpy()
                    Image.fromarray(preds).convert("L").save(f"preds/{batch['id'][0]}.png")

        def generate_sharded(model, loader):
            with torch.no_grad():
                for batch in loader:
                    preds = model(batch["x"]).argmax(1).cpu().numpy()
                    Image.fromarray(preds).save(f"preds/{batch['id'][0]}.png")

        def main(train_set, val_set):
            accelerator = Accelerator()
            net = torch.nn.Linear(4, 2)
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            train_dl = DataLoader(train_set, batch_size=8, shuffle=True)
            val_dl = DataLoader(val_set, batch_size=1, shuffle=False)
            sharded_dl = DataLoader(val_set, batch_size=1)
            net, opt, train_dl, sharded_dl = accelerator.prepare(net, opt, train_dl, sharded_dl)
            for batch in train_dl:
                accelerator.backward(net(batch["x"]).mean())
                opt.step()
            kwargs = dict(model=net, loader=val_dl, accelerator=accelerator)
            generate(**kwargs)
            generate_sharded(net, sharded_dl)
    """, [(8, "AL201"), (10, "AL401")]),
    # DeepSpeed's DummyScheduler hands its horizon to the engine, which steps once per optimizer
    # step (the prepared wrapper's step() does nothing): a horizon equal to the loop's bound is
    # right there. On the other path a scheduler picked by an if/elif chain and then prepared
    # keeps both constructors as what it may be, and its horizon is the loop's bound: reported.
    "a_dummy_scheduler_steps_with_the_engine_the_other_path_is_reported": ("""
        from accelerate import Accelerator
        from accelerate.utils import DummyOptim, DummyScheduler
        from transformers import get_constant_schedule_with_warmup, get_linear_schedule_with_warmup

        def train(args, model, loader):
            accelerator = Accelerator()
            if args.deepspeed:
                optim = DummyOptim(model.parameters())
                scheduler = DummyScheduler(optim, num_training_steps=args.max_train_steps, num_warmup_steps=10)
                model, optim, loader, scheduler = accelerator.prepare(model, optim, loader, scheduler)
            else:
                model = accelerator.prepare(model)
                optim = torch.optim.AdamW(model.parameters())
                if args.schedule == "linear":
                    scheduler = get_linear_schedule_with_warmup(optim, num_training_steps=args.max_train_steps,
                                                                num_warmup_steps=10)
                elif args.schedule == "constant":
                    scheduler = get_constant_schedule_with_warmup(optim, num_warmup_steps=10)
                optim, loader, scheduler = accelerator.prepare(optim, loader, scheduler)
            done = 0
            for batch in loader:
                accelerator.backward(model(**batch).loss)
                optim.step()
                scheduler.step()
                done += 1
                if done >= args.max_train_steps:
                    break
    """, [(15, "AL202")]),
    # The horizon picked by a conditional expression on the flag set where the count was
    # derived: the count from `len(loader)` before `prepare` when the user gave none (right for
    # a prepared scheduler), the user's optimizer-step budget x num_processes otherwise (right
    # too). With the arms swapped, the derived count is multiplied: reported.
    "a_horizon_chosen_by_the_derivation_flag_is_right_on_both_paths": ("""
        import math
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import get_scheduler

        def main(args, model, optimizer, dataset):
            accelerator = Accelerator()
            loader = DataLoader(dataset, batch_size=4)
            overrode = False
            per_epoch = math.ceil(len(loader) / args.accum)
            if args.max_train_steps is None:
                args.max_train_steps = args.epochs * per_epoch
                overrode = True
            right = args.max_train_steps if overrode else args.max_train_steps * accelerator.num_processes
            wrong = args.max_train_steps * accelerator.num_processes if overrode else args.max_train_steps
            scheduler = get_scheduler("cosine", optimizer=optimizer, num_training_steps=right)
            other = get_scheduler("cosine", optimizer=optimizer, num_training_steps=wrong)
            model, optimizer, loader, scheduler, other = accelerator.prepare(model, optimizer, loader, scheduler, other)
    """, [(17, "AL202")]),
    # `--eval` runs an evaluation entry point that builds no Accelerator, the other arm trains
    # with one: the evaluation path is a one-process program, as a file without an Accelerator
    # is, so its image writes are not races. The same helper called from the training arm
    # without a guard still is.
    "an_entry_arm_without_an_accelerator_runs_as_one_process": ("""
        import sys
        import imageio
        from accelerate import Accelerator

        def render(frames, out):
            imageio.mimwrite(out, frames)

        def evaluate(frames):
            render(frames, "preview.gif")

        def train(frames):
            accelerator = Accelerator()
            accelerator.wait_for_everyone()

        def train_and_render(frames):
            train(frames)
            imageio.mimwrite("final.gif", frames)

        if __name__ == "__main__":
            if "--eval" in sys.argv:
                evaluate([])
            else:
                train_and_render([])
    """, [(17, "AL401")]),
    # An early-stopping helper handed the accelerator (or None): its `else` / `is None` branches
    # run only without one, outside Accelerate, as one process. The branch with the accelerator
    # still writes the same file on every rank.
    "branches_without_the_accelerator_run_as_one_process": ("""
        import torch
        from accelerate import Accelerator

        class Stopper:
            def __init__(self, accelerator=None, patience=3):
                self.accelerator = accelerator
                self.patience = patience

            def save(self, model, path):
                if self.accelerator is not None:
                    self.accelerator.print("saving")
                    torch.save(self.accelerator.unwrap_model(model).state_dict(), path)
                else:
                    print("saving")
                    torch.save(model.state_dict(), path)
                if not self.accelerator:
                    print("no accelerator")

        def main(net):
            acc = Accelerator()
            net = acc.prepare(net)
            Stopper(acc).save(net, "best.pt")
    """, [(12, "AL401")]),
    # A rollout loop over the prepared prompts: generation and a reward gather under no_grad,
    # then a PPO update through a nested function that runs the backward. It trains: the
    # gather feeds reward scaling, not a metric. The evaluation loop beside it is reported.
    "rollout_loop_trains_through_a_nested_update": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def rlhf(policy, train_set, val_set, opt):
            acc = Accelerator()
            prompts, val_prompts = DataLoader(train_set, batch_size=4), DataLoader(val_set, batch_size=4)
            policy, opt, prompts, val_prompts = acc.prepare(policy, opt, prompts, val_prompts)
            memories = []

            def update():
                for sample in memories:
                    acc.backward(policy(sample).sum())
                    opt.step()

            seen_rewards = []
            for batch in prompts:
                with torch.no_grad():
                    rewards = policy(batch).sum(-1)
                    seen_rewards.append(acc.gather(rewards))
                    scale = torch.cat(seen_rewards).std()
                memories.append(batch / scale)
                update()
            scores = []
            for batch in val_prompts:
                with torch.no_grad():
                    scores.append(acc.gather(policy(batch).sum(-1)))
            return torch.cat(scores).mean()
    """, [(27, "AL203")]),
    # A trainer method that calls a module's own method and then prepares that attribute: the
    # call before the prepare reaches the bare module; the same call in the loop after it
    # reaches the wrapper.
    "attribute_read_before_its_own_methods_prepare": ("""
        import torch
        from accelerate import Accelerator

        class Gate(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = torch.nn.Linear(4, 4)
            def warm_up(self, steps):
                self.steps = steps

        class Runner:
            def __init__(self, net):
                self.acc = Accelerator()
                self.net = net
                self.gate = Gate()
            def fit(self, loader):
                self.gate.warm_up(100)
                self.net, self.gate, loader = self.acc.prepare(self.net, self.gate, loader)
                for batch in loader:
                    self.gate.warm_up(10)
                    self.acc.backward(self.net(batch).sum())
    """, [(20, "AL501")]),
    # Loaders kept in a dict under constant keys: only the "train" item is prepared, so the "val"
    # item is still the plain loader where the evaluation loop iterates it. Preparing every item
    # through a variable key, or handing the dict to an unknown function, leaves the items unknown.
    # Loaders put in a dict split by split, then prepared in a dict comprehension over its
    # items: every item of the new dict is a prepared loader, and an evaluation helper every
    # caller hands one of them iterates a prepared loader (its gather keeps the padding). The
    # dict the loop filled still holds the plain loaders.
    "a_dict_of_loaders_prepared_in_a_comprehension": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def evaluate(acc, net, loader):
            net.eval()
            hits = []
            with torch.no_grad():
                for batch in loader:
                    hits.append(acc.gather(net(batch).argmax(-1)))
            return torch.cat(hits)

        def main(splits):
            acc = Accelerator()
            net = acc.prepare(torch.nn.Linear(4, 2))
            loaders = {}
            for name in splits:
                loaders[name] = DataLoader(splits[name], batch_size=8)
            ready = {name: acc.prepare(loader) for name, loader in loaders.items()}
            for name in ready:
                evaluate(acc, net, ready[name])
            for loader in loaders.values():
                for batch in loader:
                    scores = acc.gather_for_metrics(net(batch))
    """, [(10, "AL203"), (23, "AL201")]),
    "dict_items_known_by_constant_key": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def run(net, train_set, val_set, wrap):
            acc = Accelerator()
            opt = torch.optim.SGD(net.parameters(), lr=0.1)
            dls = {"train": DataLoader(train_set, batch_size=8, shuffle=True), "val": DataLoader(val_set, batch_size=8)}
            net, opt, dls["train"] = acc.prepare(net, opt, dls["train"])
            for batch in dls["train"]:
                acc.backward(net(batch).sum())
                opt.step()
            for batch in dls["val"]:
                scores = acc.gather_for_metrics(net(batch))
            more = {"train": DataLoader(train_set, batch_size=8), "val": DataLoader(val_set, batch_size=8)}
            for split in more:
                more[split] = acc.prepare(more[split])
            for batch in more["val"]:
                scores = acc.gather_for_metrics(net(batch))
            other = {"val": DataLoader(val_set, batch_size=8)}
            wrap(other)
            for batch in other["val"]:
                scores = acc.gather_for_metrics(net(batch))
    """, [(13, "AL201")]),
    # The else arm of `args.x if args.x is not None else <prepared>.config.x`, where the file's
    # argparse gives `--x` a number default: no launch evaluates it (nor an `if args.x is None:`
    # body, where no rule reports: not the print either); the same read outside is reported.
    "dead_arm_behind_an_argparse_default": ("""
        import argparse
        from accelerate import Accelerator
        from transformers import AutoModelForSpeechSeq2Seq

        def parse():
            parser = argparse.ArgumentParser()
            parser.add_argument("--num_beams", type=int, default=1)
            parser.add_argument("--max_len", type=int, default=225)
            return parser.parse_args()

        def evaluate(args, accelerator, model, batch):
            beams = args.num_beams if args.num_beams is not None else model.config.num_beams
            length = model.config.max_length if args.max_len is None else args.max_len
            if args.num_beams is None:
                beams = model.config.num_beams
                print(f"beams from the model: {beams}")
            return accelerator.unwrap_model(model).generate(batch, num_beams=beams, max_length=length)

        def main():
            args = parse()
            accelerator = Accelerator()
            model = accelerator.prepare(AutoModelForSpeechSeq2Seq.from_pretrained("w"))
            vocab = model.config.vocab_size
            evaluate(args, accelerator, model, None)

        main()
    """, [(23, "AL501")]),
    # Step arithmetic recomputed after prepare, with a flag that says whether the step budget
    # came from the loader: the loop bound holds the post-prepare values on every path.
    "steps_recomputed_after_prepare_with_override_flag": ("""
        import math
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def train(cfg, net, opt, ds):
            acc = Accelerator(gradient_accumulation_steps=cfg.accum)
            loader = DataLoader(ds, batch_size=cfg.bs, shuffle=True)
            budget_from_loader = False
            updates_per_epoch = math.ceil(len(loader) / cfg.accum)
            if cfg.total_updates is None:
                cfg.total_updates = cfg.epochs * updates_per_epoch
                budget_from_loader = True
            net, opt, loader = acc.prepare(net, opt, loader)
            updates_per_epoch = math.ceil(len(loader) / cfg.accum)
            if budget_from_loader:
                cfg.total_updates = cfg.epochs * updates_per_epoch
            cfg.epochs = math.ceil(cfg.total_updates / updates_per_epoch)
            first = 0
            if cfg.resume:
                first = cfg.resume_step // updates_per_epoch
            done = 0
            for epoch in range(first, cfg.epochs):
                for batch in loader:
                    done += 1
                    if done >= cfg.total_updates:
                        break
    """, []),
    # The same arithmetic, but the per-epoch count is only recomputed when the budget came from
    # the loader: with a budget given on the command line the epoch count divides it by the
    # unsharded per-epoch count and training stops after 1/N of it.
    "epoch_count_from_unsharded_per_epoch_count": ("""
        import math
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def train(cfg, net, opt, ds):
            acc = Accelerator()
            loader = DataLoader(ds, batch_size=cfg.bs)
            budget_from_loader = False
            updates_per_epoch = math.ceil(len(loader) / cfg.accum)
            if cfg.total_updates is None:
                cfg.total_updates = cfg.epochs * updates_per_epoch
                budget_from_loader = True
            net, opt, loader = acc.prepare(net, opt, loader)
            if budget_from_loader:
                updates_per_epoch = math.ceil(len(loader) / cfg.accum)
                cfg.total_updates = cfg.epochs * updates_per_epoch
            cfg.epochs = math.ceil(cfg.total_updates / updates_per_epoch)
            for epoch in range(cfg.epochs):
                for batch in loader:
                    pass
    """, [(18, "AL202")]),
    # AL202 B2: a pre-prepare step count times num_processes as a prepared scheduler's horizon.
    "scheduler_horizon_times_num_processes": ("""
        import math
        from accelerate import Accelerator
        from diffusers.optimization import get_scheduler
        from torch.utils.data import DataLoader

        def train(cfg, net, opt, ds):
            acc = Accelerator()
            loader = DataLoader(ds, batch_size=cfg.bs)
            if cfg.total_updates is None:
                cfg.total_updates = cfg.epochs * math.ceil(len(loader) / cfg.accum)
            sched = get_scheduler(
                "cosine", optimizer=opt,
                num_training_steps=cfg.total_updates * acc.num_processes,
            )
            net, opt, loader, sched = acc.prepare(net, opt, loader, sched)
    """, [(13, "AL202")]),
    # The newer form: the count is per rank before it is multiplied (right), and an argparse
    # option with a numeric default is never None (the pre-prepare branch never runs).
    "per_rank_count_and_option_that_is_never_none": ("""
        import argparse, math
        from accelerate import Accelerator
        from diffusers.optimization import get_scheduler
        from torch.utils.data import DataLoader

        parser = argparse.ArgumentParser()
        parser.add_argument("--total_updates", type=int, default=3000)
        cfg = parser.parse_args()
        acc = Accelerator()
        loader = DataLoader(ds, batch_size=8)
        per_rank = math.ceil(len(loader) / acc.num_processes)
        warm = sched_horizon = cfg.epochs * per_rank * acc.num_processes
        if cfg.total_updates is None:
            cfg.total_updates = cfg.epochs * len(loader)
        sched = get_scheduler("linear", optimizer=opt, num_warmup_steps=warm,
                              num_training_steps=cfg.total_updates * acc.num_processes)
        net, opt, loader, sched = acc.prepare(net, opt, loader, sched)
    """, []),
    # PyTorch's device API is not Accelerate: a script that never imports accelerate.
    "torch_accelerator_device_api": ("""
        import torch
        from torch.utils.data import DataLoader
        from tqdm import tqdm
        device = torch.accelerator.current_accelerator().type if hasattr(torch, "accelerator") else "cpu"
        loader = DataLoader(ds, batch_size=4)
        for batch in tqdm(loader):
            loss = net(batch.to(device))
            loss.backward()
            print(loss.item())
    """, []),
    # A wrapper test picks the right object in each branch.
    "wrapper_chosen_per_branch": ("""
        from accelerate import Accelerator, DistributedType
        from transformers import AutoModelForCausalLM
        acc = Accelerator()
        net = acc.prepare(AutoModelForCausalLM.from_pretrained("tiny"))
        if hasattr(net, "module"):
            net.module.head.scale = 2.0
        else:
            net.head.scale = 2.0
        if acc.distributed_type == DistributedType.XLA:
            net.tie_weights()
        if acc.num_processes == 1:
            net.generate(prompt)
        if isinstance(net, DistributedDataParallel):
            net._set_static_graph()
    """, []),
    # Flags assigned from those tests say the same.
    "wrapper_flags": ("""
        from accelerate import Accelerator
        from torch.nn.parallel import DistributedDataParallel
        from transformers import AutoModelForCausalLM
        acc = Accelerator()
        net = acc.prepare(AutoModelForCausalLM.from_pretrained("tiny"))
        is_ddp = isinstance(net, DistributedDataParallel)
        single = acc.num_processes == 1
        inner = net.module if is_ddp else net
        if single:
            net.generate(prompt)
        if hasattr(net, "_orig_mod"):
            base = net._orig_mod
    """, []),
    # Outside such a branch the attribute is still reported.
    "wrapper_attribute_outside_a_branch": ("""
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM
        acc = Accelerator()
        net = acc.prepare(AutoModelForCausalLM.from_pretrained("tiny"))
        net.generate(prompt)
    """, [(5, "AL501")]),
    # The norm clip_grad_norm_ returns is computed from all-reduced gradients: the same on
    # every rank, so skipping the step on NaN is decided together.
    "skip_on_nan_gradient_norm": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        acc = Accelerator()
        net = torch.nn.Linear(16, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        net, opt, loader = acc.prepare(net, opt, DataLoader(ds, batch_size=8))
        for batch in loader:
            acc.backward(net(batch).mean())
            if acc.sync_gradients:
                norm = acc.clip_grad_norm_(net.parameters(), 1.0)
                if torch.logical_or(norm.isnan(), norm.isinf()):
                    opt.zero_grad()
                    continue
            opt.step()
    """, []),
    # A rank-local loss still decides alone.
    "skip_on_nan_loss": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        acc = Accelerator()
        net = torch.nn.Linear(16, 1)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        net, opt, loader = acc.prepare(net, opt, DataLoader(ds, batch_size=8))
        for batch in loader:
            loss = net(batch).mean()
            if torch.isnan(loss):
                break
            acc.backward(loss)
            opt.step()
    """, [(11, "AL303")]),
    # An accelerator built with an FSDP1 plugin, returned in a tuple by a setup function: FSDP1
    # forwards attributes and gives the full, unprefixed state dict on every rank.
    "fsdp1_accelerator_from_a_setup_tuple": ("""
        from accelerate import Accelerator, FullyShardedDataParallelPlugin
        from transformers import AutoModelForCausalLM

        def setup():
            plugin = FullyShardedDataParallelPlugin(sharding_strategy="FULL_SHARD")
            acc = Accelerator(fsdp_plugin=plugin)
            net = acc.prepare(AutoModelForCausalLM.from_pretrained("tiny"))
            return net, acc

        def compare(net, reference):
            return all((a == b).all() for a, b in zip(net.state_dict().values(), reference.values()))

        net, acc = setup()
        compare(net, load_reference())
        net.config.use_cache = False
    """, []),
    # A plugin that may be None (no FSDP on that path) says nothing about the backend.
    "fsdp_plugin_only_on_some_paths": ("""
        from accelerate import Accelerator, FullyShardedDataParallelPlugin
        from transformers import AutoModelForCausalLM
        plugin = None
        if args.shard:
            plugin = FullyShardedDataParallelPlugin(fsdp_version=1)
        acc = Accelerator(fsdp_plugin=plugin)
        net = acc.prepare(AutoModelForCausalLM.from_pretrained("tiny"))
        net.save_pretrained("out")
    """, [(8, "AL501")]),
    # Without the plugin the backend is whatever the launch config says: still reported.
    "state_dict_of_an_accelerator_of_unknown_backend": ("""
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM

        def setup():
            acc = Accelerator()
            return acc.prepare(AutoModelForCausalLM.from_pretrained("tiny")), acc

        net, acc = setup()
        weights = net.state_dict()
    """, [(9, "AL501")]),
    # A prepared model unwrapped under the main-process guard and read afterwards only under a
    # guard that implies it, or as another object's attribute: every reader sees one object.
    "rebind_read_only_where_it_happened": ("""
        import torch
        from accelerate import Accelerator
        from diffusers import UNet2DConditionModel
        acc = Accelerator()
        unet = UNet2DConditionModel.from_pretrained(args.model, subfolder="unet")
        unet, opt = acc.prepare(unet, torch.optim.AdamW(unet.parameters(), lr=1e-5))
        is_main = acc.is_main_process
        if is_main:
            unet = acc.unwrap_model(unet)
        acc.end_training()
        if is_main and args.save_state:
            save_final(args, unet)
        pipe = load_pipeline(args.model)
        pipe.unet.load_attn_procs(args.output_dir)
    """, []),
    # ... and read on every rank afterwards: the wrapper on the others.
    "rebind_read_on_every_rank": ("""
        from accelerate import Accelerator
        from transformers import CLIPTextModel
        acc = Accelerator()
        text_encoder, opt = acc.prepare(CLIPTextModel.from_pretrained(args.model, subfolder="text_encoder"), opt)
        is_main = acc.is_main_process
        if is_main:
            text_encoder = acc.unwrap_model(text_encoder)
        acc.end_training()
        embeds = text_encoder.get_input_embeddings().weight.detach()
    """, [(7, "AL502")]),
    # Rank-locality is data flow: a name that looks like a metric but holds a reduced value is
    # uniform; a counter advanced under a rank-local condition is rank-local.
    "reduced_metric_and_patience_counter": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification
        acc = Accelerator()
        net = AutoModelForSequenceClassification.from_pretrained("tiny")
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        net, opt, loader = acc.prepare(net, opt, DataLoader(ds, batch_size=8))
        best_score, patience = 0.0, 0
        for batch in loader:
            out = net(**batch)
            acc.backward(out.loss)
            eval_score = acc.reduce(out.logits.argmax(-1).eq(batch["labels"]).float().mean(), "mean")
            if eval_score.item() > 0.99:
                break
            if out.loss.item() > best_score:
                patience += 1
            if patience > 3:
                break
    """, [(19, "AL303")]),
    # Branches taken only by a single-process job (Apple silicon, one process, no process group).
    "single_process_branches": ("""
        import torch
        from accelerate import Accelerator
        acc = Accelerator()
        net = acc.prepare(net)
        if torch.backends.mps.is_available():
            print("running on mps")
        if acc.num_processes > 1:
            pass
        else:
            torch.save(net.state_dict(), "single.pt")
        if torch.distributed.get_world_size() == 1:
            print("one process")
        print("done")
    """, [(13, "AL403")]),
    # A save_state pre-hook runs where save_state runs: only on the main process here.
    "save_state_hook_of_a_main_only_save_state": ("""
        import json
        from accelerate import Accelerator
        acc = Accelerator()
        def write_train_state(models, weights, output_dir):
            with open(output_dir + "/train_state.json", "w") as f:
                json.dump({"step": 1}, f)
        acc.register_save_state_pre_hook(write_train_state)
        net, opt = acc.prepare(net, opt)
        if acc.is_main_process:
            acc.save_state("ckpt")
    """, [(10, "AL302")]),
    # ... and on every rank when save_state is called on every rank.
    "save_state_hook_of_an_every_rank_save_state": ("""
        import json
        from accelerate import Accelerator
        acc = Accelerator()
        def write_train_state(models, weights, output_dir):
            with open(output_dir + "/train_state.json", "w") as f:
                json.dump({"step": 1}, f)
        acc.register_save_state_pre_hook(write_train_state)
        net, opt = acc.prepare(net, opt)
        acc.save_state("ckpt")
    """, [(5, "AL401")]),
    # webdataset's .map is a lazy per-sample transform; huggingface_hub downloads take file locks.
    "webdataset_map_and_hub_download": ("""
        import webdataset as wds
        from accelerate import Accelerator
        from huggingface_hub import hf_hub_download
        acc = Accelerator()
        index = hf_hub_download("org/pipeline", "model_index.json")
        shards = wds.WebDataset(urls).shuffle(100).decode("pil")
        shards = shards.map(augment)
    """, []),
    # A datasets object derived from load_dataset is still traced through .map and ["train"].
    "datasets_map_on_every_rank": ("""
        from accelerate import Accelerator
        from datasets import load_dataset
        acc = Accelerator()
        raw = load_dataset("imdb")
        train = raw["train"].shuffle(seed=0)
        train = train.map(tokenize, batched=True)
        model, loader = acc.prepare(model, DataLoader(train))
    """, [(6, "AL404")]),
    # An nn.Module that only bundles an optimizer with its schedule has no parameters, so
    # prepare() does not wrap it: its own state_dict() is the right one.
    "module_holding_only_an_optimizer": ("""
        import torch
        from torch import nn
        from accelerate import Accelerator

        class ScheduledOpt(nn.Module):
            def __init__(self, params, lr):
                super().__init__()
                self.opt = torch.optim.AdamW(params, lr=lr)
                self.sched = LinearWarmupScheduler(self.opt)

            def state_dict(self):
                return {"opt": self.opt.state_dict(), "sched": self.sched.state_dict()}

        class Runner:
            def __init__(self, net):
                self.acc = Accelerator()
                self.sopt = ScheduledOpt(net.parameters(), 1e-4)
                self.net, self.sopt = self.acc.prepare(net, self.sopt)

            def save(self, path):
                torch.save({"sopt": self.sopt.state_dict()}, path)
    """, []),
    # ... while a module class with layers is a model, wrapped like any other.
    "module_class_with_layers_is_wrapped": ("""
        import torch
        from torch import nn
        from accelerate import Accelerator

        class Head(nn.Module):
            def __init__(self):
                super().__init__()
                self.proj = nn.Linear(4, 2)

        acc = Accelerator()
        head = acc.prepare(Head())
        cfg = head.proj
    """, [(12, "AL501")]),
    # A trainer class whose driver method sets up the models before the method that prepares
    # them: the setup methods see the bare model, the later ones the wrapper.
    "methods_that_run_before_the_prepare_method": ("""
        import torch
        from accelerate import Accelerator

        class Finetuner:
            def __init__(self, parts):
                self.acc = Accelerator()
                self.parts = parts

            def setup_models(self):
                self.cfg = self.parts.transformer.config
                self.parts.transformer.enable_gradient_checkpointing()

            def add_adapters(self, lora):
                self.parts.transformer.add_adapter(lora)

            def wrap(self):
                self.opt = torch.optim.AdamW(self.parts.transformer.parameters(), lr=1e-4)
                self.parts.transformer, self.opt = self.acc.prepare(self.parts.transformer, self.opt)

            def report(self):
                return self.parts.transformer.config

            def run(self, lora):
                self.setup_models()
                self.add_adapters(lora)
                self.wrap()
                return self.report()
    """, [(21, "AL501")]),
    # DeepSpeed's engine API inside the branch that tests for DeepSpeed.
    "deepspeed_engine_api_under_a_deepspeed_test": ("""
        import torch
        from accelerate import Accelerator, DistributedType
        from transformers import AutoModelForCausalLM

        acc = Accelerator()
        net = AutoModelForCausalLM.from_pretrained("tiny")
        net, opt = acc.prepare(net, torch.optim.AdamW(net.parameters(), lr=1e-4))
        for batch in loader:
            acc.backward(net(batch).loss)
            if acc.sync_gradients and acc.distributed_type == DistributedType.DEEPSPEED:
                norm = net.get_global_grad_norm()
            opt.step()
    """, []),
    # A dataset's __getitem__ caching each sample under a path derived from the sample: each
    # rank writes the files of its own shard.
    "per_sample_cache_written_in_getitem": ("""
        import hashlib
        from pathlib import Path
        from safetensors.torch import save_file
        from accelerate import Accelerator

        class CachedClips:
            def __init__(self, items, cache, accelerator):
                self.items, self.cache, self.accelerator = items, Path(cache), accelerator

            def __getitem__(self, index):
                caption, clip = self.items[index]
                target = self.cache / (hashlib.sha256(caption.encode()).hexdigest() + ".safetensors")
                if not target.exists():
                    emb = encode(caption).to(self.accelerator.device)
                    save_file({"emb": emb}, target)
                return clip

        acc = Accelerator()
        loader = acc.prepare(DataLoader(CachedClips(items, "cache", acc)))
        torch_save_target = "summary.safetensors"
        save_file({}, torch_save_target)
    """, [(21, "AL401")]),
    # A rank-dependent sanity check that raises: the launcher stops every rank when one fails,
    # so the collective after it is reached by the whole (surviving) job.
    "rank_dependent_check_that_raises_before_a_collective": ("""
        import os
        import torch.distributed as dist

        def setup(args):
            args.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
            if args.local_rank != args.device and args.mode != "inference":
                raise ValueError("one GPU per process")
            dist.init_process_group("nccl")
            group = dist.new_group([0, 1])
            return group
    """, []),
    # An evaluation only the main process runs stops after a number of samples: the early exit
    # diverges nothing more than the main-only forward already does (that one is AL305's).
    "sample_budget_exit_in_a_main_only_evaluation": ("""
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForSequenceClassification

        def evaluate(net, loader, budget):
            seen = 0
            for batch in loader:
                out = net(**batch)
                seen += batch["ids"].shape[0]
                if seen >= budget:
                    break

        acc = Accelerator()
        net = AutoModelForSequenceClassification.from_pretrained("tiny")
        net, loader = acc.prepare(net, DataLoader(eval_ds, batch_size=8))
        if acc.is_main_process:
            evaluate(net, loader, 512)
    """, [(8, "AL305")]),
    # The script checks for the attribute before it reads it on the (possibly wrapped) model.
    "attribute_read_after_a_hasattr_check": ("""
        from accelerate import Accelerator
        from diffusers import UNet2DConditionModel

        acc = Accelerator()
        unet = acc.prepare(UNet2DConditionModel.from_pretrained(args.model, subfolder="unet"))
        if hasattr(unet, "config") and hasattr(unet.config, "patch_size"):
            size = unet.config.patch_size
        size = unet.config.patch_size
    """, [(8, "AL501")]),
    # An entry-point method sets the models up and only then calls the hook that prepares
    # them: before that call it works on the bare models, also after rebinding their holder.
    "entry_method_before_its_own_prepare_hook": ("""
        import torch
        from accelerate import Accelerator

        class Job:
            def __init__(self):
                self.acc = Accelerator()

            def prepare_models(self):
                self.opt = torch.optim.AdamW(self.sd.unet.parameters(), lr=1e-5)
                self.sd.unet, self.opt = self.acc.prepare(self.sd.unet, self.opt)

            def run(self):
                self.sd = load_pipeline()
                unet = self.sd.unet
                unet.enable_gradient_checkpointing()
                self.prepare_models()
                self.sd.unet.enable_gradient_checkpointing()
    """, [(17, "AL501")]),
    # An inference tool that builds an Accelerator for its device only and never prepares,
    # gathers or asks for a rank: one process, so its writes and prints are not per rank.
    "accelerator_used_for_its_device_only": ("""
        import torch
        from accelerate import Accelerator
        from safetensors.torch import save_file

        acc = Accelerator(mixed_precision="bf16")
        net = load(args.ckpt).to(acc.device)
        with acc.autocast():
            latents = net(sample())
        save_file({"latent": latents}, args.out)
        print("saved", args.out)
    """, []),
    # A cache the main process fills first (inside main_process_first), through a helper every
    # call of which is inside the block: the other ranks find the files.
    "cache_written_inside_main_process_first": ("""
        import os
        import torch
        from accelerate import Accelerator

        acc = Accelerator()

        def cache_one(item, path):
            if not os.path.exists(path):
                torch.save(encode(item), path)

        def cache_all(items):
            with acc.main_process_first():
                for i, item in enumerate(items):
                    cache_one(item, f"cache/{i}.pt")

        cache_all(dataset)
        loader = acc.prepare(DataLoader(dataset))
    """, []),
    # An EMA wrapper from ema_pytorch averages into a copy that needs no grad: prepare() wraps
    # nothing, so its own methods and state_dict() are fine.
    "ema_pytorch_copy_prepared_with_the_model": ("""
        import torch
        from accelerate import Accelerator
        from ema_pytorch import EMA

        acc = Accelerator()
        net = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
        opt = torch.optim.Adam(net.parameters(), lr=3e-4)
        ema_model = EMA(net, beta=0.999)
        ema_model, net, opt = acc.prepare(ema_model, net, opt)
        if ema_model.initted:
            ema_model.update()
        weights = ema_model.state_dict()
    """, []),
    # The main-process flag read with getattr and a default, handed to a helper as a
    # keyword-only parameter that guards the writes with an early continue.
    "main_flag_from_getattr_passed_to_a_helper": ("""
        import torch
        from accelerate import Accelerator

        def save_models(models, out, *, is_main_process):
            for i, m in enumerate(models):
                if not is_main_process:
                    continue
                torch.save(m.state_dict(), f"{out}/model_{i}.pt")

        def save_hook(models, weights, out):
            is_main = True
            if accelerator is not None:
                is_main = getattr(accelerator, "is_main_process", True)
            save_models(models, out, is_main_process=is_main)

        accelerator = Accelerator()
        accelerator.register_save_state_pre_hook(save_hook)
        net = accelerator.prepare(net)
        accelerator.save_state("ckpt")
    """, []),
    # The step counts recomputed after prepare() under the flag set with them stay correlated with
    # it however many other True/False flags the script branches on (more paths than the walk
    # keeps): only the scheduler horizon, variant B2, is reported, not the loop bound or exit.
    "recomputed_steps_among_many_flags": ("""
        import math
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import get_scheduler

        def main(args, model, optimizer, dataset):
            accelerator = Accelerator()
            use_a = False
            if args.a:
                use_a = True
            use_b = False
            if args.b:
                use_b = True
            use_c = False
            if args.c:
                use_c = True
            loader = DataLoader(dataset, batch_size=4)
            overrode = False
            per_epoch = math.ceil(len(loader) / args.accum)
            if args.max_train_steps is None:
                args.max_train_steps = args.epochs * per_epoch
                overrode = True
            scheduler = get_scheduler("cosine", optimizer=optimizer,
                                      num_training_steps=args.max_train_steps * accelerator.num_processes)
            model, optimizer, loader, scheduler = accelerator.prepare(model, optimizer, loader, scheduler)
            if use_a:
                print("a")
            if use_b:
                print("b")
            if use_c:
                print("c")
            per_epoch = math.ceil(len(loader) / args.accum)
            if overrode:
                args.max_train_steps = args.epochs * per_epoch
            args.epochs = math.ceil(args.max_train_steps / per_epoch)
            step = 0
            for epoch in range(args.epochs):
                for batch in loader:
                    accelerator.backward(model(batch).loss)
                    step += 1
                    if step >= args.max_train_steps:
                        break
    """, [(24, "AL202")]),
    # A helper that draws an index on each rank and broadcasts rank 0's in place (under the usual
    # `if dist.is_initialized():`) returns the same value everywhere: an exit on it is not
    # rank-local; the same helper without the broadcast is.
    "index_broadcast_in_place_by_a_helper": ("""
        import torch
        import torch.distributed as dist
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def shared_index(steps, device):
            picked = torch.randint(0, steps, (1,), device=device)
            if dist.is_initialized():
                dist.broadcast(picked, src=0)
            return picked.tolist()

        def own_index(steps, device):
            return torch.randint(0, steps, (1,), device=device).tolist()

        def train(model, optimizer, dataset, steps):
            accelerator = Accelerator()
            loader = DataLoader(dataset, batch_size=4)
            model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
            for batch in loader:
                last = shared_index(steps, batch.device)[0]
                for i in range(steps):
                    accelerator.backward(model(batch).sum())
                    if i == last:
                        break
                mine = own_index(steps, batch.device)[0]
                for i in range(steps):
                    accelerator.backward(model(batch).sum())
                    if i == mine:
                        break
    """, [(29, "AL303")]),
    # torch.save into an in-memory buffer writes no file.
    "torch_save_into_a_bytes_buffer": ("""
        from io import BytesIO
        import torch
        from accelerate import Accelerator

        acc = Accelerator()
        net = acc.prepare(net)
        buffer = BytesIO()
        torch.save(sample, buffer)
    """, []),
    # The clip runs under a flag computed from sync_gradients.
    "clip_under_a_flag_derived_from_sync_gradients": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM

        acc = Accelerator(gradient_accumulation_steps=4)
        net = AutoModelForCausalLM.from_pretrained("tiny")
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        net, opt, loader = acc.prepare(net, opt, DataLoader(ds, batch_size=8))
        for batch in loader:
            with acc.accumulate(net):
                acc.backward(net(batch).loss)
                should_clip = acc.sync_gradients and max_norm > 0
                if should_clip:
                    acc.clip_grad_norm_(net.parameters(), max_norm)
                opt.step()
                opt.zero_grad()
    """, []),
    # ... while a rank-dependent early return before a collective still hangs the others.
    "rank_dependent_return_before_a_collective": ("""
        import os
        import torch.distributed as dist

        def setup(args):
            dist.init_process_group("nccl")
            if dist.get_rank() != 0 and args.skip_groups:
                return None
            return dist.new_group([0, 1])
    """, [(8, "AL301")]),
    # A nested checkpoint helper whose `is_best=False` no call overrides: its `if is_best:` write
    # never runs. A second helper called once with the flag set still writes on every rank.
    "flag_parameter_no_call_passes_keeps_its_default": ("""
        import os
        import torch
        from accelerate import Accelerator

        def fit(net, opts, acc):
            def checkpoint(step, is_best=False):
                state = acc.unwrap_model(net).state_dict()
                if is_best:
                    torch.save(state, os.path.join(opts.out, "best.pt"))
                if not is_best and acc.is_main_process:
                    torch.save(state, os.path.join(opts.out, f"step_{step}.pt"))

            def export(step, final=False):
                if final:
                    torch.save(acc.unwrap_model(net).state_dict(), os.path.join(opts.out, "final.pt"))

            for step in range(10):
                checkpoint(step)
                export(step)
            export(10, final=True)

        def main(opts):
            acc = Accelerator()
            fit(acc.prepare(torch.nn.Linear(2, 2)), opts, acc)
    """, [(15, "AL401")]),
    # A project name bound once to a string: `if project is None:` never holds, so the tracker
    # it would start there does not exist. A name bound twice (once from the command line) is
    # unknown, and the unguarded tracker in its branch still runs on every rank.
    "a_name_bound_once_to_a_string_is_never_none": ("""
        import wandb
        from accelerate import Accelerator

        def main(opts):
            acc = Accelerator()
            project = "runs"
            if project is None:
                wandb.init(mode="disabled")
            elif acc.is_main_process:
                wandb.init(project=project)
            group = "default"
            if opts.group:
                group = opts.group
            if group is not None:
                wandb.init(project=project, group=group)
    """, [(15, "AL402")]),
    # The accelerator is made in `train`, which only `main` calls, and `main` is handed to a
    # launcher (`app.run(main)`) rather than called: every process runs it, so `train` runs on
    # every rank. A helper that `main` calls and that uses no accelerator stays outside.
    "a_function_called_from_an_entry_point_handed_to_a_launcher_runs_on_every_rank": ("""
        import torch
        from absl import app
        from accelerate import Accelerator

        def train(cfg):
            accelerator = Accelerator()
            model = accelerator.prepare(torch.nn.Linear(2, 2))
            torch.save(accelerator.unwrap_model(model).state_dict(), cfg.out)

        def describe(cfg):
            with open(cfg.log, "w") as f:
                f.write("run")

        def main(argv):
            describe(argv)
            train(argv)

        if __name__ == "__main__":
            app.run(main)
    """, [(8, "AL401")]),
    # ... but a function only other modules call (a UI's button handler) is no entry point of
    # this file: whether one process or several run it is not known here.
    "a_function_only_other_modules_call_is_no_entry_point": ("""
        import torch
        from accelerate import Accelerator

        def train(cfg):
            accelerator = Accelerator()
            model = accelerator.prepare(torch.nn.Linear(2, 2))
            torch.save(accelerator.unwrap_model(model).state_dict(), cfg.out)

        def on_click(cfg):
            train(cfg)
    """, []),
    # ... nor is a function whose name is only a call's keyword (`ui.button(on_click=...)`)
    "a_function_named_only_as_a_keyword_is_no_entry_point": ("""
        import torch
        import ui
        from accelerate import Accelerator

        def train(cfg):
            accelerator = Accelerator()
            model = accelerator.prepare(torch.nn.Linear(2, 2))
            torch.save(accelerator.unwrap_model(model).state_dict(), cfg.out)

        def main(cfg):
            train(cfg)

        ui.button(main=True, on_click=print)
    """, []),
    # A progress bar over `range(max_steps)` of a pre-`prepare` count never completes; the
    # exit on that count inside the epoch loop never fires (the epoch loop ends first), so it
    # is harmless; in a `while True:` loop it is what ends training, N times too late.
    "a_progress_range_from_a_pre_prepare_count_and_its_harmless_exit": ("""
        import math
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from tqdm import tqdm

        acc = Accelerator()
        net = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        loader = DataLoader(ds, batch_size=8)
        max_steps = epochs * math.ceil(len(loader) / ga)
        net, opt, loader = acc.prepare(net, opt, loader)
        bar = tqdm(range(max_steps))
        done = 0
        for epoch in range(epochs):
            for batch in loader:
                acc.backward(net(batch).sum())
                done += 1
                if done >= max_steps:
                    break
        while True:
            for batch in loader:
                acc.backward(net(batch).sum())
                done += 1
            if done >= max_steps:
                break
    """, [(13, "AL202"), (25, "AL202")]),
    # A class is a loader by what it derives from, not by its name: `Batches(DataLoader)` is one
    # (unprepared and iterated in training: every rank trains on everything), and a
    # `RoundRobinDataLoader` that only iterates other loaders is not: `prepare` returns it
    # unchanged, so what it holds is unknown and its pre-`prepare` length says nothing.
    "a_loader_class_is_known_by_its_bases_not_its_name": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        class Batches(DataLoader):
            pass

        class RoundRobinDataLoader:
            def __init__(self, *loaders):
                self.loaders = loaders

            def __len__(self):
                return sum(len(l) for l in self.loaders)

            def __iter__(self):
                for group in zip(*self.loaders):
                    yield from group

        acc = Accelerator()
        net = torch.nn.Linear(2, 2)
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        mixed = RoundRobinDataLoader(DataLoader(a, batch_size=4), DataLoader(b, batch_size=4))
        steps = len(mixed)
        net, opt, mixed = acc.prepare(net, opt, mixed)
        for step in range(steps):
            pass
        plain = Batches(ds, batch_size=8)
        for batch in plain:
            acc.backward(net(batch).sum())
    """, [(28, "AL201")]),
    # A sampler's class decides whether a loader shards itself, never its name: a class of this
    # module that reads no rank is no distributed sampler whatever it is called (the loader is
    # AL201), one derived from torch's DistributedSampler is (AL205 with prepare), and one of
    # another module is unknown, so nothing is reported.
    "a_sampler_is_judged_by_its_class_not_its_name": ("""
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler
        from samplers import BucketSampler

        class DistributedLengthSampler:
            def __init__(self, lengths):
                self.lengths = lengths

            def __iter__(self):
                return iter(sorted(range(len(self.lengths)), key=self.lengths.__getitem__))

        class ShardedSampler(DistributedSampler):
            pass

        accelerator = Accelerator()
        model = accelerator.prepare(make_model())
        for batch in DataLoader(ds, sampler=DistributedLengthSampler(lengths)):
            accelerator.backward(model(batch))
        for batch in DataLoader(ds, sampler=BucketSampler(ds)):
            accelerator.backward(model(batch))
        loader = accelerator.prepare(DataLoader(ds, sampler=ShardedSampler(ds)))
        for batch in loader:
            accelerator.backward(model(batch))
        """, [(17, "AL201"), (21, "AL205")]),
    # A test of a value the model knows nothing about against the first process's index (a
    # rank unpacked from a helper of a package the linter cannot read, and the same attribute
    # read through a parameter the entry point fills) may be the program's own rank guard:
    # whether every rank runs the write and the print under it is unknown, so nothing is
    # reported. The same test on a loop counter is decided, and its write is reported.
    "a_test_of_an_opaque_value_against_zero_is_undecided": ("""
        import os
        from accelerate import Accelerator
        from launchutils import read_world

        def one_epoch(opts, accelerator, model):
            if opts.rank == 0:
                os.makedirs(opts.out)
                print("saved")

        def main():
            opts = make_parser().parse_args()
            opts.local_rank, opts.rank, opts.world = read_world()
            accelerator = Accelerator()
            model = accelerator.prepare(make_model())
            for epoch in range(3):
                if opts.rank == 0:
                    os.makedirs(opts.out)
                one_epoch(opts=opts, accelerator=accelerator, model=model)
                if epoch == 0:
                    os.makedirs(opts.out)
        main()
        """, [(20, "AL401")]),
    # A value set before a `break` reaches the code after the loop: the rank a helper of this file
    # finds by trying environment variables in turn is a rank, and the write it guards runs on
    # one process.
    # The fields of a configuration object an imported `parse_args()` returned are the same on
    # every rank: a test of one against 0 is decided, and the print under it is reported.
    "a_field_of_an_imported_configuration_is_decided": ("""
        from accelerate import Accelerator
        from options import parse_args

        def main():
            args = parse_args()
            accelerator = Accelerator()
            model = accelerator.prepare(make_model())
            if args.extra_layers != 0:
                print("extra layers", args.extra_layers)

        main()
        """, [(9, "AL403")]),
    # Objects handed to a helper in a list (`[net_g, net_d]`, `[train_loader, eval_loader]`) and
    # unpacked there keep what they are: the loader was never prepared (prepare got the dataset),
    # and the prepared generator has no `infer`. The helper is called in both branches of the
    # main-process test, so every rank runs its forward: no rank guard stands around it.
    "objects_in_a_list_keep_their_values_and_a_helper_called_in_both_branches_is_unguarded": ("""
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM

        def train_epoch(accelerator, nets, loaders, writer):
            net_g, net_d = nets
            train_loader, eval_loader = loaders
            for batch in train_loader:
                loss = net_g(batch).loss + net_d(batch).loss
                accelerator.backward(loss)
            net_g.infer(batch)

        accelerator = Accelerator()
        net_g = AutoModelForCausalLM.from_pretrained("a")
        net_d = AutoModelForCausalLM.from_pretrained("b")
        train_loader = DataLoader(train_set, batch_size=8)
        net_g, net_d, train_set = accelerator.prepare(net_g, net_d, train_set)
        for epoch in range(3):
            if accelerator.is_main_process:
                train_epoch(accelerator, [net_g, net_d], [train_loader, None], make_writer())
            else:
                train_epoch(accelerator, [net_g, net_d], [train_loader, None], None)
        """, [(8, "AL201"), (11, "AL501")]),
    # A class of the file whose __init__ opens a file for writing runs that write wherever it is
    # constructed: built on every rank, every rank truncates the same log.
    "a_constructor_runs_its_init_where_the_class_is_built": ("""
        import os
        from accelerate import Accelerator

        class LossLog:
            def __init__(self, folder):
                self.path = os.path.join(folder, "loss.csv")
                with open(self.path, "w") as f:
                    f.write("step,loss\\n")

        accelerator = Accelerator()
        model = accelerator.prepare(make_model())
        log = LossLog(out)
        if accelerator.is_main_process:
            other = LossLog(out)
        """, [(7, "AL401")]),
    # An attribute the file only ever sets to False (the lines that set it True are commented
    # out) never takes its branch: the call of the helper there is no call, and the helper, called
    # otherwise only under the main-process test, writes on the main process alone. A flag the
    # file also sets True stays a live branch.
    "an_attribute_only_ever_false_never_takes_its_branch": ("""
        from accelerate import Accelerator

        class Trainer:
            def __init__(self):
                self.accelerator = Accelerator()
                self.model = self.accelerator.prepare(make_model())
                self.resuming_eval = False
                self.dump_each_step = False

            def validate(self):
                with open("scores.txt", "w") as f:
                    f.write(score(self.model))

            def dump(self):
                with open("last_step.txt", "w") as f:
                    f.write("step")

            def train(self):
                if self.resuming_eval:
                    self.validate()
                if self.dump_each_step:
                    self.dump()
                if self.accelerator.is_main_process:
                    self.validate()

            def configure(self, verbose):
                self.dump_each_step = True

        Trainer().train()
        """, [(15, "AL401")]),
    # `> 0` on a count a caller configures is how "enabled" is written, not a rank guard: the
    # checkpoint rotation under it runs on every rank and races. `<= 0` on an opaque value (here
    # a field of what an entry point no call of the file makes is handed) is the "main process or
    # not distributed" guard, and stays undecided.
    "greater_than_zero_on_an_opaque_value_is_no_rank_guard": ("""
        import os
        from accelerate import Accelerator

        def save(accelerator, args, model):
            accelerator.save_state(args.out)
            if args.keep_last > 0:
                os.remove(oldest(args.out))
            if args.node_rank <= 0:
                os.remove(stale(args.out))

        def main(options):
            accelerator = Accelerator()
            save(accelerator, options, accelerator.prepare(make_model()))
        """, [(7, "AL401")]),
    # Loaders kept in a dict, one item prepared: a comprehension over constant keys makes one
    # item per key, and an item a method assigns on `self` is what the other methods read. The
    # item never given to `prepare` is reported as such; the prepared one is not.
    "items_of_a_dict_of_loaders_by_comprehension_and_on_self": ("""
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM

        accelerator = Accelerator()
        model = accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"))
        loaders = {split: DataLoader(data[split], batch_size=8) for split in ("train", "val")}
        loaders["train"] = accelerator.prepare(loaders["train"])
        for batch in loaders["train"]:
            accelerator.backward(model(**batch).loss)
        for batch in loaders["val"]:
            accelerator.gather_for_metrics(model(**batch).logits)

        class Trainer:
            def __init__(self):
                self.model = accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"))
                self.loaders = {"train": DataLoader(a, batch_size=8), "val": DataLoader(b, batch_size=8)}
                self.loaders["train"] = accelerator.prepare(self.loaders["train"])

            def fit(self):
                for batch in self.loaders["train"]:
                    accelerator.backward(self.model(**batch).loss)
                for batch in self.loaders["val"]:
                    accelerator.gather_for_metrics(self.model(**batch).logits)
        """, [(11, "AL201"), (23, "AL201")]),
    # A dict display with constant keys keeps what each key holds, also when a function of the
    # file returns it: the prepared model under "model" (its `generate` is not the wrapper's), the
    # plain loader under "val".
    "a_returned_dict_keeps_its_items": ("""
        from accelerate import Accelerator
        from torch.utils.data import DataLoader
        from transformers import AutoModelForCausalLM

        accelerator = Accelerator()
        model = accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"))

        def components():
            return {"model": model, "steps": 100}

        def loaders():
            return {"train": DataLoader(a, batch_size=8), "val": DataLoader(b, batch_size=8)}

        parts = components()
        parts["model"].generate(prompt)
        built = loaders()
        train = accelerator.prepare(built["train"])
        for batch in built["val"]:
            accelerator.gather_for_metrics(model(**batch).logits)
        """, [(15, "AL501"), (18, "AL201")]),
    # A function that hands a same-file helper performing collectives to other code (a save hook)
    # has op sequences the model cannot see: unknown, so the guarded save_state in it is not
    # reported (the per-call-context analysis must keep this).
    "an_opaque_callback_keeps_its_function_silent": ("""
        from accelerate import Accelerator

        accelerator = Accelerator()
        model = accelerator.prepare(make_model())

        def gather_hook(models, weights, out):
            accelerator.wait_for_everyone()

        def main(steps):
            fsdp_on = getattr(accelerator.state, "fsdp_plugin", None) is not None
            accelerator.register_save_state_pre_hook(gather_hook)
            for step in range(steps):
                if accelerator.is_main_process or fsdp_on:
                    accelerator.save_state("ckpt")

        main(10)
        """, []),
    # A class built only in a function no call of the file reaches (a job runner another module
    # calls) runs its __init__ as any method that uses the accelerator: on every rank.
    "an_init_built_where_callers_are_unknown_runs_on_every_rank": ("""
        from accelerate import Accelerator

        class Job:
            def __init__(self, folder):
                self.accelerator = Accelerator()
                self.model = self.accelerator.prepare(make_model())
                with open(folder + "/job.json", "w") as f:
                    f.write("{}")

        def run_job(folder):
            job = Job(folder)
            return job
        """, [(7, "AL401")]),
    "a_value_bound_before_break_reaches_past_the_loop": ("""
        import os
        from accelerate import Accelerator

        def global_rank():
            found = 0
            for var in ("RANK", "SLURM_PROCID"):
                if var in os.environ:
                    found = int(os.environ[var])
                    break
            return found

        accelerator = Accelerator()
        model = accelerator.prepare(make_model())
        rank = global_rank()
        if rank == 0:
            os.makedirs(out)
        if rank > 0:
            accelerator.wait_for_everyone()
        """, [(18, "AL301")]),
    # The split barrier written with a membership test (`local_rank not in [-1, 0]`: the
    # non-main ranks wait before the work, the main one after it): every rank reaches one of
    # the two barriers. A barrier only the ranks in (-1, 0) reach is still one rank's.
    "a_split_barrier_by_membership_is_balanced": ("""
        import argparse
        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        args = parser.parse_args()

        def load_features():
            if args.local_rank not in [-1, 0]:
                torch.distributed.barrier()
            features = build_features()
            if args.local_rank == 0:
                torch.distributed.barrier()
            return features

        def report():
            if args.local_rank in (-1, 0):
                torch.distributed.barrier()

        torch.distributed.init_process_group("gloo")
        load_features()
        report()
        """, [(18, "AL301")]),
    # An accelerator is an object, never None: `(acc is None) or acc.is_main_process` (a test
    # written for code that may run without one) is true on the main process only, so the write
    # under it is guarded; `if acc is not None:` lets every rank in.
    "an_accelerator_is_never_none": ("""
        from accelerate import Accelerator

        def main(resume=None):
            accelerator = Accelerator()
            model = accelerator.prepare(make_model())
            if (resume is None) and ((accelerator is None) or accelerator.is_main_process):
                with open("config.yaml", "w") as f:
                    f.write(dump())
            if accelerator is not None:
                with open("settings.yaml", "w") as f:
                    f.write(dump())

        main()
        """, [(10, "AL401")]),
    # A helper's tests on a parameter are decided by the literal each call passes: the split
    # barrier that `evaluate=True` turns off runs on no rank when the main process alone calls
    # it that way, and is balanced when every rank calls it with the default. Called by the main
    # process alone with the default, its second barrier waits for the others forever.
    "literal_arguments_decide_a_helpers_tests": ("""
        import argparse
        import torch

        parser = argparse.ArgumentParser()
        parser.add_argument("--local_rank", type=int, default=-1)
        args = parser.parse_args()

        def load(split, evaluate=False):
            if args.local_rank not in [-1, 0] and not evaluate:
                torch.distributed.barrier()
            features = build(split)
            if args.local_rank == 0 and not evaluate:
                torch.distributed.barrier()
            return features

        def score():
            return load("dev", evaluate=True)

        def main():
            torch.distributed.init_process_group("gloo")
            load("train", evaluate=False)
            if args.local_rank in [-1, 0]:
                score()
            if args.local_rank in [-1, 0]:
                load("test")

        main()
        """, [(25, "AL301")]),
    # `go_on = False; break` in the batch loop, then `if not go_on: break` right after it: the
    # state at that break (the model unwrapped for the final save) leaves the epoch loop too, so
    # the next epoch still trains, and reads, the prepared model.
    "a_flag_set_before_break_leaves_the_outer_loop": ("""
        from accelerate import Accelerator
        from transformers import AutoModelForCausalLM

        accelerator = Accelerator()
        model, loader = accelerator.prepare(AutoModelForCausalLM.from_pretrained("gpt2"), make_loader())
        go_on = True
        for epoch in range(3):
            for batch in loader:
                accelerator.backward(model(batch))
                print(model.generation_config)
                if done():
                    model = accelerator.unwrap_model(model)
                    go_on = False
                    break
            if not go_on:
                break
        """, [(10, "AL501")]),
    # Evaluation on the main process only, inside the training loop: the validation loader is
    # never prepared, on purpose (sharded, the main process would see part of the data) and
    # nothing is gathered. The same loop on every rank is reported.
    "main_only_evaluation_keeps_its_loader_whole": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def main(train_set, val_set):
            accelerator = Accelerator()
            net = torch.nn.Linear(4, 4)
            scorer = torch.nn.Linear(4, 1)
            opt = torch.optim.AdamW(net.parameters())
            train_dl = DataLoader(train_set, batch_size=4, shuffle=True)
            val_dl = DataLoader(val_set, batch_size=1)
            net, scorer, opt, train_dl = accelerator.prepare(net, scorer, opt, train_dl)
            for batch in train_dl:
                accelerator.backward(net(batch).sum())
                opt.step()
                if accelerator.sync_gradients and accelerator.is_main_process:
                    scores = []
                    for sample in val_dl:
                        with torch.no_grad():
                            scores.append(scorer(sample).item())
            for sample in val_dl:
                with torch.no_grad():
                    print(scorer(sample))
        """, [(20, "AL305"), (21, "AL201")]),
    # Gathered predictions cut to the number of test samples after the loop, that number
    # computed by the caller and passed in: the padding duplicates are removed by hand. Cut to
    # `n * k` rows of a per-sample tensor of k columns, nothing is removed.
    "gathered_results_cut_to_a_count_the_caller_passes": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        accelerator = Accelerator()

        def evaluate(model, loader, n_samples):
            preds = []
            for batch in loader:
                with torch.no_grad():
                    preds.append(accelerator.gather(model(batch).argmax(-1)))
            return torch.cat(preds)[:n_samples]

        def evaluate_rows(model, loader, n_samples):
            rows = []
            for batch in loader:
                with torch.no_grad():
                    rows.append(accelerator.gather(model(batch)))
            return torch.cat(rows)[:n_samples * 6]

        def main(train_set, test_set):
            model = torch.nn.Linear(4, 6)
            model, loader = accelerator.prepare(model, DataLoader(test_set, batch_size=8))
            n_train, n_test = len(train_set), len(test_set)
            evaluate(model, loader, n_test)
            evaluate_rows(model, loader, n_test)
        """, [(18, "AL203")]),
    # Figures and images saved on every rank to one path.
    "figures_and_images_saved_on_every_rank": ("""
        import matplotlib.pyplot as plt
        import torchvision
        from accelerate import Accelerator

        def train(model, loader, steps):
            accelerator = Accelerator()
            model, loader = accelerator.prepare(model, loader)
            for step, batch in enumerate(loader):
                accelerator.backward(model(batch).sum())
                torchvision.utils.save_image(batch, f"samples/{step}.png")
                # each GPU process has its own device: whether ranks share this path depends on the launch
                torchvision.utils.save_image(batch, f"check/{step}-rank{accelerator.device.index}.png")
            plt.plot(steps)
            plt.savefig("loss.png")
            if accelerator.is_main_process:
                plt.savefig("loss_main.png")
        """, [(10, "AL401"), (14, "AL401")]),
    # The prepare call sits in the script's `if __name__ == "__main__":` block, and the
    # functions it calls read the prepared model as a global: when the file runs as a script,
    # that block runs, so the global is the prepared model.
    "a_global_prepared_under_the_main_block": ("""
        import torch
        from accelerate import Accelerator

        model = torch.nn.Linear(4, 4)
        optimizer = torch.optim.AdamW(model.parameters())

        if __name__ == "__main__":
            accelerator = Accelerator()
            model, optimizer, loader = accelerator.prepare(model, optimizer, make_loader())

        def train():
            for x in loader:
                accelerator.backward(model(x).sum())
                optimizer.step()
                if accelerator.is_main_process:
                    sample()

        def sample():
            with torch.no_grad():
                return model(torch.zeros(4))

        if __name__ == "__main__":
            train()
        """, [(20, "AL305")]),
    # Running totals over an evaluation loop, gathered with `gather_for_metrics` after it:
    # outside the loop it does not cut the padding, so the totals count the duplicated samples.
    # A count of batches gathered the same way, or a list gathered batch by batch in the loop,
    # is not this bug.
    "running_totals_gathered_for_metrics_after_the_loop": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def evaluate(model, val_set):
            accelerator = Accelerator()
            model, val_dl = accelerator.prepare(model, DataLoader(val_set, batch_size=4))
            model.eval()
            total_psnr = torch.zeros(1)
            scores = []
            with torch.no_grad():
                for batch in val_dl:
                    out = model(batch)
                    total_psnr += psnr(out, batch)
                    scores.append(accelerator.gather_for_metrics(out))
            total_psnr = accelerator.gather_for_metrics(total_psnr).mean()
            everything = accelerator.gather_for_metrics(scores)
            return total_psnr
        """, [(16, "AL203")]),
    # An evaluation loop over prepared prompts that cuts the last batch's negative prompts to
    # its size before generating (a cut of something else, before the gather), then gathers
    # each reward moved to numpy into a dict of lists: the padding duplicates stay.
    "a_cut_before_the_gather_is_not_the_padding_removed": ("""
        from collections import defaultdict
        import numpy as np
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        def evaluate(transformer, prompts, negatives, reward_fn):
            accelerator = Accelerator()
            transformer, loader = accelerator.prepare(transformer, DataLoader(prompts, batch_size=8))
            all_rewards = defaultdict(list)
            for batch in loader:
                if len(batch) < len(negatives):
                    negatives = negatives[:len(batch)]
                with torch.no_grad():
                    images = transformer(batch, negatives)
                for key, value in reward_fn(images).items():
                    gathered = accelerator.gather(torch.as_tensor(value)).cpu().numpy()
                    all_rewards[key].append(gathered)
            return {key: np.concatenate(v).mean() for key, v in all_rewards.items()}
        """, [(17, "AL203")]),
    # A sampling pass that logs each batch's mean loss, gathered and averaged over the ranks:
    # one number per batch, not the samples (`gather_for_metrics`, the suggested fix, would
    # drop whole ranks' means on the last batch).
    "a_gathered_batch_mean_is_a_statistic": ("""
        from collections import defaultdict
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader

        @torch.no_grad()
        def log_samples(sample_set):
            accelerator = Accelerator()
            policy, loader = accelerator.prepare(torch.nn.Linear(4, 4), DataLoader(sample_set, batch_size=8))
            policy.eval()
            log = defaultdict(float)
            for batch in loader:
                loss = (policy(batch["x"]) - batch["y"]).pow(2).mean()
                mean_loss = accelerator.gather(loss).mean().item()
                log["mse"] += mean_loss
            return log
        """, []),
    # A trainer class is handed the tokenizer the script made with `AutoTokenizer.from_pretrained` and
    # keeps it on `self`; its save method, called on every rank after training, gates the model's
    # save but not the tokenizer's, which takes no `is_main_process`. What made the object is known
    # at the construction, so `self.tokenizer` is that object. A processor handed in from an
    # unknown call stays unknown.
    "a_tokenizer_handed_to_a_trainer_class_saves_on_every_rank": ("""
        from accelerate import Accelerator
        from transformers import AutoModel, AutoTokenizer

        class Trainer:
            def __init__(self, model, tokenizer, processor, accelerator):
                self.model = model
                self.tokenizer = tokenizer
                self.processor = processor
                self.accelerator = accelerator

            def save(self, out):
                bare = self.accelerator.unwrap_model(self.model)
                bare.save_pretrained(out, is_main_process=self.accelerator.is_main_process)
                self.tokenizer.save_pretrained(out)
                self.processor.save_pretrained(out)

            def fit(self, loader):
                for batch in loader:
                    self.accelerator.backward(self.model(**batch).loss)
                self.save("final")

        def main(data):
            accelerator = Accelerator()
            model, loader = accelerator.prepare(AutoModel.from_pretrained("m"), data)
            Trainer(model, AutoTokenizer.from_pretrained("m"), make_processor(), accelerator).fit(loader)
        """, [(14, "AL401")]),
    # A GAN-style trainer keeps its networks, built from classes of an outside package, in an
    # attribute dict and prepares them item by item. Which kind each item is the file does not
    # show; clipping the gradients through one item's `.parameters()` says it is a module, and
    # it went through prepare: AL103. A dict prepared on one path only stays unknown.
    "outside_networks_in_a_dict_prepared_item_by_item_are_clipped_raw": ("""
        import torch
        from accelerate import Accelerator
        from munch import Munch
        from codec.model import Encoder, Discriminator

        def train(loader, resume):
            accelerator = Accelerator()
            nets = Munch(encoder=Encoder(), disc=Discriminator())
            for key in nets:
                nets[key] = accelerator.prepare(nets[key])
            other = Munch(encoder=Encoder())
            if resume:
                for key in other:
                    other[key] = accelerator.prepare(other[key])
            for batch in loader:
                loss = nets.disc(nets.encoder(batch)).mean()
                accelerator.backward(loss)
                torch.nn.utils.clip_grad_norm_(nets.disc.parameters(), 10.0)
                torch.nn.utils.clip_grad_norm_(other.encoder.parameters(), 10.0)
        """, [(18, "AL103")]),
    # A distillation script keeps the loader prepare returns in `_` and iterates its own: each rank
    # walks the whole loader (its sampler has one replica) and keeps its own slice of every batch.
    # The raw loader is what runs, so its length is the right horizon, nothing is sharded twice,
    # and the manual split is the sharding. The prepared model is a DeepSpeed engine whose own
    # save_checkpoint the script calls.
    "a_prepared_loader_thrown_away_and_batches_split_by_hand": ("""
        import torch
        from accelerate import Accelerator
        from torch.utils.data import DataLoader, DistributedSampler
        from transformers import AutoModelForCausalLM

        def train(dataset, split):
            accelerator = Accelerator(gradient_accumulation_steps=2)
            model = AutoModelForCausalLM.from_pretrained("m")
            loader = DataLoader(dataset, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))
            optimizer = torch.optim.AdamW(model.parameters())
            model, optimizer, _ = accelerator.prepare(model, optimizer, loader)
            for epoch in range(3):
                for batch in tqdm(loader, total=len(loader)):
                    batch = {k: split(v, accelerator.process_index, accelerator.num_processes) for k, v in batch.items()}
                    accelerator.backward(model(**batch).loss)
                    optimizer.step()
                accelerator.wait_for_everyone()
                model.save_checkpoint(f"out/{epoch}")
        """, []),
    # A trainer subclass logs a table only where the tracker has a run (the trainer's callback
    # starts it on the main process), and every rank ends its run; a run started on every rank
    # is still one per rank.
    "logging_where_a_tracker_run_exists": ("""
        import wandb
        from accelerate import Accelerator

        def evaluate(table):
            accelerator = Accelerator()
            accelerator.wait_for_everyone()
            if wandb.run is not None:
                wandb.log({"completions": table})
            wandb.finish()
            wandb.init(project="p")
        """, [(10, "AL402")]),
    # A link to the last checkpoint made on every rank: the ranks that lose the race raise
    # FileExistsError.
    "a_symlink_made_on_every_rank": ("""
        import os
        from accelerate import Accelerator

        accelerator = Accelerator()
        model = accelerator.prepare(model)
        os.symlink("checkpoint-100", "latest")
        if accelerator.is_main_process:
            os.symlink("checkpoint-100", "latest-main")
        """, [(6, "AL401")]),
    # A base trainer prepares the loader and the model in its `__init__`; the subclass's epoch
    # method iterates `self.dl` and skips a NaN loss with `continue` before the backward. The
    # attributes come from the base class of this file, so the batch is this rank's and the
    # skip is one rank's.
    "a_base_class_prepares_what_the_subclass_iterates": ("""
        import torch
        from torch.utils.data import DataLoader
        from accelerate import Accelerator

        class BaseTrainer:
            def __init__(self, accelerator: Accelerator, model: torch.nn.Module, dataset):
                self.accelerator = accelerator
                self.dl = DataLoader(dataset, batch_size=8, shuffle=True)
                self.opt = torch.optim.AdamW(model.parameters())
                self.model, self.opt, self.dl = accelerator.prepare(model, self.opt, self.dl)

        class Trainer(BaseTrainer):
            def epoch(self):
                for batch in self.dl:
                    loss = self.model(**batch).loss
                    if torch.isnan(loss):
                        continue
                    self.accelerator.backward(loss)
                    self.opt.step()
        """, [(17, "AL303")]),
}


# the one case besides single_process_branches whose AL403 findings count
AL403_CASE = "a_field_of_an_imported_configuration_is_decided"


@pytest.mark.parametrize("name", sorted(CASES))
def test_ecosystem_pattern(name):
    source, expected = CASES[name]
    result = lint_source(textwrap.dedent(source).lstrip("\n"), f"{name}.py", Config())
    assert sorted((d.line, d.code) for d in result.diagnostics
                  if d.code != "AL403" or name in ("single_process_branches", AL403_CASE)) == expected


def test_a_shell_line_continued_with_backslashes_is_masked_as_one_unit(tmp_path):
    cells = [
        "from accelerate import Accelerator\naccelerator = Accelerator()\n",
        "!python prepare.py --split train \\\n    --out data/ \\\n    --workers 4\nx = 1\n",
    ]
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                           "source": cell.splitlines(keepends=True)} for cell in cells],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path = tmp_path / "prep.ipynb"
    path.write_text(json.dumps(notebook, indent=1))
    code, findings = json_findings("--no-cache", str(path))
    assert (code, findings) == (0, [])


def test_an_accelerator_built_by_a_factory_in_another_module_is_seen(tmp_path):
    import shutil

    from conftest import REPO

    shutil.copytree(REPO / "fixtures" / "project_factory", tmp_path / "project")
    for args in ((), ("--jobs", "1")):
        assert _tree_findings(tmp_path / "project", *args) == [("train.py", 15, "AL302")]
    # the factory stops returning an accelerator: its callers hold an unknown object again
    (tmp_path / "project" / "train_util.py").write_text("def prepare_accelerator(args):\n    return object()\n")
    code, found = json_findings(str(tmp_path / "project"), "--no-cache")
    assert (code, found) == (0, [])


def test_a_rank_predicate_from_another_module_guards_writes(tmp_path):
    """``from mypkg.distributed import is_main_process`` where the package re-exports a function
    of one of its modules that returns ``not dist.is_initialized() or dist.get_rank() == 0``:
    writes under ``if is_main_process():`` run on rank 0 only, an unguarded one on every rank."""
    package = tmp_path / "mypkg" / "distributed"
    package.mkdir(parents=True)
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("from .helpers import is_main_process\n")
    (package / "helpers.py").write_text(
        "import torch.distributed as dist\n\n\n"
        "def is_main_process() -> bool:\n"
        "    return not dist.is_initialized() or dist.get_rank() == 0\n")
    (tmp_path / "train.py").write_text(
        "import torch\n"
        "from accelerate import Accelerator\n"
        "from mypkg.distributed import is_main_process\n"
        "from transformers import AutoTokenizer\n\n"
        "accelerator = Accelerator()\n"
        "model = accelerator.prepare(model)\n"
        "tokenizer = AutoTokenizer.from_pretrained('gpt2')\n"
        "if is_main_process():\n"
        "    torch.save(accelerator.get_state_dict(model), 'ema.pt')\n"
        "    tokenizer.save_pretrained('out')\n"
        "tokenizer.save_pretrained('final')\n")
    for args in ((), ("--jobs", "1")):
        assert _tree_findings(tmp_path, *args) == [
            ("train.py", 10, "AL302"), ("train.py", 12, "AL401")]


def test_a_same_file_rank_predicate_with_an_initialized_check():
    source = textwrap.dedent("""
        import torch
        import torch.distributed as dist
        from accelerate import Accelerator

        def is_main():
            return not dist.is_initialized() or dist.get_rank() == 0

        accelerator = Accelerator()
        if is_main():
            torch.save({}, "stats.pt")
    """).lstrip("\n")
    result = lint_source(source, "train.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == []


def test_a_helper_module_imported_from_its_package_is_followed(tmp_path):
    """``from mypkg.utils import train_utils`` then ``train_utils.save_and_rotate(...)`` under the
    main-process guard: the helper's ``save_state`` is AL302 at the guarded call, and its
    ``rmtree`` is not a write on every rank (every caller guards the helper)."""
    utils = tmp_path / "mypkg" / "utils"
    utils.mkdir(parents=True)
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (utils / "__init__.py").write_text("")
    (utils / "train_utils.py").write_text(
        "import os\nimport shutil\nimport accelerate\n\n\n"
        "def save_and_rotate(args, accelerator: accelerate.Accelerator, step):\n"
        "    accelerator.save_state(os.path.join(args.out, f'step-{step}'))\n"
        "    old = os.path.join(args.out, f'step-{step - args.keep}')\n"
        "    if os.path.exists(old):\n"
        "        shutil.rmtree(old)\n")
    (tmp_path / "train.py").write_text(
        "from accelerate import Accelerator\n"
        "from mypkg.utils import train_utils\n\n"
        "accelerator = Accelerator()\n"
        "model, opt = accelerator.prepare(model, opt)\n"
        "for step in range(10):\n"
        "    if accelerator.is_main_process:\n"
        "        train_utils.save_and_rotate(args, accelerator, step)\n")
    for args in ((), ("--jobs", "1")):
        assert _tree_findings(tmp_path, *args) == [("train.py", 8, "AL302")]


def test_a_module_named_accelerator_in_an_import_path_reads_nothing():
    """``from toolkit.accelerator import get_accelerator``: the module path is no accelerator,
    so a print before anything builds one is not a per-rank print (AL403)."""
    source = textwrap.dedent("""
        import os

        if "SEED" not in os.environ:
            print("no seed given")

        from toolkit.accelerator import get_accelerator
        accelerator = get_accelerator()
    """).lstrip("\n")
    result = lint_source(source, "run.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == []


def test_a_keyword_argument_named_accelerator_reads_nothing():
    """``loader.load(accelerator=stub)`` passes a stub under that keyword: no accelerator is
    read, so the script's prints are not per-rank prints (AL403)."""
    source = textwrap.dedent("""
        from types import SimpleNamespace

        stub = SimpleNamespace(device="cuda")
        model = loader.load(accelerator=stub, path="w.safetensors")
        print("loaded")
    """).lstrip("\n")
    result = lint_source(source, "generate.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == []


def test_a_checkpoint_call_after_an_early_continue_names_the_side_it_runs_on():
    """``if not is_main_process: continue`` with the flag a parameter: the message says the call
    runs on the ranks that pass the early exit, not where the exit's test is true."""
    source = textwrap.dedent("""
        from accelerate import Accelerator

        accelerator = Accelerator()
        model = accelerator.prepare(model)

        def save(models, *, is_main_process):
            for m in models:
                if not is_main_process:
                    continue
                weights = accelerator.get_state_dict(m)

        def hook(models):
            is_main = True
            if accelerator is not None:
                is_main = getattr(accelerator, "is_main_process", True)
            save(models, is_main_process=is_main)

        hook([model])
    """).lstrip("\n")
    result = lint_source(source, "train.py", Config())
    [finding] = result.diagnostics
    assert (finding.line, finding.code) == (10, "AL302")
    assert "pass the early exit on `not is_main_process` (line 8)" in finding.message


def test_callers_passing_different_rank_predicates_leave_the_flag_unknown():
    """A split barrier (``_goes_first(is_main)``) called with the main and the local-main
    predicate: every rank calls the barrier once either way, so nothing is reported."""
    source = textwrap.dedent("""
        from contextlib import contextmanager
        from accelerate import PartialState

        class State(PartialState):
            def _goes_first(self, is_main):
                if not is_main:
                    self.wait_for_everyone()
                yield
                if is_main:
                    self.wait_for_everyone()

            @contextmanager
            def main_first(self):
                yield from self._goes_first(self.is_main_process)

            @contextmanager
            def local_main_first(self):
                yield from self._goes_first(self.is_local_main_process)
    """).lstrip("\n")
    result = lint_source(source, "state.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == []


def test_a_method_testing_self_is_no_passed_flag():
    """``if self:`` inside a method called as ``self.save()``: ``self`` is no parameter a caller
    passes a value for (the flag lookup skipped it and indexed before the arguments: an internal
    error found on transformers' modeling_utils.py)."""
    source = textwrap.dedent("""
        import torch.distributed as dist
        from accelerate import Accelerator

        class Saver:
            def save(self):
                if self:
                    dist.barrier()

            def run(self):
                self.save()

        acc = Accelerator()
    """).lstrip("\n")
    result = lint_source(source, "saver.py", Config())
    assert result.errors == [] and [(d.line, d.code) for d in result.diagnostics] == []


def test_an_item_never_given_to_prepare_is_not_said_to_hold_the_given_loader():
    # both items of the comprehension come from one expression, and only `loaders["train"]` went
    # to `prepare`: the message about `loaders["val"]` must not say it holds the loader given there
    source, _ = CASES["items_of_a_dict_of_loaders_by_comprehension_and_on_self"]
    result = lint_source(textwrap.dedent(source).lstrip("\n"), "items.py", Config())
    message = next(d.message for d in result.diagnostics if d.line == 11)
    assert "never passed to `accelerator.prepare()`" in message


def test_the_raw_clip_message_names_what_it_does_on_tpu():
    """On XLA, `accelerator.clip_grad_norm_` averages the gradients over the cores first; a raw
    torch clip right after the backward clips each core's own gradients (a TPU training script
    of batch 20)."""
    source = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        accelerator = Accelerator()
        model, opt = accelerator.prepare(torch.nn.Linear(2, 2), torch.optim.SGD([torch.zeros(1)], lr=0.1))
        accelerator.backward(model(torch.zeros(2)).sum())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    """)
    [finding] = [d for d in lint_source(source, "tpu_train.py", Config()).diagnostics if d.code == "AL103"]
    assert "each core's gradients before they are averaged on TPU (XLA)" in finding.message


def test_a_print_override_in_another_module_gates_the_prints(tmp_path):
    """torchvision's `setup_for_distributed(is_master)` rebinds `builtins.print` (imported as
    `__builtin__`) in a helper module; a script that calls it has a print that prints on the main
    process only, so its prints are not per-rank. A print in a script that never calls it still
    is, and so is a progress bar (it does not go through `print`)."""
    (tmp_path / "helpers.py").write_text(textwrap.dedent("""\
        def setup_for_distributed(is_master):
            import builtins as __builtin__
            builtin_print = __builtin__.print

            def print(*args, **kwargs):
                if is_master or kwargs.pop("force", False):
                    builtin_print(*args, **kwargs)

            __builtin__.print = print
    """))
    script = textwrap.dedent("""\
        from accelerate import Accelerator
        from tqdm import tqdm
        import helpers

        accelerator = Accelerator()
        accelerator.wait_for_everyone()
        {setup}
        for step in tqdm(range(10)):
            print("step", step)
    """)
    (tmp_path / "gated.py").write_text(script.format(setup="helpers.setup_for_distributed(accelerator.is_main_process)"))
    (tmp_path / "plain.py").write_text(script.format(setup="pass"))
    _, found = json_findings("--no-cache", "--select", "AL403", ".", cwd=tmp_path)
    assert sorted((f["path"], f["line"], f["message"].split("`")[1]) for f in found) == [
        ("gated.py", 8, "tqdm()"), ("plain.py", 8, "tqdm()"), ("plain.py", 9, "print()")]


def test_a_fixed_path_written_by_a_helper_star_imported_through_another_module(tmp_path):
    """The script star-imports a model module, which star-imports a helper module; a helper
    there writes a fixed file name whenever it runs. Called on every rank, every rank truncates
    and writes that one file: AL401 at the call. The same helper under the main-process guard,
    and a helper that only appends, are not reported."""
    (tmp_path / "helpers.py").write_text(
        "import json\n\n\n"
        "def load_items(folder):\n"
        "    items = sorted(folder)\n"
        "    with open('item_list.txt', 'w') as f:\n"
        "        json.dump(items, f)\n"
        "    return items\n\n\n"
        "def note(line):\n"
        "    with open('notes.txt', 'a') as f:\n"
        "        f.write(line)\n")
    (tmp_path / "nets.py").write_text(
        "import torch\nfrom helpers import *\n\n\nclass Net(torch.nn.Module):\n    pass\n")
    (tmp_path / "train.py").write_text(
        "from accelerate import Accelerator\n"
        "from nets import *\n\n"
        "accelerator = Accelerator()\n"
        "model, opt = accelerator.prepare(model, opt)\n"
        "train_items = load_items('data/train')\n"
        "note('started')\n"
        "if accelerator.is_main_process:\n"
        "    load_items('data/val')\n")
    for args in ((), ("--jobs", "1")):
        assert _tree_findings(tmp_path, *args) == [("train.py", 6, "AL401")]


def test_a_count_from_an_all_gather_helper_of_another_module_is_the_same_on_every_rank(tmp_path):
    """A helper of another module all-gathers each rank's rows into a list and returns their
    concatenation: every rank gets the same tensor, so a `continue` on its length is taken by all
    of them or none (no AL303). The same test on the rank's own rows is AL303. Where one process
    runs (`if accelerator.num_processes > 1:` not taken) the rows stay local, and no rank differs."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("from .dist_utils import gather_rows\n")
    (tmp_path / "pkg" / "dist_utils.py").write_text(
        "import torch\nimport torch.distributed as dist\n\n\n"
        "def gather_rows(x, sizes):\n"
        "    parts = [x.new_zeros(n, *x.shape[1:]) for n in sizes]\n"
        "    dist.all_gather(parts, x)\n"
        "    return torch.cat(parts, dim=0)\n")
    body = ("import torch\nfrom torch.utils.data import DataLoader\nfrom accelerate import Accelerator\n"
            "from pkg import gather_rows\n\n"
            "accelerator = Accelerator()\nmodel = torch.nn.Linear(4, 1)\n"
            "optimizer = torch.optim.AdamW(model.parameters())\n"
            "loader = DataLoader(ds, batch_size=8, shuffle=True)\n"
            "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
            "for batch in loader:\n"
            "    rows = batch[batch[:, 0] > 0]\n"
            "    if accelerator.num_processes > 1:\n"
            "        rows = {gathered}\n"
            "    if rows.shape[0] < accelerator.num_processes:\n"
            "        continue\n"
            "    accelerator.backward(model(rows).sum())\n"
            "    optimizer.step()\n")
    (tmp_path / "train.py").write_text(body.format(gathered="gather_rows(rows, sizes)"))
    (tmp_path / "local.py").write_text(body.format(gathered="rows * 2"))
    for args in ((), ("--jobs", "1")):
        assert _tree_findings(tmp_path, *args) == [("local.py", 16, "AL303")]


def _tree_findings(tmp_path, *args) -> list[tuple[str, int, str]]:
    """(file name, line, code) of what the CLI finds in the tree (no cache)."""
    _code, found = json_findings(str(tmp_path), "--no-cache", *args)
    return [(f["path"].rsplit("/", 1)[-1], f["line"], f["code"]) for f in found]


def test_a_flag_a_trainer_of_another_module_sets_on_the_main_process_only_is_rank_local(tmp_path):
    """The loop leaves on ``trainer.stop``, which the trainer class of another module sets
    under ``if self.accelerator.is_main_process:``: the main process leaves, the others wait in
    the barrier. A flag the class binds from ``check_trigger()`` on every rank is agreed."""
    (tmp_path / "trainer.py").write_text(
        "class Trainer:\n"
        "    def __init__(self, accelerator, model, optimizer):\n"
        "        self.accelerator = accelerator\n"
        "        self.model, self.optimizer = accelerator.prepare(model, optimizer)\n"
        "        self.stop = False\n"
        "        self.agreed = False\n"
        "        self.high = 0\n\n"
        "    def step(self, batch):\n"
        "        loss = self.model(batch).mean()\n"
        "        self.accelerator.backward(loss)\n"
        "        self.optimizer.step()\n"
        "        if self.accelerator.is_main_process and loss.item() > 10:\n"
        "            self.high += 1\n"
        "            if self.high > 3:\n"
        "                self.stop = True\n"
        "                self.accelerator.set_trigger()\n"
        "        self.agreed = self.accelerator.check_trigger()\n")
    (tmp_path / "train.py").write_text(
        "from accelerate import Accelerator\n"
        "from trainer import Trainer\n\n"
        "accelerator = Accelerator()\n"
        "trainer = Trainer(accelerator, build_model(), build_optimizer())\n"
        "for batch in batches():\n"
        "    trainer.step(batch)\n"
        "    accelerator.wait_for_everyone()\n"
        "    if trainer.agreed:\n"
        "        break\n"
        "    if trainer.stop:\n"
        "        break\n")
    for args in ((), ("--jobs", "1")):
        assert _tree_findings(tmp_path, *args) == [("train.py", 12, "AL303")]


@pytest.mark.parametrize("script,expected", [
    ("loader_on_main.py", [("loader_on_main.py", 10, "AL301")]),
    ("ddp_nan_skips_backward.py", [("ddp_nan_skips_backward.py", 12, "AL303")]),
])
def test_the_static_linter_names_the_line_the_runtime_guard_catches(script, expected):
    """The runtime fixtures whose divergence the runtime tests confirm on 2 gloo ranks: the
    linter reports the same line before any launch."""
    from conftest import REPO

    _code, found = json_findings("--no-cache", str(REPO / "fixtures" / "runtime" / script))
    assert [(f["path"].rsplit("/", 1)[-1], f["line"], f["code"]) for f in found] == expected
