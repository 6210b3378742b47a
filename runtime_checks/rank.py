"""The in-rank entry point: ``python -m runtime_checks.rank [--] script.py [args...]`` or
``python -m runtime_checks.rank -m module [args...]``.

Used by ``python -m runtime_checks`` for every rank, and usable under launchers the user
already has::

    torchrun --nproc_per_node 2 -m runtime_checks.rank train.py --epochs 1
    accelerate launch -m runtime_checks.rank train.py --epochs 1

Without a launcher-provided store (``RUNTIME_CHECKS_STORE``), global rank 0 starts the watcher
process (:mod:`runtime_checks.watcher_process`), which serves the store on
``MASTER_ADDR:(MASTER_PORT + 1)`` (or ``RUNTIME_CHECKS_PORT``) and judges from outside every
rank; on a finding every rank exits with the finding's exit code. On every other node, local
rank 0 starts the node reader (:mod:`runtime_checks.node_reader`): only a process of that host
can read its ranks' rings and see them die.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
import traceback

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


def _in_rank_address() -> str:
    """In-rank mode: where the watcher process serves the store (also kept in the environment:
    the guard's ring folder is named after it)."""
    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get(P.ENV_PORT, int(os.environ.get("MASTER_PORT", "29500")) + 1))
    address = os.environ[P.ENV_STORE] = f"{host}:{port}"
    return address


def _store(rank: int, world_size: int, target: str, under_our_launcher: bool):
    """The store to push to, and (global rank 0 in in-rank mode) the watcher process serving it."""
    from .guard import connect

    if under_our_launcher:  # python -m runtime_checks hosts the store and watches
        return connect(os.environ[P.ENV_STORE], timeout=60), None
    address = _in_rank_address()
    watcher = None
    if rank == 0:
        from . import watcher_process

        watcher = watcher_process.spawn(address, world_size, target)
        import torch.distributed  # noqa: F401  (meanwhile: the import both processes need)

        watcher_process.await_ready(watcher)
    return connect(address, timeout=60), watcher


def _final_code(store, wait: float = 30.0) -> int | None:
    """Rank 0's script ended: the run's exit code once the watcher process has seen every rank
    end (a finding ends this rank through the watchdog thread instead). ``None`` if the others
    still run after ``wait`` seconds, or the watcher is gone."""
    deadline = time.time() + wait
    while time.time() < deadline:
        try:
            if store.check([P.FINAL]):
                return int(store.get(P.FINAL))
        except Exception:
            return None
        time.sleep(0.05)
    return None


def _await_verdict(wait: float = 10.0) -> None:
    """A rank that raised, in in-rank mode: torchrun and ``accelerate launch`` stop every rank
    as soon as one exits, and the launcher would print its failure summary (and return) before
    the verdict. Stay until the watcher process has concluded: the watchdog thread, which polls
    the store for the abort key, then ends this rank with the finding's code. No verdict within
    ``wait`` seconds: exit as before."""
    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(wait)


def _cuda_available() -> bool:
    """Whether this rank will see a GPU, without initializing CUDA here (the script may still set
    CUDA_VISIBLE_DEVICES): NVML's count, else whether an NVIDIA driver is loaded."""
    try:
        import torch

        if not torch.backends.cuda.is_built():
            return False
        if torch.cuda.is_initialized():
            return torch.cuda.is_available()
        count = torch.cuda._device_count_nvml()
        if count >= 0:
            return count > 0
    except Exception:
        pass
    return os.environ.get("CUDA_VISIBLE_DEVICES") != "" and os.path.exists("/proc/driver/nvidia/version")


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
    reader = None
    if not under_our_launcher and rank != 0 and os.environ.get("LOCAL_RANK") == "0":
        from . import node_reader

        reader = node_reader.spawn(_in_rank_address(), target)  # first: its start-up overlaps ours
    store, watcher = _store(rank, world_size, target, under_our_launcher)
    guard = Guard(store, rank, world_size)
    guard.install()
    if not under_our_launcher:  # python -m runtime_checks prepared the ranks' environment already
        from .flight_recorder import prepare_environment

        prepare_environment(os.environ, _cuda_available())  # read when the script creates its process group
    Watchdog(store.clone(), rank, threading.get_ident(), os.getppid(), guard).start()
    guard.push(P.START, pid=os.getpid(), host=os.uname().nodename, world_size=world_size,
               local_rank=int(os.environ.get("LOCAL_RANK", "0")), target=target)
    sys.argv = [target, *args]
    if reader is not None:
        # before the script: no rank of the job gets past its first collective before this node's
        # ranks are watched, so a death is seen when it happens, not found later
        node_reader.await_ready(reader)

    def body() -> None:
        if kind == "module":
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")

    code = run_guarded(guard, body)
    if code and not under_our_launcher:
        _await_verdict()
    if watcher is not None:
        final = _final_code(store)
        if final:
            code = final
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: a stuck process group must not hang the exit



if __name__ == "__main__":
    main()
