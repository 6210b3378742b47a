"""Re-parsing only the statement an edit touched gives the tree, positions and findings of a
full parse (accel_lint.reparse, used by the language server)."""

from __future__ import annotations

import textwrap

import libcst as cst
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from accel_lint.config import Config
from accel_lint.engine import _parse_trusted, lint_source
from accel_lint.reparse import Layout, Reparser

SOURCE = textwrap.dedent('''\
    # a header comment
    """A trainer, in the shape of the large ones."""
    import os

    from accelerate import Accelerator


    def make_loader(ds):
        return DataLoader(ds, batch_size=8)


    class Trainer:
        """Docstring
    at column 0, and
            indented more."""

        def __init__(self, model, ds):
            self.accelerator = Accelerator()
            self.model = self.accelerator.prepare(model)
            self.loader = make_loader(ds)

        @property
        def is_main(self):
            return self.accelerator.is_main_process

        def train(self):
            for batch in self.loader:  # a comment
                loss = self.model(batch)
                self.accelerator.backward(loss)
            if self.accelerator.is_main_process:
                self.accelerator.save_state("out")

        def evaluate(self):
            total = (1 +
                2)
            return total
        # a trailing comment of the class


    if __name__ == "__main__":
        Trainer(None, []).train()
''')


def _full(data: bytes) -> cst.Module:
    return _parse_trusted(data)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def test_an_edit_inside_a_method_parses_only_that_method():
    reparser = Reparser(_full)
    old, _ = reparser.parse("t.py", SOURCE.encode())
    edited = SOURCE.replace("loss = self.model(batch)", "loss = self.model(batch, step=1)")
    new, layout = reparser.parse("t.py", edited.encode())
    assert reparser.reparsed == 1
    assert new.code == edited
    assert new.deep_equals(_full(edited.encode()))
    # every other statement is the old tree's very node
    old_class = next(s for s in old.body if isinstance(s, cst.ClassDef))
    new_class = next(s for s in new.body if isinstance(s, cst.ClassDef))
    kept = [a is b for a, b in zip(old_class.body.body, new_class.body.body)]
    assert kept == [True, True, True, False, True]
    assert all(a is b for a, b in zip(old.body, new.body) if not isinstance(a, cst.ClassDef))


def test_an_edit_across_two_methods_parses_their_class():
    reparser = Reparser(_full)
    old, _ = reparser.parse("t.py", SOURCE.encode())
    edited = SOURCE.replace("        return self.accelerator.is_main_process\n\n    def train(self):",
                            "        return self.accelerator.is_local_main_process\n\n    def train(self, steps=1):")
    new, _ = reparser.parse("t.py", edited.encode())
    assert reparser.reparsed == 1
    assert new.deep_equals(_full(edited.encode()))
    assert [a is b for a, b in zip(old.body, new.body)] == [True, True, True, True, False, True]


@pytest.mark.parametrize("edit", [
    # a new statement at the end of a class body, after its trailing comment
    lambda s: s.replace("    # a trailing comment of the class\n", "    # a trailing comment of the class\n    x = 1\n"),
    # a method split into two
    lambda s: s.replace("            2)\n        return total", "            2)\n    def extra(self):\n        return 0"),
    # two statements of the module
    lambda s: s.replace("import os\n\nfrom accelerate", "import sys\n\nfrom accelerate.state"),
])
def test_edits_that_a_statement_alone_cannot_hold_parse_the_whole_file(edit):
    reparser = Reparser(_full)
    reparser.parse("t.py", SOURCE.encode())
    edited = edit(SOURCE)
    assert edited != SOURCE
    new, _ = reparser.parse("t.py", edited.encode())
    assert reparser.reparsed == 0
    assert new.code == edited


def test_a_syntax_error_raises_and_the_repair_is_parsed_against_the_last_good_tree():
    reparser = Reparser(_full)
    reparser.parse("t.py", SOURCE.encode())
    broken = SOURCE.replace("total = (1 +", "total = (1 +(")
    with pytest.raises(cst.ParserSyntaxError):
        reparser.parse("t.py", broken.encode())
    repaired = SOURCE.replace("total = (1 +", "total = (3 +")
    new, _ = reparser.parse("t.py", repaired.encode())
    assert reparser.reparsed == 1
    assert new.deep_equals(_full(repaired.encode()))


def test_layout_positions_are_the_whole_file_positions():
    module = _full(SOURCE.encode())
    expected = cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True).resolve(cst.metadata.PositionProvider)
    layout = Layout(module)
    checked = 0
    for unit in layout.starts:
        for node in _descendants(unit):
            assert layout.position_of(node, unit) == expected[node], cst.Module([]).code_for_node(node)
            checked += 1
    assert checked > 300


def _descendants(node: cst.CSTNode):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


# -- any edit: the result is the full parse's ------------------------------------------------------

_SNIPPETS = ["x = 1", "    y = 2", "        z = self.model(3)", "# note", "", "    def m(self):", "        pass",
             "if accelerator.is_main_process:", "            accelerator.wait_for_everyone()", "  )", '"""', "class C:"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["insert", "replace", "delete", "append"]),
                          st.integers(0, 10_000), st.sampled_from(_SNIPPETS)), min_size=1, max_size=4))
