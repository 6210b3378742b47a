"""Benchmark: how long ``python -m runtime_checks`` takes to a verdict on each runtime fixture.

    python bench/time_to_diagnosis.py [--runs 3]

For each fixture: the launcher's wall time (start-up of 2 gloo ranks included) and, where
the report has it, the delay between the first rank reaching the collective and the verdict.
Also Accelerate 1.15.0's own multi-process test scripts (``accelerate/test_utils/scripts/``).
Writes bench/results/time_to_diagnosis.json. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "runtime"
CASES = [("correct_ddp.py", None), ("divergence.py", None), ("shape_mismatch.py", None), ("hang.py", 3.0),
         ("rank_exception.py", None), ("rank_died.py", None), ("early_break.py", None), ("trigger_subset.py", None),
         # DDP's implicit collectives against explicit ones, and DDP code that must stay silent
         ("ddp_uneven_batches.py", None), ("ddp_extra_forward.py", None), ("ddp_backward_one_rank.py", None),
         ("ddp_eval_on_main.py", None), ("ddp_eval_unwrapped_ok.py", None), ("ddp_no_sync_ok.py", None),
         ("ddp_no_grad_forward_ok.py", None)]
# Accelerate's own multi-process test scripts, from the installed wheel (copied out of the
# package first: code inside accelerate's folder is library code to the guard)
ACCELERATE_SCRIPTS = ["test_script.py", "test_sync.py", "test_ops.py", "test_distributed_data_loop.py",
                      "test_ddp_comm_hook.py", "test_merge_weights.py"]


def _accelerate_script(name: str, folder: str) -> str:
    import shutil

    import accelerate

    source = Path(accelerate.__file__).parent / "test_utils" / "scripts" / name
    target = Path(folder) / name
    shutil.copy(source, target)
    return str(target)


def one(script: str, timeout: float | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "runtime_checks", "--nproc", "2", "--report", report]
        cmd += ["--timeout", str(timeout)] if timeout else []
        path = _accelerate_script(script, tmp) if script in ACCELERATE_SCRIPTS else str(FIXTURES / script)
        start = time.perf_counter()
        proc = subprocess.run(cmd + [path], capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - start
        data = json.load(open(report)) if os.path.exists(report) else {}
    finding = (data.get("findings") or [None])[0]
    lines = {r["rank"]: f"{os.path.basename(r['site']['file'])}:{r['site']['line']}"
             for r in (finding or {}).get("rows", []) if r.get("site")}
    return {"exit": proc.returncode, "wall_s": wall, "kind": finding["kind"] if finding else "ok", "lines": lines,
            "detected_after_s": finding.get("detected_after") if finding else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for script, timeout in CASES + [(name, None) for name in ACCELERATE_SCRIPTS]:
        runs = [one(script, timeout) for _ in range(args.runs)]
        results[script] = {"kind": runs[0]["kind"], "exit": runs[0]["exit"], "timeout_s": timeout,
                           "culprit_lines": runs[0]["lines"],
                           "wall_median_s": statistics.median(r["wall_s"] for r in runs),
                           "detected_after_s": [r["detected_after_s"] for r in runs]}
        r = results[script]
        print(f"{script:<32} {r['kind']:<15} exit {r['exit']:<3} wall {r['wall_median_s']:.2f} s"
              + (f"  (--timeout {timeout})" if timeout else ""))
    out = HERE / "results" / "time_to_diagnosis.json"
    out.write_text(json.dumps({"cores": os.cpu_count(), "runs": args.runs, "results": results}, indent=2) + "\n")
    print(f"written: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
