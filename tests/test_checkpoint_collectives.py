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
