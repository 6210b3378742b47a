"""Benchmark (needs 2 GPUs): time to diagnosis under NCCL for a divergence, a hang, a rank crash
and a shape mismatch: the guard vs the NCCL watchdog alone vs TORCH_DISTRIBUTED_DEBUG=DETAIL.

    python bench/nccl_time_to_diagnosis.py [--pg-timeout 20]

Every approach runs the same fixture on 2 GPUs and its output is read as it comes: the time of
the first line that diagnoses anything (counted from the launch, so rank start-up is in every
number), that line, whether it names the rank/op/line, whether the job ended by itself within the
cap, and how it ended. The baselines run with a process-group timeout of --pg-timeout seconds
(torch's NCCL default is 600 s: there the watchdog's times grow by 600 - pg-timeout). The guard
runs with ``--timeout`` equal to it, for the hang. Writes bench/results/nccl_time_to_diagnosis.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "runtime"
CASES = ["divergence.py", "hang.py", "rank_died.py", "shape_mismatch.py"]
DIAGNOSTIC = re.compile(r"\[runtime_checks\]|Watchdog caught|timed out|Timeout|timeout|mismatch|Mismatch|"
                        r"Error|error|failed|Failed|exitcode", re.IGNORECASE)


def watch(cmd: list[str], env: dict, cap: float) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=HERE.parent,
                            start_new_session=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for raw in proc.stdout:  # type: ignore[union-attr]
            lines.append((time.perf_counter() - start, raw.decode(errors="replace").rstrip()))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=cap)
        ended = True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # our own process group only
        code = proc.wait()
        ended = False
    reader.join(timeout=5)
    first = next(((t, line) for t, line in lines if DIAGNOSTIC.search(line)), None)
    return {"exit": code, "ended_by_itself": ended, "wall_s": round(time.perf_counter() - start, 2),
            "first_diagnostic_s": round(first[0], 2) if first else None,
            "first_diagnostic": first[1][:300] if first else None,
            "output_tail": [line[:300] for _, line in lines[-12:]]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pg-timeout", type=float, default=20.0)
    parser.add_argument("--cap", type=float, default=90.0, help="seconds after which a run is killed")
    args = parser.parse_args()
    base_env = {k: v for k, v in os.environ.items() if k not in ("TORCH_DISTRIBUTED_DEBUG", "ACCELERATE_DEBUG_MODE")}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(HERE / "pg_timeout_runner.py"), str(args.pg_timeout)]
    results = {}
    for name in CASES:
        script = str(FIXTURES / name)
        guard = watch([sys.executable, "-m", "runtime_checks", "--nproc", "2", "--timeout", str(args.pg_timeout),
                       script], base_env, args.cap)
        watchdog = watch([*torchrun, script], base_env, args.cap)
        detail = watch([*torchrun, script], {**base_env, "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, args.cap)
        results[name] = {"guard": guard, "nccl_watchdog": watchdog, "distributed_debug_detail": detail}
        for label, r in results[name].items():
            print(f"{name:<18} {label:<25} first diagnostic {r['first_diagnostic_s']} s  exit {r['exit']}  "
                  f"ended {r['ended_by_itself']}  | {r['first_diagnostic']}", flush=True)
    import torch

    out = {"gpu": torch.cuda.get_device_name(), "gpus": torch.cuda.device_count(), "torch": torch.__version__,
           "pg_timeout_s": args.pg_timeout, "cap_s": args.cap, "results": results}
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "nccl_time_to_diagnosis.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
