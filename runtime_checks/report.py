"""The verdict: one screen on stderr, and the same content plus stacks as JSON."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from .groups import RankGroup, group_rows, hosts_text, ranks_label, shown


@dataclass
class Finding:
    kind: str  # a key of protocol.EXIT_CODES
    title: str
    seq: int | None
    rows: list[dict[str, Any]]
    culprit: int | None
    why: str
    hint: str
    detected_after: float | None = None  # seconds from the first rank's arrival to the verdict
    extra: dict[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)


def source_line(site: dict | None) -> str:
    if not site or not site.get("file"):
        return ""
    import linecache

    return linecache.getline(site["file"], site["line"]).strip()


def describe_site(site: dict | None) -> str:
    if not site:
        return "?"
    return f"{_short(site['file'])}:{site['line']}"


def _short(path: str) -> str:
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


@lru_cache(maxsize=64)
def _model(path: str):
    try:
        import libcst as cst

        from accel_lint.model import FileModel

        with open(path, "rb") as f:
            return FileModel(cst.parse_module(f.read()))
    except Exception:
        return None


def warm(script: str) -> None:
    """Build the linter's model of ``script`` (and the op walk :func:`_guard_at` reads) before a
    verdict needs it: done by the watcher while the ranks start. Cold, it is most of the time
    between deciding a verdict and printing it (0.37 s for the 130 lines of
    bench/runtime_scale_loop.py on a loaded 2-core machine, more for a longer script)."""
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        return
    model = _model(path)
    if model is None:
        return
    try:
        for call in model.index.calls:
            _guard_at(path, model.line_of(call))
            return
    except Exception:  # a file the model cannot read: the verdict goes without its branch hint
        pass


def rank_guard_hint(site: dict | None) -> str:
    """'inside `if accelerator.is_main_process:` at train.py:86', from the linter's model of the file."""
    if not site or not site.get("file") or not os.path.exists(site["file"]):
        return ""
    guard = _guard_at(site["file"], site["line"])
    if guard is None:
        return ""
    how, cond, line = guard
    where = f"{_short(site['file'])}:{line}"
    if how == "decorator":
        return f"inside a function decorated `@{cond}` at {where}"
    if how == "else":
        return f"in the `else` of `if {cond}:` at {where}"
    if how == "early-exit":
        return f"after the early exit on `{cond}` at {where}"
    return f"inside `if {cond}:` at {where}"


@lru_cache(maxsize=1024)
def _guard_at(path: str, line: int) -> tuple[str, str, int] | None:
    """(how, condition, line) of the rank-dependent branch around ``line``; cached, so 512 ranks
    at one line walk the file's calls once."""
    model = _model(path)
    if model is None:
        return None
    for call in model.index.calls:
        if model.line_of(call) != line:
            continue
        guard = model.rank_guard_of(call)
        if guard is not None:
            return guard.how, model.code(guard.condition), model.line_of(guard.node)
    return None


def _args_text(args: Any) -> str:
    if isinstance(args, dict) and "shape" in args:
        return f"{args['dtype']}[{','.join(str(s) for s in args['shape'])}]"
    if isinstance(args, list):
        inner = [a for a in (_args_text(x) for x in args) if a]
        return ", ".join(inner)
    if isinstance(args, dict):
        return ", ".join(f"{k}={_args_text(v)}" for k, v in args.items())
    return ""


def guard_of_row(row: dict[str, Any]) -> str:
    """The rank-dependent branch around a row's line ("" outside any), from the linter's model."""
    return rank_guard_hint(row.get("site"))


def groups_of(finding: Finding) -> list[RankGroup]:
    """The finding's rows as groups of ranks in the same state, the likely culprit first."""
    return group_rows(finding.rows, finding.culprit, guard_of_row)


def _op_text(row: dict[str, Any]) -> str:
    if row.get("op"):
        return f"{row['op']}({_args_text(row['args'])})"
    if row.get("state") == "finished" and row.get("last_completed"):
        return f"(last: {row['last_completed']['op']})"
    return ""


def _guard_text(group: RankGroup) -> str:
    """The guard, with its location shortened to a line number when it is the row's own file."""
    site = group.row.get("site") or {}
    if not group.guard or not site.get("file"):
        return group.guard
    return group.guard.replace(f" at {_short(site['file'])}:", " at line ")


