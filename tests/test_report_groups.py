"""Reports that stay short at any scale: ranks in the same state are one group, the likely
culprit first, in the text verdict, the "why" line, the stacks summary, the JSON, the HTML view
and the notebook table. Synthetic findings of up to 64 ranks, no process started."""

from __future__ import annotations

import io
import json
import time

import pytest

from conftest import REPO
from runtime_checks import protocol as P
from runtime_checks.groups import group_rows, grouped_phrases, order_groups, rank_ranges, ranks_label
from runtime_checks.report import Finding, render_text, to_json

DIVERGENCE = str(REPO / "fixtures" / "runtime" / "divergence.py")  # line 9 is inside `if is_main_process:`
FLOAT2 = [{"shape": [2], "dtype": "float32", "device": "cpu"}]


def row(rank, op="accelerator.gather", line=10, state="in collective", args=FLOAT2, host="node0", file=DIVERGENCE,
        **extra):
    return {"rank": rank, "pid": 1000 + rank, "host": host, "state": state, "op": op, "args": args,
            "site": {"file": file, "line": line, "function": "<module>"}, "last_completed": None, "stack": None,
            **extra}


def divergence_rows(n=64, odd=0):
    """Rank ``odd`` in `wait_for_everyone` at line 9 (under `if is_main_process:`), the rest gather at 10."""
    return [row(r, "accelerator.wait_for_everyone", 9, args=[]) if r == odd else row(r) for r in range(n)]


def text_of(finding, report="runtime_checks_report.json"):
    buffer = io.StringIO()
    render_text(finding, report, stream=buffer)
    return buffer.getvalue().rstrip("\n").split("\n")


def finding_of(rows, kind="divergence", culprit=None, **extra):
    return Finding(kind, "ranks called different collectives at collective #1", 1, rows, culprit,
                   "ranks must call the same collectives in the same order", "move the collective out",
                   detected_after=0.05, extra=extra)


# -- ranges and labels ---------------------------------------------------------------------------

@pytest.mark.parametrize("ranks,text", [
    ([0, 1, 2, 3, 5, 8, 9, 10, 11], "0-3,5,8-11"),
    ([7], "7"),
    ([4, 5], "4,5"),  # two neighbours are not worth a range
    ([11, 3, 2, 1, 3], "1-3,11"),  # any order, duplicates once
    (list(range(512)), "0-511"),
])
def test_rank_ranges_compress_contiguous_ranks(ranks, text):
    assert rank_ranges(ranks) == text


def test_a_label_gives_the_count_when_a_range_hides_it():
    assert ranks_label([31]) == "rank 31"
    assert ranks_label([0, 1]) == "ranks 0,1"
    assert ranks_label(list(range(31))) == "ranks 0-30 (31)"


# -- what makes a group, and its order -----------------------------------------------------------

def test_ranks_group_by_state_op_fingerprint_and_line():
    rows = [row(0), row(1), row(2, args=[{"shape": [3], "dtype": "float32", "device": "cpu"}]), row(3, line=11),
            row(4, state="computing", op=None, args=None), row(5)]
    groups = group_rows(rows, None)
    assert sorted(g.ranks for g in groups) == [(0, 1, 5), (2,), (3,), (4,)]


def test_finished_ranks_group_by_their_last_collective():
    last = lambda op: {"seq": 3, "op": op, "site": None}  # noqa: E731
    rows = [row(r, op=None, args=None, state="finished", last_completed=last("accelerator.gather")) for r in range(3)]
    rows.append(row(3, op=None, args=None, state="finished", last_completed=last("accelerator.reduce")))
    assert sorted(g.ranks for g in group_rows(rows, None)) == [(0, 1, 2), (3,)]


def test_the_minority_comes_first_as_the_likely_culprit():
    groups = group_rows(divergence_rows(8, odd=5), None)
    assert [(g.ranks, g.role) for g in groups] == [((5,), "likely culprit"), ((0, 1, 2, 3, 4, 6, 7), None)]


