"""runtime_checks across two nodes: two network namespaces on this machine, each with its own
/dev/shm and hostname, joined by a veth pair, one torchrun agent per node (2 x 2 gloo ranks).

Each node's shared memory is private, so the watcher (on node0) cannot read node1's rings: a
rank of node1 that dies is known only through node1's node reader. Needs root, ``ip`` and
``unshare``; skipped otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO
from runtime_checks.pytest_plugin import processes_running

pytest.importorskip("torch")
pytest.importorskip("accelerate")

RUNTIME = REPO / "fixtures" / "runtime"
ADDRESSES = ("10.77.0.1", "10.77.0.2")
RDZV_PORT, STORE_PORT = 29400, 29600  # each namespace has its own ports: nothing else listens there
JOB_LIMIT_S = 120.0  # both agents must have returned by then (a run takes 15-30 s on 2 busy cores)
GONE_LIMIT_S = 20.0  # then every process of the job (watcher, node reader) must be gone


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


class TwoNodes:
    """node0 and node1: a network namespace each, a veth pair between them. Commands run in a
    node get a private mount namespace with a fresh tmpfs on /dev/shm and their own hostname."""

    def __init__(self) -> None:
        tag = str(os.getpid())  # unique among live processes: concurrent runs never share a name
        self.netns = [f"rcmn{tag}a", f"rcmn{tag}b"]
        self.links = [f"rcv{tag}a", f"rcv{tag}b"]  # at most 15 characters
        self.created: list[str] = []  # namespaces this object created (and only those are deleted)
        self.linked = False

    def setup(self) -> None:
        """Create the namespaces and the link, or skip the test saying why."""
        if os.geteuid() != 0:
            pytest.skip("needs root to create network namespaces")
        for tool in ("ip", "unshare", "mount", "hostname"):
            if shutil.which(tool) is None:
                pytest.skip(f"needs `{tool}`")
        steps = []
        for ns in self.netns:
            steps.append(("ip", "netns", "add", ns))
        steps.append(("ip", "link", "add", self.links[0], "type", "veth", "peer", "name", self.links[1]))
        for ns, link, address in zip(self.netns, self.links, ADDRESSES):
            steps += [("ip", "link", "set", link, "netns", ns),
                      ("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", link),
                      ("ip", "-n", ns, "link", "set", link, "up"),
                      ("ip", "-n", ns, "link", "set", "lo", "up")]
        for step in steps:
            done = _run(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot build the two-node network (`{' '.join(step)}`: {done.stderr.strip()})")
            if step[1:3] == ("netns", "add"):
                self.created.append(step[3])
            if step[1:3] == ("link", "add"):
                self.linked = True
        probe = subprocess.run(self.command(1, ["true"]), capture_output=True, text=True, timeout=30)
        if probe.returncode != 0:
            pytest.skip(f"cannot give a node its own /dev/shm and hostname: {probe.stderr.strip()}")

    def command(self, node: int, argv: list[str]) -> list[str]:
        """``argv`` run in ``node``'s namespaces: its network, a private /dev/shm, its hostname."""
        inner = f"mount -t tmpfs tmpfs /dev/shm && hostname node{node} && exec \"$@\""
        return ["ip", "netns", "exec", self.netns[node], "unshare", "--mount", "--uts", "--fork",
                "sh", "-c", inner, "sh", *argv]

    def teardown(self) -> None:
        if self.linked:  # still in this namespace if the setup failed before moving it (else: not found)
            _run("ip", "link", "del", self.links[0])
        for ns in reversed(self.created):  # deleting a namespace takes its end of the veth pair (and the pair) with it
            _run("ip", "netns", "del", ns)


@pytest.fixture
def two_nodes():
    nodes = TwoNodes()
    try:
        nodes.setup()
        yield nodes
    finally:
        nodes.teardown()


def _agent(nodes: TwoNodes, node: int, script: str) -> list[str]:
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"{ADDRESSES[0]}:{RDZV_PORT}",
            "--rdzv-conf", f"is_host={int(node == 0)}", "--node-rank", str(node),
            # MASTER_ADDR is node0's address (its hostname resolves nowhere)
            "--local-addr", ADDRESSES[node],
            "-m", "runtime_checks.rank", str(RUNTIME / script)]
    return nodes.command(node, argv)


