"""Benchmark: the runtime guard at several world sizes (issue 24, deliverable 5).

    python bench/runtime_scale.py [--ranks 4 16 32 64] [--label NAME] [--steps 400] [--repeats 5]

For each world size W it launches the small DDP loop of bench/runtime_scale_loop.py (gloo, CPU,
Accelerate, one ``accelerator.backward`` and one ``accelerator.gather`` per step) with
``torchrun --standalone --nproc-per-node W``:

* ``plain``: the script under torchrun, no guard;
* ``guarded``: the same under ``torchrun ... -m runtime_checks.rank`` (the in-rank mode, the
  way multi-node jobs run it; ``--mode launcher`` uses ``python -m runtime_checks --nproc W``);
* ``divergence``: guarded, and at ``--diverge-step`` the last rank calls
  ``accelerator.wait_for_everyone()`` instead of the gather (another collective on another line).

Every arm has the same environment: ``OMP_NUM_THREADS=1``, ``ACCELERATE_USE_CPU=1``, ``CUDA_VISIBLE_DEVICES=`` (gloo on CPU even on a GPU host) and
``ACCELERATE_DEBUG_MODE=0`` (``--accelerate-debug``). Left unset, the guard turns Accelerate's
debug mode on, which adds a ``gather_object`` of the shapes to every Accelerate collective
(1.5-1.6x on a 2-rank loop, bench/runtime_overhead.py): that is Accelerate's cost, and in both
arms it would pad the step the guard's overhead is divided by. ``--accelerate-debug 1`` measures
the guard as shipped, with debug mode in both arms.

Measured, per W:

* step time: each rank times its ``--steps`` steps after ``--warmup`` (perf_counter around
  the step); a run's value is the median over ranks of each rank's median step. Noise: plain
  and guarded runs are interleaved, ABBA order (plain, guarded, guarded, plain, ...), ``--repeats``
  of each; the overhead is median(guarded runs) / median(plain runs) - 1 (median of medians).
  Also shown: the same on the mean step (loop time / steps, which counts rare stalls the median
  hides), the paired per-repeat overheads, and the plain runs' own spread (max - min over
  median): an overhead smaller than that spread is not resolved by the run;
* time to verdict: the diverging rank writes ``time.time()`` just before its divergent call;
  the verdict's time is when its first line (``[runtime_checks] DIVERGENCE ...``) reached this
  process's pipe (also recorded: the finding's own ``at``, and the report file's mtime);
* the printed verdict: its lines before the ``stacks:`` line, and the first line naming the
  culprit rank (W-1) together with its file:line;
* the store's event rate: ``Guard.sent`` (events, batches, bytes each rank pushed) over the
  timed steps, summed over ranks, divided by the loop time;
* memory: VmRSS at the end of the loop, median over ranks and runs, guarded minus plain; the
  watcher process's RSS and CPU time over the loop (read by rank 0).

Then, without ranks: how fast one watcher drains the queue (events/s, decoding and judging
included, for simulated worlds up to 1024 ranks), and how many requests per second one
TCPStore serves; the projection of where one store and one watcher saturate is computed from
these and written to the JSON (see bench/RUNTIME_SCALE.md for the arithmetic).

At 2 ranks a divergence is a tie (one rank against one, neither inside a rank-dependent branch)
and the verdict rightly blames neither: "culprit named" can only hold from 3 ranks on.

Targets checked at W=64 (the issue's done-when): the report names the culprit rank and line
within 12 lines, the verdict comes within 1 s of the anomaly, the step overhead is <= 2 %.

Every launch runs in its own session under a timeout; on timeout its process group gets
SIGTERM then SIGKILL, and afterwards any process still carrying the launch's
``RUNTIME_SCALE_TOKEN`` in its environment (the watcher process runs in a session of its own)
is killed by pid. Needs only torch, accelerate and this repository. Writes
bench/results/runtime_scale_<label>.json. Not a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
LOOP = HERE / "runtime_scale_loop.py"
TOKEN_VAR = "RUNTIME_SCALE_TOKEN"
TARGET_WORLD = 64
TARGETS = {"report_lines": 12, "verdict_s": 1.0, "overhead_pct": 2.0}


def marker_line(tag: str) -> int:
    for number, line in enumerate(LOOP.read_text().splitlines(), 1):
        if f"# {tag}" in line:
            return number
    raise RuntimeError(f"no '# {tag}' line in {LOOP}")


DIVERGE_LINE = marker_line("SCALE-DIVERGE")
GATHER_LINE = marker_line("SCALE-GATHER")


# -- launching ---------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def token_pids(token: str) -> list[int]:
    """Processes of this user whose environment carries the launch's token (its descendants)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _read_lines(stream, sink: list) -> None:
    for raw in iter(stream.readline, b""):
        sink.append((time.time(), raw.decode(errors="replace").rstrip("\n")))
    stream.close()


