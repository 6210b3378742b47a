"""What CPU runs cannot exercise but NCCL needs, tested on the logic itself: a collective on a
GPU tensor is "in flight" until the GPU has finished it (its CPU call returns at once), the
device of a tensor is part of its fingerprint, and the guard never reads tensor values."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from runtime_checks import protocol as P  # noqa: E402
from runtime_checks.guard import Guard, _on_cuda, describe  # noqa: E402
from runtime_checks.watch import Watcher  # noqa: E402


class FakeEvent:
    def __init__(self):
        self.done = False

    def query(self):
        return self.done


class FakeStore:
    def __init__(self):
        self.pushed = []

    def queue_push(self, key, value):
        self.pushed.append(P.decode(value.encode() if isinstance(value, str) else value))

    def set(self, key, value):
        pass

    def check(self, keys):
        return False


def cuda_like(shape=(2,)):
    return SimpleNamespace(shape=shape, dtype=torch.float32, device=SimpleNamespace(type="cuda"))


def test_fingerprint_has_the_device_type_and_no_values():
    assert describe(torch.zeros(3, 2)) == {"shape": [3, 2], "dtype": "float32", "device": "cpu"}
    assert describe(cuda_like())["device"] == "cuda"
    assert not _on_cuda([torch.zeros(1), 3]) and _on_cuda([torch.zeros(1), cuda_like()])
    assert _on_cuda({"x": [cuda_like()]})


def test_guard_reports_completion_only_when_the_gpu_work_is_done():
    store = FakeStore()
    guard = Guard(store, rank=0, world_size=2)
    first, second = FakeEvent(), FakeEvent()
    guard.left_on_device(0, first)
    guard.left_on_device(1, second)
    second.done = True  # a later event cannot be reported before an earlier one
    guard.poll_device()
    guard.flush(store)
    assert store.pushed == []
    first.done = True
    guard.poll_device()
    guard.flush(store)
    assert [(e["kind"], e["seq"]) for e in store.pushed[0]] == [(P.LEAVE, 0), (P.LEAVE, 1)]


def _watcher(timeout=0.05):
    watcher = Watcher(FakeStore(), world_size=2, timeout=timeout)
    watcher.request_stacks = lambda wait=1.5: None
    return watcher


def enter(rank, seq, op="accelerator.gather", kind="ALLGATHER", on_device=True, t=None, **extra):
    return {"kind": P.ENTER, "rank": rank, "seq": seq, "op": op, "op_kind": kind, "on_device": on_device,
            "site": {"file": "train.py", "line": 10 + seq, "function": "<module>"},
            "args": [{"shape": [2], "dtype": "float32", "device": "cuda"}], "t": t or time.time(), **extra}


def test_a_collective_queued_on_the_gpu_is_where_the_rank_waits():
    watcher = _watcher()
    watcher._apply(enter(0, 0))
    watcher._apply(enter(0, 1))  # the CPU moved on: NCCL calls return before the work is done
    assert watcher.ranks[0].current["seq"] == 0
    watcher._apply({"kind": P.LEAVE, "rank": 0, "seq": 0, "t": time.time()})
    assert watcher.ranks[0].current["seq"] == 1
    watcher._apply({"kind": P.LEAVE, "rank": 0, "seq": 1, "t": time.time()})
    assert watcher.ranks[0].current is None


def test_hang_under_nccl_names_the_queued_collective_and_the_rank_that_never_came():
    watcher = _watcher(timeout=0.05)
    watcher._apply(enter(0, 0, t=time.time() - 1))  # rank 0's GPU waits in collective #0
    time.sleep(0.01)
    finding = watcher._hang()
    assert finding is not None and finding.kind == "hang" and finding.seq == 0
    assert finding.culprit == 1
    row0 = next(r for r in finding.rows if r["rank"] == 0)
    assert row0["state"] == "in collective" and row0["on_device"] is True and row0["site"]["line"] == 10
    assert "queued on its GPU" not in finding.why  # the waiting rank is rank 0; the outlier is described


def test_the_deferred_leave_names_its_collective():
    watcher = _watcher()
    watcher._apply(enter(1, 0, on_device=True))
    watcher._apply(enter(1, 1, op="accelerator.wait_for_everyone", kind="BARRIER", on_device=False))
    # the next ENTER carries the CPU-side LEAVE of #1; #0 is still on the GPU
    watcher._apply(enter(1, 2, prev_left=time.time(), prev_left_seq=1))
    assert sorted(watcher.ranks[1].in_flight) == [0, 2]


def test_a_tensor_on_the_wrong_device_is_a_mismatch():
    watcher = _watcher()
    cpu = enter(1, 0)
    cpu["args"] = [{"shape": [2], "dtype": "float32", "device": "cpu"}]
    watcher._apply(enter(0, 0))
    watcher._apply(cpu)
    finding = watcher._mismatch()
    assert finding is not None and finding.kind == "shape_mismatch" and "devices" in finding.title


def test_a_dead_rank_is_not_left_inside_a_collective_its_peers_completed():
    watcher = _watcher()
    now = time.time()
    for rank in (0, 1):
        watcher._apply(enter(rank, 0, op="accelerator.wait_for_everyone", kind="BARRIER", on_device=False, t=now))
    # rank 0 completed #0 and waits in #1; rank 1 died before its deferred LEAVE of #0 went out
    watcher._apply(enter(0, 1, op="accelerator.wait_for_everyone", kind="BARRIER", on_device=False,
                         prev_left=now + 0.01, prev_left_seq=0))
    watcher.settle_dead(watcher.ranks[1])
    assert watcher.ranks[1].current is None and watcher.ranks[0].current["seq"] == 1
    # a collective nobody completed stays where the dead rank was
    watcher._apply(enter(1, 1, op="accelerator.wait_for_everyone", kind="BARRIER", on_device=False))
    watcher.settle_dead(watcher.ranks[1])
    assert watcher.ranks[1].current["seq"] == 1


def test_launcher_leaves_nccl_and_flight_recorder_settings_alone():
    from runtime_checks.launch import prepare_environment

    user = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1", "NCCL_NVLS_ENABLE": "0", "OMP_NUM_THREADS": "8"}
    on_gpu = dict(user)
    prepare_environment(on_gpu, cuda=True)
    assert {k: on_gpu[k] for k in user} == user
    assert on_gpu["ACCELERATE_DEBUG_MODE"] == "1" and "ACCELERATE_USE_CPU" not in on_gpu
    on_cpu = {}
    prepare_environment(on_cpu, cuda=False)
    assert on_cpu["ACCELERATE_USE_CPU"] == "1" and not any(k.startswith(("TORCH_NCCL", "NCCL")) for k in on_cpu)


def test_default_hang_timeout_stays_below_the_nccl_watchdog():
    watcher = _watcher(timeout=None)
    watcher.user_timeout = None
    watcher._gaps = [0.5]
    assert watcher.timeout() == 30.0
    watcher._gaps = [120.0]  # long evaluations between collectives: 20x would be 40 minutes
    assert watcher.timeout() == 540.0 < 600.0


def test_a_rank_whose_finish_arrives_after_its_exit_was_seen_did_not_die():
    watcher = _watcher()
    watcher.ranks[0].died, watcher.ranks[0].died_at = True, time.time() - 1
    watcher._apply({"kind": P.FINISH, "rank": 0, "seq": 0, "t": time.time()})
    assert watcher._death() is None
