"""Fuzz the linter at length: programs from hypothesmith's grammar and syntax-tree generators,
and mutated fixture scripts (reordered, guarded, wrapped in functions and classes, broken),
each checked for the properties of ``tests/fuzzing.py`` (no internal error; ``--fix`` output
compiles and is idempotent; JSON, JSON lines, SARIF and JUnit output valid).

    python bench/fuzz.py --examples 2000 --seed 1

Writes ``bench/results/fuzz.json``: how many programs each generator produced, how many the
linter analysed (not skipped as syntax errors), and every distinct problem with one program
that shows it. Exit status 1 when a problem was found.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402
import hypothesmith  # noqa: E402

from fuzzing import FIXTURE_SOURCES, PREAMBLE, mutate, problems_with  # noqa: E402


def _compiles(source: str) -> bool:
    try:
        compile(source, "fuzzed", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


def run(generator: str, examples: int, seed: int, found: dict, counts: dict) -> None:
    tally = counts.setdefault(generator, {"programs": 0, "valid_python": 0, "seconds": 0.0})

    def check(source: str) -> None:
        tally["programs"] += 1
        tally["valid_python"] += _compiles(source)
        for problem in problems_with(source):
            found.setdefault(problem, {"generator": generator, "program": source[:4000], "count": 0})
            found[problem]["count"] += 1

    options = settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                       suppress_health_check=list(HealthCheck))
    if generator == "grammar":
        test = given(hypothesmith.from_grammar())(lambda source: check(PREAMBLE + source))
    elif generator == "syntax-tree":
        test = given(hypothesmith.from_node())(lambda source: check(PREAMBLE + source))
    else:
        test = given(st.sampled_from(FIXTURE_SOURCES), st.randoms(use_true_random=False), st.integers(1, 6))(
            lambda source, rng, steps: check(mutate(source, rng, steps)))
    started = time.perf_counter()
    random.seed(seed)
    settings(options)(test)()
    tally["seconds"] = round(tally["seconds"] + time.perf_counter() - started, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=1000, help="programs per generator")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--generators", default="grammar,syntax-tree,mutations")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "results" / "fuzz.json")
    args = parser.parse_args()
    found: dict = {}
    counts: dict = {}
    for generator in args.generators.split(","):
        run(generator, args.examples, args.seed, found, counts)
        print(f"{generator}: {counts[generator]}", flush=True)
    report = {"examples_per_generator": args.examples, "seed": args.seed, "generators": counts,
              "programs": sum(c["programs"] for c in counts.values()),
              "problems": [{"problem": k, **v} for k, v in sorted(found.items())]}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"{report['programs']} programs, {len(found)} distinct problems; written to {args.output}")
    for problem, detail in sorted(found.items()):
        print(f"  {detail['count']:4d}  {problem}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
