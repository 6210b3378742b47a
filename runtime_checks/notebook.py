"""``notebook_launch``: Accelerate's ``notebook_launcher``, guarded.

    from runtime_checks import notebook_launch
    report = notebook_launch(training_function, args=(model,), num_processes=2, timeout=60)
    report            # in Jupyter: a table of the verdict; elsewhere: the text verdict

Runs ``fn(*args)`` on ``num_processes`` ranks forked from this process (a function defined in a
notebook cannot be pickled for a fresh interpreter; Accelerate's launcher forks for the same
reason), each with the guard installed, and watches them from a thread of this process exactly
as ``python -m runtime_checks`` does. Returns a :class:`NotebookReport`. When the kernel is
interrupted (Ctrl-C, "Interrupt kernel"), every rank is killed before ``KeyboardInterrupt``
propagates: no process is left behind.
"""

from __future__ import annotations

import html
import io
import os
import shutil
import signal
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from . import protocol as P
from .groups import ranks_cell
from .report import Finding, groups_of, render_text, to_json, write_json


@dataclass
class NotebookReport:
    """The outcome of a guarded notebook launch."""

    kind: str  # "ok" or a finding kind (divergence, hang, ...)
    exit_code: int
    finding: Finding | None
    report_path: str | None
    timeline: str = ""  # the run's collectives per rank, as inline SVG

    @property
    def ok(self) -> bool:
        return self.finding is None

    def text(self) -> str:
        if self.finding is None:
            return "[runtime_checks] ok: every rank finished, nothing to report"
        buffer = io.StringIO()
        render_text(self.finding, self.report_path, stream=buffer)
        return buffer.getvalue().rstrip()

    def to_dict(self) -> dict[str, Any]:
        return to_json(self.finding)

    def __str__(self) -> str:
        return self.text()

    __repr__ = __str__

    def _rows(self) -> list[tuple[str, ...]]:
        """One row per group of ranks in the same state (runtime_checks.groups), the likely culprit first."""
        rows = []
        for group in (groups_of(self.finding) if self.finding else []):
            site = group.row.get("site") or {}
            where = f"{os.path.basename(site.get('file') or '?')}:{site.get('line') or '?'}"
            rows.append((ranks_cell(group.ranks), group.row.get("state") or "", group.row.get("op") or "", where,
                         group.role or ""))
        return rows

    def _repr_markdown_(self) -> str:
        if self.finding is None:
            return "**runtime_checks: ok** — every rank finished, nothing to report"
        f = self.finding
        lines = [f"**runtime_checks: {f.kind.upper()}** — {f.title}", "",
                 "| ranks | state | collective | where | |", "|---|---|---|---|---|"]
        lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in self._rows()]
        lines += ["", f"**why:** {f.why}", "", f"**fix:** {f.hint}"]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if self.finding is None:
            return "<p><b>runtime_checks: ok</b> &mdash; every rank finished, nothing to report</p>"
        f = self.finding
        cells = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in self._rows())
        return (f"<p><b>runtime_checks: {html.escape(f.kind.upper())}</b> &mdash; {html.escape(f.title)}</p>"
                "<table><thead><tr><th>ranks</th><th>state</th><th>collective</th><th>where</th><th></th></tr></thead>"
                f"<tbody>{cells}</tbody></table><p><b>why:</b> {html.escape(f.why)}</p>"
                f"<p><b>fix:</b> {html.escape(f.hint)}</p>{self.timeline}")


