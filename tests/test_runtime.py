"""runtime_checks on real 2-process gloo runs: every diagnosis, with rank, op and line."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO
from runtime_checks.pytest_plugin import processes_running

pytest.importorskip("torch")
pytest.importorskip("accelerate")

RUNTIME = REPO / "fixtures" / "runtime"


def site(row):
    return (os.path.basename(row["site"]["file"]), row["site"]["line"]) if row["site"] else None


@pytest.mark.parametrize("script", ["correct_ddp.py", "slow_rank.py", "early_stop_ok.py"])
def test_correct_runs_exit_zero_with_an_empty_report(distributed_run, script):
    result = distributed_run(RUNTIME / script, timeout=10)
    assert result.exit_code == 0, result.stderr
    assert result.report == {"findings": [], "exit_code": 0}
    assert "[runtime_checks]" not in result.stderr
    assert result.leftover_pids == []


def test_module_form(distributed_run, tmp_path):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text((RUNTIME / "divergence.py").read_text())
    result = distributed_run("mypkg.train", module=True, timeout=20, env={"PYTHONPATH": str(tmp_path)})
    assert (result.exit_code, result.kind) == (10, "divergence")
    assert site(result.row(0)) == ("train.py", 9)


def test_divergence_on_4_ranks_names_the_groups_lines_and_the_branch(distributed_run):
    """Rank 0 alone in the branch, ranks 1-3 together at the next line: two groups, the
    minority first as the likely culprit, every rank's row still in the JSON."""
    result = distributed_run(RUNTIME / "divergence.py", nproc=4, timeout=20)
    assert (result.exit_code, result.kind) == (10, "divergence")
    assert result.finding["seq"] == 1
    rank0 = result.row(0)
    assert (rank0["op"], site(rank0)) == ("accelerator.wait_for_everyone", ("divergence.py", 9))
    for rank in (1, 2, 3):
        assert (result.row(rank)["op"], site(result.row(rank))) == ("accelerator.gather", ("divergence.py", 10))
    assert rank0["guard"].startswith("inside `if accelerator.is_main_process:` at")
    groups = [(g["label"], g["count"], g["role"]) for g in result.finding["groups"]]
    assert groups == [("0", 1, "likely culprit"), ("1-3", 3, None)]
    lines = result.stderr[result.stderr.index("[runtime_checks] DIVERGENCE at collective #1"):].splitlines()
    assert re.fullmatch(r"  rank 0 +in collective accelerator\.wait_for_everyone\(\) +\S*divergence\.py:9 +"
                        r"\(inside `if accelerator\.is_main_process:` at line 8\)  <- likely culprit", lines[2]), lines
    assert re.fullmatch(r"  ranks 1-3 \(3\) +in collective accelerator\.gather\(float32\[2\]\) +\S*divergence\.py:10",
                        lines[3]), lines
    assert re.fullmatch(r"  stacks: rank 0 at \S*divergence\.py:9; ranks 1-3 \(3\) at \S*divergence\.py:10", lines[4])
    assert lines[5].startswith("  why: ") and "ranks 1-3 (3) in `accelerator.gather`" in lines[5]
    assert result.leftover_pids == []


def test_implicit_collective_of_a_shuffled_loader_is_seen(distributed_run):
    result = distributed_run(RUNTIME / "loader_on_main.py", timeout=20)
    assert (result.exit_code, result.kind) == (10, "divergence")
    assert (result.row(0)["op"], site(result.row(0))) == ("loader.iter.rng_sync", ("loader_on_main.py", 10))
    assert (result.row(1)["op"], site(result.row(1))) == ("accelerator.wait_for_everyone", ("loader_on_main.py", 12))


def test_shape_mismatch_reports_every_rank_shape(distributed_run):
    result = distributed_run(RUNTIME / "shape_mismatch.py", timeout=20)
    assert (result.exit_code, result.kind) == (11, "shape_mismatch")
    shapes = {r["rank"]: r["args"][0]["shape"] for r in result.finding["rows"]}
    assert shapes == {0: [1, 2], 1: [2, 2]}
    assert {site(r) for r in result.finding["rows"]} == {("shape_mismatch.py", 7)}


