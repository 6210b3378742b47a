"""Start N guarded ranks on this host through torch's elastic launcher, watch them, stop them.

The launcher process hosts the TCPStore the ranks push fingerprints to, runs the watcher in
a thread, and runs ``torch.distributed.run`` (the code behind ``torchrun --standalone``) for
the ranks, each of which starts in :mod:`runtime_checks.rank`. On a finding it prints the
verdict, stops every rank (SIGTERM, then SIGKILL) and exits with the finding's code.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from datetime import timedelta

from . import protocol as P
from .groups import grouped_phrases
from .flight_recorder import add_to_report as add_flight_recorder
from .report import Finding, render_text, write_json
from .ring import ring_dir, sweep_stale
from .watch import POLL_S, Watcher, stop_processes


def default_nproc() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 2


def prepare_environment(environ, cuda: bool) -> None:
    """What the ranks inherit. Accelerate's debug mode on; on CPU, ACCELERATE_USE_CPU (without
    it every CPU rank believes it is alone, facts §8). On GPUs, NCCL's flight recorder on (2000
    entries: ``TORCH_FR_BUFFER_SIZE``, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` before torch 2.8) unless the
    user set its buffer size under either name (:mod:`runtime_checks.flight_recorder`). Every other
    TORCH_NCCL_* / NCCL_* variable (async error handling, dump on timeout, NVLS off) is the user's
    and passes through untouched."""
    from .flight_recorder import prepare_environment as flight_recorder_environment

    environ["ACCELERATE_DEBUG_MODE"] = "1"
    environ.setdefault("OMP_NUM_THREADS", "1")
    if not cuda:
        environ["ACCELERATE_USE_CPU"] = "1"
    flight_recorder_environment(environ, cuda)


def launch(target: list[str], module: bool, nproc: int | None, timeout: float | None, report: str | None,
           trace: str | None = None) -> int:
    import torch
    import torch.distributed.run as torchrun
    from torch.distributed import TCPStore

    nproc = nproc or default_nproc()
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=60))
    os.environ[P.ENV_STORE] = f"127.0.0.1:{store.port}"
    prepare_environment(os.environ, torch.cuda.is_available())
    # torchrun's own failure summary blames the first rank to exit, a victim in a hang: keep it quiet
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)

    watcher = Watcher(store, nproc, timeout)
    sweep_stale()
    watcher.ring_dir = ring_dir(os.environ[P.ENV_STORE])
    watch = _WatchThread(watcher, report, trace, None if module else target[0])
    watch.start()
    args = torchrun.parse_args([
        "--standalone", "--nproc-per-node", str(nproc), "--monitor-interval", "0.5",
        "--module", "runtime_checks.rank", *(["-m"] if module else ["--"]), *target,
    ])
    failures: dict[int, int] = {}
    try:
        torchrun.run(args)
    except Exception as exc:  # ChildFailedError: some rank exited non-zero
        failures = {int(r): f.exitcode for r, f in getattr(exc, "failures", {}).items()}
    watch.stop()
    watcher.drain()
    watcher.settle = 0.0  # every rank has ended: decide on what arrived
    try:
        return _conclude(watcher, watch, failures, report, trace)
    finally:
        shutil.rmtree(watcher.ring_dir, ignore_errors=True)


def _conclude(watcher: Watcher, watch: _WatchThread, failures: dict[int, int], report: str | None,
              trace: str | None) -> int:
    finding = watch.finding
    if finding is None:
        finding = watcher.check() if failures else watcher.check_at_end()
        if finding is None and failures:
            finding = _unexplained_failure(watcher, failures)
        if finding is not None:
            watch.conclude(finding, stop_ranks=False)
    if finding is None:
        if report:
            write_json(None, report, watcher, trace)
        elif trace:
            from .trace import write_trace

            write_trace(trace, watcher, None)
        return 0
    return P.EXIT_CODES[finding.kind]


def _unexplained_failure(watcher: Watcher, failures: dict[int, int]) -> Finding:
    # the first rank that did not die of the launcher's own SIGTERM is the culprit
    culprit = next((r for r, code in sorted(failures.items()) if code != -signal.SIGTERM), min(failures))
    code = failures[culprit]
    how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
    return Finding(
        kind="rank_died",
        title=f"rank {culprit} ended with {how}",
        seq=None,
        rows=[watcher._row(r) for r in watcher.ranks.values()],
        culprit=culprit,
        why=f"rank {culprit} ended with {how} before the guard saw an exception; exit codes: "
            + grouped_phrases(((r, str(c)) for r, c in sorted(failures.items())), between=": ", joiner=", "),
        hint="look for the OOM killer (dmesg), os._exit on one rank, or a native crash",
    )


class _WatchThread(threading.Thread):
    def __init__(self, watcher: Watcher, report: str | None, trace: str | None = None,
                 script: str | None = None) -> None:
        super().__init__(name="runtime_checks-watcher", daemon=True)
        self.script = script  # its model is built before the first look, as the watcher process does
        self.watcher = watcher
        self.report = report
        self.trace = trace
        self.finding: Finding | None = None
        self._stop_event = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        if self.script:
            from .report import warm

            warm(self.script)
        while not self._stop_event.is_set():
            self.watcher.drain()
            finding = self.watcher.check()
            if finding is not None:
                self.conclude(finding, stop_ranks=True)
                return
            time.sleep(POLL_S)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(timeout=10)

    def conclude(self, finding: Finding, stop_ranks: bool) -> None:
        with self._lock:
            if self.finding is not None:
                return
            self.finding = finding
            if stop_ranks:
                self.watcher.fill_rows_with_stacks()
            path = self.report or P.DEFAULT_REPORT  # a finding always leaves its report behind
            render_text(finding, path)
            trace = write_json(finding, path, self.watcher, self.trace)
            if stop_ranks:
                add_flight_recorder(self.watcher, path, trace)  # after the verdict: a first dump can take seconds
                self._stop_ranks()

    def _stop_ranks(self) -> None:
        stop_processes([r.pid for r in self.watcher.ranks.values() if r.pid])
