"""The in-rank entry point: ``python -m runtime_checks.rank [--] script.py [args...]`` or
``python -m runtime_checks.rank -m module [args...]``.

Used by ``python -m runtime_checks`` for every rank, and usable under launchers the user
already has::

    torchrun --nproc_per_node 2 -m runtime_checks.rank train.py --epochs 1
    accelerate launch -m runtime_checks.rank train.py --epochs 1

Without a launcher-provided store (``RUNTIME_CHECKS_STORE``), global rank 0 serves one on
``MASTER_ADDR:(MASTER_PORT + 1)`` (or ``RUNTIME_CHECKS_PORT``) and runs the watcher in a
thread; on a finding every rank exits with the finding's exit code.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
import traceback
from datetime import timedelta

from . import protocol as P


def _parse(argv: list[str]) -> tuple[str, str, list[str]]:
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise SystemExit("usage: python -m runtime_checks.rank [--] script.py [args...] | -m module [args...]")
    if argv[0] == "-m":
        if len(argv) < 2:
            raise SystemExit("runtime_checks.rank: -m needs a module name")
        return "module", argv[1], argv[2:]
    return "script", argv[0], argv[1:]


def _store(rank: int, world_size: int):
    from torch.distributed import TCPStore

    address = os.environ.get(P.ENV_STORE)
    if address:
        from .guard import connect

        return connect(address), None
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get(P.ENV_PORT, int(os.environ.get("MASTER_PORT", "29500")) + 1))
    store = TCPStore(host, port, is_master=rank == 0, wait_for_workers=False, timeout=timedelta(seconds=60))
    os.environ[P.ENV_STORE] = f"{host}:{port}"
    if rank != 0:
        return store, None
    from .watch import InRankWatcher

    timeout = float(os.environ[P.ENV_TIMEOUT]) if os.environ.get(P.ENV_TIMEOUT) else None
    watcher = InRankWatcher(store.clone(), world_size, timeout, os.environ.get(P.ENV_REPORT))
    from .ring import ring_dir

    watcher.watcher.ring_dir = ring_dir(os.environ[P.ENV_STORE])  # the ranks of this host
    watcher.start()
    return store, watcher


def _await_verdict(wait: float = 10.0) -> None:
    """A rank that raised, in in-rank mode: torchrun and ``accelerate launch`` stop every rank
    (rank 0's watcher too) as soon as one exits, so the verdict would never be written. Stay
    until rank 0's watcher has concluded: the watchdog thread, which polls the store for the
    abort key, then ends this rank with the finding's code. No verdict within ``wait`` seconds:
    exit as before."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(wait)


def run_guarded(guard, body) -> int:
    """Run the rank's work; report an exception (with the user's frame) or the normal end.
    Returns the exit code the rank should have."""
    from .guard import is_user_file

    code = 0
    try:
        body()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            guard.push(P.EXCEPTION, type="SystemExit", message=str(exc.code), traceback="", site=None)
    except BaseException as exc:  # report, then fail like Python would
        frames = traceback.extract_tb(exc.__traceback__)
        user = [f for f in frames if is_user_file(f.filename)]
        site = user[-1] if user else (frames[-1] if frames else None)
        guard.push(
            P.EXCEPTION,
            type=f"{type(exc).__module__}.{type(exc).__qualname__}",
            message=str(exc),
            cause=str(exc.__cause__) if exc.__cause__ else "",
            traceback="".join(traceback.format_exception(exc)),
            site={"file": os.path.abspath(site.filename), "line": site.lineno, "function": site.name,
                  "code": (site.line or "").strip()} if site else None,
            seq=guard.seq,
        )
        traceback.print_exc()
        code = 1
    if code == 0:
        guard.push(P.FINISH, seq=guard.seq)
    return code


def main(argv: list[str] | None = None) -> None:
    kind, target, args = _parse(list(sys.argv[1:] if argv is None else argv))
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("ACCELERATE_DEBUG_MODE", "1")  # read once, at the first PartialState()

    from .guard import Guard, Watchdog, die_with_parent

    die_with_parent()
    under_our_launcher = bool(os.environ.get(P.ENV_STORE))
    store, watcher = _store(rank, world_size)
    guard = Guard(store, rank, world_size)
    guard.install()
    Watchdog(store.clone(), rank, threading.get_ident(), os.getppid(), guard).start()
    guard.push(P.START, pid=os.getpid(), host=os.uname().nodename, world_size=world_size,
               local_rank=int(os.environ.get("LOCAL_RANK", "0")), target=target)
    sys.argv = [target, *args]

    def body() -> None:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")

    code = run_guarded(guard, body)
    if code and watcher is None and not under_our_launcher:
        _await_verdict()
    if watcher is not None:
        final = watcher.finish()
        if final:
            code = final
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: a stuck process group must not hang the exit



if __name__ == "__main__":
    main()