def test_the_culprit_the_watcher_named_comes_first_even_in_the_larger_group():
    rows = [row(r, state="raised", op=None, args=None, line=7) if r in (2, 3, 4) else row(r) for r in range(6)]
    groups = group_rows(rows, culprit=3)
    assert [(g.ranks, g.role) for g in groups] == [((2, 3, 4), "culprit"), ((0, 1, 5), None)]


def test_a_tie_goes_to_the_group_inside_a_rank_dependent_branch():
    guards = {9: "inside `if accelerator.is_main_process:` at divergence.py:8"}
    rows = [row(0), row(1, "accelerator.wait_for_everyone", 9, args=[])]  # rank 1 is the guarded one here
    groups = group_rows(rows, None, lambda r: guards.get(r["site"]["line"], ""))
    assert [(g.ranks, g.role) for g in groups] == [((1,), "likely culprit"), ((0,), None)]


def test_a_tie_without_evidence_puts_rank_0_first_and_blames_nobody():
    rows = [row(0, line=10), row(1, line=11), row(2, line=10), row(3, line=11)]
    groups = group_rows(rows, None)
    assert [(g.ranks, g.role) for g in groups] == [((0, 2), None), ((1, 3), None)]
    assert order_groups([[1], [0]], None) == ([1, 0], None)


# -- the text verdict ----------------------------------------------------------------------------

def test_a_divergence_on_64_ranks_prints_at_most_12_lines():
    lines = text_of(finding_of(divergence_rows(64, odd=0)))
    assert len(lines) <= 12, "\n".join(lines)
    assert len(lines) == 8  # kind, title, two groups, why, fix, report, timeline
    culprit, rest = lines[2], lines[3]
    assert culprit.startswith("  rank 0 ") and "accelerator.wait_for_everyone()" in culprit
    assert "divergence.py:9" in culprit and culprit.endswith("<- likely culprit")
    assert "(inside `if accelerator.is_main_process:` at line 8)" in culprit
    assert rest.startswith("  ranks 1-63 (63) ") and "accelerator.gather(float32[2])" in rest
    assert "likely culprit" not in rest


def test_64_ranks_in_64_states_still_fit_in_12_lines_stacks_included():
    rows = [row(r, line=100 + r) for r in range(64)]
    stacks = [{"ranks": [r], "site": {"file": DIVERGENCE, "line": 100 + r}} for r in range(64)]
    lines = text_of(finding_of(rows, stack_groups=stacks))
    assert len(lines) <= 12, "\n".join(lines)
    assert lines[6] == "  ranks 4-63 (60) in 60 other states: see the report's \"groups\""
    stack_line = next(line for line in lines if line.startswith("  stacks: "))
    assert stack_line.count(" at ") == 5 and stack_line.endswith("ranks 4-63 (60) at 60 other lines")


def test_the_stacks_summary_names_ranges():
    stacks = [{"ranks": [7], "site": {"file": DIVERGENCE, "line": 9}},
              {"ranks": [r for r in range(64) if r != 7], "site": {"file": DIVERGENCE, "line": 10}}]
    lines = text_of(finding_of(divergence_rows(64, odd=7), stack_groups=stacks))
    assert "  stacks: rank 7 at fixtures/runtime/divergence.py:9; ranks 0-6,8-63 (63) at " \
           "fixtures/runtime/divergence.py:10" in lines


def test_groups_spanning_several_nodes_name_them():
    rows = divergence_rows(16, odd=12)
    for r in rows:
        r["host"] = f"node{r['rank'] // 4}"
    lines = text_of(finding_of(rows))
    assert lines[2].startswith("  rank 12 on node3 ")
    assert lines[3].startswith("  ranks 0-11,13-15 (15) on 4 nodes ")
    groups = to_json(finding_of(rows))["findings"][0]["groups"]
    assert groups[1]["hosts"] == {"node0": [0, 1, 2, 3], "node1": [4, 5, 6, 7], "node2": [8, 9, 10, 11],
                                  "node3": [13, 14, 15]}


