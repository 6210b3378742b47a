"""Robustness over real code: lint every ``.py`` of the wheel corpus and of this Python's
standard library with the byte prefilter switched off (so the parser, the model and every
rule see every file), and count internal errors: exceptions that escaped the model or a rule.

    python bench/corpus_errors.py            # writes bench/results/corpus_errors.json

The target is zero internal errors. Syntax errors (AL001: the stdlib ships deliberately
broken test files) and unreadable files are counted separately; they are diagnostics, not
crashes. CI runs a pinned slice of the same check (tests/test_corpus_slice.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import sysconfig
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from lint_speed import corpus  # noqa: E402  (the same download and cache)

import accel_lint.engine as engine  # noqa: E402
from accel_lint.config import Config  # noqa: E402


def lint_everything(path: Path):
    engine.may_have_findings = lambda data, config: True  # in the worker: every file is analysed
    return engine.lint_file(path, Config())


def run(name: str, root: Path, jobs: int) -> dict:
    files = sorted(p for p in root.rglob("*.py") if p.is_file() and "site-packages" not in p.parts)
    start = time.perf_counter()
    internal, other_errors, codes = [], 0, Counter()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for result in pool.map(lint_everything, files, chunksize=8):
            for error in result.errors:
                if error.internal:
                    internal.append(f"{error.path}: {error.message}")
                else:
                    other_errors += 1
            codes.update(d.code for d in result.diagnostics)
    return {"tree": name, "root": str(root), "files": len(files), "seconds": round(time.perf_counter() - start, 1),
            "internal_errors": len(internal), "internal_error_samples": internal[:20],
            "file_errors": other_errors, "findings_per_rule": dict(sorted(codes.items()))}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cache-root", default=str(Path.home() / ".cache" / "accel-lint-bench"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    trees = [("wheel corpus", corpus(Path(args.cache_root))), ("CPython stdlib", Path(sysconfig.get_paths()["stdlib"]))]
    results = [run(name, root, args.jobs) for name, root in trees]
    out = {"cores": os.cpu_count(), "python": sys.version.split()[0], "prefilter": "off", "trees": results}
    (HERE / "results" / "corpus_errors.json").write_text(json.dumps(out, indent=2) + "\n")
    for r in results:
        print(f"{r['tree']:15} {r['files']:6d} files {r['seconds']:7.1f} s  internal errors: {r['internal_errors']}  "
              f"file errors: {r['file_errors']}  findings: {r['findings_per_rule']}")
        for sample in r["internal_error_samples"]:
            print("   ", sample)
    print("written: bench/results/corpus_errors.json")


if __name__ == "__main__":
    main()