def test_hang_blames_the_rank_that_is_computing(distributed_run, tmp_path):
    result = distributed_run(RUNTIME / "hang.py", timeout=3)
    assert (result.exit_code, result.kind) == (12, "hang")
    assert result.finding["culprit"] == 1
    rank0, rank1 = result.row(0), result.row(1)
    assert (rank0["state"], rank0["op"], site(rank0)) == ("in collective", "accelerator.wait_for_everyone",
                                                          ("hang.py", 10))
    assert (rank1["state"], site(rank1)) == ("computing", ("hang.py", 9))
    assert any("time.sleep(600)" in line for line in rank1["stack"])
    groups = result.finding["extra"]["stack_groups"]
    assert sorted(tuple(g["ranks"]) for g in groups) == [(0,), (1,)]
    assert re.search(r"stacks: rank 1 at \S*hang\.py:9; rank 0 at \S*hang\.py:10", result.stderr)  # the culprit first
    assert result.row(0)["last_completed"]["seq"] == 0
    # gloo: no NCCL flight recorder section, no dump folder (tests/test_flight_recorder.py has NCCL's)
    assert "flight_recorder" not in result.finding["extra"] and "NCCL flight recorder" not in result.stderr
    assert list(tmp_path.glob("*.flight_recorder")) == []
    assert result.leftover_pids == []


def test_rank_exception_blames_the_raiser_not_the_waiter(distributed_run):
    result = distributed_run(RUNTIME / "rank_exception.py", timeout=20)
    assert (result.exit_code, result.kind) == (13, "rank_exception")
    assert result.finding["culprit"] == 1
    assert site(result.row(1)) == ("rank_exception.py", 7)
    assert (result.row(0)["op"], site(result.row(0))) == ("accelerator.wait_for_everyone", ("rank_exception.py", 8))
    assert "ValueError: corrupt sample in shard 1" in result.finding["extra"]["traceback"]


def test_rank_died_is_reported_with_the_blocked_peer(distributed_run):
    result = distributed_run(RUNTIME / "rank_died.py", timeout=20)
    assert (result.exit_code, result.kind) == (14, "rank_died")
    assert result.finding["culprit"] == 1
    assert (result.row(0)["op"], site(result.row(0))) == ("accelerator.wait_for_everyone", ("rank_died.py", 10))
    assert result.leftover_pids == []


@pytest.mark.parametrize(
    "script,culprit,where",
    [
        ("trigger_subset.py", None, {0: ("accelerator.check_trigger", 9), 1: ("accelerator.wait_for_everyone", 11)}),
        ("early_break.py", 1, {0: ("accelerator.reduce", 10)}),
        ("trigger_dangling.py", 1, {}),
    ],
)
def test_trigger_misuse(distributed_run, script, culprit, where):
    result = distributed_run(RUNTIME / script, timeout=20)
    assert (result.exit_code, result.kind) == (15, "trigger_misuse"), result.stderr
    assert result.finding["culprit"] == culprit
    for rank, (op, line) in where.items():
        assert (result.row(rank)["op"], site(result.row(rank))) == (op, (script, line))
    if script == "trigger_dangling.py":
        assert "trigger_dangling.py:9" in result.finding["why"]


def test_not_distributed(distributed_run):
    result = distributed_run(RUNTIME / "not_distributed.py", timeout=20)
    assert (result.exit_code, result.kind) == (16, "not_distributed")
    assert "not_distributed.py:4" in result.finding["why"] and "WORLD_SIZE=2" in result.finding["why"]