def test_one_node_is_not_named():
    assert " on node0" not in "\n".join(text_of(finding_of(divergence_rows(4))))


# -- the JSON ------------------------------------------------------------------------------------

def test_the_json_keeps_every_rank_and_adds_the_groups():
    data = to_json(finding_of(divergence_rows(64, odd=0)))
    finding = json.loads(json.dumps(data, default=str))["findings"][0]
    assert [r["rank"] for r in finding["rows"]] == list(range(64))
    assert [(g["label"], g["count"], g["role"], g["op"]) for g in finding["groups"]] == [
        ("0", 1, "likely culprit", "accelerator.wait_for_everyone"), ("1-63", 63, None, "accelerator.gather")]
    assert finding["groups"][0]["guard"].startswith("inside `if accelerator.is_main_process:`")
    assert finding["groups"][0]["code"].startswith("accelerator.wait_for_everyone()")


# -- the "why" line, from the watcher ------------------------------------------------------------

class FakeStore:
    def set(self, key, value):
        pass


def watcher_of(n, timeout=60.0):
    from runtime_checks.watch import Watcher

    watcher = Watcher(FakeStore(), world_size=n, timeout=timeout)
    watcher.request_stacks = lambda wait=1.5: None
    return watcher


def enter(rank, seq, op, kind, line, t=None):
    return {"kind": P.ENTER, "rank": rank, "seq": seq, "op": op, "op_kind": kind, "on_device": False,
            "site": {"file": DIVERGENCE, "line": line, "function": "<module>"}, "args": [], "t": t or time.time()}


def barrier(rank, seq=0, line=7, t=None):
    return enter(rank, seq, "accelerator.wait_for_everyone", "BARRIER", line, t)


def gather(rank, seq=1, line=10, t=None):
    return enter(rank, seq, "accelerator.gather", "ALLGATHER", line, t)


def test_the_why_of_a_divergence_on_6_ranks_names_groups_not_ranks():
    watcher = watcher_of(6)
    for r in range(6):
        watcher._apply(barrier(r))
        watcher._apply(barrier(r, 1, 9) if r == 0 else gather(r))
    finding = watcher.check()
    assert finding is not None and finding.kind == "divergence"
    assert "at the same point rank 0 in `accelerator.wait_for_everyone` at fixtures/runtime/divergence.py:9, " \
           "ranks 1-5 (5) in `accelerator.gather` at fixtures/runtime/divergence.py:10" in finding.why
    assert "rank 3" not in finding.why


def test_an_extra_collective_is_blamed_on_a_group():
    watcher = watcher_of(5)
    for r in range(5):
        watcher._apply(barrier(r))
        if r == 4:  # rank 4 gathers once more than the others before the barrier at line 12
            watcher._apply(gather(r))
            watcher._apply(barrier(r, 2, 12))
        else:
            watcher._apply(barrier(r, 1, 12))
    finding = watcher.check()
    assert "rank 4 made an extra `accelerator.gather` (or ranks 0-3 (4) skipped it)" in finding.why


def test_a_divergence_waits_briefly_for_the_ranks_still_on_their_way():
    watcher = watcher_of(4)
    for r in range(4):
        watcher._apply(barrier(r))
    watcher._apply(barrier(0, 1, 9))
    watcher._apply(gather(1))
    assert watcher.check() is None  # ranks 2 and 3 are in the next batch
    watcher._apply(gather(2))
    watcher._apply(gather(3))
    finding = watcher.check()
    assert [g.ranks for g in group_rows(finding.rows, None)] == [(0,), (1, 2, 3)]


def test_a_divergence_is_reported_without_a_rank_that_never_comes():
    watcher = watcher_of(4)
    watcher.settle = 0.05
    for r in range(4):
        watcher._apply(barrier(r))
    watcher._apply(barrier(0, 1, 9))
    watcher._apply(gather(1))
    watcher._apply(gather(2))
    assert watcher.check() is None
    time.sleep(0.06)
    finding = watcher.check()
    assert finding is not None and finding.kind == "divergence"
    assert finding.detected_after is not None and finding.detected_after >= 0.05


