"""PyTorch's NCCL flight recorder, read at the verdict: where NCCL itself says each rank is.

ProcessGroupNCCL keeps a ring buffer of the collectives it enqueued (``TORCH_FR_BUFFER_SIZE``
entries, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` before torch 2.8; 2000 by default in torch 2.11, where
pytorch#172843 made the recorder's own default agree with ProcessGroupNCCL's). Each entry has the process group, NCCL's own sequence number (``collective_seq_id``,
per group, from 1), the op (``profiling_name``, e.g. ``nccl:all_reduce``), sizes, dtypes and a
``state``: ``scheduled`` (enqueued on the GPU stream), ``started`` (seen running; only with
``TORCH_NCCL_ENABLE_TIMING=1``, which records start events) or ``completed``.

How a dump is taken: when a verdict leaves ranks inside a collective, the verdict is printed and
written first; then the watcher asks each rank that can dump (its stack reply says so) through the
store; the rank's watchdog thread (not its main thread, which is blocked in the collective) calls
``torch._C._distributed_c10d._dump_nccl_trace()``, the documented on-demand API, and sends the
pickled bytes back through the store. A blocked NCCL wait releases the GIL, so that thread runs;
a rank whose main thread holds the GIL answers neither its stack nor this (torch's own dump
paths need the GIL as well, to symbolize the Python stacks). The section is printed below the
verdict and the report is written again with it; then the ranks are stopped.

The watcher saves the dumps, unmodified, as ``<report stem>.flight_recorder/nccl_trace_rank_<rank>``
(the ``<folder>/<prefix><rank>`` layout of ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``, read by
``torchfrtrace <folder> --prefix nccl_trace_rank_``), and the report gets each rank's last NCCL
collective: grouped lines in the text, one row per rank in the JSON.

Settings: :func:`prepare_environment` sets the buffer size to 2000 entries (``TORCH_FR_BUFFER_SIZE``
from torch 2.8 on, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` before) when the ranks will use GPUs and the
user set neither name (a user's 0 stays 0: no entries then).
``RUNTIME_CHECKS_FLIGHT_RECORDER=0`` turns the whole feature off; ``=1`` also dumps under other
backends that keep a flight recorder (gloo, torch >= 2.8: its entries never leave ``scheduled``).
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shlex
import sys
import time
from typing import Any

from . import protocol as P
from .groups import order_groups, ranks_label, shown

ENV_MODE = "RUNTIME_CHECKS_FLIGHT_RECORDER"  # unset: NCCL only; "0": never; "1": any backend with a recorder
BUFFER_ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # torch reads the first one set
DEFAULT_ENTRIES = "2000"  # torch's own default since 2.11 (and the tutorial's recommendation)
PREFIX = "nccl_trace_rank_"  # torch's default dump file prefix: torchfrtrace --prefix nccl_trace_rank_
# how long the watcher waits for the dumps: a rank answers within 0.05 s plus the dump, which is
# instant except the first in a process (symbolizing its Python stacks imports torch._dynamo: 3-6 s
# measured on a loaded 2-core machine)
WAIT_S = 20.0
# what the report keeps of an entry (the frames stay in the raw dump)
ENTRY_KEYS = ("record_id", "pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name",
              "state", "is_p2p", "input_sizes", "input_dtypes", "output_sizes", "output_dtypes", "time_created_ns",
              "time_discovered_started_ns", "time_discovered_completed_ns", "duration_ms", "retired", "timeout_ms")


# -- settings (launcher and rank) -------------------------------------------------------------------
def mode(environ=os.environ) -> str:
    return environ.get(ENV_MODE, "").strip()


def prepare_environment(environ, cuda: bool) -> None:
    """Turn the recorder on for GPU ranks unless the user chose a buffer size (either name), or
    turned the feature off. Nothing changes for CPU ranks (gloo) unless ``RUNTIME_CHECKS_FLIGHT_RECORDER=1``."""
    wanted = mode(environ)
    if wanted == "0" or not (cuda or wanted == "1"):
        return
    if any(name in environ or name in os.environ for name in BUFFER_ENV):
        return  # the user's setting, 0 included (``environ`` may be what the ranks add to this process's)
    environ[buffer_variable()] = DEFAULT_ENTRIES


def buffer_variable(version: str | None = None) -> str:
    """The buffer size's name for this torch: ``TORCH_FR_BUFFER_SIZE`` from 2.8 on (where the old
    name still works but prints a deprecation warning in every rank), ``TORCH_NCCL_TRACE_BUFFER_SIZE``
    before. (ProcessGroupNCCL itself reads only the old name, for its dump pipe; its default is 2000.)"""
    if version is None:
        try:
            import torch

            version = torch.__version__
        except ImportError:
            return BUFFER_ENV[1]
    try:
        major, minor = (int(part) for part in str(version).split("+")[0].split(".")[:2])
    except ValueError:
        return BUFFER_ENV[0]
    return BUFFER_ENV[0] if (major, minor) >= (2, 8) else BUFFER_ENV[1]


# -- in the rank (its watchdog thread) -----------------------------------------------------------------
def _backend() -> str | None:
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return str(dist.get_backend())
    except Exception:
        pass
    return None


def can_dump() -> bool:
    """Whether this rank has a flight recorder worth dumping: an NCCL process group (or, with
    ``RUNTIME_CHECKS_FLIGHT_RECORDER=1``, any initialized one). Sent with the rank's stack."""
    wanted = mode()
    if wanted == "0":
        return False
    backend = _backend()
    if backend is None:
        return False
    return "nccl" in backend.lower() or wanted == "1"


