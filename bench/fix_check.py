"""``--fix`` and ``--fix --unsafe-fixes`` on the outside corpora of ``bench/ecosystem.py``:
every file they change must still compile, a second run must change nothing, and every fix
applied is listed with its rule and whether it was safe or unsafe.

    python bench/fix_check.py                  # every corpus
    python bench/fix_check.py --corpus diffusers --diff-dir /tmp/fix-diffs

Each corpus is copied to a temporary folder (the cache stays pristine) and fixed there, once
with the safe fixes only (what a pre-commit hook with ``--fix`` writes) and once with the
unsafe ones too. Writes ``bench/results/fix_check.json``: per corpus, every fix applied
(path, line, rule, safe or unsafe), the counts per rule, the fixes refused or dropped (with
their notices), and the files that no longer compile (must be none). ``--diff-dir`` also
writes the safe run's unified diff per corpus there, for the review of safe fixes recorded
in ``bench/fix_review/<batch>.tsv`` (outside code: never commit the diffs). Exit status 1 when
a fixed file does not compile or a second run changes it.
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


def fix(root: Path, unsafe: bool = True) -> tuple[str, str]:
    proc = subprocess.run([sys.executable, "-m", "accel_lint", "--no-cache", "--fix",
                           *(["--unsafe-fixes"] if unsafe else []), "--show-fixes", "--exit-zero", "."],
                          cwd=root, capture_output=True, text=True)
    return proc.stdout, proc.stderr


_APPLIED_AT = re.compile(r"^\s+(\S+):(\d+):(\d+): (AL\d{3}) ", re.M)


def offered_fixes(root: Path) -> dict[tuple[str, int, int, str], str]:
    """(path, line, column, rule) -> "safe" | "unsafe", for every finding with a fix."""
    proc = subprocess.run([sys.executable, "-m", "accel_lint", "--no-cache", "--output-format", "json",
                           "--exit-zero", "."], cwd=root, capture_output=True, text=True)
    return {(d["path"], d["line"], d["column"], d["code"]): d["fix"]
            for d in json.loads(proc.stdout or "[]") if d.get("fix")}


def applied(err: str, offered: dict) -> list[dict]:
    """The fixes a run reports, each with the applicability its finding had before any fix (a
    fix of a later round, at a position the first lint did not report, is "later-round")."""
    return [{"path": path, "line": int(line), "code": code,
             "fix": offered.get((path, int(line), int(column), code), "later-round")}
            for path, line, column, code in _APPLIED_AT.findall(err)]


def safe_diff(original: Path, name: str) -> str:
    """The unified diff of what plain ``--fix`` writes on a copy of ``original``."""
    with tempfile.TemporaryDirectory(prefix=f"fix-safe-{name}-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(original, work, ignore=shutil.ignore_patterns(".complete"))
        fix(work, unsafe=False)
        proc = subprocess.run(["diff", "-ru", str(original), str(work)], capture_output=True, text=True)
    return proc.stdout.replace(str(original) + "/", "a/").replace(str(work) + "/", "b/")


def sources(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.py"))}


def check(name: str, cache: Path, mirror: Path | None, diff_dir: Path | None = None) -> dict:
    original = corpus_root(name, cache, mirror)
    offered = offered_fixes(original)
    with tempfile.TemporaryDirectory(prefix=f"fix-check-{name}-") as tmp:
        work = Path(tmp) / name
        shutil.copytree(original, work, ignore=shutil.ignore_patterns(".complete"))
        _, safe_err = fix(work, unsafe=False)
        shutil.rmtree(work)
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
    if diff_dir is not None:
        diff_dir.mkdir(parents=True, exist_ok=True)
        (diff_dir / f"{name}.safe.diff").write_text(safe_diff(original, name))
    with_unsafe = applied(err, offered)
    return {
        "files_changed": len(changed),
        "fixes_applied": dict(sorted(Counter(_APPLIED.findall(err)).items())),
        "fixes_applied_by_applicability": dict(sorted(Counter(f"{f['code']} {f['fix']}" for f in with_unsafe).items())),
        "safe_fixes_applied_by_fix": applied(safe_err, offered),
        "all_fixes_applied": with_unsafe,
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
    parser.add_argument("--diff-dir", type=Path, help="write each corpus's safe-fix diff here (for review)")
    args = parser.parse_args()
    results = {}
    for name in args.corpus or CORPORA:
        results[name] = check(name, args.cache, args.mirror_root, args.diff_dir)
        r = results[name]
        print(f"{name}: {r['files_changed']} files changed, fixes {r['fixes_applied_by_applicability']}, "
              f"{len(r['safe_fixes_applied_by_fix'])} by plain --fix, "
              f"{r['fixes_refused_or_dropped']} refused or dropped, {len(r['not_compiling_after_fix'])} not compiling, "
              f"{len(r['changed_by_a_second_run'])} changed again", flush=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    if args.output.exists() and args.corpus:  # a partial run updates its corpora only
        results = {**json.loads(args.output.read_text()), **results}
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    bad = any(r["not_compiling_after_fix"] or r["changed_by_a_second_run"] for r in results.values())
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
