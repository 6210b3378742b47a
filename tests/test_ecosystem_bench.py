"""The ecosystem check's bookkeeping (bench/ecosystem.py): which triaged bugs a lint finds."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench" / "ecosystem.py"


@pytest.fixture(scope="module")
def ecosystem():
    spec = importlib.util.spec_from_file_location("ecosystem_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up by name)
    spec.loader.exec_module(module)
    return module


def test_a_missed_row_found_later_counts_as_found_and_the_rest_are_listed(ecosystem):
    key = ecosystem.Key
    table = {
        key("train.py", 10, "AL401", 0): ("TP", "unguarded torch.save"),
        key("train.py", 20, "AL201", 0): ("missed", "eval loader never prepared"),
        key("eval.py", 5, "AL203", 0): ("missed", "gather feeds the metric"),
    }
    findings = [{"path": "train.py", "line": 10, "code": "AL401", "message": "m"},
                {"path": "train.py", "line": 20, "code": "AL201", "message": "m"}]
    result = ecosystem.compare("demo", findings, table)
    assert result["per_rule"]["AL201"]["TP"] == 1
    assert result["per_rule"]["AL203"]["missed"] == 1
    assert result["still_missed"] == ["eval.py:5: AL203 gather feeds the metric"]
    assert result["recall_without_al403"] == round(2 / 3, 3)


def test_a_true_finding_no_longer_reported_counts_against_recall(ecosystem):
    """A row triaged TP that a later lint no longer reports is a real bug missed now: it is
    listed with the still-missed ones and lowers recall (it used to vanish from both counts)."""
    key = ecosystem.Key
    table = {
        key("train.py", 10, "AL401", 0): ("TP", "unguarded torch.save"),
        key("train.py", 30, "AL302", 0): ("TP", "main-only save_state"),
        key("train.py", 40, "AL401", 0): ("FP", "guarded by the caller"),
    }
    findings = [{"path": "train.py", "line": 10, "code": "AL401", "message": "m"}]
    result = ecosystem.compare("demo", findings, table)
    assert result["per_rule"]["AL302"] == {"missed": 1, "precision": None}
    assert result["still_missed"] == ["train.py:30: AL302 main-only save_state"]
    assert result["recall_without_al403"] == 0.5
    assert result["gone"] == ["train.py:30: AL302 (TP)", "train.py:40: AL401 (FP)"]
