"""One rank of bench/runtime_scale.py: a small DDP loop (gloo, CPU) through Accelerate.

Each step: forward, ``accelerator.backward`` (DDP's gradient all-reduce), ``optimizer.step``,
then ``accelerator.gather`` of the loss (a logging gather, as bench/ddp_loop.py does with
``gather_for_metrics``). With ``SCALE_DIVERGE_STEP`` set, the last rank calls
``accelerator.wait_for_everyone()`` at that step instead of the gather (another collective, on
another line), after writing ``time.time()`` to ``SCALE_ANOMALY_FILE``.

Writes ``$SCALE_OUT/rank<N>.json``: the timed steps' durations, the loop's wall time, VmRSS and
VmHWM at the end of the loop, what the guard sent to the store during the timed steps
(``Guard.sent``; absent without the guard) and, on rank 0, the watcher process's CPU time and
RSS over the same steps (in-rank mode: rank 0's child; launcher mode: the launcher, rank 0's
parent).
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch
from accelerate import Accelerator

STEPS = int(os.environ.get("SCALE_STEPS", "300"))
WARMUP = int(os.environ.get("SCALE_WARMUP", "30"))
DIVERGE = int(os.environ.get("SCALE_DIVERGE_STEP", "-1"))
HIDDEN = int(os.environ.get("SCALE_HIDDEN", "256"))
BATCH = int(os.environ.get("SCALE_BATCH", "8"))
OUT = os.environ.get("SCALE_OUT")
ANOMALY = os.environ.get("SCALE_ANOMALY_FILE")
TICK = os.sysconf("SC_CLK_TCK")


def status_kib(pid: str | int = "self") -> dict:
    """VmRSS and VmHWM of a process, in KiB ({} if it is gone)."""
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, value = line.split(":", 1)
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime
    except (OSError, IndexError, ValueError):
        return None


def watcher_pid() -> int | None:
    """The process that runs the watcher: in-rank mode, rank 0's child runtime_checks.watcher_process;
    launcher mode (python -m runtime_checks), the launcher, which is this rank's parent."""
    me = str(os.getpid())
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = f.read().rsplit(")", 1)[1].split()[1]
            if ppid != me:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"runtime_checks.watcher_process" in f.read():
                    return int(entry)
        except (OSError, IndexError):
            continue
    try:
        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if b"runtime_checks" in argv and b"-m" in argv:
            return os.getppid()
    except OSError:
        pass
    return None


def guard_sent() -> dict | None:
    module = sys.modules.get("runtime_checks.guard")
    guard = getattr(getattr(module, "Guard", None), "active", None) if module else None
    return dict(guard.sent) if guard is not None else None


accelerator = Accelerator()
rank, world = accelerator.process_index, accelerator.num_processes
torch.manual_seed(rank)
xs = torch.randn(WARMUP + STEPS, BATCH, 64)
ys = torch.randint(0, 4, (WARMUP + STEPS, BATCH))
model = torch.nn.Sequential(torch.nn.Linear(64, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
model, optimizer = accelerator.prepare(model, optimizer)
diverges = rank == world - 1 and DIVERGE >= 0
watcher = watcher_pid() if rank == 0 else None
accelerator.wait_for_everyone()

durations = []
sent0 = cpu0 = None
loop_start = time.perf_counter()
for step in range(WARMUP + STEPS):
    if step == WARMUP:
        sent0, cpu0 = guard_sent(), cpu_seconds(watcher) if watcher else None
        loop_start = time.perf_counter()
    t0 = time.perf_counter()
    loss = torch.nn.functional.cross_entropy(model(xs[step]), ys[step])
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
    if diverges and step == DIVERGE:
        anomaly = time.time()
        with open(ANOMALY, "w") as f:
            f.write(repr(anomaly))
        accelerator.wait_for_everyone()  # SCALE-DIVERGE: the planted divergence, on the last rank only
    else:
        accelerator.gather(loss.detach().reshape(1))  # SCALE-GATHER: every rank's collective of the step
    if step >= WARMUP:
        durations.append(time.perf_counter() - t0)
loop_s = time.perf_counter() - loop_start
memory = status_kib()
sent1 = guard_sent()
result = {"rank": rank, "world": world, "steps": STEPS, "warmup": WARMUP, "loop_s": loop_s, "step_s": durations,
          "rss_kib": memory.get("VmRSS"), "hwm_kib": memory.get("VmHWM")}
if sent0 is not None and sent1 is not None:
    result["sent"] = {k: sent1[k] - sent0[k] for k in sent1}
if watcher:
    cpu1 = cpu_seconds(watcher)
    result["watcher"] = {"pid": watcher, "cpu_s": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
                         "rss_kib": status_kib(watcher).get("VmRSS")}
if OUT:
    with open(os.path.join(OUT, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
accelerator.wait_for_everyone()
