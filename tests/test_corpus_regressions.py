"""False positives found on the wheel corpus (transformers, accelerate), each reduced to the
pattern that caused it. Every snippet must stay clean."""

from __future__ import annotations

import textwrap

import pytest

from accel_lint.config import Config
from accel_lint.engine import lint_source

CASES = {
    # trl sft_trainer.py: a wrapper of main_process_first() guards the map
    "map_under_a_main_first_wrapper": """
        from accelerate import PartialState
        class Trainer:
            def __init__(self, accelerator, train_dataset):
                self.accelerator = accelerator
                self.train_dataset = self._prepare_dataset(train_dataset)
            def _prepare_dataset(self, dataset):
                with global_then_local_main_first():
                    dataset = dataset.map(tokenize, batched=True)
                return dataset
    """,
    # trl grpo_trainer.py: each reward model prepared once, in a loop over them
    "prepare_each_item_of_a_loop": """
        class Trainer:
            def __init__(self, accelerator, reward_funcs):
                self.accelerator = accelerator
                self.reward_funcs = reward_funcs
                for i, reward_func in enumerate(self.reward_funcs):
                    self.reward_funcs[i] = self.accelerator.prepare_model(reward_func, evaluation_mode=True)
    """,
    # trl a2po_trainer.py: a new loader per dataset, prepared in the loop
    "prepare_a_new_loader_per_pass": """
        from torch.utils.data import DataLoader
        class Trainer:
            def estimate(self, accelerator, datasets):
                for dataset in datasets:
                    dataloader = accelerator.prepare(DataLoader(dataset, batch_size=8))
    """,
    # accelerate/commands/env.py, diffusers/commands/env.py: `accelerator` holds a device name
    "accelerator_named_string": """
        def env_command(args):
            accelerator = "N/A"
            if cuda:
                accelerator = "CUDA"
            info = {"Accelerator": accelerator}
            print("\\n".join(f"- {k}: {v}" for k, v in info.items()))
    """,
    # accelerate/utils/megatron_lm.py: a rank test the model cannot evaluate still guards a print
    "print_under_args_rank_test": """
        from accelerate import Accelerator
        accelerator = Accelerator()
        def initialize(args):
            if args.rank == 0:
                print("WARNING: overriding default arguments", flush=True)
    """,
    # accelerate/test_utils/scripts/test_script.py: printing the state is per-rank on purpose
    "print_of_the_state_object": """
        from accelerate.state import AcceleratorState
        def init_state_check():
            state = AcceleratorState()
            print(state)
    """,
    # transformers Trainer: TrainingArguments.should_save is the main-process predicate
    "should_save_guard": """
        import shutil, torch
        class Trainer:
            def __init__(self, accelerator):
                self.accelerator = accelerator
            def _save_optimizer(self, output_dir):
                if self.args.should_save:
                    torch.save(self.optimizer.state_dict(), output_dir + "/optimizer.pt")
            def _rotate(self, checkpoints):
                if self.args.should_save and self.state.best_model_checkpoint is not None:
                    for checkpoint in checkpoints:
                        shutil.rmtree(checkpoint)
            def _reset(self):
                self.state.best_model_checkpoint = None
    """,
    # transformers layoutlmv2: `get_rank() > -1` holds on every rank
    "rank_compared_with_negative_literal": """
        import torch
        def synchronize_batch_norm(self):
            if not (torch.distributed.is_initialized() and torch.distributed.get_rank() > -1):
                raise RuntimeError("Make sure torch.distributed is set up properly.")
            groups = [torch.distributed.new_group(ranks=r) for r in self.ranks]
    """,
    # a write only one process can reach
    "single_process_branch": """
        import torch
        def save_rng(accelerator, args, states, output_dir):
            if args.world_size <= 1:
                torch.save(states, output_dir + "/rng_state.pth")
            else:
                torch.save(states, f"{output_dir}/rng_state_{accelerator.process_index}.pth")
    """,
    # accelerate fsdp_utils: the rank reaches the path through two assignments
    "rank_in_path_through_assignments": """
        import os, torch
        def save_local(accelerator, state_dict, output_dir, model_index):
            weights_name = f"model_rank{accelerator.process_index}.bin" if model_index == 0 else (
                f"model_{model_index}_rank{accelerator.process_index}.bin")
            output_model_file = os.path.join(output_dir, weights_name)
            torch.save(state_dict, output_model_file)
    """,
    # transformers optuna search: main runs the collective inside a callback handed to optuna
    "collective_in_callback": """
        import torch
        def run_hp_search(trainer, n_trials):
            if trainer.args.process_index == 0:
                def _objective(trial):
                    torch.distributed.broadcast_object_list([trial], src=0)
                    return trainer.train(trial=trial)
                study.optimize(_objective, n_trials=n_trials)
            else:
                for i in range(n_trials):
                    holder = [None]
                    torch.distributed.broadcast_object_list(holder, src=0)
                    trainer.train(trial=holder[0])
            trainer.accelerator.clear()
    """,
    # transformers Trainer: save_model <-> push_to_hub recursion must not make classes disagree
    "recursion_through_methods": """
        class Trainer:
            def __init__(self, accelerator):
                self.accelerator = accelerator
            def save_model(self, output_dir=None, _internal_call=False):
                state_dict = self.accelerator.get_state_dict(self.model)
                self._save(output_dir, state_dict=state_dict)
                if self.args.push_to_hub and not _internal_call:
                    self.push_to_hub()
            def push_to_hub(self):
                if self.args.should_save:
                    name = self.args.hub_model_id
                self.save_model(_internal_call=True)
                if not self.is_world_process_zero():
                    return
                self.upload()
    """,
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_corpus_pattern_stays_clean(name):
    result = lint_source(textwrap.dedent(CASES[name]), f"{name}.py", Config())
    assert result.errors == []
    assert [(d.line, d.code, d.message) for d in result.diagnostics] == []


def test_torch_distributed_through_plain_import_torch_is_checked():
    source = "import torch\nif torch.distributed.get_rank() == 0:\n    torch.distributed.barrier()\n"
    assert [(d.line, d.code) for d in lint_source(source, "t.py", Config()).diagnostics] == [(3, "AL301")]


def test_the_guards_above_still_catch_the_unguarded_forms():
    bad = textwrap.dedent("""
        import torch
        class Trainer:
            def __init__(self, accelerator):
                self.accelerator = accelerator
            def save(self, output_dir):
                torch.save(self.optimizer.state_dict(), output_dir + "/optimizer.pt")
                if self.args.should_save:
                    self.accelerator.wait_for_everyone()
    """)
    result = lint_source(bad, "bad.py", Config())
    assert [(d.line, d.code) for d in result.diagnostics] == [(7, "AL401"), (9, "AL301")]