def notebook_launch(fn: Callable[..., Any], args: tuple = (), num_processes: int = 2, timeout: float | None = None,
                    report: str | None = None, verbose: bool = False) -> NotebookReport:
    """Run ``fn(*args)`` on ``num_processes`` guarded ranks and return the verdict."""
    import torch
    from torch.distributed import TCPStore

    from .launch import _WatchThread, prepare_environment
    from .watch import Watcher

    _refuse_unsafe_fork(torch)
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    environ = {P.ENV_STORE: f"127.0.0.1:{store.port}", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port()),
               "WORLD_SIZE": str(num_processes), "LOCAL_WORLD_SIZE": str(num_processes)}
    prepare_environment(environ, torch.cuda.is_available())
    watcher = Watcher(store, num_processes, timeout)
    from .ring import ring_dir

    watcher.ring_dir = ring_dir(environ[P.ENV_STORE])
    watch = _WatchThread(watcher, report)
    watch.start()
    pids: list[int] = []
    try:
        for rank in range(num_processes):
            pid = os.fork()
            if pid == 0:  # the rank: never returns
                _rank_main(fn, args, rank, environ, verbose)
            pids.append(pid)
        codes = _wait(pids, watch)
    except BaseException:  # KeyboardInterrupt from the kernel, or anything else: leave nothing behind
        _kill(pids)
        watch.stop()
        raise
    watch.stop()
    watcher.drain()
    watcher.settle = 0.0
    finding = watch.finding
    if finding is None:
        failed = {rank: code for rank, code in enumerate(codes) if code}
        finding = watcher.check() if failed else watcher.check_at_end()
        if finding is not None:
            watch.conclude(finding, stop_ranks=False)
    if finding is None and report:
        write_json(None, report, watcher)
    shutil.rmtree(watcher.ring_dir, ignore_errors=True)
    from .trace import chrome_trace
    from .view import timeline_svg

    timeline = timeline_svg(chrome_trace(watcher, finding), finding.culprit if finding else None)
    return NotebookReport("ok" if finding is None else finding.kind,
                          0 if finding is None else P.EXIT_CODES[finding.kind], finding,
                          (report or P.DEFAULT_REPORT) if finding else report, timeline)


def _refuse_unsafe_fork(torch) -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        raise RuntimeError("CUDA is already initialized in this process, and forked ranks cannot use it: restart "
                           "the kernel and call notebook_launch before anything touches the GPU")
    try:
        from accelerate.state import AcceleratorState

        if AcceleratorState._shared_state:
            raise RuntimeError("an Accelerator already exists in this process: create it inside the launched "
                               "function, not in a notebook cell (as with accelerate's notebook_launcher)")
    except ImportError:
        pass


def _one_cpu_thread_after_fork() -> None:
    """A kernel that ran a torch CPU op before the launch has started GNU OpenMP's thread pool,
    and a forked child that enters an OpenMP parallel region then waits forever for threads
    that were not forked (a course notebook's single-process loop, then the launch). One
    intra-op thread per rank never enters one. Ranks forked on one machine share its cores
    anyway."""
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(fn: Callable, args: tuple, rank: int, environ: dict, verbose: bool) -> None:
    code = 1
    try:
        os.environ.update(environ)
        os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank)})
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides; Ctrl-C reaches the whole group
        _one_cpu_thread_after_fork()
        from .guard import Guard, Watchdog, connect, die_with_parent
        from .rank import run_guarded

        die_with_parent()
        store = connect(environ[P.ENV_STORE])
        guard = Guard(store, rank, int(environ["WORLD_SIZE"]))
        guard.install()
        Watchdog(store.clone(), rank, threading.get_ident(), os.getppid(), guard).start()
        guard.push(P.START, pid=os.getpid(), host=os.uname().nodename, world_size=int(environ["WORLD_SIZE"]),
                   local_rank=rank, target=getattr(fn, "__name__", "fn"))
        code = run_guarded(guard, lambda: fn(*args))
    except BaseException:
        if verbose:
            import traceback

            traceback.print_exc()
    finally:
        try:
            import sys

            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _wait(pids: list[int], watch) -> list[int]:
    """Exit codes of the ranks; returns early (ranks killed) once the watcher has a verdict."""
    codes: dict[int, int] = {}
    while len(codes) < len(pids):
        for rank, pid in enumerate(pids):
            if rank in codes:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                codes[rank] = os.waitstatus_to_exitcode(status)
        if watch.finding is not None:
            # the watcher stops the ranks itself; reap what is left
            for rank, pid in enumerate(pids):
                if rank not in codes:
                    _, status = os.waitpid(pid, 0)
                    codes[rank] = os.waitstatus_to_exitcode(status)
            break
        time.sleep(0.05)
    return [codes[r] for r in range(len(pids))]


def _kill(pids: list[int]) -> None:
    """Stop the ranks and reap them (they are this process's children)."""
    from .watch import stop_processes

    stop_processes(pids)
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
