"""Which checkpoint calls the guard records as collectives, per backend (bench/backend_matrix.py
measured each on 2 GPUs: docs/backends.md, rows al302_*)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from runtime_checks.guard import _checkpoint_is_collective


def _accelerator(distributed_type: str, zero_stage: int | None = None):
    plugin = SimpleNamespace(zero_stage=zero_stage) if zero_stage is not None else None
    return SimpleNamespace(state=SimpleNamespace(distributed_type=f"DistributedType.{distributed_type}",
                                                 deepspeed_plugin=plugin))


@pytest.mark.parametrize("op", ["accelerator.save_state", "accelerator.load_state", "accelerator.save_model",
                                "accelerator.get_state_dict"])
def test_every_checkpoint_call_is_a_collective_under_fsdp_and_zero3(op):
    assert _checkpoint_is_collective(_accelerator("FSDP"), op)
    assert _checkpoint_is_collective(_accelerator("DEEPSPEED", 3), op)


@pytest.mark.parametrize("op,collective", [("accelerator.save_state", True), ("accelerator.load_state", False),
                                           ("accelerator.save_model", False), ("accelerator.get_state_dict", False)])
def test_under_zero2_only_save_state_is_a_collective(op, collective):
    # a main-only save_model / get_state_dict completed on 2 GPUs, a main-only load_state left the
    # replicas different (no hang); a main-only save_state hung
    assert _checkpoint_is_collective(_accelerator("DEEPSPEED", 2), op) is collective


def test_no_checkpoint_call_is_a_collective_under_ddp():
    assert not _checkpoint_is_collective(_accelerator("MULTI_GPU"), "accelerator.save_state")


def test_save_state_with_automatic_checkpoint_naming_falls_out_of_step_on_every_backend():
    """Accelerate's `save_state` calls `wait_for_everyone()` when the project configuration names
    checkpoints itself, so a main-only call breaks plain DDP too (on 2 gloo ranks the other rank's
    next barrier pairs with it and rank 0 then crashes); the message and evidence say so."""
    import textwrap

    from accel_lint.config import Config
    from accel_lint.engine import lint_source

    source = textwrap.dedent("""\
        import torch
        from accelerate import Accelerator
        from accelerate.utils import ProjectConfiguration
        config = ProjectConfiguration(project_dir="runs", automatic_checkpoint_naming=True)
        accelerator = Accelerator(project_config=config)
        model = accelerator.prepare(torch.nn.Linear(2, 2))
        if accelerator.is_main_process:
            accelerator.save_state()
    """)
    found = [d for d in lint_source(source.encode(), "x.py", Config()).diagnostics if d.code == "AL302"]
    assert len(found) == 1 and "on every backend calls `wait_for_everyone()`" in found[0].message
    assert (4, "`automatic_checkpoint_naming=True` makes `save_state` wait for every rank") in found[0].evidence
    plain = source.replace(", automatic_checkpoint_naming=True", "")
    found = [d for d in lint_source(plain.encode(), "x.py", Config()).diagnostics if d.code == "AL302"]
    assert len(found) == 1 and "deadlocks under FSDP and DeepSpeed" in found[0].message


def test_a_checkpoint_after_end_training_names_the_backends_where_it_communicates(tmp_path):
    """`save_state()` after `end_training()` needs the process group only under FSDP and DeepSpeed
    (or with automatic checkpoint naming); a barrier there raises on every backend."""
    from conftest import json_findings

    (tmp_path / "train.py").write_text(
        "from accelerate import Accelerator\n"
        "accelerator = Accelerator()\n"
        "model = accelerator.prepare(model)\n"
        "accelerator.end_training()\n"
        "accelerator.save_state('final')\n"
        "accelerator.wait_for_everyone()\n")
    _, found = json_findings("--no-cache", "--select", "AL306", ".", cwd=tmp_path)
    messages = {f["line"]: f["message"] for f in found}
    assert "under FSDP and DeepSpeed" in messages[5] and "it raises" not in messages[5], messages
    assert ": it raises" in messages[6], messages
