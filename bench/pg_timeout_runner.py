"""Run a fixture script with a shorter default process-group timeout (no guard): the baseline
that bench/nccl_time_to_diagnosis.py compares the guard with.

    torchrun --standalone --nproc-per-node 2 bench/pg_timeout_runner.py SECONDS script.py

Accelerate passes no timeout unless the script gives InitProcessGroupKwargs, so torch's default
applies (600 s for NCCL); this sets that default before the script initializes the group.
"""
import runpy
import sys
from datetime import timedelta

import torch.distributed.distributed_c10d as c10d

seconds = float(sys.argv[1])
c10d.default_pg_timeout = timedelta(seconds=seconds)
if hasattr(c10d, "default_pg_nccl_timeout"):
    c10d.default_pg_nccl_timeout = timedelta(seconds=seconds)
script = sys.argv[2]
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