def _env(nodes: TwoNodes, node: int, report: Path) -> dict[str, str]:
    return {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
            "GLOO_SOCKET_IFNAME": nodes.links[node],  # gloo cannot find the interface from the hostname
            "RUNTIME_CHECKS_REPORT": str(report), "RUNTIME_CHECKS_PORT": str(STORE_PORT),
            "RUNTIME_CHECKS_TIMEOUT": "60"}


@dataclass
class TwoNodeRun:
    finding: dict
    stderr: str  # node0's: where rank 0's watcher prints the verdict
    died_at: float | None  # when the fixture's rank said it dies (node1's stdout)
    elapsed: float  # until both agents returned
    gone_after: float  # from then until no process of the job was left (at most GONE_LIMIT_S)
    leftover: list[int]  # processes of the job still alive GONE_LIMIT_S after that

    def row(self, rank: int) -> dict:
        return next(r for r in self.finding["rows"] if r["rank"] == rank)

    def line(self, pattern: str) -> str:
        """The verdict's line that matches ``pattern`` (a regular expression) in full."""
        verdict = self.stderr[self.stderr.index("[runtime_checks] "):].splitlines()[:12]
        found = [line for line in verdict if re.fullmatch(pattern, line)]
        assert found, "\n".join(verdict)
        return found[0]


def run_two_nodes(nodes: TwoNodes, script: str, tmp_path: Path) -> TwoNodeRun:
    """Run ``script`` on 2 nodes x 2 ranks, to its end."""
    report = tmp_path / "report.json"
    agents: list[subprocess.Popen] = []
    started = time.time()
    try:
        for node in (0, 1):
            with open(tmp_path / f"node{node}.out", "w") as out, open(tmp_path / f"node{node}.err", "w") as err:
                agents.append(subprocess.Popen(_agent(nodes, node, script), stdout=out, stderr=err,
                                               env=_env(nodes, node, report), start_new_session=True))
        for agent in agents:
            agent.wait(timeout=max(1.0, JOB_LIMIT_S - (time.time() - started)))
        elapsed = time.time() - started
        deadline = time.time() + GONE_LIMIT_S
        while time.time() < deadline and processes_running(script):
            time.sleep(0.2)
        leftover = processes_running(script)
        gone_after = time.time() - started - elapsed
    finally:
        for agent in agents:  # each agent's session: ip -> unshare -> torchrun and its ranks
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        for pid in processes_running(script):  # the watcher and node reader have sessions of their own
            os.kill(pid, signal.SIGKILL)
    stderr = (tmp_path / "node0.err").read_text()
    assert report.exists(), stderr + (tmp_path / "node1.err").read_text()
    dying = re.search(r"rank \d dies at ([0-9.]+)", (tmp_path / "node1.out").read_text())
    run = TwoNodeRun(json.loads(report.read_text())["findings"][0], stderr,
                     float(dying.group(1)) if dying else None, elapsed, gone_after, leftover)
    after = f", verdict {run.finding['at'] - run.died_at:.2f} s after the death" if run.died_at else ""
    print(f"[multinode] {script}: agents returned after {elapsed:.1f} s{after}, nothing of the job left "
          f"{gone_after:.1f} s later")  # shown with -s, or when the test fails
    return run


def test_a_divergence_across_nodes_names_the_node_rank_op_and_line(two_nodes, tmp_path):
    run = run_two_nodes(two_nodes, "multinode_divergence.py", tmp_path)
    assert run.finding["kind"] == "divergence" and run.finding["seq"] == 1
    assert {r["rank"]: (r["host"], r["op"], r["site"]["line"]) for r in run.finding["rows"]} == {
        0: ("node0", "accelerator.gather", 12), 1: ("node0", "accelerator.gather", 12),
        2: ("node1", "accelerator.wait_for_everyone", 11), 3: ("node1", "accelerator.gather", 12)}
    run.line(r"  rank 2 on node1 +in collective accelerator\.wait_for_everyone\(\) +\S*multinode_divergence\.py:11 .*"
             r"<- likely culprit")
    run.line(r"  ranks 0,1,3 on 2 nodes +in collective accelerator\.gather\(float32\[3\]\) +"
             r"\S*multinode_divergence\.py:12")
    assert run.finding["groups"][0]["hosts"] == {"node1": [2]}
    assert run.leftover == [] and run.elapsed < 60