def test_any_sequence_of_line_edits_gives_the_full_parse(edits):
    reparser = Reparser(_full)
    reparser.parse("t.py", SOURCE.encode())
    lines = _lines(SOURCE)
    for kind, where, snippet in edits:
        i = where % len(lines)
        if kind == "insert":
            lines.insert(i, snippet + "\n")
        elif kind == "replace":
            lines[i] = snippet + "\n"
        elif kind == "delete" and len(lines) > 1:
            del lines[i]
        else:
            lines[i] = lines[i].rstrip("\n") + "  # " + snippet.strip() + "\n"
        data = "".join(lines).encode()
        try:
            expected = _full(data)
        except cst.ParserSyntaxError:
            with pytest.raises(cst.ParserSyntaxError):
                reparser.parse("t.py", data)
            continue
        module, layout = reparser.parse("t.py", data)
        assert module.code.encode() == data
        assert module.deep_equals(expected)
        positions = cst.metadata.MetadataWrapper(module, unsafe_skip_copy=True).resolve(cst.metadata.PositionProvider)
        for unit in layout.starts:
            assert layout.position_of(unit, unit) == positions[unit]


def test_the_findings_after_edits_are_a_fresh_lint_s():
    reparser = Reparser(_full)
    config = Config()
    lint_source(SOURCE.encode(), "t.py", config, reparser=reparser)
    edited = SOURCE
    for old, new in [('save_state("out")', 'save_state("out2")'),
                     ("        if self.accelerator.is_main_process:\n", "        if self.is_main:\n"),
                     ("    def evaluate(self):\n", "    def evaluate(self):\n        self.accelerator.wait_for_everyone()\n")]:
        edited = edited.replace(old, new)
        incremental = lint_source(edited.encode(), "t.py", config, reparser=reparser)
        fresh = lint_source(edited.encode(), "t.py", config)
        assert incremental.diagnostics == fresh.diagnostics
        assert incremental.diagnostics, "the edited trainer has findings (AL302 at least)"
    assert reparser.reparsed == 3


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.sampled_from([
    "        self.loader = self.accelerator.prepare(self.loader)",
    "        self.model = make_loader(None)",
    "        if self.accelerator.is_main_process:",
    "            self.accelerator.wait_for_everyone()",
    "            return self.accelerator.prepare(ds)",
    "        self.accelerator.save_state('x')",
    "        return self.model",
    "        for batch in make_loader(ds):",
    "            break",
])), min_size=1, max_size=5))
def test_findings_after_any_edits_are_a_fresh_lint_s(edits):
    """The flow walks kept from the last edit give what a fresh analysis gives."""
    reparser = Reparser(_full)
    config = Config()
    lines = _lines(SOURCE)
    lint_source(SOURCE.encode(), "t.py", config, reparser=reparser)
    for where, statement in edits:
        lines.insert(where % len(lines), statement + "\n")
        data = "".join(lines).encode()
        incremental = lint_source(data, "t.py", config, reparser=reparser)
        fresh = lint_source(data, "t.py", config)
        assert incremental.diagnostics == fresh.diagnostics
        assert incremental.errors == fresh.errors


CROSS = textwrap.dedent("""\
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    accelerator = Accelerator()


    def train(model, loader, optimizer):
        for batch in loader:
            accelerator.backward(model(batch))
            optimizer.step()


    def main(model, ds, optimizer):
        loader = DataLoader(ds, batch_size=8)
        model, optimizer = accelerator.prepare(model, optimizer)
        train(model, loader, optimizer)
""")


@pytest.mark.parametrize("edits", [
    # prepared in main: train, which the edit kept, iterates a sharded loader now, and back
    [("loader = DataLoader(ds, batch_size=8)", "loader = accelerator.prepare(DataLoader(ds, batch_size=8))"),
     ("loader = accelerator.prepare(DataLoader(ds, batch_size=8))", "loader = DataLoader(ds, batch_size=8)")],
    # the loop moves out of train and back: what main passes no longer meets a loop
    [("    for batch in loader:\n", "    for batch in []:\n"), ("for batch in []", "for batch in loader")],
])
def test_a_kept_function_is_walked_again_when_what_it_reads_changed(edits):
    reparser = Reparser(_full)
    config = Config()
    text = CROSS
    codes = [[d.code for d in lint_source(text.encode(), "t.py", config, reparser=reparser).diagnostics]]
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
        incremental = lint_source(text.encode(), "t.py", config, reparser=reparser)
        assert incremental.diagnostics == lint_source(text.encode(), "t.py", config).diagnostics
        codes.append([d.code for d in incremental.diagnostics])
    assert reparser.reparsed == len(edits)
    assert codes[0] == ["AL201"] and codes[1] != codes[0] and codes[2] == codes[0]


def test_an_edit_walks_again_only_what_it_changed():
    methods = "".join(f"    def m{i}(self):\n        self.accelerator.wait_for_everyone()\n\n" for i in range(30))
    source = ("from accelerate import Accelerator\n\n\nclass T:\n    def __init__(self):\n"
              "        self.accelerator = Accelerator()\n\n" + methods)
    reparser = Reparser(_full)
    config = Config()
    first = lint_source(source.encode(), "t.py", config, want_fixes=True, reparser=reparser)
    assert first.model.objects.walk_count >= 32
    edited = source.replace("    def m7(self):\n        self.accelerator", "    def m7(self):\n        x = 1\n        self.accelerator")
    again = lint_source(edited.encode(), "t.py", config, want_fixes=True, reparser=reparser)
    objects = again.model.objects
    # the module (a new node after the re-parse) and the edited method; 29 methods and __init__ stand
    assert objects.walk_count == 2 and len(objects.kept) == 30
    assert again.diagnostics == lint_source(edited.encode(), "t.py", config).diagnostics
