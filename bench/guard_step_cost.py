"""Benchmark: the guard's CPU cost per step and per recorded collective, in one process.

    python bench/guard_step_cost.py [--steps 3000] [--runs 3] [--profile]

The step of bench/runtime_scale_loop.py (forward through DDP, ``accelerator.backward``,
``optimizer.step``, ``accelerator.gather`` of the loss) in a gloo process group of world size 1,
plain and with the guard installed (a real TCPStore, the rank's ring in /dev/shm and its watchdog
thread flushing every 50 ms, as ``runtime_checks.rank`` sets them up; no watcher pops the queue).
Each arm runs in its own subprocess, alternating (plain, guarded, guarded, plain, ...). Measured
with CPU clocks, not wall time, so a busy shared machine moves the figures little:

* ``main_us``: the training thread's CPU time per step (``time.thread_time``);
* ``process_us``: the whole process's CPU time per step (``time.process_time``): the watchdog
  thread's flushes and the store's server thread too;
* ``cost_us_per_collective``: (guarded - plain) main-thread CPU per step / collectives recorded
  per step (2: the backward and the gather).

With one rank, DDP still all-reduces (a world of one) and Accelerate's gather returns the
tensor, so the plain step is cheaper than at scale; the guard's own work is the same as in
every rank of a larger world. ``--profile`` prints cProfile's top entries of one guarded run.
Writes bench/results/guard_step_cost.json (``--label``: guard_step_cost_<label>.json). Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def child(guarded: bool, steps: int, warmup: int, profile: bool) -> dict:
    import socket
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.distributed import TCPStore

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                      LOCAL_WORLD_SIZE="1", ACCELERATE_USE_CPU="1", ACCELERATE_DEBUG_MODE="0")
    guard = None
    if guarded:
        import threading

        from runtime_checks import protocol as P
        from runtime_checks.guard import Guard, Watchdog, connect

        server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
        os.environ[P.ENV_STORE] = f"127.0.0.1:{server.port}"
        store = connect(os.environ[P.ENV_STORE])
        guard = Guard(store, 0, 1)
        guard.install()
        Watchdog(store.clone(), 0, threading.get_ident(), os.getppid(), guard).start()
        guard.push(P.START, pid=os.getpid(), host="bench", world_size=1, local_rank=0, target=__file__)
    from accelerate import Accelerator

    dist.init_process_group("gloo", rank=0, world_size=1)
    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    xs = torch.randn(64, 8, 64)
    ys = torch.randint(0, 4, (64, 8))
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))
    model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)

    def step(i: int) -> None:
        loss = torch.nn.functional.cross_entropy(model(xs[i % 64]), ys[i % 64])
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        accelerator.gather(loss.detach().reshape(1))

    for i in range(warmup):
        step(i)
    seq0 = guard.seq if guard else 0
    profiler = None
    if profile:
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    t0, p0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
    for i in range(steps):
        step(i)
    t1, p1, w1 = time.thread_time(), time.process_time(), time.perf_counter()
    if profiler is not None:
        import io
        import pstats

        profiler.disable()
        if os.environ.get("GUARD_PROFILE_OUT"):
            profiler.dump_stats(os.environ["GUARD_PROFILE_OUT"])
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(30)
        print(out.getvalue(), file=sys.stderr)
    result = {"guarded": guarded, "steps": steps, "main_us": (t1 - t0) / steps * 1e6,
              "process_us": (p1 - p0) / steps * 1e6, "wall_us": (w1 - w0) / steps * 1e6,
              "collectives_per_step": ((guard.seq - seq0) / steps) if guard else None,
              "sent": dict(guard.sent) if guard else None}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    os._exit(0)  # skip teardown: the watchdog thread would meet the store's server going away


def run_child(guarded: bool, args) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "guarded" if guarded else "plain",
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    if args.profile and guarded:
        cmd.append("--profile")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    if args.profile and guarded:
        sys.stderr.write(proc.stderr[-8000:])
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result (exit {proc.returncode}): {proc.stderr[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3, help="runs of each arm, alternating")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries of a guarded run")
    parser.add_argument("--label", default="", help="results go to bench/results/guard_step_cost[_<label>].json")
    parser.add_argument("--child", choices=("plain", "guarded"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child == "guarded", args.steps, args.warmup, args.profile)
    import runtime_checks

    print(f"runtime_checks from {runtime_checks.__file__}", flush=True)
    runs: dict[str, list[dict]] = {"plain": [], "guarded": []}
    for i in range(args.runs):
        for arm in (("plain", "guarded") if i % 2 == 0 else ("guarded", "plain")):
            r = run_child(arm == "guarded", args)
            runs[arm].append(r)
            print(f"  {arm:<8} run {i}: main thread {r['main_us']:.1f} us/step, process {r['process_us']:.1f} "
                  f"us/step, wall {r['wall_us']:.1f} us/step", flush=True)
    med = {arm: {k: statistics.median(r[k] for r in rs) for k in ("main_us", "process_us", "wall_us")}
           for arm, rs in runs.items()}
    per_step = runs["guarded"][0]["collectives_per_step"] or 2.0
    summary = {
        "main_us_per_step": {arm: med[arm]["main_us"] for arm in med},
        "process_us_per_step": {arm: med[arm]["process_us"] for arm in med},
        "added_main_us_per_step": med["guarded"]["main_us"] - med["plain"]["main_us"],
        "added_process_us_per_step": med["guarded"]["process_us"] - med["plain"]["process_us"],
        "collectives_per_step": per_step,
    }
    summary["cost_us_per_collective"] = summary["added_main_us_per_step"] / per_step
    summary["process_cost_us_per_collective"] = summary["added_process_us_per_step"] / per_step
    print(f"guard's added CPU per step: main thread {summary['added_main_us_per_step']:.1f} us "
          f"({summary['cost_us_per_collective']:.1f} us per collective, {per_step:.2f} per step), "
          f"whole process {summary['added_process_us_per_step']:.1f} us")
    import platform

    out = {"machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                       "loadavg": os.getloadavg()},
           "settings": {"steps": args.steps, "warmup": args.warmup, "runs": args.runs},
           "runs": runs, "summary": summary}
    name = f"guard_step_cost_{args.label}.json" if args.label else "guard_step_cost.json"
    path = HERE / "results" / name
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"written: {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