def test_the_why_of_a_hang_on_64_ranks_names_the_groups():
    watcher = watcher_of(64, timeout=0.01)
    old = time.time() - 1
    for r in range(64):
        watcher._apply(barrier(r, t=old))
        watcher._apply({"kind": P.LEAVE, "rank": r, "seq": 0, "t": old})
        if r in (5, 9):
            watcher.ranks[r].stack = {"site": {"file": DIVERGENCE, "line": 8}}
        else:
            watcher._apply(barrier(r, 1, 9, t=old))
    finding = watcher.check()
    assert finding.kind == "hang" and finding.culprit is None
    assert finding.why.endswith("; ranks 5,9 are computing at fixtures/runtime/divergence.py:8")
    assert "rank 63" not in finding.why
    assert [(g.ranks, g.role) for g in group_rows(finding.rows, None)][0] == ((5, 9), "likely culprit")


def test_the_peers_a_dead_or_raising_rank_blocks_are_grouped():
    from runtime_checks.watch import _waiting_text

    watcher = watcher_of(64)
    for r in range(1, 64):
        watcher._apply(barrier(r))
    text = _waiting_text([watcher.ranks[r] for r in range(1, 64)])
    assert text == "ranks 1-63 (63) wait in `accelerator.wait_for_everyone` at fixtures/runtime/divergence.py:7"


def test_stack_groups_put_the_culprit_then_the_minority_first():
    watcher = watcher_of(6)
    for r in range(6):
        watcher.ranks[r].stack = {"site": {"file": DIVERGENCE, "line": 9 if r == 4 else 10}}
    assert [g["ranks"] for g in watcher.stack_groups()] == [[4], [0, 1, 2, 3, 5]]
    watcher.finding = finding_of([], culprit=2)
    assert [g["ranks"] for g in watcher.stack_groups()] == [[0, 1, 2, 3, 5], [4]]


def test_grouped_phrases_agree_in_number_and_cap_the_list():
    items = [(r, f"is at {r % 7}", f"are at {r % 7}") for r in range(64)]
    text = grouped_phrases(items, limit=3)
    assert text.count(";") == 2 and text.endswith("in 5 other states (see the report)")
    assert grouped_phrases([(0, "waits", "wait"), (1, "waits", "wait")]) == "ranks 0,1 wait"


def test_exit_codes_of_an_unexplained_failure_are_grouped():
    from types import SimpleNamespace

    from runtime_checks.launch import _unexplained_failure

    watcher = SimpleNamespace(ranks={}, _row=lambda r: r)
    finding = _unexplained_failure(watcher, {r: (-9 if r == 17 else -15) for r in range(32)})
    assert finding.culprit == 17
    assert finding.why.endswith("exit codes: rank 17: -9, ranks 0-16,18-31 (31): -15")


# -- the HTML view and the notebook table --------------------------------------------------------

def test_the_view_has_one_table_row_per_group():
    from runtime_checks.view import render

    report = to_json(finding_of(divergence_rows(64, odd=0)))
    page = render(json.loads(json.dumps(report, default=str)), {"traceEvents": []})
    table = page[page.index("<table>"):page.index("</table>")]
    assert table.count("<tr") == 3  # the header and two groups
    assert "<tr class=culprit><td>0</td>" in table and "<td>likely culprit</td>" in table
    assert "<td>1-63 (63)</td>" in table


def test_the_notebook_table_has_one_row_per_group():
    from runtime_checks.notebook import NotebookReport

    report = NotebookReport("divergence", 10, finding_of(divergence_rows(64, odd=0)), None)
    markdown = report._repr_markdown_()
    assert "| 0 | in collective | accelerator.wait_for_everyone | divergence.py:9 | likely culprit |" in markdown
    assert "| 1-63 (63) | in collective | accelerator.gather | divergence.py:10 |  |" in markdown
    assert markdown.count("\n|") == 4  # header, rule, two groups
    assert "<td>1-63 (63)</td>" in report._repr_html_()
