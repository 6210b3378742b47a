"""Property checks and program generators for fuzzing the linter (used by
``tests/test_fuzz.py`` for a bounded slice and by ``bench/fuzz.py`` for long runs).

Programs come from two places:

* ``hypothesmith``'s grammar-based generator (any syntactically valid Python), behind a
  preamble that makes the file an Accelerate program, so that the whole analysis runs;
* the fixture scripts, mutated: statements reordered, wrapped in a rank guard, moved into a
  function or a class, and syntax errors inserted.

The properties (:func:`problems_with`): no internal error; ``--fix --unsafe-fixes`` output
parses, compiles and is a fixed point (fixing it again changes nothing); every output format
is valid (JSON, JSON lines, SARIF's required structure, JUnit XML).
"""

from __future__ import annotations

import ast
import json
import random
import warnings
from pathlib import Path
from xml.etree import ElementTree as ET

import libcst as cst

from accel_lint.config import Config
from accel_lint.engine import lint_source
from accel_lint.fixes import fix_source
from accel_lint.report import FORMATS, RuleInfo, Run, render
from accel_lint.rules import all_rules

REPO = Path(__file__).resolve().parent.parent
PREAMBLE = "import torch\nfrom accelerate import Accelerator\naccelerator = Accelerator()\n"
FIXTURE_SOURCES = sorted(
    p.read_text() for folder in ("lint", "fix", "demo") for p in (REPO / "fixtures" / folder).glob("*.py"))
_CONFIG = Config(cache_dir=None)
_RUN = Run(rules={r.code: RuleInfo(r.code, r.name, r.severity, r.summary, r.docs()) for r in all_rules()},
           root=Path("."), version="fuzz", files_checked=1)


def problems_with(source: str, path: str = "fuzzed.py") -> list[str]:
    """Every property ``source`` breaks, as short descriptions (empty: all hold)."""
    found: list[str] = []
    result = lint_source(source.encode("utf-8"), path, _CONFIG)
    found += [f"internal error: {e.message}" for e in result.errors if e.internal]
    for fmt in FORMATS:
        try:
            _check_format(fmt, render(fmt, result.diagnostics, _RUN))
        except Exception as exc:  # an invalid document, or a reporter that crashed
            found.append(f"{fmt} output invalid: {type(exc).__name__}: {exc}")
    outcome = fix_source(source.encode("utf-8"), path, _CONFIG, unsafe=True)
    if outcome.changed and _compiles(source):
        if not _compiles(outcome.fixed):
            try:
                compile(ast.parse(outcome.fixed), path, "exec")
            except (SyntaxError, ValueError) as exc:
                return found + [f"fixed file does not compile: {exc}"]
        again = fix_source(outcome.fixed.encode(outcome.encoding), path, _CONFIG, unsafe=True)
        if again.changed:
            found.append("fixing the fixed file changes it again (not idempotent)")
        if outcome.remaining is not None:
            found += [f"internal error after fixing: {e.message}" for e in outcome.remaining.errors if e.internal]
    return found


def _compiles(source: str) -> bool:
    """Valid Python for CPython's compiler too (libcst accepts `return` in a class body)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SyntaxWarning for `1()` and the like
        try:
            compile(source, "input", "exec")
        except (SyntaxError, ValueError):
            return False
    return True


def _check_format(fmt: str, text: str) -> None:
    if fmt == "json":
        assert isinstance(json.loads(text), list)
    elif fmt == "json-lines":
        for line in text.splitlines():
            assert isinstance(json.loads(line), dict)
    elif fmt == "sarif":
        log = json.loads(text)
        assert log["version"] == "2.1.0" and isinstance(log["runs"], list)
        for result in log["runs"][0]["results"]:
            region = result["locations"][0]["physicalLocation"]["region"]
            assert region["startLine"] >= 1 and region["startColumn"] >= 1
            assert isinstance(result["message"]["text"], str) and result["ruleId"]
    elif fmt == "junit":
        body = text.split("\n", 1)[1] if text.startswith("<?xml") else text
        assert ET.fromstring(body).tag in ("testsuites", "testsuite")


# -- mutations of the fixture scripts ------------------------------------------------------------

GUARDS = ("accelerator.is_main_process", "accelerator.process_index == 1", "not accelerator.is_local_main_process")


def mutate(source: str, rng: random.Random, steps: int) -> str:
    """Apply ``steps`` random mutations; a syntax error, once inserted, ends the chain."""
    for _ in range(steps):
        operator = rng.choice(_OPERATORS)
        try:
            source = operator(source, rng)
        except (cst.ParserSyntaxError, RecursionError, _Skip):
            continue
        if operator is _syntax_error:
            break
    return source


class _Skip(Exception):
    pass


def _blocks(module: cst.Module) -> list[cst.CSTNode]:
    """The module and every indented block, where statements can be moved."""
    found: list[cst.CSTNode] = [module]

    class Collect(cst.CSTVisitor):
        def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
            found.append(node)

    module.visit(Collect())
    return found


def _edit_block(source: str, rng: random.Random, edit) -> str:
    module = cst.parse_module(source)
    blocks = [b for b in _blocks(module) if len(b.body) >= 1]
    if not blocks:
        raise _Skip
    block = rng.choice(blocks)
    body = list(block.body)
    new_body = edit(body, rng)
    if new_body is None:
        raise _Skip
    new_block = block.with_changes(body=new_body)
    return new_block.code if block is module else module.deep_replace(block, new_block).code


def _reorder(source: str, rng: random.Random) -> str:
    def edit(body, rng):
        if len(body) < 2:
            return None
        i = rng.randrange(len(body) - 1)
        body[i], body[i + 1] = body[i + 1], body[i]
        return body
    return _edit_block(source, rng, edit)


def _wrap_run(source: str, rng: random.Random, most: int, wrapper) -> str:
    """Replace a random run of up to ``most`` statements of a block with ``wrapper(run)``
    (a list of statements)."""
    def edit(body, rng):
        start = rng.randrange(len(body))
        end = min(len(body), start + rng.randint(1, most))
        run = [s.with_changes(leading_lines=[]) if hasattr(s, "leading_lines") else s for s in body[start:end]]
        return body[:start] + wrapper(cst.IndentedBlock(body=run), rng) + body[end:]
    return _edit_block(source, rng, edit)


def _guard(source: str, rng: random.Random) -> str:
    return _wrap_run(source, rng, 3, lambda block, rng: [
        cst.If(test=cst.parse_expression(rng.choice(GUARDS)), body=block)])


def _wrap_in_function(source: str, rng: random.Random) -> str:
    return _wrap_run(source, rng, 4, lambda block, rng: [
        cst.FunctionDef(name=cst.Name("_fuzzed"), params=cst.Parameters(), body=block),
        cst.SimpleStatementLine([cst.Expr(cst.parse_expression("_fuzzed()"))])])


def _wrap_in_class(source: str, rng: random.Random) -> str:
    return _wrap_run(source, rng, 3, lambda block, rng: [cst.ClassDef(name=cst.Name("_Fuzzed"), body=block)])


def _syntax_error(source: str, rng: random.Random) -> str:
    at = rng.randrange(len(source) + 1)
    if rng.random() < 0.5 and source:
        return source[:at] + source[at + 1:]
    return source[:at] + rng.choice(["(", ")", ":", "\n    ", "if", "=", "'", '"""', "\\", "@"]) + source[at:]


_OPERATORS = (_reorder, _reorder, _guard, _guard, _wrap_in_function, _wrap_in_class, _syntax_error)
