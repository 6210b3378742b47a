"""Benchmark: the guard's cost on a CPU DDP training loop, and per recorded collective.

    python bench/runtime_overhead.py [--runs 5]

(a) the same 2-rank gloo training loop (bench/ddp_loop.py) under plain torchrun and under
``python -m runtime_checks``, median loop time of several runs and the ratio;
(b) the recording cost per collective in microseconds: a wrapped no-op call with a real
TCPStore vs the bare call. Writes bench/results/runtime_overhead.json. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent


def loop_time(guarded: bool, debug_mode: bool = False) -> dict:
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1"}
    if debug_mode:
        env["ACCELERATE_DEBUG_MODE"] = "1"  # what the guard turns on: Accelerate's own shape checks
    if guarded:
        cmd = [sys.executable, "-m", "runtime_checks", "--nproc", "2", str(HERE / "ddp_loop.py")]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               str(HERE / "ddp_loop.py")]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result (exit {proc.returncode}): {proc.stderr[-2000:]}")


def record_cost(n: int = 20000) -> dict:
    from torch.distributed import TCPStore

    from runtime_checks import guard as G

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    client = G.connect(f"127.0.0.1:{server.port}")
    g = G.Guard(client, 0, 2)
    G._SKIP_DIRS = G._library_dirs()
    G._distributed = lambda: True  # measure the recording path, not a real collective

    def noop(x):
        return x

    wrapped = g.wrap(noop, "accelerator.gather", "ALLGATHER", method=False)
    import torch

    t = torch.zeros(8, 128)
    for fn in (noop, wrapped):
        for _ in range(500):
            fn(t)
    start = time.perf_counter()
    for _ in range(n):
        noop(t)
    bare = (time.perf_counter() - start) / n
    start = time.perf_counter()
    for _ in range(n):
        wrapped(t)
    guarded = (time.perf_counter() - start) / n
    return {"bare_us": bare * 1e6, "recorded_us": guarded * 1e6, "cost_us": (guarded - bare) * 1e6, "calls": n}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    plain, debug, guarded = [], [], []
    for _ in range(args.runs):  # interleaved, so drift in machine load hits all three alike
        plain.append(loop_time(False))
        debug.append(loop_time(False, debug_mode=True))
        guarded.append(loop_time(True))
    p = statistics.median(r["loop_s"] for r in plain)
    d = statistics.median(r["loop_s"] for r in debug)
    g = statistics.median(r["loop_s"] for r in guarded)
    cost = record_cost()
    result = {
        "machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
        "loop": {"steps": plain[0]["steps"], "collectives_recorded": guarded[0]["collectives"], "runs": args.runs,
                 "plain_s": [r["loop_s"] for r in plain], "debug_mode_s": [r["loop_s"] for r in debug],
                 "guarded_s": [r["loop_s"] for r in guarded], "plain_median_s": p, "debug_mode_median_s": d,
                 "guarded_median_s": g, "ratio_vs_plain": g / p, "ratio_vs_debug_mode": g / d},
        "per_collective": cost,
    }
    out = HERE / "results" / "runtime_overhead.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"training loop, {plain[0]['steps']} steps x 2 ranks (gloo), median of {args.runs}:")
    print(f"  plain torchrun                 {p:.3f} s")
    print(f"  torchrun + Accelerate debug    {d:.3f} s   ratio {d / p:.3f}")
    print(f"  runtime_checks (debug on)      {g:.3f} s   ratio {g / p:.3f} vs plain, {g / d:.3f} vs debug mode")
    print(f"recording one collective: {cost['cost_us']:.1f} us (bare call {cost['bare_us']:.2f} us)")
    print(f"written: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