def _start(script: str, *extra: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "runtime_checks", "--nproc", "2", "--timeout", "60", *extra,
                             str(RUNTIME / script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait_for_ranks(token: str, n: int, limit: float = 60) -> list[int]:
    deadline = time.time() + limit
    while time.time() < deadline:
        pids = [p for p in processes_running(token) if b"runtime_checks.rank" in open(f"/proc/{p}/cmdline", "rb").read()]
        if len(pids) >= n:
            return pids
        time.sleep(0.2)
    raise AssertionError("ranks did not start")


def _wait_gone(token: str, limit: float) -> list[int]:
    deadline = time.time() + limit
    while time.time() < deadline and processes_running(token):
        time.sleep(0.1)
    return processes_running(token)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_signals_to_the_launcher_leave_no_rank_behind(sig):
    launcher = _start("hang.py")
    try:
        _wait_for_ranks("hang.py", 2)
        time.sleep(2)  # ranks are inside the first barrier / the sleep
        launcher.send_signal(sig)
        launcher.wait(timeout=30)
        assert _wait_gone("hang.py", 15) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid in processes_running("hang.py"):
            os.kill(pid, signal.SIGKILL)


def _free_port() -> int:
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind(("127.0.0.1", 0))
            port = a.getsockname()[1]
            try:
                b.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port pair")


def _torchrun(node_rank: int, port: int, script: str, report: str) -> subprocess.Popen:
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "RUNTIME_CHECKS_REPORT": report,
           "RUNTIME_CHECKS_TIMEOUT": "20"}
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node_rank),
         "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port),
         "-m", "runtime_checks.rank", str(RUNTIME / script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.parametrize("script,kind", [("correct_ddp.py", None), ("divergence.py", "divergence")])
def test_in_rank_guard_under_a_two_node_torchrun(tmp_path, script, kind):
    port = _free_port()
    report = str(tmp_path / "report.json")
    started = time.time()
    nodes = [_torchrun(0, port, script, report), _torchrun(1, port, script, report)]
    outputs = [n.communicate(timeout=120) for n in nodes]
    codes = [n.returncode for n in nodes]
    if kind is None:
        assert codes == [0, 0], outputs
        # rank 0 learns the run's code from the watcher process as soon as every rank has ended
        # (without it, rank 0 would wait 30 s for the others)
        assert time.time() - started < 30
        assert not os.path.exists(report) or json.load(open(report))["findings"] == []
    else:
        assert all(c != 0 for c in codes)
        data = json.load(open(report))
        assert data["findings"][0]["kind"] == kind
        sites = {r["rank"]: (r["op"], r["site"]["line"]) for r in data["findings"][0]["rows"]}
        assert sites == {0: ("accelerator.wait_for_everyone", 9), 1: ("accelerator.gather", 10)}
        assert "DIVERGENCE" in outputs[0][1]
    assert _wait_gone(script, 10) == []


def test_in_rank_guard_reports_an_exception_before_torchrun_stops_rank_0(tmp_path):
    """torchrun stops every rank as soon as one exits: the rank that raised stays until rank 0's
    watcher has written the verdict, then exits with the finding's code."""
    report = str(tmp_path / "report.json")
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "RUNTIME_CHECKS_REPORT": report,
           "RUNTIME_CHECKS_TIMEOUT": "20"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
         "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
         "-m", "runtime_checks.rank", str(RUNTIME / "rank_exception.py")],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    finding = json.load(open(report))["findings"][0]
    assert finding["kind"] == "rank_exception" and finding["culprit"] == 1
    assert "ValueError: corrupt sample in shard 1" in finding["title"]
    assert _wait_gone("rank_exception.py", 10) == []


def _watch_job(cmd: list[str], env: dict[str, str], tmp_path, limit: float = 90) -> tuple[int, str, set[int]]:
    """Run a job to its end; its exit code, stderr, and the pids of every watcher process seen."""
    with open(tmp_path / "stdout", "w") as out, open(tmp_path / "stderr", "w") as err:
        job = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        watchers: set[int] = set()
        deadline = time.time() + limit
        try:
            while job.poll() is None and time.time() < deadline:
                watchers.update(p for p in processes_running("runtime_checks.watcher_process"))
                time.sleep(0.1)
        finally:
            if job.poll() is None:
                job.kill()
    return job.wait(), (tmp_path / "stderr").read_text(), watchers


