"""runtime_checks and the collectives FSDP (1 and 2) and DeepSpeed make on the user's behalf.

FSDP runs on 2 real gloo ranks (``fully_shard`` and ``FullyShardedDataParallel`` on CPU; Accelerate's
FSDP plugin needs GPUs). DeepSpeed does not run on CPU: its hooks are checked against a stand-in
package with the API surface of deepspeed 0.19.8 that they read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO

pytest.importorskip("torch")
pytest.importorskip("accelerate")

RUNTIME = REPO / "fixtures" / "runtime"


def site(row):
    return (os.path.basename(row["site"]["file"]), row["site"]["line"]) if row["site"] else None


@pytest.mark.parametrize("script,ranks", [
    ("fsdp2_extra_forward.py", {0: ("fsdp.forward.all_gather", 15), 1: ("accelerator.wait_for_everyone", 16)}),
    ("fsdp2_backward_one_rank.py", {0: ("fsdp.backward.reduce_scatter", 12), 1: ("accelerator.wait_for_everyone", 13)}),
    ("fsdp1_extra_forward.py", {0: ("fsdp.forward.all_gather", 14), 1: ("accelerator.wait_for_everyone", 15)}),
    ("fsdp1_no_shard_backward_one_rank.py",
     {0: ("fsdp.backward.all_reduce", 13), 1: ("accelerator.wait_for_everyone", 14)}),
])
def test_an_implicit_fsdp_collective_against_an_explicit_one_is_a_divergence(distributed_run, script, ranks):
    result = distributed_run(RUNTIME / script, timeout=20)
    assert (result.exit_code, result.kind) == (10, "divergence"), result.stderr
    for rank, (op, line) in ranks.items():
        assert (result.row(rank)["op"], site(result.row(rank))) == (op, (script, line))
    assert result.finding["detected_after"] <= 2.0
    assert result.leftover_pids == []


# Two FSDP units (the Linear layers; the root holds no parameter of its own), 3 steps of 2
# micro-batches, the first of each without gradient sync, then one evaluation forward:
# every forward all-gathers each unit: (6 + 1) x 2; every backward all-gathers it again (both
# reshard after forward): 6 x 2; only the 3 synchronized backwards reduce-scatter: 3 x 2.
# FSDP2's fixture adds a model that keeps its parameters unsharded: its first forward
# all-gathers, rank 0's second one does not.
@pytest.mark.parametrize("script,expected", [
    ("fsdp2_train_ok.py", {"fsdp.forward.all_gather": 14 + 1, "fsdp.backward.all_gather": 12,
                           "fsdp.backward.reduce_scatter": 6, "accelerator.wait_for_everyone": 1}),
    ("fsdp1_train_ok.py", {"fsdp.forward.all_gather": 14, "fsdp.backward.all_gather": 12,
                           "fsdp.backward.reduce_scatter": 6, "accelerator.wait_for_everyone": 1}),
])
def test_fsdp_collectives_are_recorded_only_where_they_communicate(tmp_path, script, expected):
    trace = tmp_path / "trace.json"
    proc = subprocess.run([sys.executable, "-m", "runtime_checks", "--nproc", "2", "--timeout", "20",
                           "--trace", str(trace), str(RUNTIME / script)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr
    slices = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    per_rank = {rank: [(e["name"], e["args"]["site"]) for e in sorted(slices, key=lambda e: e["args"]["seq"])
                       if e["tid"] == rank] for rank in (0, 1)}
    assert per_rank[0] == per_rank[1]
    assert Counter(op for op, _ in per_rank[0]) == expected
    assert all(where.startswith(str(RUNTIME / script)) for _, where in per_rank[0])


FAKE_ENGINE = '''
import torch


class DeepSpeedEngine(torch.nn.Module):
    """What runtime_checks reads of deepspeed 0.19.8's engine; ZeRO-3 fetches in a pre-forward hook."""

    def __init__(self, module, stage, accumulation=1):
        super().__init__()
        self.module, self.stage, self.accumulation, self.micro_steps = module, stage, accumulation, 0
        self.enable_backward_allreduce, self.inside_no_sync_ctxt = True, False
        if stage == 3:
            from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator

            coordinator = PartitionedParameterCoordinator()
            module.register_forward_pre_hook(lambda m, args: coordinator.reset_step())
            module.register_forward_pre_hook(lambda m, args: coordinator.fetch_sub_module(m, True))

    def zero_optimization(self):
        return self.stage > 0

    def zero_optimization_partition_gradients(self):
        return self.stage >= 2

    def zero_optimization_partition_weights(self):
        return self.stage == 3

    def managed_gradient_accumulation(self):
        return True

    def is_gradient_accumulation_boundary(self):
        return (self.micro_steps + 1) % self.accumulation == 0

    def forward(self, x):
        return self.module(x)

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.micro_steps += 1
'''

FAKE_COORDINATOR = '''
import enum


