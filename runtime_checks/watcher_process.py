"""The in-rank mode's watcher, a process of its own: ``python -m runtime_checks.watcher_process``.

Under launchers the user already has (``torchrun -m runtime_checks.rank train.py``, ``accelerate
launch -m runtime_checks.rank train.py``), global rank 0 starts this process before its script
runs. It serves the store every rank pushes its fingerprints to (``MASTER_ADDR:MASTER_PORT+1``),
runs the :class:`~runtime_checks.watch.Watcher` and writes the verdict. It used to be a thread of
rank 0, and a rank 0 stuck in native code that keeps the GIL (or whose threads the process
starves) silenced it: the watcher must never run inside a rank it judges.

What runs where: the process runs on global rank 0's host in a session of its own (torchrun and
``accelerate launch`` stop a rank by signalling its process group, and this process must outlive
the ranks to report their deaths). Its stderr is rank 0's, so the verdict appears where rank 0's
output does (the launcher's terminal); the report JSON goes to ``RUNTIME_CHECKS_REPORT``, else
``runtime_checks_report.json`` in rank 0's working directory. It reads the rings of the ranks of
its own host and sees them die; those of other nodes are watched by each node's reader
(:mod:`runtime_checks.node_reader`), whose ``died`` events arrive in the same queue.

How it ends:

* a verdict: it prints it, writes the report, tells every rank to exit with the finding's code
  (the ``rc/abort`` key, read by each rank's watchdog thread), stops the ranks of its host that
  cannot obey within a grace period (a rank holding the GIL: SIGTERM, then SIGKILL), and exits;
* every rank ended (finished, raised or died): the end-of-run checks, then ``rc/final`` tells
  rank 0 the exit code; it exits once rank 0 has gone (at most ``FINAL_WAIT_S``);
* rank 0 gone before any rank started, or no process of its host alive and no event for
  ``ORPHAN_S``: it exits without a verdict. It never outlives the job by more than that.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import subprocess
import sys
import time
from datetime import timedelta

from . import protocol as P

READY = "ready"
START_WAIT_S = 60.0  # how long rank 0 waits for this process to serve the store
ABORT_GRACE_S = 1.5  # ranks obey the abort within 0.05 s; one that has not by then cannot
FINAL_WAIT_S = 10.0  # after the end-of-run checks: how long rank 0 may take to read its code
ORPHAN_S = 60.0


def spawn(address: str, world_size: int, target: str) -> subprocess.Popen:
    """Start the watcher process for the job whose store will be at ``address`` (called by global
    rank 0; returns at once, :func:`await_ready` waits until the store is served)."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    # the same runtime_checks as this rank, whatever the working directory of the launch
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        # the script's name on the command line: `ps` shows whose watcher it is
        [sys.executable, "-m", "runtime_checks.watcher_process", "--store", address, "--world-size",
         str(world_size), "--rank0-pid", str(os.getpid()), "--", target],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env,
        start_new_session=True,  # out of rank 0's process group, which the launcher signals
    )