@pytest.mark.parametrize("mode,culprit,rows", [
    # rank 0 waits alone in a gloo barrier while rank 1 computes
    ("barrier", 1, {0: ("in collective", "accelerator.wait_for_everyone", 17), 1: ("computing", None, 21)}),
    # rank 0 sits in native code that keeps the GIL: no thread of rank 0 runs (the old watcher thread
    # gave no verdict at all); the LEAVE of its last barrier comes from its ring
    ("gil", 0, {0: ("computing", None, None), 1: ("in collective", "accelerator.wait_for_everyone", 19)}),
])
def test_in_rank_watcher_is_a_process_that_a_stuck_rank_0_cannot_silence(tmp_path, mode, culprit, rows):
    report, timeout = tmp_path / "report.json", 3.0
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "RUNTIME_CHECKS_REPORT": str(report),
           "RUNTIME_CHECKS_TIMEOUT": str(timeout), "RUNTIME_CHECKS_PORT": str(_free_port())}
    code, stderr, watchers = _watch_job(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "runtime_checks.rank", str(RUNTIME / "rank0_stuck.py"), mode], env, tmp_path)
    assert code != 0
    finding = json.loads(report.read_text())["findings"][0]
    assert (finding["kind"], finding["culprit"]) == ("hang", culprit), stderr
    for rank, (state, op, line) in rows.items():
        row = next(r for r in finding["rows"] if r["rank"] == rank)
        assert (row["state"], row["op"], row["site"] and row["site"]["line"]) == (state, op, line)
    assert "[runtime_checks] HANG at collective #1" in stderr  # on rank 0's stderr, the launcher's terminal
    anomaly = finding["at"] - finding["detected_after"]  # when the waiting rank entered the collective
    assert report.stat().st_mtime - anomaly <= timeout + 2.0
    if mode == "gil":
        assert "rank 0 is computing since `accelerator.wait_for_everyone` at" in finding["why"]
        assert "rank0_stuck.py:12 (its Python stack did not answer" in finding["why"]
        assert re.search(r"stacks: rank 0: no stack; rank 1 at \S*rank0_stuck\.py:19", stderr)
    # the verdict came from a process of its own, and nothing outlived the job
    assert len(watchers) == 1 and not watchers & {r["pid"] for r in finding["rows"]}
    assert _wait_gone("rank0_stuck.py", 10) == []


def test_the_watcher_process_leaves_when_rank_0_died_before_any_rank_started():
    rank0 = subprocess.Popen([sys.executable, "-c", "pass"])
    rank0.wait()
    proc = subprocess.run([sys.executable, "-m", "runtime_checks.watcher_process", "--store",
                           f"127.0.0.1:{_free_port()}", "--world-size", "2", "--rank0-pid", str(rank0.pid)],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (3, "ready\n")


def test_plain_torchrun_on_cpu_is_reported_as_not_distributed(tmp_path):
    """facts §8 trap 2: without ACCELERATE_USE_CPU every CPU rank silently trains alone."""
    report = str(tmp_path / "report.json")
    env = {k: v for k, v in os.environ.items() if k != "ACCELERATE_USE_CPU"}
    env.update(OMP_NUM_THREADS="1", RUNTIME_CHECKS_REPORT=report, RUNTIME_CHECKS_PORT=str(_free_port()))
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "-m", "runtime_checks.rank", str(RUNTIME / "correct_ddp.py")],
        capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    finding = json.load(open(report))["findings"][0]
    assert finding["kind"] == "not_distributed"
    assert "correct_ddp.py:6" in finding["why"] and "WORLD_SIZE=2" in finding["why"]
    assert _wait_gone("correct_ddp.py", 10) == []