def group_lines(groups: list[RankGroup]) -> list[str]:
    """One line per group (at most ``MAX_SHOWN``: the rest summed up in the last)."""
    hosts = {h for g in groups for h in g.hosts}
    listed, rest = shown(groups)
    labels = [g.label + hosts_text(g, hosts) for g in listed]
    width = max(len(label) for label in labels) if labels else 0
    lines = []
    for group, label in zip(listed, labels):
        row, guard = group.row, _guard_text(group)
        mark = f"  <- {group.role}" if group.role else ""
        lines.append(f"  {label:<{width}}  {row['state']:<13} {_op_text(row):<45} {describe_site(row.get('site'))}"
                     + (f"   ({guard})" if guard else "") + mark)
    if rest:
        ranks = sorted(r for g in rest for r in g.ranks)
        lines.append(f"  {ranks_label(ranks)} in {len(rest)} other states: see the report's \"groups\"")
    return lines


def stacks_line(stack_groups: list[dict[str, Any]]) -> str:
    """Where the ranks' Python stacks stand, one entry per site (in the watcher's order)."""
    listed, rest = shown(stack_groups)
    # a rank without a stack: finished, dead, or one that could not answer (native code holding the GIL)
    parts = [f"{ranks_label(g['ranks'])} at {describe_site(g['site'])}" if g["site"] else
             f"{ranks_label(g['ranks'])}: no stack" for g in listed]
    if rest:
        parts.append(f"{ranks_label(sorted(r for g in rest for r in g['ranks']))} at {len(rest)} other lines")
    return "  stacks: " + "; ".join(parts)


def render_text(finding: Finding, report_path: str | None, stream=None) -> None:
    stream = stream or sys.stderr
    when = f" (detected {finding.detected_after:.2f} s after it happened)" if finding.detected_after else ""
    seq = f" at collective #{finding.seq}" if finding.seq is not None else ""
    lines = [f"[runtime_checks] {finding.kind.upper()}{seq}{when}", f"  {finding.title}"]
    lines += group_lines(groups_of(finding))
    stack_groups = finding.extra.get("stack_groups")
    if stack_groups and len(stack_groups) > 1:
        lines.append(stacks_line(stack_groups))
    lines.append(f"  why: {finding.why}")
    lines.append(f"  fix: {finding.hint}")
    flight_recorder = finding.extra.get("flight_recorder")
    if flight_recorder:
        from .flight_recorder import text_lines

        lines += text_lines(flight_recorder)
    if report_path:
        lines.append(f"  report (stacks, per-rank fingerprints): {report_path}")
        lines.append(f"  timeline: python -m runtime_checks view {report_path}")
    print("\n".join(lines), file=stream, flush=True)


def to_json(finding: Finding | None, watcher=None, trace: str | None = None) -> dict[str, Any]:
    if finding is None:
        return {"findings": [], "exit_code": 0, **({"trace": trace} if trace else {})}
    from .protocol import EXIT_CODES

    data = asdict(finding)
    for row in data["rows"]:
        row["guard"] = rank_guard_hint(row.get("site")) or None
        row["code"] = source_line(row.get("site")) or None
    data["groups"] = [g.to_json() for g in group_rows(data["rows"], finding.culprit)]
    data["exit_code"] = EXIT_CODES[finding.kind]
    return {"findings": [data], "exit_code": data["exit_code"], **({"trace": trace} if trace else {})}


def write_json(finding: Finding | None, path: str, watcher=None, trace: str | None = None) -> str | None:
    """The report; with a watcher, also the run's timeline (always with a finding: next to the
    report, or at ``trace``), named under the report's top-level ``"trace"`` key. Returns the
    timeline's path (``None`` without one)."""
    if watcher is not None and (finding is not None or trace):
        from .trace import trace_path_for, write_trace

        try:
            trace = write_trace(trace or trace_path_for(path), watcher, finding)
        except OSError as exc:
            print(f"[runtime_checks] could not write the trace: {exc}", file=sys.stderr)
            trace = None
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(to_json(finding, watcher, trace), f, indent=2, default=str)
    os.replace(tmp, path)
    return trace
