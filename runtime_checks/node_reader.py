"""A node's reader of its ranks' rings: ``python -m runtime_checks.node_reader``.

Each rank writes its last fingerprints to a ring in shared memory (:mod:`runtime_checks.ring`),
which only a process of the same host can read, and the watcher runs on global rank 0's host. A
rank of another node that dies in native code never sends the batch naming the collective it died
in, and the watcher cannot even see it die (its pid means nothing there). So, in in-rank mode, the
local rank 0 of every node but rank 0's starts this process first thing, in a session of its own
(the launcher stops ranks by signalling their process group; this process must see them die), and
waits until it is ready before running its script.

It looks at its host's ring files every ``POLL_S``, and at once when a writer dies (it holds a
pidfd of each). The guard removes a rank's ring when the rank finishes or raises, so a ring whose
writer is gone belongs to a rank that died without either; the reader pushes a ``died`` event
carrying the ring's records to the store's event queue, and the watcher applies those records as
it applies a ring of its own host. The watcher accepts it only for the pid the rank announced at
its start, so a stale ring of an earlier run is harmless. Waking on the death itself matters: the
launcher stops the other ranks of the node as soon as it sees one fail (within its 0.1 s monitor
interval), and the watcher blames the rank that died first.

How it ends: the store says the run is over (``rc/abort`` or ``rc/final``, asked every
``STORE_POLL_S``) or cannot be reached (the watcher process has gone), or its spawner is gone and
no ring on this host has a live writer for ``IDLE_S``. Then it waits at most ``CLEANUP_S`` for its
ranks to go, removes the rings of dead writers and exits: it outlives the last process of the job
on its host by a few seconds at most.
"""

from __future__ import annotations

import argparse
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from . import protocol as P

READY = "ready"
POLL_S = 0.05
STORE_POLL_S = 0.5  # how often it asks the store whether the run is over
START_WAIT_S = 60.0  # how long local rank 0 waits for this process (the watcher's store included)
CONNECT_TRY_S = 5.0  # one attempt to reach the store; it retries while the job lives on this host
IDLE_S = 2.0  # spawner gone and no live writer for this long: the job has ended on this host
CLEANUP_S = 3.0  # after the run ended: how long ranks obeying the abort may take to leave