def command(arm: str, mode: str, world: int, report: str, hang_timeout: float) -> list[str]:
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(world)]
    if arm == "plain":
        return [*torchrun, str(LOOP)]
    if mode == "launcher":
        return [sys.executable, "-m", "runtime_checks", "--nproc", str(world), "--report", report,
                "--timeout", str(hang_timeout), str(LOOP)]
    return [*torchrun, "-m", "runtime_checks.rank", str(LOOP)]


def launch(arm: str, world: int, args, diverge_step: int = -1) -> dict:
    """One job: run it under a timeout, collect what its ranks and the guard wrote, clean up."""
    token = uuid.uuid4().hex
    tmp = Path(tempfile.mkdtemp(prefix="runtime_scale-"))
    out_dir, report, anomaly = tmp / "out", tmp / "report.json", tmp / "anomaly"
    out_dir.mkdir()
    steps = args.steps if diverge_step < 0 else max(1, diverge_step + 5 - args.warmup)
    env = {**os.environ, TOKEN_VAR: token, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1", "CUDA_VISIBLE_DEVICES": "",
           "ACCELERATE_DEBUG_MODE": args.accelerate_debug,
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p),
           "SCALE_STEPS": str(steps), "SCALE_WARMUP": str(args.warmup), "SCALE_DIVERGE_STEP": str(diverge_step),
           "SCALE_HIDDEN": str(args.hidden), "SCALE_BATCH": str(args.batch), "SCALE_OUT": str(out_dir),
           "SCALE_ANOMALY_FILE": str(anomaly), "RUNTIME_CHECKS_REPORT": str(report),
           "RUNTIME_CHECKS_PORT": str(free_port()), "RUNTIME_CHECKS_TIMEOUT": str(args.hang_timeout)}
    for key in ("RUNTIME_CHECKS_STORE", "RUNTIME_CHECKS_TRACE"):
        env.pop(key, None)
    limit = args.launch_timeout or max(180.0, 60 + 4 * world + 0.05 * steps * world)
    cmd = command(arm, args.mode, world, str(report), args.hang_timeout)
    stdout: list = []
    stderr: list = []
    started = time.time()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    readers = [threading.Thread(target=_read_lines, args=(proc.stdout, stdout), daemon=True),
               threading.Thread(target=_read_lines, args=(proc.stderr, stderr), daemon=True)]
    for r in readers:
        r.start()
    timed_out = False
    try:
        rc = proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        _signal_group(proc.pid, signal.SIGTERM)  # the session this launch was started in
        try:
            rc = proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    wall = time.time() - started
    killed = _reap(token, grace=3.0 if timed_out else 20.0)
    for r in readers:
        r.join(timeout=5)
    job = {"arm": arm, "world": world, "rc": rc, "timed_out": timed_out, "wall_s": wall, "limit_s": limit,
           "stragglers_killed": killed, "ranks": [], "stderr_tail": [line for _, line in stderr[-30:]]}
    for path in sorted(out_dir.glob("rank*.json")):
        job["ranks"].append(json.loads(path.read_text()))
    if report.exists():
        job["report"] = json.loads(report.read_text())
        job["report_mtime"] = report.stat().st_mtime
    if anomaly.exists():
        job["anomaly_t"] = float(anomaly.read_text())
    job["_stderr"] = stderr
    shutil.rmtree(tmp, ignore_errors=True)
    return job