def test_a_rank_killed_on_the_second_node_is_named_by_its_node_reader(two_nodes, tmp_path):
    """Rank 2 (node1) is SIGKILLed while ranks 0, 1 and 3 wait in a barrier. The watcher on node0
    cannot see a pid of node1 die: without node1's reader the verdict blamed a victim's
    "Connection closed by peer"."""
    run = run_two_nodes(two_nodes, "multinode_sigkill.py", tmp_path)
    assert (run.finding["kind"], run.finding["culprit"]) == ("rank_died", 2), run.stderr
    run.line(r"  rank 2 \(pid \d+ on node1\) died without an exception")
    run.line(r"  rank 2 on node1 +died +\? +<- culprit")
    assert re.search(r"rank 2 exited abruptly .* after 1 collectives, the last `accelerator\.wait_for_everyone` at "
                     r"\S*multinode_sigkill\.py:10; ranks? [0-9,]+ wait in `accelerator\.wait_for_everyone` at "
                     r"\S*multinode_sigkill\.py:15", run.finding["why"]), run.finding["why"]
    for rank in (0, 1):
        assert (run.row(rank)["op"], run.row(rank)["site"]["line"]) == ("accelerator.wait_for_everyone", 15)
    assert run.died_at is not None and run.finding["at"] - run.died_at < 5.0
    assert run.leftover == [] and run.elapsed < 60


def test_a_native_abort_inside_a_collective_on_the_second_node_names_the_collective(two_nodes, tmp_path):
    """Rank 3 (node1) dies of SIGABRT inside broadcast_object_list, well within the 50 ms before its
    watchdog thread would send the batch naming it: the collective comes from its ring, read on
    node1 and forwarded by node1's reader. node1's launcher then stops rank 2 too; rank 3 died
    first and is the culprit."""
    run = run_two_nodes(two_nodes, "multinode_native_abort.py", tmp_path)
    assert (run.finding["kind"], run.finding["culprit"]) == ("rank_died", 3), run.stderr
    run.line(r"  rank 3 \(pid \d+ on node1\) died without an exception inside "
             r"`accelerate\.utils\.broadcast_object_list`")
    run.line(r"  rank 3 on node1 +died +accelerate\.utils\.broadcast_object_list\(\) +"
             r"\S*multinode_native_abort\.py:20  <- culprit")
    assert re.search(r"inside `accelerate\.utils\.broadcast_object_list\(a list of 1\)` at "
                     r"\S*multinode_native_abort\.py:20 \(collective #1\)", run.finding["why"]), run.finding["why"]
    for rank in (0, 1):
        assert (run.row(rank)["op"], run.row(rank)["site"]["line"]) == ("accelerate.utils.broadcast_object_list", 20)
    assert run.died_at is not None and run.finding["at"] - run.died_at < 5.0
    assert run.leftover == [] and run.elapsed < 60


# -- the parts, without namespaces -----------------------------------------------------------------

class _QueueStore:
    """What the node reader uses of a TCPStore."""

    def __init__(self, keys: tuple[str, ...] = ()) -> None:
        self.keys = set(keys)
        self.pushed: list[dict] = []

    def check(self, keys: list[str]) -> bool:
        return all(k in self.keys for k in keys)

    def queue_push(self, key: str, value: str) -> None:
        self.pushed += json.loads(value)


def _enter(rank: int, t: float) -> dict:
    return {"kind": "enter", "rank": rank, "seq": 0, "op": "accelerator.gather", "op_kind": "ALLGATHER",
            "site": {"file": "train.py", "line": 9, "function": "<module>"},
            "args": [{"shape": [2], "dtype": "float32"}], "t": t}