def dump() -> bytes:
    """This rank's flight recorder, torch's pickle as is; on failure a JSON ``{"error": ...}``."""
    try:
        import torch

        c10d = torch._C._distributed_c10d
        backend = (_backend() or "").lower()
        names = ("_dump_nccl_trace",) if "nccl" in backend else ("_dump_fr_trace", "_dump_nccl_trace")
        for name in names:
            fn = getattr(c10d, name, None)
            if fn is not None:
                try:
                    raw = fn(includeCollectives=True, includeStackTraces=True, onlyActive=False)
                except TypeError:  # a build whose binding takes no keywords: its defaults are the same
                    raw = fn()
                return bytes(raw)
        return _error(f"this torch build has no {' or '.join(names)}")
    except Exception as exc:  # never break the rank for a diagnostic
        return _error(f"{type(exc).__name__}: {exc}")


def _error(text: str) -> bytes:
    return json.dumps({"error": text[:500]}).encode()


# -- parsing (watcher) ---------------------------------------------------------------------------------------
class _PlainData(pickle.Unpickler):
    """torch pickles the dump as plain dicts, lists, tuples, strings and numbers: refuse anything else."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"{module}.{name} is not plain data")


def load(raw: bytes) -> dict[str, Any]:
    """A dump as a dict; ``{"error": ...}`` for an error answer or bytes that are no dump."""
    if raw[:1] == b"{":
        try:
            answer = json.loads(raw.decode("utf-8"))
            return answer if isinstance(answer, dict) else {"error": "unreadable answer"}
        except ValueError:
            return {"error": "unreadable answer"}
    try:
        data = _PlainData(io.BytesIO(raw)).load()
    except Exception as exc:
        return {"error": f"unreadable dump ({type(exc).__name__})"}
    return data if isinstance(data, dict) else {"error": "unreadable dump (not a dict)"}


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _entry(e: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if e is None else {k: _plain(e[k]) for k in ENTRY_KEYS if k in e}


def summarize(dump: dict[str, Any]) -> dict[str, Any]:
    """One rank's row: its last entry (the newest collective NCCL enqueued), the oldest one not
    completed (where its GPU waits), its groups' progress. Missing keys are unknown, never an error."""
    if dump.get("error"):
        return {"error": str(dump["error"])}
    entries = dump.get("entries")
    entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    status = dump.get("pg_status")
    row: dict[str, Any] = {
        "version": _plain(dump.get("version")),
        "entries": len(entries),
        "last": _entry(entries[-1] if entries else None),  # entries come in the order they were recorded
        "oldest_incomplete": _entry(next((e for e in entries if e.get("state") not in ("completed", None)
                                          and not e.get("retired")), None)),
        "pg_status": _plain(status) if isinstance(status, dict) else None,
        "error": None,
    }
    if not entries:
        row["error"] = ("no entries (the flight recorder is off: " + "/".join(BUFFER_ENV) + " = 0? Or it recorded "
                        "no collective)")
    return row


def _seq(entry: dict[str, Any]) -> Any:
    return entry.get("p2p_seq_id") if entry.get("is_p2p") else entry.get("collective_seq_id")


