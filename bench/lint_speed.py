"""Benchmark: accel-lint on the wheel corpus — cold, warm, one file touched — against the floor
(a bare libcst parse of every file) and TorchFix, the reference peer.

    python bench/lint_speed.py [--runs 3] [--cache-root DIR] [--torchfix-timeout 900] [--skip-torchfix]

(--skip-torchfix keeps the TorchFix figure of the previous results file, marked as reused.)

Downloads the corpus of DEVELOPERS.md into a folder outside the repository (default
~/.cache/accel-lint-bench), installs TorchFix into its own venv there (it pins an older libcst),
prints a table of medians and writes bench/results/lint_speed.json. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WHEELS = ["transformers==5.23.0", "trl==1.16.0", "peft==0.21.2", "diffusers==0.42.1", "accelerate==1.15.0"]
TOUCHED = "transformers/trainer.py"  # the largest Accelerate file: the worst one-file change
ACCEL_LINT = [sys.executable, "-m", "accel_lint"]
TARGETS = [("cold", "cold_s", 10.0), ("warm", "warm_s", 1.0), ("one file touched", "one_touched_s", 1.5)]


def corpus(root: Path) -> Path:
    src = root / "src"
    marker = root / ("unpacked-" + "-".join(w.replace("==", "") for w in WHEELS))
    if not marker.exists():
        wheels = root / "wheels"
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *WHEELS],
                       check=True)
        shutil.rmtree(src, ignore_errors=True)
        for wheel in wheels.glob("*.whl"):
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(src)
        marker.touch()
    return src


def timed(cmd: list[str], timeout: float | None = None) -> tuple[float | None, subprocess.CompletedProcess | None]:
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, None
    return time.perf_counter() - start, proc


def accel_lint_runs(src: Path, runs: int) -> dict:
    cold, warm, touched = [], [], []
    target = src / TOUCHED
    original = target.read_bytes()
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as cache:
            args = [*ACCEL_LINT, str(src), "--exit-zero", "-q", "--cache-dir", cache]
            seconds, proc = timed(args)
            cold.append(seconds)
            findings = len(proc.stdout.splitlines())
            warm.append(timed(args)[0])
            try:
                target.write_bytes(original + b"\n# touched\n")
                touched.append(timed(args)[0])
            finally:
                target.write_bytes(original)
    one_job = timed([*ACCEL_LINT, str(src), "--exit-zero", "-q", "--no-cache", "--jobs", "1"])[0]
    return {"cold_s": cold, "warm_s": warm, "one_touched_s": touched, "cold_one_job_s": one_job,
            "findings": findings}


def bare_parse(src: Path) -> float:
    code = ("import libcst, pathlib, sys\n"
            "for p in sorted(pathlib.Path(sys.argv[1]).rglob('*.py')):\n"
            "    try:\n        libcst.parse_module(p.read_bytes())\n"
            "    except Exception:\n        pass\n")
    return timed([sys.executable, "-c", code, str(src)])[0]


def torchfix(root: Path, src: Path, timeout: float) -> dict:
    venv = root / "torchfix-venv"
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", "torchfix"], check=True)
    seconds, proc = timed([str(venv / "bin" / "torchfix"), str(src)], timeout=timeout)
    if seconds is None:
        return {"seconds": None, "note": f"did not finish within {timeout:.0f} s"}
    return {"seconds": seconds, "exit": proc.returncode, "findings": len(proc.stdout.splitlines())}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cache-root", default=str(Path.home() / ".cache" / "accel-lint-bench"))
    parser.add_argument("--torchfix-timeout", type=float, default=900)
    parser.add_argument("--skip-torchfix", action="store_true")
    args = parser.parse_args()
    root = Path(args.cache_root)
    root.mkdir(parents=True, exist_ok=True)
    src = corpus(root)
    files = sum(1 for _ in src.rglob("*.py"))
    ours = accel_lint_runs(src, args.runs)
    # the largest single process (main or worker) of every accel-lint run so far
    ours["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    floor = bare_parse(src)
    previous = HERE / "results" / "lint_speed.json"
    if args.skip_torchfix and previous.exists():
        # TorchFix takes 15 minutes or more: keep its last measurement, marked as such
        peer = dict(json.loads(previous.read_text()).get("torchfix", {}))
        peer.setdefault("measured", "earlier run")
        peer["reused_from_previous_run"] = True
    elif args.skip_torchfix:
        peer = {"seconds": None, "note": "skipped"}
    else:
        peer = torchfix(root, src, args.torchfix_timeout)
        peer["measured"] = time.strftime("%Y-%m-%d %H:%M")
    median = {k: statistics.median(v) for k, v in ours.items() if isinstance(v, list)}
    result = {"cores": os.cpu_count(), "files": files, "runs": args.runs, "accel_lint": ours, "medians": median,
              "bare_libcst_parse_s": floor, "torchfix": peer}
    if peer.get("seconds"):
        result["ratio_cold_vs_torchfix"] = median["cold_s"] / peer["seconds"]
    (HERE / "results").mkdir(exist_ok=True)
    (HERE / "results" / "lint_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"corpus: {files} .py files, {os.cpu_count()} cores, median of {args.runs}")
    print(f"  accel-lint cold (default --jobs)   {median['cold_s']:7.2f} s   ({ours['findings']} findings)")
    print(f"  accel-lint cold, --jobs 1          {ours['cold_one_job_s']:7.2f} s")
    print(f"  accel-lint warm (cache, no change) {median['warm_s']:7.2f} s")
    print(f"  accel-lint one file touched        {median['one_touched_s']:7.2f} s   ({TOUCHED})")
    print(f"  accel-lint peak RSS (one process)  {ours['peak_rss_mb']:7.0f} MB")
    print(f"  bare libcst parse, every file      {floor:7.2f} s   (the floor of a parse-everything design)")
    if peer.get("seconds"):
        print(f"  TorchFix                           {peer['seconds']:7.2f} s   ratio accel-lint/TorchFix "
              f"{result['ratio_cold_vs_torchfix']:.3f}")
    else:
        print(f"  TorchFix                           {peer.get('note')}"
              + (" (reused from the previous run)" if peer.get("reused_from_previous_run") else ""))
    for name, key, limit in TARGETS:
        value = median[key]
        print(f"  target {name} <= {limit} s: {'met' if value <= limit else 'MISSED'} ({value:.2f} s)")
    print("written: bench/results/lint_speed.json")


if __name__ == "__main__":
    main()