def await_ready(proc: subprocess.Popen, limit: float = START_WAIT_S) -> None:
    """Block until the watcher process serves the store; raise if it failed (its own error is
    on the shared stderr already)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], limit)
    line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    proc.stdout.close()
    if line != READY:
        raise RuntimeError(f"runtime_checks: the watcher process did not start (exit code {proc.poll()})")


class WatcherProcess:
    """The loop of the watcher process: watch, decide once, end the job's guard cleanly."""

    def __init__(self, store, address: str, world_size: int, timeout: float | None, report: str | None,
                 trace: str | None, rank0_pid: int) -> None:
        from .ring import ring_dir
        from .watch import Watcher

        self.store = store
        self.watcher = Watcher(store, world_size, timeout)
        self.watcher.ring_dir = ring_dir(address)  # the rings of the ranks of this host
        self.report = report
        self.trace = trace
        self.rank0_pid = rank0_pid
        self.host = os.uname().nodename
        self._last_event = time.time()

    def run(self) -> int:
        from .watch import POLL_S

        w = self.watcher
        try:
            while True:
                if w.drain():
                    self._last_event = time.time()
                finding = w.check()
                if finding is not None:
                    return self._conclude(finding)
                if all(r.finished or r.exception or r.died for r in w.ranks.values()):
                    return self._end_of_run()
                if self._orphaned():
                    return P.EXIT_CODES["internal"]
                time.sleep(POLL_S)
        finally:
            if w.ring_dir is not None:
                shutil.rmtree(w.ring_dir, ignore_errors=True)

    def _conclude(self, finding) -> int:
        from .flight_recorder import add_to_report
        from .report import render_text, write_json

        w = self.watcher
        w.fill_rows_with_stacks()
        path = self.report or P.DEFAULT_REPORT  # a finding always leaves its report behind
        render_text(finding, path)
        trace = write_json(finding, path, w, self.trace)
        add_to_report(w, path, trace)  # after the verdict: a rank's first dump can take seconds
        code = P.EXIT_CODES[finding.kind]
        self._publish(P.ABORT, code)
        self._publish(P.SIGNAL, code)  # after the abort: a rank that sees it finds the abort
        self._publish(P.FINAL, code)
        self._stop_local_ranks()
        return code

    def _end_of_run(self) -> int:
        w = self.watcher
        w.drain()
        w.settle = 0.0  # every rank has ended: no event is still on its way
        finding = w.check_at_end() if all(r.finished for r in w.ranks.values()) else w.check()
        if finding is not None:
            return self._conclude(finding)
        if self.trace:  # asked for a timeline of a clean run
            from .trace import write_trace

            write_trace(self.trace, w, None)
        self._publish(P.FINAL, 0)
        self._wait_gone([self.rank0_pid], FINAL_WAIT_S)  # the store must outlive rank 0's last read
        return 0

    def _publish(self, key: str, code: int) -> None:
        try:
            self.store.set(key, str(code))
        except Exception:  # nobody left to read it
            pass

    def _local_pids(self) -> list[int]:
        pids = {r.pid for r in self.watcher.ranks.values() if r.pid and r.host == self.host}
        return sorted(pids | {self.rank0_pid})

    def _stop_local_ranks(self) -> None:
        """Every rank got the abort; those of this host that are still there after the grace period
        cannot read it (stuck holding the GIL, or their watchdog thread starved): stop them, so
        that the launcher ends the job. Ranks on other hosts obey the abort or lose rank 0."""
        from .watch import process_alive, stop_processes

        pids = self._local_pids()
        self._wait_gone(pids, ABORT_GRACE_S)
        stop_processes([p for p in pids if process_alive(p)])

    @staticmethod
    def _wait_gone(pids: list[int], limit: float) -> None:
        from .watch import process_alive

        deadline = time.time() + limit
        while time.time() < deadline and any(process_alive(p) for p in pids):
            time.sleep(0.05)

    def _orphaned(self) -> bool:
        """No verdict can come any more: rank 0 died before any rank started, or nothing of this
        job is alive on this host and no rank elsewhere has said anything for ``ORPHAN_S``."""
        from .watch import process_alive

        w = self.watcher
        started = any(r.pid for r in w.ranks.values())
        if not started:
            return not process_alive(self.rank0_pid)
        alive = any(process_alive(p) for p in self._local_pids())
        return not alive and time.time() - self._last_event > ORPHAN_S


def _warm_up(target: list[str] | None = None) -> None:
    """Import what the verdict needs (the linter's model of the file, for the rank-dependent
    branch) and build that model of the script while the ranks start, not after the timeout."""
    try:
        import libcst  # noqa: F401

        import accel_lint.model  # noqa: F401

        from . import report, trace  # noqa: F401

        script = [t for t in (target or []) if t != "--"][:1]
        if script:
            report.warm(script[0])
    except Exception:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime_checks.watcher_process")
    parser.add_argument("--store", required=True, help="HOST:PORT to serve the store on")
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--rank0-pid", type=int, required=True)
    parser.add_argument("target", nargs=argparse.REMAINDER, help="the script the ranks run (for `ps`)")
    ns = parser.parse_args(argv)
    from torch.distributed import TCPStore

    host, _, port = ns.store.rpartition(":")
    store = TCPStore(host, int(port), is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    print(READY, flush=True)
    os.dup2(2, 1)  # rank 0 has read the one line it waits for: anything else goes to the shared stderr
    from .ring import sweep_stale

    sweep_stale()
    _warm_up(ns.target)
    timeout = float(os.environ[P.ENV_TIMEOUT]) if os.environ.get(P.ENV_TIMEOUT) else None
    process = WatcherProcess(store, ns.store, ns.world_size, timeout, os.environ.get(P.ENV_REPORT),
                             os.environ.get(P.ENV_TRACE) or None, ns.rank0_pid)
    return process.run()


if __name__ == "__main__":
    sys.exit(main())
