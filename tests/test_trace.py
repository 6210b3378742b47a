"""The run's timeline: a Chrome trace (Perfetto, chrome://tracing) with one track per rank and a
slice per collective, written on demand and always with a finding; and the HTML view of it,
opened in a real headless browser where Debian's chromium is installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO

pytest.importorskip("accelerate")
FIXTURES = REPO / "fixtures" / "runtime"


def guarded_run(tmp_path: Path, script: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runtime_checks", "--nproc", "2", "--timeout", "60", *extra,
                           str(FIXTURES / script)], cwd=tmp_path, capture_output=True, text=True, timeout=240)


def check_trace_format(trace: dict, ranks: int) -> list[dict]:
    """The trace-event format's required fields, and one named track per rank."""
    events = trace["traceEvents"]
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= e.keys(), e
        assert e["ph"] in ("X", "i", "M"), e
        if e["ph"] in ("X", "i"):
            assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
            assert {"seq", "shapes", "site"} <= e["args"].keys()
        if e["ph"] == "i":
            assert e["s"] in ("g", "p", "t")
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {r: f"rank {r}" for r in range(ranks)}
    return [e for e in events if e["ph"] == "X"]


def test_a_finding_always_leaves_a_trace_next_to_its_report(tmp_path):
    proc = guarded_run(tmp_path, "divergence.py", "--report", "report.json")
    assert proc.returncode == 10, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["trace"] == "report.trace.json"
    trace = json.loads((tmp_path / "report.trace.json").read_text())
    slices = check_trace_format(trace, 2)
    assert {e["tid"] for e in slices} == {0, 1}
    assert {"accelerator.wait_for_everyone", "accelerator.gather"} <= {e["name"] for e in slices}
    in_flight = [e for e in slices if not e["args"]["completed"]]
    assert {e["tid"] for e in in_flight} == {0, 1}  # both ranks were inside at the verdict
    assert any(e["ph"] == "i" and e["s"] == "g" and e["name"].startswith("divergence") for e in trace["traceEvents"])
    assert "timeline: python -m runtime_checks view report.json" in proc.stderr


def test_trace_on_demand_for_a_clean_run(tmp_path):
    proc = guarded_run(tmp_path, "correct_ddp.py", "--trace", "clean.trace.json")
    assert proc.returncode == 0, proc.stderr
    trace = json.loads((tmp_path / "clean.trace.json").read_text())
    slices = check_trace_format(trace, 2)
    assert slices and all(e["args"]["completed"] for e in slices)
    assert not [e for e in trace["traceEvents"] if e["ph"] == "i"]
    assert not (tmp_path / "runtime_checks_report.json").exists()


def test_the_view_is_a_self_contained_page_and_opens_in_a_browser(tmp_path):
    assert guarded_run(tmp_path, "divergence.py", "--report", "report.json").returncode == 10
    view = subprocess.run([sys.executable, "-m", "runtime_checks", "view", "report.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert view.returncode == 0, view.stderr
    page = tmp_path / view.stdout.strip()
    text = page.read_text()
    assert "<svg" in text and "rank 0" in text and "rank 1" in text and "divergence" in text
    assert "<script" not in text and "src=" not in text and "href=" not in text  # nothing fetched
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("no chromium here to open the page")
    shot = tmp_path / "timeline.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1250,420", page.as_uri()], capture_output=True, timeout=120)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 10_000


def test_the_view_stays_readable_with_8_ranks_and_thousands_of_collectives():
    from runtime_checks.report import Finding
    from runtime_checks.trace import chrome_trace
    from runtime_checks.view import render

    ranks = {}
    for rank in range(8):
        collectives = {seq: {"seq": seq, "op": "accelerator.gather", "op_kind": "ALLGATHER", "site": None,
                             "args": {"dtype": "float32", "shape": [4]}, "entered": 100 + seq * 0.01,
                             "left": 100 + seq * 0.01 + 0.004} for seq in range(3000)}
        ranks[rank] = SimpleNamespace(rank=rank, started=100.0, collectives=collectives)
    watcher = SimpleNamespace(ranks=ranks, started=100.0)
    finding = Finding("hang", "rank 3 stopped", 2999, [{"rank": r, "state": "waiting", "op": None} for r in range(8)],
                      3, "why", "fix", at=131.0)
    trace = chrome_trace(watcher, finding)
    assert len(check_trace_format(trace, 8)) == 24_000
    page = render({"findings": [{"kind": "hang", "title": "t", "why": "w", "hint": "h", "culprit": 3,
                                 "rows": finding.rows}]}, trace)
    assert page.count("<rect") >= 24_000 and "rank 3 (culprit)" in page
    assert len(page) < 12_000_000
