"""A bounded, reproducible slice of the fuzzing that ``bench/fuzz.py`` runs at length: generated
programs and mutated fixture scripts keep every property of :func:`fuzzing.problems_with`."""

from __future__ import annotations

import random

import pytest

from fuzzing import FIXTURE_SOURCES, PREAMBLE, mutate, problems_with

hypothesis = pytest.importorskip("hypothesis")
hypothesmith = pytest.importorskip("hypothesmith")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

# derandomized: CI runs the same slice every time; bench/fuzz.py explores
def slice_of(examples: int) -> settings:
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))


@slice_of(200)
@given(hypothesmith.from_grammar())
def test_generated_programs_keep_the_properties(source: str):
    assert problems_with(PREAMBLE + source) == []


@slice_of(60)
@given(hypothesmith.from_node())
def test_generated_syntax_trees_keep_the_properties(source: str):
    assert problems_with(PREAMBLE + source) == []


@slice_of(300)
@given(st.sampled_from(FIXTURE_SOURCES), st.randoms(use_true_random=False), st.integers(1, 4))
def test_mutated_fixture_scripts_keep_the_properties(source: str, rng: random.Random, steps: int):
    assert problems_with(mutate(source, rng, steps)) == []


def test_the_mutations_do_what_they_say():
    """Each operator changes the program the way its name says (else the slice tests nothing)."""
    import libcst as cst

    from fuzzing import _guard, _reorder, _syntax_error, _wrap_in_class, _wrap_in_function

    source = "import os\nx = 1\ny = 2\nprint(x, y)\n"
    seen = {name: set() for name in ("reorder", "guard", "function", "class", "error")}
    for seed in range(40):
        rng = random.Random(seed)
        seen["reorder"].add(_reorder(source, rng))
        seen["guard"].add(_guard(source, random.Random(seed)))
        seen["function"].add(_wrap_in_function(source, random.Random(seed)))
        seen["class"].add(_wrap_in_class(source, random.Random(seed)))
        seen["error"].add(_syntax_error(source, random.Random(seed)))
    assert any(s.index("y = 2") < s.index("x = 1") for s in seen["reorder"])
    assert all("if " in s for s in seen["guard"])
    assert all("def _fuzzed():" in s and "_fuzzed()\n" in s for s in seen["function"])
    assert all("class _Fuzzed:" in s for s in seen["class"])
    broken = 0
    for s in seen["error"]:
        try:
            compile(s, "x", "exec")
        except SyntaxError:
            broken += 1
    assert broken >= 10
    for group in ("reorder", "guard", "function", "class"):
        for s in seen[group]:
            cst.parse_module(s)  # still valid Python
