"""The run as a timeline: Chrome trace-event JSON (what Perfetto UI and ``chrome://tracing`` open).

One track per rank (``tid`` = rank), a complete slice (``ph: "X"``) per collective with its op,
shapes, call site and duration; a collective still in flight when the run was stopped ends at
the verdict and says so. The finding is a global instant (``ph: "i"``, ``s: "g"``) at the
moment of the verdict, and each rank the finding names gets an instant on its own track; the
culprit's is named ``culprit``. Long runs keep the tail of each rank's collectives the watcher
holds (``KEEP_PER_RANK`` and more).
"""

from __future__ import annotations

import json
import os
from typing import Any

from .report import Finding, _args_text, describe_site

PID = 1  # one process in the trace: the job; ranks are its threads (tracks)


def chrome_trace(watcher, finding: Finding | None) -> dict[str, Any]:
    ranks = sorted(watcher.ranks.values(), key=lambda r: r.rank)
    starts = [c["entered"] for r in ranks for c in r.collectives.values()] + [r.started for r in ranks if r.started]
    t0 = min(starts) if starts else watcher.started
    end = finding.at if finding is not None else max(
        [c.get("left", c["entered"]) for r in ranks for c in r.collectives.values()] or [t0])

    def us(t: float) -> float:
        return round((t - t0) * 1e6, 1)

    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": PID, "tid": 0, "args": {"name": "runtime_checks job"}}]
    for r in ranks:
        events.append({"name": "thread_name", "ph": "M", "pid": PID, "tid": r.rank, "args": {"name": f"rank {r.rank}"}})
        events.append({"name": "thread_sort_index", "ph": "M", "pid": PID, "tid": r.rank,
                       "args": {"sort_index": r.rank}})
        for c in sorted(r.collectives.values(), key=lambda c: c["seq"]):
            left = c.get("left")
            events.append({
                "name": c["op"], "cat": c.get("op_kind") or "collective", "ph": "X", "pid": PID, "tid": r.rank,
                "ts": us(c["entered"]), "dur": max(0.0, round(((left if left is not None else end) - c["entered"]) * 1e6, 1)),
                "args": {"seq": c["seq"], "shapes": _args_text(c.get("args")), "site": describe_site(c.get("site")),
                         "completed": left is not None},
            })
    if finding is not None:
        events.append({"name": f"{finding.kind}: {finding.title}", "ph": "i", "s": "g", "pid": PID, "tid": 0,
                       "ts": us(finding.at), "args": {"why": finding.why, "fix": finding.hint}})
        for row in finding.rows:
            culprit = row["rank"] == finding.culprit
            events.append({"name": "culprit" if culprit else row.get("state", "rank"), "ph": "i", "s": "t",
                           "pid": PID, "tid": row["rank"], "ts": us(finding.at),
                           "args": {"state": row.get("state"), "op": row.get("op"),
                                    "site": describe_site(row.get("site")), "culprit": culprit}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"finding": finding.kind if finding else None, "culprit": finding.culprit if finding else None,
                          "t0": t0, "ranks": len(ranks)}}


def trace_path_for(report_path: str) -> str:
    """``runtime_checks_report.json`` -> ``runtime_checks_report.trace.json``."""
    base = report_path[:-5] if report_path.endswith(".json") else report_path
    return f"{base}.trace.json"


def write_trace(path: str, watcher, finding: Finding | None) -> str:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(chrome_trace(watcher, finding), f, default=str)
    os.replace(tmp, path)
    return path
