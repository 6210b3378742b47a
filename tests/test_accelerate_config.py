"""--accelerate-config: severities follow the backend of the Accelerate config YAML."""

from __future__ import annotations

import json

from accel_lint.accelerate_config import parse_simple_yaml
from conftest import run_cli

SCRIPT = """\
import torch
from accelerate import Accelerator
accelerator = Accelerator(gradient_accumulation_steps=4)
model, optimizer, dl = accelerator.prepare(model, optimizer, dl)
for batch in dl:
    with accelerator.accumulate(model):
        loss = model(**batch).loss / 4
        accelerator.backward(loss)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
if accelerator.is_main_process:
    accelerator.save_state("ckpt")
    state = accelerator.get_state_dict(model)
"""
FSDP = """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
mixed_precision: bf16
num_machines: 1
num_processes: 8
"""
DDP_FP16 = "distributed_type: MULTI_GPU\nmixed_precision: fp16\nnum_processes: 2\nuse_cpu: false\n"
LOCAL = "distributed_type: 'NO'\nnum_processes: 1\nmixed_precision: 'no'\n"


def severities(tmp_path, *configs):
    (tmp_path / "train.py").write_text(SCRIPT)
    args = []
    for i, text in enumerate(configs):
        (tmp_path / f"c{i}.yaml").write_text(text)
        args += ["--accelerate-config", f"c{i}.yaml"]
    proc = run_cli("train.py", "--no-cache", "--output-format", "json", *args, cwd=tmp_path)
    return proc.returncode, {(f["code"], f["line"]): f["severity"] for f in json.loads(proc.stdout)}


def test_without_a_config_the_defaults_assume_the_worst(tmp_path):
    code, found = severities(tmp_path)
    assert found[("AL302", 12)] == "error" and found[("AL302", 13)] == "error"
    assert found[("AL103", 9)] == "warning" and found[("AL102", 7)] == "warning"


def test_fsdp_keeps_checkpoints_errors_and_raises_clipping(tmp_path):
    code, found = severities(tmp_path, FSDP)
    assert found[("AL302", 12)] == "error" and found[("AL302", 13)] == "error"
    assert found[("AL103", 9)] == "error"


def test_ddp_lowers_checkpoints_and_fp16_raises_clipping(tmp_path):
    code, found = severities(tmp_path, DDP_FP16)
    assert found[("AL302", 12)] == "warning"  # save_state under DDP: only rank 0's RNG state
    assert found[("AL302", 13)] == "info"  # get_state_dict is local under DDP
    assert found[("AL103", 9)] == "error"  # fp16: the norm of scaled gradients


def test_a_local_config_makes_rank_rules_info_and_several_configs_take_the_highest(tmp_path):
    code, found = severities(tmp_path, LOCAL)
    assert found[("AL302", 12)] == "info" and found[("AL302", 13)] == "info"
    code, found = severities(tmp_path, LOCAL, FSDP)
    assert found[("AL302", 12)] == "error"


def test_pyproject_key_and_bad_files(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "ddp.yaml").write_text(DDP_FP16)
    (tmp_path / "pyproject.toml").write_text('[tool.accel-lint]\naccelerate-config = "configs/ddp.yaml"\n')
    (tmp_path / "train.py").write_text(SCRIPT)
    proc = run_cli("train.py", "--no-cache", "--output-format", "json", cwd=tmp_path)
    assert {(f["code"], f["line"]): f["severity"] for f in json.loads(proc.stdout)}[("AL302", 13)] == "info"
    (tmp_path / "bad.yaml").write_text("compute_environment: LOCAL_MACHINE\n")
    proc = run_cli("train.py", "--accelerate-config", "bad.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "bad.yaml: not an Accelerate config (no distributed_type)" in proc.stderr
    proc = run_cli("train.py", "--accelerate-config", "missing.yaml", cwd=tmp_path)
    assert proc.returncode == 2 and "missing.yaml: cannot read" in proc.stderr


def test_the_yaml_reader_that_needs_no_pyyaml():
    data = parse_simple_yaml(FSDP + "deepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: none\n"
                             "downcast_bf16: 'no'\nuse_cpu: false  # comment\n")
    assert data["distributed_type"] == "FSDP" and data["num_processes"] == 8
    assert data["fsdp_config"] == {"fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP"}
    assert data["deepspeed_config"]["zero_stage"] == 3 and data["downcast_bf16"] == "no" and data["use_cpu"] is False
