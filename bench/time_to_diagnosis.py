"""Benchmark: how long ``python -m runtime_checks`` takes to a verdict on each runtime fixture.

    python bench/time_to_diagnosis.py [--runs 3]

For each fixture: the launcher's wall time (start-up of 2 gloo ranks included) and, where
the report has it, the delay between the first rank reaching the collective and the verdict.
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
         ("rank_exception.py", None), ("rank_died.py", None), ("early_break.py", None), ("trigger_subset.py", None)]


def one(script: str, timeout: float | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        cmd = [sys.executable, "-m", "runtime_checks", "--nproc", "2", "--report", report]
        cmd += ["--timeout", str(timeout)] if timeout else []
        start = time.perf_counter()
        proc = subprocess.run(cmd + [str(FIXTURES / script)], capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - start
        data = json.load(open(report)) if os.path.exists(report) else {}
    finding = (data.get("findings") or [None])[0]
    return {"exit": proc.returncode, "wall_s": wall, "kind": finding["kind"] if finding else "ok",
            "detected_after_s": finding.get("detected_after") if finding else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    results = {}
    for script, timeout in CASES:
        runs = [one(script, timeout) for _ in range(args.runs)]
        results[script] = {"kind": runs[0]["kind"], "exit": runs[0]["exit"], "timeout_s": timeout,
                           "wall_median_s": statistics.median(r["wall_s"] for r in runs),
                           "detected_after_s": [r["detected_after_s"] for r in runs]}
        r = results[script]
        print(f"{script:<20} {r['kind']:<15} exit {r['exit']:<3} wall {r['wall_median_s']:.2f} s"
              + (f"  (--timeout {timeout})" if timeout else ""))
    out = HERE / "results" / "time_to_diagnosis.json"
    out.write_text(json.dumps({"cores": os.cpu_count(), "runs": args.runs, "results": results}, indent=2) + "\n")
    print(f"written: {out.relative_to(HERE.parent)}")


if __name__ == "__main__":
    main()