def spawn(address: str, target: str) -> subprocess.Popen:
    """Start this host's node reader for the job whose store will be at ``address`` (called by a
    node's local rank 0; returns at once, :func:`await_ready` waits)."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    # the same runtime_checks as this rank, whatever the working directory of the launch
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH", "")) if p)
    return subprocess.Popen(
        # the script's name on the command line: `ps` shows whose reader it is
        [sys.executable, "-m", "runtime_checks.node_reader", "--store", address, "--spawner-pid",
         str(os.getpid()), "--", target],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env=env,
        start_new_session=True,  # out of the rank's process group, which the launcher signals
    )


def await_ready(proc: subprocess.Popen, limit: float = START_WAIT_S) -> bool:
    """Block until the reader watches this host's rings. The run goes on without it if it does
    not come (a death on this node is then reported as the peers' errors show it)."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], limit)
    line = proc.stdout.readline().decode(errors="replace").strip() if ready else ""
    proc.stdout.close()
    if line != READY:
        print(f"runtime_checks: the node reader did not start (exit code {proc.poll()}); deaths of this node's "
              f"ranks will not be named", file=sys.stderr, flush=True)
    return line == READY


class NodeReader:
    """Finds the ranks of this host that died, and forwards what their rings hold."""

    def __init__(self, store, folder: str, spawner_pid: int) -> None:
        self.store = store
        self.folder = folder
        self.spawner_pid = spawner_pid
        self.host = os.uname().nodename
        self.reported: set[tuple[int, int]] = set()  # (rank, pid) already forwarded
        self.pidfds: dict[int, int] = {}  # live writers' pid -> pidfd, readable once the process has exited

    def run(self, ready: Callable[[], None] | None = None) -> int:
        """Watch until the job has ended on this host; ``ready()`` after the first look."""
        idle_since: float | None = None
        asked = 0.0
        while True:
            alive = self.scan()
            if ready is not None:
                ready()
                ready = None
            if time.time() - asked >= STORE_POLL_S:
                # not at every look: a round trip to a busy watcher can take tens of ms, and a death
                # that happens meanwhile is seen only after it, perhaps together with the next one
                asked = time.time()
                try:
                    if self.store.check([P.ABORT]) or self.store.check([P.FINAL]):
                        break
                except Exception:  # the watcher process has gone: nobody to tell
                    break
            if alive or _alive(self.spawner_pid):
                idle_since = None
            elif idle_since is None:
                idle_since = time.time()
            elif time.time() - idle_since > IDLE_S:
                break
            self.wait(POLL_S)
        for fd in self.pidfds.values():
            os.close(fd)
        self.cleanup()
        return 0

    def wait(self, limit: float) -> None:
        """Sleep ``limit`` seconds, or less: until a writer it watches exits."""
        if not self.pidfds:
            time.sleep(limit)
            return
        select.select(list(self.pidfds.values()), [], [], limit)

    def scan(self) -> bool:
        """Forward each newly dead rank's ring; whether some ring still has a live writer."""
        from .ring import read_ring, rings_in, writer_pid

        alive = False
        now = time.time()  # ranks found dead in one look died at the same time, as far as it knows
        for rank, path in sorted(rings_in(self.folder).items()):
            pid = writer_pid(path)
            if pid is None or (rank, pid) in self.reported:
                continue
            if _alive(pid):
                alive = True
                self._watch(pid)
                continue
            records = read_ring(path)
            if not os.path.exists(path):  # removed after the read began: it finished or raised
                continue
            self.reported.add((rank, pid))
            self.forward(rank, pid, records, now)
        for pid in [p for p in self.pidfds if not _alive(p)]:
            os.close(self.pidfds.pop(pid))
        return alive

    def _watch(self, pid: int) -> None:
        if pid in self.pidfds or not hasattr(os, "pidfd_open"):
            return
        try:
            self.pidfds[pid] = os.pidfd_open(pid)
        except OSError:  # gone meanwhile (the next look reports it), or no pidfd here: polling only
            pass

    def forward(self, rank: int, pid: int, records: list[dict[str, Any]], seen: float) -> None:
        event = {"kind": P.DIED, "rank": rank, "pid": pid, "host": self.host, "t": seen, "ring": records}
        try:
            self.store.queue_push(P.EVENTS_QUEUE, P.encode([event]))
        except Exception:
            pass  # the watcher is gone; the loop ends at its next look at the store

    def cleanup(self) -> None:
        """Wait (bounded) for the ranks of this host to go, then remove the rings they left."""
        from .ring import rings_in, writer_pid

        deadline = time.time() + CLEANUP_S
        while time.time() < deadline and any(_alive(writer_pid(p) or 0) for p in rings_in(self.folder).values()):
            time.sleep(POLL_S)
        for path in rings_in(self.folder).values():
            if not _alive(writer_pid(path) or 0):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        try:
            os.rmdir(self.folder)  # only once it is empty: a live rank's ring stays
        except OSError:
            pass


def _alive(pid: int) -> bool:
    """Running and not a zombie (a dead rank stays a zombie until its launcher reaps it)."""
    if pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def _connect(address: str, spawner_pid: int, folder: str):
    """The watcher's store, which may not be served yet (rank 0's watcher process is starting):
    retried while the job lives on this host, at most ``START_WAIT_S``; ``None`` if it never came."""
    from .guard import connect
    from .ring import rings_in, writer_pid

    deadline = time.time() + START_WAIT_S
    while time.time() < deadline:
        try:
            return connect(address, timeout=CONNECT_TRY_S)
        except Exception:
            if not _alive(spawner_pid) and not any(_alive(writer_pid(p) or 0) for p in rings_in(folder).values()):
                return None
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime_checks.node_reader")
    parser.add_argument("--store", required=True, help="HOST:PORT of the watcher's store")
    parser.add_argument("--spawner-pid", type=int, required=True)
    parser.add_argument("target", nargs=argparse.REMAINDER, help="the script the ranks run (for `ps`)")
    ns = parser.parse_args(argv)
    from .ring import ring_dir, sweep_stale

    folder = ring_dir(ns.store)
    store = _connect(ns.store, ns.spawner_pid, folder)
    if store is None:
        return P.EXIT_CODES["internal"]
    sweep_stale()  # no watcher runs on this host to sweep what killed runs left here

    def ready() -> None:
        print(READY, flush=True)
        os.dup2(2, 1)  # the rank has read the one line it waits for: anything else goes to stderr

    return NodeReader(store, folder, ns.spawner_pid).run(ready)


if __name__ == "__main__":
    sys.exit(main())