def test_a_finding_writes_the_default_report_in_the_working_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "runtime_checks", "--nproc", "2", "--timeout", "20",
                           str(RUNTIME / "divergence.py")], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 10
    assert "report (stacks, per-rank fingerprints): runtime_checks_report.json" in proc.stderr
    data = json.load(open(tmp_path / "runtime_checks_report.json"))
    assert data["findings"][0]["kind"] == "divergence" and data["exit_code"] == 10


# -- the collectives DDP makes on the user's behalf ------------------------------------------------

@pytest.mark.parametrize("script,ranks", [
    ("ddp_uneven_batches.py", {0: ("ddp.forward.broadcast_buffers", 14), 1: ("accelerator.wait_for_everyone", 18)}),
    ("ddp_extra_forward.py", {0: ("ddp.forward.rebuild_buckets", 11), 1: ("accelerator.wait_for_everyone", 12)}),
    ("ddp_backward_one_rank.py", {0: ("ddp.backward.allreduce", 11), 1: ("accelerator.wait_for_everyone", 12)}),
    ("ddp_nan_skips_backward.py", {0: ("accelerator.backward", 12), 1: ("accelerator.wait_for_everyone", 13)}),
    ("ddp_eval_on_main.py", {0: ("ddp.forward.broadcast_buffers", 12), 1: ("accelerator.wait_for_everyone", 13)}),
])
def test_an_implicit_ddp_collective_against_an_explicit_one_is_a_divergence(distributed_run, script, ranks):
    result = distributed_run(RUNTIME / script, timeout=20)
    assert (result.exit_code, result.kind) == (10, "divergence"), result.stderr
    for rank, (op, line) in ranks.items():
        assert (result.row(rank)["op"], site(result.row(rank))) == (op, (script, line))
    assert result.finding["detected_after"] <= 2.0


@pytest.mark.parametrize("script", ["ddp_eval_unwrapped_ok.py", "ddp_no_sync_ok.py", "ddp_no_grad_forward_ok.py"])
def test_ddp_code_that_does_not_communicate_unevenly_stays_silent(distributed_run, script):
    result = distributed_run(RUNTIME / script, timeout=20)
    assert result.exit_code == 0, result.stderr


# -- a rank that dies in native code still tells what it was doing -------------------------------

def _verdict(result) -> tuple:
    rows = tuple((r["rank"], r.get("op"), site(r)) for r in result.finding["rows"]) if result.finding else ()
    return result.kind, result.finding["culprit"] if result.finding else None, rows


CONCURRENT_RUNS = 5


@pytest.fixture
def busy_cores():
    """Both cores kept busy by processes this test starts (and kills, by PID)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    yield
    for hog in hogs:
        hog.kill()
        hog.wait()


@pytest.mark.parametrize("script,expected", [
    ("native_abort.py", ("shape_mismatch", None, ((0, "accelerate.utils.broadcast_object_list", ("native_abort.py", 9)),
                                                  (1, "accelerate.utils.broadcast_object_list", ("native_abort.py", 9))))),
    ("native_segfault.py", ("rank_died", 0, ((0, "accelerate.utils.broadcast_object_list", ("native_segfault.py", 19)),
                                             (1, "accelerate.utils.broadcast_object_list", ("native_segfault.py", 19))))),
])
def test_a_native_crash_inside_a_collective_gets_the_same_verdict_every_time_under_load(
        distributed_run, busy_cores, script, expected):
    """gloo's SIGABRT on a size mismatch and a SIGSEGV kill the rank before its last batch of
    events is sent; its shared-memory ring still holds the collective it died in.

    The 10 runs go CONCURRENT_RUNS at a time (each its own store, port and ring folder) on top of
    the busy cores: more load than one at a time, and the cores go to the runs, not to the hogs.
    The last run is alone, so that its leftover check sees only its own processes."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=CONCURRENT_RUNS) as pool:
        verdicts = list(pool.map(lambda _: _verdict(distributed_run(RUNTIME / script, timeout=30)), range(10)))
    assert verdicts == [expected] * 10
    last = distributed_run(RUNTIME / script, timeout=30)
    if script == "native_abort.py":
        assert "rank 0: 2 at" in last.finding["why"] and "rank 1: 1 at" in last.finding["why"]
        # the rank whose list was shorter dies; under load gloo's abort sometimes takes its peer too
        assert re.search(r"\b(rank 1|ranks 0,1) then died inside it", last.finding["why"]), last.finding["why"]
    else:
        assert "inside `accelerate.utils.broadcast_object_list(a list of 1)`" in last.finding["why"]
    assert last.leftover_pids == []