def _pg_text(entry: dict[str, Any]) -> str:
    pg = entry.get("process_group")
    if isinstance(pg, list) and pg:
        name, desc = str(pg[0]), str(pg[1]) if len(pg) > 1 else ""
        return f"{name}:{desc}" if desc and desc != "undefined" else name
    return str(entry.get("pg_id", "?"))


def _completed_up_to(row: dict[str, Any]) -> Any:
    last, status = row.get("last") or {}, row.get("pg_status") or {}
    pg = status.get(str(last.get("pg_id"))) if isinstance(status, dict) else None
    return pg.get("last_completed_collective") if isinstance(pg, dict) else None


def state_of(row: dict[str, Any]) -> str:
    """A rank's row in a few words: ``nccl:all_reduce seq 3 scheduled (completed up to seq 2)``
    (NCCL's sequence number of the collective in its process group, not the guard's #)."""
    if row.get("error"):
        return row["error"] if row.get("entries") == 0 else f"no dump: {row['error']}"
    last = row.get("last") or {}
    seq = _seq(last)
    text = (f"{last.get('profiling_name', '?')} {'p2p ' if last.get('is_p2p') else ''}seq "
            f"{'?' if seq is None else seq} {last.get('state', '?')}")
    done = _completed_up_to(row)
    if (last.get("state") != "completed" and not last.get("is_p2p") and isinstance(done, int) and isinstance(seq, int)
            and 0 <= done < seq):
        text += f" (completed up to seq {done})"
    return text


# -- the watcher's side -----------------------------------------------------------------------------------
def dump_dir(report_path: str) -> str:
    stem = report_path[:-5] if report_path.endswith(".json") else report_path
    return stem + ".flight_recorder"


def command(folder: str, incomplete: bool) -> str:
    return f"torchfrtrace {shlex.quote(folder)} --prefix {PREFIX}" + (" --allow-incomplete-ranks" if incomplete else "")


def request(store, ranks: list[int], wait: float, alive=lambda rank: True) -> dict[int, bytes]:
    """Ask ``ranks`` for their dumps (answered by each rank's watchdog thread) and wait for them,
    at most ``wait`` seconds, and not for a rank that is no longer ``alive``."""
    answers: dict[int, bytes] = {}
    if not ranks:
        return answers
    try:
        store.set(P.FR_REQUEST, str(time.time()))
        store.set(P.SIGNAL, "1")  # (already there: the stack request came first)
    except Exception:
        return answers
    missing, deadline = set(ranks), time.time() + wait
    while missing and time.time() < deadline:
        for rank in sorted(missing):
            key = P.FR_KEY.format(rank=rank)
            try:
                if store.check([key]):
                    answers[rank] = bytes(store.get(key))
                    missing.discard(rank)
                elif not alive(rank):
                    missing.discard(rank)
            except Exception:
                missing.discard(rank)
        if missing:
            time.sleep(0.05)
    return answers


def save(answers: dict[int, bytes], folder: str) -> dict[int, str]:
    """The raw dumps as ``folder/nccl_trace_rank_<rank>`` (error answers are not dumps: not saved).
    Files of an earlier run in the folder go first, so that the analyzer sees this run only."""
    dumps = {rank: raw for rank, raw in answers.items() if raw[:1] != b"{"}
    if not dumps:
        return {}
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.startswith(PREFIX):
            os.remove(os.path.join(folder, name))
    paths = {}
    for rank, raw in sorted(dumps.items()):
        path = os.path.join(folder, f"{PREFIX}{rank}")
        with open(path, "wb") as f:
            f.write(raw)
        paths[rank] = path
    return paths


def _alive(watcher, r) -> bool:
    """Whether a rank may still answer: its process runs (known only for the watcher's own host)."""
    from .watch import process_alive

    return not r.pid or bool(r.host and r.host != watcher.host) or process_alive(r.pid)


def not_asked_reason(r) -> str:
    """Why the watcher did not ask a rank (a watch.RankState) for a dump."""
    if r.died:
        return "the rank died"
    if r.finished:
        return "the rank had finished"
    if r.stack is None:
        return "its Python threads did not answer (native code holding the GIL, or a starved process)"
    return "no NCCL process group on this rank"