def _reap(token: str, grace: float) -> list[int]:
    """Wait up to ``grace`` s for the launch's processes to end by themselves (the in-rank watcher
    leaves after rank 0), then SIGKILL those left, by pid. Returns the pids killed."""
    deadline = time.time() + grace
    left = [p for p in token_pids(token) if _alive(p)]
    while left and time.time() < deadline:
        time.sleep(0.2)
        left = [p for p in left if _alive(p)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


# -- one run's numbers --------------------------------------------------------------------------
def loop_numbers(job: dict) -> dict | None:
    ranks = job["ranks"]
    if job["timed_out"] or job["rc"] != 0 or len(ranks) != job["world"]:
        return None
    out = {
        "step_median_s": statistics.median(statistics.median(r["step_s"]) for r in ranks),
        "step_mean_s": statistics.median(r["loop_s"] / r["steps"] for r in ranks),
        "loop_s": statistics.median(r["loop_s"] for r in ranks),
        "rss_kib": [r["rss_kib"] for r in ranks],
        "wall_s": job["wall_s"],
    }
    sent = [r["sent"] for r in ranks if "sent" in r]
    if sent:
        out["sent"] = {k: sum(s[k] for s in sent) for k in sent[0]}
    watcher = next((r["watcher"] for r in ranks if "watcher" in r), None)
    if watcher:
        out["watcher"] = watcher
    return out


def verdict_numbers(job: dict, world: int) -> dict:
    culprit = world - 1
    out: dict = {"rc": job["rc"], "timed_out": job["timed_out"], "wall_s": job["wall_s"],
                 "stragglers_killed": job["stragglers_killed"]}
    stderr = job["_stderr"]
    start = next((i for i, (_, line) in enumerate(stderr) if re.match(r"\[runtime_checks\] [A-Z_]+", line)), None)
    if start is None:
        out["error"] = "no verdict printed"
        out["stderr_tail"] = job["stderr_tail"]
        return out
    block = [stderr[start][1]]
    for _, line in stderr[start + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    stacks = next((i for i, line in enumerate(block) if line.startswith("  stacks:")), len(block))
    rank_re = re.compile(rf"\brank {culprit}\b(?![-,\d])")
    site_re = re.compile(rf"{re.escape(LOOP.name)}:{DIVERGE_LINE}\b")
    named = next((i + 1 for i, line in enumerate(block) if rank_re.search(line) and site_re.search(line)), None)
    out.update(printed=block, lines_printed=len(block), lines_before_stacks=stacks, culprit_named_at_line=named)
    anomaly = job.get("anomaly_t")
    if anomaly is not None:
        out["verdict_printed_after_s"] = stderr[start][0] - anomaly
    finding = ((job.get("report") or {}).get("findings") or [None])[0]
    if finding:
        first = (finding.get("groups") or [{}])[0]
        out.update(kind=finding["kind"], detected_after_s=finding.get("detected_after"),
                   first_group={"ranks": first.get("ranks"), "role": first.get("role"),
                                "line": (first.get("site") or {}).get("line")})
        if anomaly is not None:
            out["decided_after_s"] = finding["at"] - anomaly
            out["report_written_after_s"] = job["report_mtime"] - anomaly
    out["names_culprit"] = bool(named and finding and finding["kind"] == "divergence"
                                and out["first_group"]["ranks"] == [culprit]
                                and out["first_group"]["line"] == DIVERGE_LINE)
    return out


def _pct(a: float, b: float) -> float:
    return (a / b - 1.0) * 100.0


def summarize(world: int, plain: list[dict], guarded: list[dict], verdicts: list[dict]) -> dict:
    summary: dict = {"world": world, "runs_ok": {"plain": len(plain), "guarded": len(guarded)}}
    if plain and guarded:
        p_med = [r["step_median_s"] for r in plain]
        g_med = [r["step_median_s"] for r in guarded]
        p_mean = [r["step_mean_s"] for r in plain]
        g_mean = [r["step_mean_s"] for r in guarded]
        summary["step"] = {
            "plain_median_s": statistics.median(p_med), "guarded_median_s": statistics.median(g_med),
            "overhead_pct": _pct(statistics.median(g_med), statistics.median(p_med)),
            "plain_mean_s": statistics.median(p_mean), "guarded_mean_s": statistics.median(g_mean),
            "overhead_mean_pct": _pct(statistics.median(g_mean), statistics.median(p_mean)),
            "paired_overhead_pct": [_pct(g, p) for p, g in zip(p_med, g_med)],
            "plain_spread_pct": (max(p_med) - min(p_med)) / statistics.median(p_med) * 100.0,
            "guarded_spread_pct": (max(g_med) - min(g_med)) / statistics.median(g_med) * 100.0,
            "added_us_per_step": (statistics.median(g_med) - statistics.median(p_med)) * 1e6,
            "runs_plain_median_s": p_med, "runs_guarded_median_s": g_med,
        }
        p_rss = [k for r in plain for k in r["rss_kib"] if k]
        g_rss = [k for r in guarded for k in r["rss_kib"] if k]
        summary["memory"] = {"plain_rss_mib": statistics.median(p_rss) / 1024,
                             "guarded_rss_mib": statistics.median(g_rss) / 1024,
                             "guard_rss_delta_mib": (statistics.median(g_rss) - statistics.median(p_rss)) / 1024}
        rates = []
        for r in guarded:
            if "sent" in r:
                s, loop = r["sent"], r["loop_s"]
                rates.append({"events_per_s": s["events"] / loop, "batches_per_s": s["batches"] / loop,
                              "bytes_per_s": s["bytes"] / loop, "events": s["events"], "batches": s["batches"]})
        if rates:
            mid = sorted(rates, key=lambda x: x["events_per_s"])[len(rates) // 2]
            steps_per_s = 1.0 / statistics.median(g_mean)
            summary["store"] = {**mid, "events_per_rank_step": mid["events"] / (world * ARGS.steps),
                                "events_per_batch": mid["events"] / max(1, mid["batches"]),
                                "steps_per_s": steps_per_s,
                                "runs_events_per_s": [x["events_per_s"] for x in rates]}
        watchers = [r["watcher"] for r in guarded if r.get("watcher")]
        if watchers:
            cpu = [w["cpu_s"] / r["loop_s"] for r, w in ((r, r.get("watcher")) for r in guarded)
                   if w and w.get("cpu_s") is not None]
            summary["watcher"] = {"rss_mib": statistics.median(w["rss_kib"] for w in watchers if w.get("rss_kib")) / 1024
                                  if any(w.get("rss_kib") for w in watchers) else None,
                                  "cpu_fraction": statistics.median(cpu) if cpu else None}
    if verdicts:
        ok = [v for v in verdicts if "verdict_printed_after_s" in v]
        summary["verdict"] = {
            "runs": verdicts,
            "printed_after_s": [v["verdict_printed_after_s"] for v in ok],
            "printed_after_max_s": max((v["verdict_printed_after_s"] for v in ok), default=None),
            "printed_after_median_s": statistics.median(v["verdict_printed_after_s"] for v in ok) if ok else None,
            "lines_before_stacks_max": max((v.get("lines_before_stacks", 99) for v in verdicts), default=None),
            "culprit_named_at_line_max": max((v.get("culprit_named_at_line") or 99 for v in verdicts), default=None),
            "names_culprit_all": all(v.get("names_culprit") for v in verdicts),
        }
    return summary


def check_targets(s: dict) -> dict:
    v, step = s.get("verdict") or {}, s.get("step") or {}
    report_ok = (v.get("names_culprit_all") and v.get("lines_before_stacks_max") is not None
                 and v["lines_before_stacks_max"] <= TARGETS["report_lines"]
                 and v["culprit_named_at_line_max"] <= TARGETS["report_lines"])
    verdict_ok = v.get("printed_after_max_s") is not None and v["printed_after_max_s"] <= TARGETS["verdict_s"]
    overhead_ok = step.get("overhead_pct") is not None and step["overhead_pct"] <= TARGETS["overhead_pct"]
    return {"report_names_culprit_rank_and_line_within_12_lines": bool(report_ok),
            "verdict_within_1s_of_anomaly": bool(verdict_ok),
            "step_overhead_at_most_2pct": bool(overhead_ok),
            "overhead_resolved": bool(step) and abs(step["overhead_pct"] - TARGETS["overhead_pct"])
            > step["plain_spread_pct"] / 2}


# -- one watcher, one store, without ranks ------------------------------------------------------
def _server():
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))


def _events(rank: int, first_seq: int, count: int, t: float) -> list[dict]:
    """What a rank of the DDP loop sends: an ENTER per collective (backward, gather), the LEAVE of
    the previous one riding on it, as Guard.run_recorded makes them."""
    site = {"file": str(LOOP), "line": GATHER_LINE, "function": "<module>"}
    out = []
    for seq in range(first_seq, first_seq + count):
        gather = seq % 2
        out.append({"seq": seq, "op": "accelerator.gather" if gather else "accelerator.backward",
                    "op_kind": "ALLGATHER" if gather else "BACKWARD", "site": site,
                    "prev_left": t if seq else None, "prev_left_seq": seq - 1 if seq else None,
                    "args": [{"shape": [1], "dtype": "float32", "device": "cpu"}] if gather else [],
                    "on_device": False, "kind": "enter", "rank": rank, "t": t})
    return out


def drain_rate(world: int, per_batch: int, target_events: int) -> dict:
    """Events per second one Watcher drains and judges: rounds of one batch of ``per_batch``
    events from each of ``world`` simulated ranks (what a 50 ms flush brings), each round then
    drained and checked as the watcher process's loop does (drain(); check()). Only drain and
    check are timed, not the pushes."""
    from runtime_checks import protocol as P
    from runtime_checks.guard import connect
    from runtime_checks.watch import Watcher

    server = _server()
    address = f"127.0.0.1:{server.port}"
    pusher, reader = connect(address), connect(address)
    watcher = Watcher(reader, world, timeout=None)
    host = os.uname().nodename
    for r in range(world):  # alive pids on this host: the watcher's note_deaths reads /proc as for real ranks
        pusher.queue_push(P.EVENTS_QUEUE, P.encode([{"kind": "start", "rank": r, "pid": os.getpid(), "host": host,
                                                     "world_size": world, "t": time.time()}]))
    watcher.drain()
    rounds = max(3, math.ceil(target_events / (world * per_batch)))
    timed = 0.0
    events = batches = 0
    for i in range(rounds):
        now = time.time()
        for r in range(world):
            pusher.queue_push(P.EVENTS_QUEUE, P.encode(_events(r, i * per_batch, per_batch, now)))
        t0 = time.perf_counter()
        n = watcher.drain()
        finding = watcher.check()
        timed += time.perf_counter() - t0
        batches += n
        events += n * per_batch
        if finding is not None:
            raise RuntimeError(f"the simulated ranks agree, the watcher found: {finding.title}")
    return {"world": world, "events_per_batch": per_batch, "rounds": rounds, "events": events, "batches": batches,
            "seconds": timed, "events_per_s": events / timed, "us_per_event": timed / events * 1e6,
            "us_per_batch": timed / batches * 1e6}


def check_after(world: int, events: int) -> dict:
    """What one ``Watcher.check()`` costs after a long run: ``events`` ENTER events of ``world``
    ranks applied (without the store; a check every 100 collectives, as a 50 ms poll would),
    then 20 checks timed. Before this bench, the watcher kept every interval between
    collectives in a list and took its max at every check: 268 ms per check after 2M events
    (64 ranks) on the 2-core machine where this was written, 0.26 ms with the running max."""
    from runtime_checks.watch import Watcher

    watcher = Watcher(None, world, timeout=None)
    site = {"file": str(LOOP), "line": GATHER_LINE, "function": "<module>"}
    t = time.time()
    per_rank = max(1, events // world)
    start = time.perf_counter()
    for seq in range(per_rank):
        for r in range(world):
            watcher._apply({"kind": "enter", "rank": r, "seq": seq, "op": "accelerator.gather", "op_kind": "ALLGATHER",
                            "site": site, "args": [], "t": t + seq * 0.005,
                            "prev_left": t + seq * 0.005 - 0.001 if seq else None,
                            "prev_left_seq": seq - 1 if seq else None})
        if seq % 100 == 0:
            watcher.check()
    applied = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(20):
        watcher.check()
    return {"world": world, "events": per_rank * world, "apply_us_per_event": applied / (per_rank * world) * 1e6,
            "check_ms_after": (time.perf_counter() - start) / 20 * 1e3}


STORE_CLIENT = """
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
s = TCPStore(host, port, is_master=False, wait_for_workers=False, timeout=timedelta(seconds=60))
s.add("ready", 1)
s.wait(["go"])
n, end = 0, time.perf_counter() + seconds
while time.perf_counter() < end:
    s.check(["rc/signal"])
    n += 1
print(n, flush=True)
"""


def store_rate(clients: int, seconds: float = 3.0) -> dict:
    """Requests per second one TCPStore serves: ``clients`` processes each calling ``check`` (the
    request a rank's watchdog thread makes twice per 50 ms) in a loop."""
    server = _server()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", STORE_CLIENT, "127.0.0.1", str(server.port), str(seconds)],
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(clients)]
    try:
        deadline = time.time() + 120
        while time.time() < deadline and (int(server.add("ready", 0)) < clients):
            if any(p.poll() is not None for p in procs):
                break
            time.sleep(0.1)
        server.set("go", "1")
        counts = [int(p.communicate(timeout=seconds + 60)[0].split()[0]) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {"clients": clients, "seconds": seconds, "requests": sum(counts), "requests_per_s": sum(counts) / seconds}


def capacity(args, results: dict) -> dict:
    worlds = sorted(set(args.ranks) | {256, 1024})
    drains = []
    for world in worlds:
        for per_batch in (1, 8):
            d = drain_rate(world, per_batch, args.drain_events)
            drains.append(d)
            print(f"  watcher drain, {world:>5} simulated ranks, {per_batch} events/batch: "
                  f"{d['events_per_s']:>9.0f} events/s ({d['us_per_batch']:.1f} us/batch)", flush=True)
    long_run = check_after(TARGET_WORLD, args.long_events)
    print(f"  watcher check() after {long_run['events']} events of {TARGET_WORLD} ranks: "
          f"{long_run['check_ms_after']:.2f} ms ({long_run['apply_us_per_event']:.1f} us to apply an event)", flush=True)
    cpus = os.cpu_count() or 1
    stores = []
    for clients in sorted({1, max(2, min(32, cpus // 2))}):
        s = store_rate(clients)
        stores.append(s)
        print(f"  store, {clients:>2} client processes: {s['requests_per_s']:.0f} requests/s", flush=True)
    return {"drain": drains, "long_run": long_run, "store": stores, "projection": project(drains, stores, results)}


def project(drains: list[dict], stores: list[dict], results: dict) -> dict:
    """Where one watcher and one store saturate, from the measured costs and the measured load.

    Watcher: a round of B batches holding E events costs B*a + E*b (a: per batch, b: per event,
    fitted per simulated world from the 1- and 8-event batches). A rank sends beta batches/s and
    eps events/s, so W ranks keep the watcher busy a fraction u = W*(beta*a + eps*b) of its
    time; it saturates at u = 1: W* = 1 / (beta*a + eps*b).
    Store: a rank costs 1/0.05 = 20 check requests/s (its watchdog's poll of the signal key,
    which the watcher sets with an abort or a dump request) + beta pushes/s, and the watcher pops
    each batch (beta per rank) and asks the queue's length once per round: about 20 + 2*beta
    requests/s per rank; W* = C / (20 + 2*beta)
    with C the requests/s one store served to the most client processes measured."""
    fits = {}
    for world in sorted({d["world"] for d in drains}):
        one = next(d for d in drains if d["world"] == world and d["events_per_batch"] == 1)
        eight = next(d for d in drains if d["world"] == world and d["events_per_batch"] == 8)
        b = max(0.0, (eight["us_per_batch"] - one["us_per_batch"]) / 7) * 1e-6
        a = max(0.0, one["us_per_batch"] * 1e-6 - b)
        fits[world] = {"a_us_per_batch": a * 1e6, "b_us_per_event": b * 1e6}
    store_c = max(s["requests_per_s"] for s in stores)
    measured = [r for r in results.values() if r.get("store")]
    load = max(measured, key=lambda r: r["world"])["store"] if measured else None
    out: dict = {"fits": fits, "store_requests_per_s": store_c}
    if load is None:
        return out
    world = max(r["world"] for r in measured)
    beta = load["batches_per_s"] / world
    eps = load["events_per_s"] / world
    largest = max(fits)
    a, b = fits[largest]["a_us_per_batch"] * 1e-6, fits[largest]["b_us_per_event"] * 1e-6
    per_rank_s = beta * a + eps * b
    store_per_rank = 20 + 2 * beta  # 40 + 2 * beta before the signal key (two polls per tick)
    out.update({
        "from_world": world, "per_rank_batches_per_s": beta, "per_rank_events_per_s": eps,
        "events_per_rank_step": load["events_per_rank_step"], "steps_per_s": load["steps_per_s"],
        "fit_from_simulated_world": largest,
        "watcher_busy_s_per_rank_s": per_rank_s,
        "watcher_saturates_at_ranks": 1.0 / per_rank_s if per_rank_s else None,
        "store_requests_per_rank_s": store_per_rank,
        "store_saturates_at_ranks": store_c / store_per_rank,
        # the same loop stepping faster: every flush (20/s) then carries a batch, e*s events/s per rank
        "watcher_saturates_at_ranks_by_steps_per_s": {
            str(s): 1.0 / (20 * a + load["events_per_rank_step"] * s * b) for s in (10, 50, 100, 200, 500)},
    })
    return out


# -- output ---------------------------------------------------------------------------------------
def table(results: dict) -> list[str]:
    head = (f"{'ranks':>5} {'plain ms':>9} {'guard ms':>9} {'ovh % med':>9} {'ovh % mean':>10} {'noise %':>8} "
            f"{'verdict s':>9} {'lines':>5} {'culprit':>8} {'events/s':>9} {'RSS +MiB':>8} {'watcher':>14}")
    rows = [head, "-" * len(head)]
    for world, s in sorted(results.items()):
        st, v, m, store, w = (s.get(k) or {} for k in ("step", "verdict", "memory", "store", "watcher"))

        def f(value, spec):
            if isinstance(value, (int, float)):
                return format(value, spec)
            width = re.match(r"[+]?(\d*)", spec).group(1)
            return "-".rjust(int(width or 0))

        named = "-" if not v else ("yes@" + str(v["culprit_named_at_line_max"]) if v["names_culprit_all"] else "NO")
        watcher = (f"{f(w.get('cpu_fraction', None) and w['cpu_fraction'] * 100, '.0f')}% cpu "
                   f"{f(w.get('rss_mib'), '.0f')}M") if w else "-"
        rows.append(f"{world:>5} {f(st.get('plain_median_s', None) and st['plain_median_s'] * 1e3, '9.2f')} "
                    f"{f(st.get('guarded_median_s', None) and st['guarded_median_s'] * 1e3, '9.2f')} "
                    f"{f(st.get('overhead_pct'), '+9.1f')} {f(st.get('overhead_mean_pct'), '+10.1f')} "
                    f"{f(st.get('plain_spread_pct'), '8.1f')} {f(v.get('printed_after_max_s'), '9.2f')} "
                    f"{f(v.get('lines_before_stacks_max'), '5d')} {named:>8} {f(store.get('events_per_s'), '9.0f')} "
                    f"{f(m.get('guard_rss_delta_mib'), '+8.1f')} {watcher:>14}")
    return rows


def machine() -> dict:
    import accelerate
    import torch

    return {"label": ARGS.label, "host": platform.node(), "cpu_count": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "torch": torch.__version__, "accelerate": accelerate.__version__, "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_start": os.getloadavg()}


def main() -> int:
    global ARGS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, nargs="+", default=[4, 16, 32, 64], help="world sizes")
    parser.add_argument("--label", default="local", help="results go to bench/results/runtime_scale_<label>.json")
    parser.add_argument("--steps", type=int, default=400, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=30, help="untimed steps before them")
    parser.add_argument("--repeats", type=int, default=5, help="plain and guarded runs per world size (each)")
    parser.add_argument("--divergence-runs", type=int, default=3, help="runs with the planted divergence")
    parser.add_argument("--diverge-step", type=int, default=50, help="the step at which the last rank diverges")
    parser.add_argument("--hidden", type=int, default=256, help="the MLP's hidden width (64 -> hidden -> 4)")
    parser.add_argument("--batch", type=int, default=8, help="samples per rank per step")
    parser.add_argument("--mode", choices=("inrank", "launcher"), default="inrank",
                        help="inrank: torchrun -m runtime_checks.rank (default); launcher: python -m runtime_checks")
    parser.add_argument("--accelerate-debug", choices=("1", "0"), default="0",
                        help="ACCELERATE_DEBUG_MODE for every arm (the guard sets 1 when unset; default 0: the "
                             "guard's own cost, not Accelerate's debug gathers)")
    parser.add_argument("--hang-timeout", type=float, default=30.0, help="RUNTIME_CHECKS_TIMEOUT for guarded runs")
    parser.add_argument("--launch-timeout", type=float, default=None,
                        help="seconds one launch may take (default: max(180, 60 + 4 W + 0.05 steps W))")
    parser.add_argument("--drain-events", type=int, default=20000, help="events per simulated watcher measurement")
    parser.add_argument("--long-events", type=int, default=500000,
                        help="events applied before timing the watcher's check() (a long run)")
    parser.add_argument("--skip-capacity", action="store_true", help="skip the watcher/store measurements")
    ARGS = args = parser.parse_args()
    if args.diverge_step < 0:
        parser.error("--diverge-step must be >= 0")
    if args.mode == "launcher" and args.accelerate_debug == "0":
        # python -m runtime_checks sets ACCELERATE_DEBUG_MODE=1 whatever the environment says:
        # the plain arm gets it too, or the comparison would charge Accelerate's cost to the guard
        print("--mode launcher turns Accelerate's debug mode on in its ranks: ACCELERATE_DEBUG_MODE=1 in every arm")
        args.accelerate_debug = "1"

    info = machine()
    print(f"runtime_scale: {info['cpu_count']} CPUs, torch {info['torch']}, accelerate {info['accelerate']}, "
          f"mode {args.mode}, {args.steps} steps (+{args.warmup} warm-up) x {args.repeats} repeats, "
          f"load average {info['loadavg_start'][0]:.2f}", flush=True)
    results: dict[int, dict] = {}
    failures: list[dict] = []
    for world in args.ranks:
        plain, guarded, verdicts = [], [], []
        for i in range(args.repeats):  # ABBA: drift in the machine's load hits both arms alike
            for arm in (("plain", "guarded") if i % 2 == 0 else ("guarded", "plain")):
                job = launch(arm, world, args)
                numbers = loop_numbers(job)
                if numbers is None:
                    failures.append({k: v for k, v in job.items() if k not in ("_stderr", "ranks")})
                    print(f"  W={world} {arm} run {i}: FAILED rc={job['rc']} timed_out={job['timed_out']} "
                          f"ranks={len(job['ranks'])}", flush=True)
                    continue
                (plain if arm == "plain" else guarded).append(numbers)
                print(f"  W={world:<3} {arm:<8} run {i}: step median {numbers['step_median_s'] * 1e3:.2f} ms, "
                      f"mean {numbers['step_mean_s'] * 1e3:.2f} ms, wall {numbers['wall_s']:.1f} s", flush=True)
        for i in range(args.divergence_runs):
            job = launch("guarded", world, args, diverge_step=args.diverge_step)
            v = verdict_numbers(job, world)
            verdicts.append(v)
            print(f"  W={world:<3} divergence run {i}: {v.get('kind', v.get('error'))}, printed "
                  f"{v.get('verdict_printed_after_s', float('nan')):.3f} s after the anomaly, "
                  f"{v.get('lines_before_stacks')} lines before stacks, culprit named: {v.get('names_culprit')}",
                  flush=True)
        results[world] = summarize(world, plain, guarded, verdicts)
        if world == max(args.ranks) and verdicts and verdicts[0].get("printed"):
            print("  the last verdict as printed:", *("    " + line for line in verdicts[-1]["printed"]), sep="\n")

    out: dict = {"machine": info, "settings": {k: v for k, v in vars(args).items()},
                 "loop": {"file": str(LOOP.relative_to(REPO)), "diverge_line": DIVERGE_LINE,
                          "gather_line": GATHER_LINE},
                 "targets": {"world": TARGET_WORLD, **TARGETS},
                 "results": {str(k): v for k, v in results.items()}, "failures": failures}
    if not args.skip_capacity:
        print("one watcher and one store, without ranks:", flush=True)
        out["capacity"] = capacity(args, results)
    out["machine"]["loadavg_end"] = os.getloadavg()

    print()
    print("\n".join(table(results)))
    print("ovh % med/mean: guarded vs plain step time (median step; mean = loop time / steps); noise %: spread of "
          "the plain runs' medians; verdict s: worst run, anomaly -> verdict printed; lines: before the stacks "
          "line; culprit: named (rank and file:line) at line N; RSS +MiB: per rank, guarded - plain")
    target_world = TARGET_WORLD if TARGET_WORLD in results else None
    if target_world is not None:
        verdict = check_targets(results[target_world])
        out["targets"]["check"] = verdict
        print(f"targets at {target_world} ranks:")
        for name in ("report_names_culprit_rank_and_line_within_12_lines", "verdict_within_1s_of_anomaly",
                     "step_overhead_at_most_2pct"):
            print(f"  {'PASS' if verdict[name] else 'FAIL'}  {name}")
        if not verdict["overhead_resolved"]:
            print("  (note: the plain runs' own spread is wider than the distance to the 2 % line: not resolved)")
    else:
        largest = max(results)
        verdict = check_targets(results[largest])
        out["targets"]["check_at_largest"] = {"world": largest, **verdict}
        print(f"targets are for {TARGET_WORLD} ranks, not run here; the same checks at {largest} ranks "
              f"(informational):")
        for name in ("report_names_culprit_rank_and_line_within_12_lines", "verdict_within_1s_of_anomaly",
                     "step_overhead_at_most_2pct"):
            print(f"  {'pass' if verdict[name] else 'fail'}  {name}")
    projection = (out.get("capacity") or {}).get("projection") or {}
    if projection.get("watcher_saturates_at_ranks"):
        print(f"projection (from {projection['from_world']} ranks at {projection['steps_per_s']:.0f} steps/s, "
              f"{projection['events_per_rank_step']:.2f} events/rank/step): one watcher saturates at "
              f"~{projection['watcher_saturates_at_ranks']:.0f} ranks, one store at "
              f"~{projection['store_saturates_at_ranks']:.0f} ranks")
        grid = projection["watcher_saturates_at_ranks_by_steps_per_s"]
        print("  one watcher, the same loop at more steps/s: " + ", ".join(
            f"{s} steps/s -> ~{w:.0f} ranks" for s, w in grid.items()))
    path = HERE / "results" / f"runtime_scale_{args.label}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"written: {path.relative_to(REPO)}")
    return 0


ARGS: argparse.Namespace


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