def test_the_ring_keeps_the_last_events_and_stale_rings_are_swept(tmp_path, monkeypatch):
    import runtime_checks.ring as ring

    monkeypatch.setattr(ring, "ring_dir", lambda address: str(tmp_path / f"runtime_checks-{os.getuid()}-{address}"))
    path = ring.ring_path(ring.ring_dir("h-1"), 0)
    writer = ring.Ring(path)
    for seq in range(ring.SLOTS + 5):
        writer.record({"kind": "enter", "seq": seq, "args": "x" * (3000 if seq == 7 else 1)})
    events = ring.read_ring(path)
    assert [e["seq"] for e in events] == list(range(5, ring.SLOTS + 5))  # the last SLOTS, oldest first
    ring.sweep_stale(min_age_s=0)
    assert os.path.exists(path)  # its writer (this process) is alive
    dead = ring.ring_path(ring.ring_dir("h-2"), 0)
    ring.Ring(dead)
    with open(dead, "r+b") as f:  # a writer that is gone
        f.seek(16)
        f.write((2**31 - 2).to_bytes(4, "little"))
    ring.sweep_stale(min_age_s=0)
    assert not os.path.exists(os.path.dirname(dead)) and os.path.exists(path)


def test_the_hot_path_encodes_each_event_as_encode_event_does_from_parts_made_once(tmp_path, monkeypatch):
    """A recorded collective's ENTER is assembled from its site's and its tensors' JSON, made once
    per line and per shapes/dtypes/devices; the bytes must be those ``encode_event`` writes of the
    event (ring and store get the same), whatever the values."""
    import torch

    import runtime_checks.guard as G
    import runtime_checks.protocol as P
    from runtime_checks.ring import read_ring

    monkeypatch.setenv(P.ENV_STORE, f"bench-{os.getpid()}:0")
    monkeypatch.setattr("runtime_checks.ring.ring_dir", lambda address: str(tmp_path / "rings"))
    guard = G.Guard(None, 3, 4)
    assert guard.ring is not None

    def call(tensors, extra=None):  # one line: its site is made once
        return guard.run_recorded(lambda: None, (), {}, op="accelerator.gather", op_kind="ALLGATHER",
                                  site=G.site_of(sys._getframe(0)), tensors=tensors, extra=extra)

    small, other = torch.zeros(2, 3), torch.zeros(5, dtype=torch.int64)
    call([small])
    call([small])  # the deferred LEAVE of the first rides on this ENTER (prev_left, prev_left_seq)
    call([other, small])
    call([{"nested": small}, "text"])  # not plain tensors: described each time
    call([], extra={"length": 2})
    enters = [e for e in guard._buffer if e["kind"] == "enter"]
    assert len(enters) == 5 and enters[0]["site"] is enters[1]["site"] and enters[0]["args"] is enters[1]["args"]
    assert enters[1]["prev_left_seq"] == 0 and enters[0]["prev_left"] is None
    assert enters[2]["args"] == G.describe([other, small]) and enters[3]["args"] == G.describe([{"nested": small}, "text"])
    for event, data in zip(guard._buffer, guard._wire):
        assert data == P.encode_event(event)
    ring = read_ring(guard.ring.path)
    leaves = [e for e in ring if e["kind"] == "leave"]
    assert [e["seq"] for e in leaves] == [0, 1, 2, 3, 4] and all(e["rank"] == 3 for e in leaves)
    assert [e for e in ring if e["kind"] == "enter"] == [json.loads(d) for d in guard._wire]
    site = {"file": "/x/train.py", "line": 7, "function": "<module>"}
    for values in ((0, None, None, False, 0.5), (7, 1.25, 6, True, 1e300), (2**70, float("inf"), 1, False, -0.0),
                   (True, float("nan"), None, False, 3.0), (1, 2.0, 0, 1, 4.0)):
        seq, prev_left, prev_seq, on_device, t = values
        event = {"seq": seq, "op": "torch.distributed.all_reduce", "op_kind": "ALLREDUCE", "site": site,
                 "prev_left": prev_left, "prev_left_seq": prev_seq, "args": [{"shape": [1]}], "on_device": on_device,
                 "kind": "enter", "rank": 1, "t": t}
        fast = P.encode_enter(seq, event["op"], event["op_kind"], P.encode_event(site), prev_left, prev_seq,
                              P.encode_event(event["args"]), on_device, 1, t)
        assert fast is None or fast == P.encode_event(event), values
        leave = {"kind": "leave", "rank": 1, "seq": seq, "t": t}
        assert P.encode_leave(1, seq, t) == P.encode_event(leave), values
    assert P.encode_enter(0, "op", "kind", b"{}", None, None, b"[]", False, 0, 1.5) is not None