def section(watcher, report_path: str, wait: float | None = None) -> dict[str, Any] | None:
    """Ask, save, summarize: the report's ``flight_recorder`` section, or ``None`` where no rank
    has an NCCL flight recorder to dump (gloo: the report stays as it was)."""
    wait = WAIT_S if wait is None else wait
    ranks = watcher.ranks
    asked = [rank for rank, r in sorted(ranks.items())
             if (r.stack or {}).get("flight_recorder") and not (r.died or r.finished)]
    if not asked:
        return None
    answers = request(watcher.store, asked, wait, lambda rank: _alive(watcher, ranks[rank]))
    folder = dump_dir(report_path)
    try:
        paths = save(answers, folder)
    except OSError as exc:
        print(f"[runtime_checks] could not save the flight recorder dumps: {exc}", file=sys.stderr)
        paths = {}
    rows = []
    for rank, r in sorted(ranks.items()):
        if rank in answers:
            row = summarize(load(answers[rank]))
        elif rank in asked:
            alive = _alive(watcher, r)
            row = {"error": f"no answer within {wait:g} s" if alive else "the rank ended before it answered"}
        else:
            row = {"error": not_asked_reason(r)}
        rows.append({"rank": rank, "file": paths.get(rank), **row})
    incomplete = len(paths) < len(ranks)
    recorded = any(row.get("last") for row in rows)  # the analyzer has nothing to say about empty dumps
    return {
        "dir": os.path.abspath(folder) if paths else None,
        "prefix": PREFIX,
        "command": command(folder, incomplete) if paths and recorded else None,
        "ranks": rows,
        "groups": groups(rows, watcher.finding.culprit if watcher.finding else None),
    }


def groups(rows: list[dict[str, Any]], culprit: int | None) -> list[dict[str, Any]]:
    """Ranks whose last NCCL collective is the same (group, sequence number, op, state), in the
    report's order: the culprit's group first, then the smaller groups; ranks without a dump last."""
    out = []
    for dumped in (True, False):
        by_state: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            if bool(row.get("last")) == dumped:
                by_state.setdefault(_group_key(row), []).append(row)
        members = list(by_state.values())
        order, role = order_groups([[r["rank"] for r in same] for same in members], culprit)
        for position, i in enumerate(order):
            first = members[i][0]
            last = first.get("last") or {}
            out.append({"ranks": [r["rank"] for r in members[i]], "role": role if position == 0 and dumped else None,
                        "pg": _pg_text(last) if last else None, "seq": _seq(last), "op": last.get("profiling_name"),
                        "state": last.get("state"), "text": state_of(first)})
    return out


def _group_key(row: dict[str, Any]) -> str:
    last = row.get("last") or {}
    return json.dumps([_pg_text(last) if last else None, state_of(row)])


def add_to_report(watcher, report_path: str, trace: str | None) -> None:
    """After the verdict was printed and written: the ranks' dumps, their section printed below the
    verdict, and the report written again with it (the timeline stays as written). A rank's first
    dump symbolizes its Python stacks, which imports much of torch (torch._dynamo): seconds, which
    the verdict does not wait for."""
    from .report import write_json

    watcher.collect_flight_recorder(report_path)
    section = watcher.finding.extra.get("flight_recorder") if watcher.finding else None
    if not section:
        return
    print("\n".join(text_lines(section, standalone=True)), file=sys.stderr, flush=True)
    try:
        write_json(watcher.finding, report_path, None, trace)
    except OSError as exc:
        print(f"[runtime_checks] could not write the report: {exc}", file=sys.stderr)


def text_lines(fr: dict[str, Any], standalone: bool = False) -> list[str]:
    """The report's short section: one line per group of ranks (at most ``MAX_SHOWN``), the command.
    ``standalone``: printed on its own after the verdict (a ``[runtime_checks]`` heading)."""
    grps = fr.get("groups") or []
    pgs = {g.get("pg") for g in grps if g.get("pg")}
    listed, rest = shown(grps)
    labels = [ranks_label(g["ranks"]) for g in listed]
    width = max((len(label) for label in labels), default=0)
    title = "NCCL flight recorder, each rank's last collective (NCCL's sequence number, state):"
    lines = [f"[runtime_checks] {title}" if standalone else f"  {title}"]
    for group, label in zip(listed, labels):
        where = f"  (process group {group['pg']})" if len(pgs) > 1 and group.get("pg") else ""
        lines.append(f"    {label:<{width}}  {group['text']}{where}")
    if rest:
        others = sorted(r for g in rest for r in g["ranks"])
        lines.append(f"    {ranks_label(others)} in {len(rest)} other states: see the report's \"flight_recorder\"")
    if fr.get("command"):
        lines.append(f"  NCCL dumps: {fr['command']}")
    return lines

