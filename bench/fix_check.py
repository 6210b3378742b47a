"""``--fix --unsafe-fixes`` on the outside corpora of ``bench/ecosystem.py``: every file it
changes must still compile, and a second run must change nothing.

    python bench/fix_check.py                  # every corpus
    python bench/fix_check.py --corpus diffusers

Each corpus is copied to a temporary folder (the cache stays pristine) and fixed there. Writes
``bench/results/fix_check.json``: per corpus, the files changed, the fixes applied per rule,
the fixes refused or dropped (with their notices), and the files that no longer compile
(must be none). Exit status 1 when a fixed file does not compile or a second run changes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from ecosystem import CORPORA, corpus_root  # noqa: E402

_APPLIED = re.compile(r"^\s+\S+:\d+:\d+: (AL\d{3}) ", re.M)
_NOTICE = re.compile(r"^accel-lint: notice: (.*)$", re.M)


def fix(root: Path) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-m", "accel_lint", "--no-cache", "--fix", "--unsafe-fixes",
                           "--show-fixes", "--exit-zero", "."], cwd=root, capture_output=True, text=True)
    return proc.stdout, proc.stderr


def sources(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}


def check(name: str, cache: Path, mirror: Path | None) -> dict:
    original = corpus_root(name, cache, mirror)
    with tempfile.TemporaryDirectory(prefix=f"fix-check-{name}-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(original, work, ignore=shutil.ignore_patterns(".complete"))
        before = sources(work)
        _, err = fix(work)
        after = sources(work)
        changed = sorted(p for p in after if after[p] != before.get(p))
        broken = []
        for path in changed:
            try:
                compile(after[path], path, "exec")
            except SyntaxError as exc:
                broken.append(f"{path}: {exc}")
        _, err_again = fix(work)
        again = sorted(p for p, data in sources(work).items() if data != after.get(p))
    notices = [n.replace(str(work) + "/", "") for n in _NOTICE.findall(err)]
    return {
        "files_changed": len(changed),
        "fixes_applied": dict(sorted(Counter(_APPLIED.findall(err)).items())),
        "fixes_refused_or_dropped": len([n for n in notices if " not fixed" in n or "not applied" in n]),
        "notices": notices,
        "not_compiling_after_fix": broken,
        "changed_by_a_second_run": again,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", action="append", choices=CORPORA, help="default: all")
    parser.add_argument("--cache", type=Path, default=Path(os.environ.get(
        "ACCEL_LINT_ECOSYSTEM_CACHE", Path.home() / ".cache" / "accel-lint-ecosystem")))
    parser.add_argument("--mirror-root", type=Path, default=Path(os.environ.get("ACCEL_LINT_MIRRORS", "/work/.mirror")),
                        help="folder of git mirrors named owner+name (as bench/ecosystem.py)")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "fix_check.json")
    args = parser.parse_args()
    results = {}
    for name in args.corpus or CORPORA:
        results[name] = check(name, args.cache, args.mirror_root)
        r = results[name]
        print(f"{name}: {r['files_changed']} files changed, fixes {r['fixes_applied']}, "
              f"{r['fixes_refused_or_dropped']} refused or dropped, {len(r['not_compiling_after_fix'])} not compiling, "
              f"{len(r['changed_by_a_second_run'])} changed again", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    bad = any(r["not_compiling_after_fix"] or r["changed_by_a_second_run"] for r in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