class ZeroParamStatus(enum.Enum):
    AVAILABLE = 1
    NOT_AVAILABLE = 2


class PartitionedParameterCoordinator:
    resets = 0

    def is_complete_trace(self):
        return self.resets >= 2  # the module order was recorded, then checked against rank 0's

    def reset_step(self):
        self.resets += 1

    def fetch_sub_module(self, module, forward):
        self.__all_gather_params_(set(module.parameters()), forward)

    def __all_gather_params_(self, params, forward, quantize=False):
        for param in params:
            param.ds_status = ZeroParamStatus.AVAILABLE
'''

SCRIPT = '''
import json, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
from runtime_checks.guard import Guard

guard = Guard(store=None, rank=0, world_size=1)
guard.install()
lazy = [name for name in ("deepspeed", "torch.distributed.fsdp") if name in sys.modules]
from deepspeed.runtime.engine import DeepSpeedEngine
from deepspeed.runtime.zero.partitioned_param_coordinator import ZeroParamStatus

x = torch.randn(2, 2)
zero3 = DeepSpeedEngine(torch.nn.Linear(2, 2), stage=3)
for param in zero3.parameters():
    param.ds_status = ZeroParamStatus.NOT_AVAILABLE
loss = zero3(x).sum()  # [fetch] the partitioned parameters
zero3.backward(loss)  # [zero3 backward]
zero3.step()  # [zero3 step]
loss = zero3(x).sum()  # [trace complete] after this check; the parameters are available: no fetch
loss.backward()  # [raw backward] runs the engine's gradient reduction too
with torch.no_grad():
    zero3(x)  # the trace is complete: no check
zero1 = DeepSpeedEngine(torch.nn.Linear(2, 2), stage=1, accumulation=2)
zero1.backward(zero1(x).sum())  # not a boundary: gradients stay local
zero1.step()  # not a boundary
zero1.backward(zero1(x).sum())  # [boundary backward]
zero1.step()  # [boundary step]
ops = [(e["op"], e["site"]["line"]) for e in guard._buffer if e["kind"] == "enter"]
print(json.dumps({"lazy": lazy, "ops": ops}))
'''


def test_deepspeed_engine_and_zero3_fetch_are_recorded_where_they_communicate(tmp_path):
    """Also: installing the guard imports neither DeepSpeed nor FSDP (they are patched when the
    script imports them)."""
    package = tmp_path / "deepspeed"
    for folder in (package, package / "runtime", package / "runtime" / "zero"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").write_text("")
    (package / "runtime" / "engine.py").write_text(textwrap.dedent(FAKE_ENGINE))
    (package / "runtime" / "zero" / "partitioned_param_coordinator.py").write_text(textwrap.dedent(FAKE_COORDINATOR))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.lstrip("\n"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    env.pop("RUNTIME_CHECKS_STORE", None)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["lazy"] == []
    line = {marker: number for number, text in enumerate(script.read_text().splitlines(), 1)
            for marker in [text.partition("# [")[2].partition("]")[0]] if marker}
    assert [tuple(op) for op in out["ops"]] == [
        ("deepspeed.forward.trace_check", line["fetch"]),
        ("deepspeed.forward.all_gather", line["fetch"]),
        ("deepspeed.backward.reduce_gradients", line["zero3 backward"]),
        ("deepspeed.step", line["zero3 step"]),
        ("deepspeed.forward.trace_check", line["trace complete"]),
        ("deepspeed.backward.reduce_gradients", line["raw backward"]),
        ("deepspeed.backward.reduce_gradients", line["boundary backward"]),
        ("deepspeed.step", line["boundary step"]),
    ]

