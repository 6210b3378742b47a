"""Run many fix fixtures one after another in the same two ranks (tests/test_fix_fixtures.py).

``python -m torch.distributed.run --standalone --nproc-per-node 2 fix_batch_runner.py JOBS.json``

Starting a rank and importing torch and accelerate costs ~20 s on 2 cores; a fixture's own run
takes ~1 s. So one launch runs every job of ``JOBS.json`` (a list of ``{"dir", "script",
"out", "record"}``) in turn, each the way ``fixtures/fix/_run.py`` runs one fixture in a fresh
process: in its own folder (cwd, first on ``sys.path``, ``PYTHONPATH``), with ``sys.argv =
[script, out]``, the launch's environment, torch's default seed and dtype, and fresh
Accelerate singletons and modules of the fixture's folder (``_toy``, the stand-in ``wandb``).
The fixture's stdout and stderr (file descriptors 1 and 2, so native output too) go to
``RECORD-rank<R>.stdout``/``.stderr``; its exit status (0, its ``sys.exit`` code, or 1 after
an uncaught exception, as in ``_run.py``) and seconds go to ``RECORD-rank<R>.json``, written
after the job, so a job without a record never finished. A failed job does not stop the next.

Each job's process groups are created on a fresh prefix of the launcher's store (``init_process_group``
wrapped: a second group on the keys of a destroyed one would read its stale addresses) with a
timeout of ``JOB_TIMEOUT`` seconds (a rank left waiting in a collective by a failed peer fails
instead of hanging), and a group a job leaves behind is destroyed after it. The ranks meet at a
store barrier before every job. Like ``_run.py`` the process leaves with ``os._exit`` (status 0;
the statuses are in the records), skipping the teardown that DDP's gloo group aborts in. Every
job's globals and default process group stay referenced until then: a gloo group freed while the
process runs on (a fixture's ``main()`` returning drops its DDP model, the last owner of the group
after ``end_training``) joins its worker threads holding the GIL while one of them needs the GIL
to free a finished work, and the rank hangs (seen on the 5th job of a batch).
"""

from __future__ import annotations

import json
import os
import random
import runpy
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
from accelerate.state import AcceleratorState, GradientState

JOB_TIMEOUT = 120.0  # seconds a collective or a barrier waits; a job's own run takes ~1 s

RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
STORE = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), WORLD, is_master=False,
                      timeout=timedelta(seconds=3 * JOB_TIMEOUT))
_real_init = dist.init_process_group
_job, _inits = -1, 0


def _init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1, store=None, **kwargs):
    global _inits
    if store is None and init_method is None:
        _inits += 1
        store = dist.PrefixStore(f"fix-batch/job-{_job}/group-{_inits}", STORE)
        world_size = WORLD if world_size == -1 else world_size
        rank = RANK if rank == -1 else rank
    _real_init(backend=backend, init_method=init_method, world_size=world_size, rank=rank, store=store,
               timeout=timeout or timedelta(seconds=JOB_TIMEOUT), **kwargs)
    _kept.append(dist.distributed_c10d._get_default_group())


def barrier(name: str) -> bool:
    """Every rank reached ``name`` (False after 3 JOB_TIMEOUTs: a rank is stuck; carry on anyway).
    A rank whose peer failed alone arrives up to a JOB_TIMEOUT late, after its collective timed out."""
    STORE.add(f"fix-batch/{name}", 1)
    deadline = time.monotonic() + 3 * JOB_TIMEOUT
    while STORE.add(f"fix-batch/{name}", 0) < WORLD:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def run_job(job: dict) -> dict:
    """Run one fixture as ``_run.py`` would in a fresh process; returns its record."""
    folder, script = job["dir"], job["script"]
    env, cwd, argv, path = dict(os.environ), os.getcwd(), sys.argv, list(sys.path)
    modules = set(sys.modules)
    dtype = torch.get_default_dtype()
    sys.stdout.flush()
    sys.stderr.flush()
    saved_fds = os.dup(1), os.dup(2)
    out_file = os.open(f"{job['record']}-rank{RANK}.stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err_file = os.open(f"{job['record']}-rank{RANK}.stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(out_file, 1)
    os.dup2(err_file, 2)
    status, started = 0, time.monotonic()
    try:
        os.chdir(folder)
        os.environ["PYTHONPATH"] = folder
        sys.path.insert(0, folder)
        sys.argv = [script, job["out"]]
        torch.manual_seed(67280421310721)  # torch's seed in a fresh process
        random.seed()
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        _kept.append(runpy.run_path(script, run_name="__main__"))
    except SystemExit as exc:
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 - reported like the interpreter would, then the status says it
        traceback.print_exc()
        _kept.append(exc)
        status = 1
    finally:
        try:
            if dist.is_initialized():  # the fixture did not end its training
                dist.destroy_process_group()
        except BaseException:  # noqa: BLE001 - the record says so; the next job gets a fresh group anyway
            traceback.print_exc()
            status = status or 1
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        torch.set_default_dtype(dtype)
        for name in set(sys.modules) - modules:
            file = getattr(sys.modules[name], "__file__", None) or ""
            if file.startswith(folder + os.sep):
                del sys.modules[name]
        os.environ.clear()
        os.environ.update(env)
        os.chdir(cwd)
        sys.argv, sys.path[:] = argv, path
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_fds[0], 1)
        os.dup2(saved_fds[1], 2)
        for fd in (*saved_fds, out_file, err_file):
            os.close(fd)
    return {"status": status, "seconds": round(time.monotonic() - started, 2)}


_kept: list = []  # the jobs' globals: DDP models are not torn down before os._exit

if __name__ == "__main__":
    dist.init_process_group = _init_process_group
    with open(sys.argv[1]) as f:
        jobs = json.load(f)
    for _job, job in enumerate(jobs):
        _inits = 0
        met = barrier(f"job-{_job}")
        record = run_job(job)
        record["barrier"] = met
        with open(f"{job['record']}-rank{RANK}.json", "w") as f:
            json.dump(record, f)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