def _writer(path: str, then: str) -> subprocess.Popen:
    """A process that writes an ENTER to the ring at ``path``, then runs ``then``."""
    code = (f"import os, time\nfrom runtime_checks.ring import Ring\nring = Ring({path!r})\n"
            f"ring.record({_enter(3, 0.0)!r})\n{then}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def test_the_node_reader_forwards_a_dead_ranks_ring_once_and_cleans_up(tmp_path, monkeypatch):
    import runtime_checks.node_reader as node_reader
    from runtime_checks.ring import ring_path

    monkeypatch.setattr(node_reader, "IDLE_S", 0.3)
    folder = str(tmp_path / "rings")
    dying = _writer(ring_path(folder, 3), "time.sleep(1.0)\nos.abort()")
    finishing = _writer(ring_path(folder, 2), "time.sleep(0.5)\nring.remove()")  # what FINISH does
    spawner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.0)"])
    store = _QueueStore()
    try:
        started = time.time()
        assert node_reader.NodeReader(store, folder, spawner.pid).run() == 0
        took = time.time() - started
    finally:
        for proc in (dying, finishing, spawner):
            proc.kill()
            proc.wait()
    assert [(e["kind"], e["rank"], e["pid"]) for e in store.pushed] == [("died", 3, dying.pid)]
    assert [e["op"] for e in store.pushed[0]["ring"]] == ["accelerator.gather"]
    assert took < 2.0 + 0.3 + 2.0  # the spawner's life, IDLE_S, and slack for a busy machine
    assert not os.path.exists(folder)  # the dead rank's ring went with it


def test_the_node_reader_stops_when_the_watcher_has_concluded(tmp_path):
    import runtime_checks.node_reader as node_reader

    started = time.time()
    store = _QueueStore(keys=("rc/abort",))
    assert node_reader.NodeReader(store, str(tmp_path / "rings"), os.getpid()).run() == 0
    assert time.time() - started < 1.0 and store.pushed == []


def test_the_watcher_takes_a_death_notice_for_the_pid_the_rank_announced_only():
    from runtime_checks.watch import Watcher

    watcher = Watcher(None, world_size=2, timeout=None)
    now = time.time()
    for rank, host, pid in ((0, os.uname().nodename, os.getpid()), (1, "node1", 4242)):
        watcher._apply({"kind": "start", "rank": rank, "pid": pid, "host": host, "world_size": 2, "t": now})
    stale = {"kind": "died", "rank": 1, "pid": 999, "host": "node1", "t": now - 1, "ring": [_enter(1, now - 2)]}
    watcher._apply(stale)  # a ring that an earlier run left on node1
    assert not watcher.ranks[1].died and watcher.ranks[1].count == 0
    watcher._apply({**stale, "pid": 4242})
    finding = watcher.check()
    assert (finding.kind, finding.culprit) == ("rank_died", 1)
    assert finding.title == "rank 1 (pid 4242 on node1) died without an exception inside `accelerator.gather`"
    assert "inside `accelerator.gather(float32[2])` at train.py:9 (collective #0)" in finding.why


def test_victims_errors_wait_longer_for_a_death_on_another_node():
    """Every rank that raised says "connection closed by peer" while a rank of another node has not
    ended: its death notice comes through its node reader, so the watcher waits REMOTE_DEATH_S
    (instead of 1 s) before blaming the first victim."""
    from runtime_checks.watch import REMOTE_DEATH_S, Watcher

    def watcher_with_victim(raised_ago: float) -> Watcher:
        watcher = Watcher(None, world_size=2, timeout=None)
        now = time.time()
        for rank, host in ((0, os.uname().nodename), (1, "node1")):
            watcher._apply({"kind": "start", "rank": rank, "pid": os.getpid(), "host": host, "world_size": 2,
                            "t": now})
        watcher._apply({"kind": "exception", "rank": 0, "type": "RuntimeError", "t": now - raised_ago,
                        "message": "Connection closed by peer [10.77.0.2]:1234", "site": None})
        return watcher

    assert watcher_with_victim(REMOTE_DEATH_S - 1.0).check() is None
    assert watcher_with_victim(REMOTE_DEATH_S + 0.5).check().kind == "rank_exception"
