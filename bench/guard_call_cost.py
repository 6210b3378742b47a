"""Benchmark: the training thread's CPU time to record one collective (the guard's hot path).

    python bench/guard_call_cost.py [--calls 20000] [--reps 7]

A no-op wrapped as ``accelerator.gather`` by ``Guard.wrap`` (the same wrapper every recorded
collective goes through), called from this file (a user frame) with one small CPU tensor, with
a real TCPStore, the rank's ring in /dev/shm and the watchdog thread flushing every 50 ms, as
``runtime_checks.rank`` sets them up. ``torch.distributed`` is not initialized: the guard is told
it is, so only the recording is timed. Per call: ENTER (site, fingerprint, encoding, ring, batch
buffer) and the deferred LEAVE (ring). Reported: the training thread's CPU time per call
(``time.thread_time``, best and median of ``--reps`` runs of ``--calls`` calls, minus the bare
call), and the whole process's (the watchdog's encoding of batches and the store's server too).
CPU clocks, so other work on the machine moves the figures little. Prints one JSON line. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    import torch
    from torch.distributed import TCPStore

    import runtime_checks
    from runtime_checks import guard as G
    from runtime_checks import protocol as P

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=30))
    os.environ[P.ENV_STORE] = f"127.0.0.1:{server.port}"
    store = G.connect(os.environ[P.ENV_STORE])
    guard = G.Guard(store, 0, 2)
    G._SKIP_DIRS = G._library_dirs()
    G._distributed = lambda: True  # the recording path, not a real collective
    G.Watchdog(store.clone(), 0, threading.get_ident(), os.getppid(), guard).start()

    def noop(x):
        return x

    wrapped = guard.wrap(noop, "accelerator.gather", "ALLGATHER", method=False)
    tensor = torch.zeros(1)
    for _ in range(2000):
        wrapped(tensor)
    bare, main, process = [], [], []
    for _ in range(args.reps):
        t0 = time.thread_time()
        for _ in range(args.calls):
            noop(tensor)
        bare.append((time.thread_time() - t0) / args.calls * 1e6)
        time.sleep(0.06)  # the watchdog flushes what the last run buffered
        t0, p0 = time.thread_time(), time.process_time()
        for _ in range(args.calls):
            wrapped(tensor)
        main.append((time.thread_time() - t0) / args.calls * 1e6)
        process.append((time.process_time() - p0) / args.calls * 1e6)
    b = statistics.median(bare)
    out = {"runtime_checks": os.path.dirname(runtime_checks.__file__), "calls": args.calls, "reps": args.reps,
           "bare_us": b, "main_us_best": min(main) - b, "main_us_median": statistics.median(main) - b,
           "process_us_median": statistics.median(process) - b, "main_us_runs": main,
           "events_sent": guard.sent["events"], "ring": guard.ring is not None}
    print(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # the watchdog thread would meet the store's server going away


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    main()
