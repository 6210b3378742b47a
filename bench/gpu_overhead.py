"""Benchmark (needs 2 GPUs): the guard's cost on a realistic DDP training step under NCCL.

    python bench/gpu_overhead.py [--rounds 2]

Runs bench/gpu_train_step.py (a ~200 M-parameter transformer, bf16, 300 timed steps) under plain
torchrun and under ``python -m runtime_checks``, alternating, on the same machine, and compares
the median step times. Writes bench/results/gpu_overhead.json and prints ``overhead_ratio=X``
(guarded median / unguarded median). Not a test: CI has no GPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
STEP = HERE / "gpu_train_step.py"


def run(guarded: bool) -> dict:
    if guarded:
        cmd = [sys.executable, "-m", "runtime_checks", "--nproc", "2", str(STEP)]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(STEP)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=HERE.parent)
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no result (exit {proc.returncode}): {proc.stderr[-3000:]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    plain, guarded = [], []
    for _ in range(args.rounds):  # alternate, so that drift in clocks or temperature hits both
        plain.append(run(False))
        guarded.append(run(True))
    plain_steps = [t for r in plain for t in r["step_s"]]
    guarded_steps = [t for r in guarded for t in r["step_s"]]
    p, g = statistics.median(plain_steps), statistics.median(guarded_steps)
    result = {"gpu": plain[0]["gpu"], "gpus": plain[0]["world_size"], "torch": plain[0]["torch"],
              "params": plain[0]["params"], "steps_per_run": plain[0]["steps"], "rounds": args.rounds,
              "plain_median_step_s": p, "guarded_median_step_s": g, "overhead_ratio": g / p,
              "plain_run_medians_s": [statistics.median(r["step_s"]) for r in plain],
              "guarded_run_medians_s": [statistics.median(r["step_s"]) for r in guarded]}
    out = HERE / "results" / "gpu_overhead.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['gpus']}x {result['gpu']}, {result['params'] / 1e6:.0f} M parameters, bf16, "
          f"{result['steps_per_run']} steps x {args.rounds} runs each")
    print(f"median step: plain {p * 1000:.2f} ms, guarded {g * 1000:.2f} ms")
    print(f"overhead_ratio={g / p:.4f}")
    (HERE / "results" / "gpu_overhead.txt").write_text(
        f"gpu={result['gpu']} x{result['gpus']}\nparams={result['params']}\nplain_median_step_s={p:.6f}\n"
        f"guarded_median_step_s={g:.6f}\noverhead_ratio={g / p:.4f}\n")


if __name__ == "__main__":
    main()