def test_a_healthy_watchdog_tick_asks_the_store_one_key_and_the_signal_brings_the_abort(tmp_path):
    """The rank's watchdog thread polls ``rc/signal`` alone while nothing is asked of it (one store
    round trip per tick, not one per key); the watcher sets it after the abort or a dump request,
    and the rank then reads them as before: here it exits with the abort's code."""
    code = """
import os, sys, threading, time
from runtime_checks import protocol as P
from runtime_checks.guard import Watchdog

class Store:
    def __init__(self):
        self.data, self.checked = {}, []
    def check(self, keys):
        self.checked.append(tuple(keys))
        return all(k in self.data for k in keys)
    def get(self, key):
        return self.data[key]
    def set(self, key, value):
        self.data[key] = value.encode() if isinstance(value, str) else value

store = Store()
Watchdog(store, 0, threading.get_ident(), os.getppid()).start()
time.sleep(0.4)
print(sorted(set(store.checked)), len(store.checked) >= 3, flush=True)
store.set(P.ABORT, "13")
time.sleep(0.3)
print("still here", flush=True)  # no signal yet: the abort is not looked for
store.set(P.SIGNAL, "13")
time.sleep(5)
print("not aborted", flush=True)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 13, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["[('rc/signal',)] True", "still here"]


# -- the watcher's bookkeeping ---------------------------------------------------------------------

def _enter(rank: int, seq: int, t: float) -> dict:
    return {"kind": "enter", "rank": rank, "seq": seq, "op": "accelerator.wait_for_everyone", "op_kind": "BARRIER",
            "site": {"file": "train.py", "line": 7, "function": "<module>"}, "args": [], "t": t}


def test_an_enter_read_from_the_ring_first_is_not_reopened_by_the_same_enter_from_the_store():
    from runtime_checks.watch import Watcher

    watcher = Watcher(None, world_size=1, timeout=None)
    now = time.time()
    watcher._apply(_enter(0, 0, now))  # from the rank's ring, with its LEAVE
    watcher._apply({"kind": "leave", "rank": 0, "seq": 0, "t": now + 1})
    watcher._apply(_enter(0, 0, now))  # the batch the rank's watchdog thread sent late
    assert watcher.ranks[0].current is None and watcher.ranks[0].collectives[0]["left"] == now + 1


def test_only_ranks_of_the_watchers_host_can_be_seen_dead():
    from runtime_checks.watch import Watcher

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    watcher = Watcher(None, world_size=2, timeout=None)
    for rank, host in ((0, os.uname().nodename), (1, "another-node")):  # the same dead pid on both
        watcher._apply({"kind": "start", "rank": rank, "pid": gone.pid, "host": host, "world_size": 2, "t": 0})
    watcher.note_deaths()
    assert (watcher.ranks[0].died, watcher.ranks[1].died) == (True, False)
