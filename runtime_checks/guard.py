"""In-rank recording of collectives: fingerprints, call sites, and the rank's own watchdog.

``install()`` wraps the ``torch.distributed`` collectives and Accelerate's collectives (the
table in :mod:`accel_lint.collectives`) so that every collective a rank enters and leaves is
recorded as a small fingerprint and sent, in batches, to the out-of-band store queue. Only the outermost
call is recorded: Accelerate's ``gather`` calling ``all_gather_into_tensor`` is one record,
placed at the user's line. A background thread answers stack-dump requests, obeys an abort,
and exits the rank when its launcher is gone.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any
from collections.abc import Callable

from accel_lint import collectives as C

from . import protocol as P

_SKIP_DIRS: tuple[str, ...] = ()
FLUSH_S = 0.05  # how often the watchdog thread sends buffered events
_CKPT_COLLECTIVE_TYPES = {"FSDP", "DEEPSPEED", "MEGATRON_LM", "XLA"}


def _library_dirs() -> tuple[str, ...]:
    import accelerate
    import torch

    here = os.path.dirname(os.path.abspath(__file__))
    dirs = [os.path.dirname(torch.__file__), os.path.dirname(accelerate.__file__), here]
    for mod in ("runpy", "contextlib", "functools", "threading"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            dirs.append(os.path.abspath(m.__file__))
    return tuple(dirs)


_USER_CODE: dict[Any, str | None] = {}  # code object -> absolute file name, or None for library code


def _user_file(code) -> str | None:
    cached = _USER_CODE.get(code, False)
    if cached is False:
        cached = os.path.abspath(code.co_filename) if is_user_file(code.co_filename) else None
        _USER_CODE[code] = cached
    return cached


def is_user_file(filename: str) -> bool:
    """Outside torch, accelerate, runtime_checks and the stdlib plumbing between them."""
    return not (filename.startswith("<") or os.path.abspath(filename).startswith(_SKIP_DIRS))


def call_site(skip: int = 2) -> dict[str, Any]:
    """The innermost frame outside torch, accelerate and runtime_checks: the user's line.
    (The watcher reads the source line itself; the hot path sends file and line only.)"""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = _user_file(frame.f_code)
        if filename is not None:
            return {"file": filename, "line": frame.f_lineno, "function": frame.f_code.co_name}
        frame = frame.f_back
    return {"file": "?", "line": 0, "function": "?"}


def describe(value: Any, depth: int = 0) -> Any:
    """A comparable fingerprint of an argument: tensors by shape, dtype and device type
    (``cuda``/``cpu``, not the index: each rank has its own GPU). Metadata only: reading a
    tensor's values would synchronize the GPU."""
    shape = getattr(value, "shape", None)
    dtype = getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        device = getattr(getattr(value, "device", None), "type", None)
        out = {"shape": list(shape), "dtype": str(dtype).replace("torch.", "")}
        if device is not None:
            out["device"] = device
        return out
    if depth >= 2:
        return type(value).__name__
    if isinstance(value, (list, tuple)):
        return [describe(v, depth + 1) for v in list(value)[:4]]
    if isinstance(value, dict):
        return {str(k): describe(v, depth + 1) for k, v in list(value.items())[:4]}
    return type(value).__name__


class Guard:
    """One per rank: pushes fingerprints, runs the watchdog thread."""

    def __init__(self, store, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.seq = 0
        self._tls = threading.local()
        self._state_sent = False
        self._patched: list[tuple[Any, str, Any]] = []
        self._leave_lock = threading.Lock()
        self._buffer_lock = threading.Lock()
        self._buffer: list[dict[str, Any]] = []
        self._pending_leave: tuple[int, float] | None = None
        # collectives on CUDA tensors whose CPU call returned but whose GPU work may still be
        # queued (NCCL is asynchronous): (seq, cuda event recorded after the call), in order
        self._on_device: list[tuple[int, Any]] = []
        self.ring = _open_ring(rank)

    # -- recording -------------------------------------------------------------------------
    # Events are buffered and sent in batches by the watchdog thread (every FLUSH_S): a store
    # round trip on the training thread costs ~0.5 ms when the ranks keep every core busy.
    # START, FINISH and EXCEPTION flush the buffer and go out at once.
    def push(self, kind: str, **fields: Any) -> None:
        if kind not in (P.ENTER,):
            fields.setdefault("prev_left", self.take_leave())
        fields.update(kind=kind, rank=self.rank, t=time.time())
        if self.ring is not None and kind not in (P.FINISH, P.EXCEPTION):
            self.ring.record(fields)  # survives the process: read by the watcher after a native crash
        with self._buffer_lock:
            self._buffer.append(fields)
        if kind in (P.START, P.FINISH, P.EXCEPTION):
            self.flush(self.store)
        if kind in (P.FINISH, P.EXCEPTION) and self.ring is not None:
            ring, self.ring = self.ring, None  # its events reached the store: the ring has done its job
            ring.remove()

    def flush(self, store) -> None:
        with self._buffer_lock:
            batch, self._buffer = self._buffer, []
            if not batch:
                return
            try:
                store.queue_push(P.EVENTS_QUEUE, P.encode(batch))  # type: ignore[arg-type]
            except Exception:  # the watcher is gone: never break the user's program for it
                pass

    # A LEAVE is not sent at once: the next ENTER carries it (``prev_left``), which halves
    # the messages; the watchdog thread flushes it when the rank computes for a while, so
    # the watcher still knows the rank has left the collective.
    def left(self, seq: int) -> None:
        with self._leave_lock:
            self._pending_leave = (seq, time.time())
            if self.ring is not None:
                self.ring.record({"kind": P.LEAVE, "rank": self.rank, "seq": seq, "t": self._pending_leave[1]})

    def take_leave(self) -> float | None:
        pending = self.take_leave_record()
        return pending[1] if pending else None

    def take_leave_record(self) -> tuple[int, float] | None:
        """(seq, time) of the deferred LEAVE, if one is waiting."""
        with self._leave_lock:
            pending, self._pending_leave = self._pending_leave, None
        return pending

    def left_on_device(self, seq: int, event: Any) -> None:
        """The CPU call returned, the GPU may still run (or wait in) the collective: the LEAVE
        goes out when ``event``, recorded on the stream after it, has completed."""
        with self._leave_lock:
            self._on_device.append((seq, event))

    def poll_device(self) -> None:
        """Watchdog thread: a LEAVE for each collective whose GPU work has completed, in order
        (events on one stream complete in order; ``query`` never blocks)."""
        done = []
        with self._leave_lock:
            while self._on_device:
                seq, event = self._on_device[0]
                try:
                    finished = event.query()
                except Exception:  # a broken CUDA context: the rank is about to fail anyway
                    finished = True
                if not finished:
                    break
                self._on_device.pop(0)
                done.append(seq)
        if done:
            now = time.time()
            with self._buffer_lock:
                self._buffer.extend({"kind": P.LEAVE, "rank": self.rank, "seq": seq, "t": now} for seq in done)

    def flush_leave(self, older_than: float, store) -> None:
        with self._leave_lock:
            pending = self._pending_leave
            if pending is None or time.time() - pending[1] < older_than:
                return
            self._pending_leave = None
        with self._buffer_lock:
            self._buffer.append({"kind": P.LEAVE, "rank": self.rank, "seq": pending[0], "t": pending[1]})

    def wrap(self, fn: Callable, op: str, op_kind: str, method: bool, checkpoint: bool = False,
             fingerprint_args: bool = True) -> Callable:
        guard = self

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            if getattr(guard._tls, "depth", 0) or not _distributed():
                return fn(*args, **kwargs)
            if checkpoint and not _checkpoint_is_collective(args[0] if method else None):
                return fn(*args, **kwargs)  # local under DDP: let the collectives inside count
            guard._tls.depth = 1
            try:
                seq = guard.seq
                guard.seq += 1
                payload = args[1:] if method else args
                tensors = list(payload[:2]) + [v for k, v in kwargs.items() if k == "tensor"] if fingerprint_args else []
                prev = guard.take_leave_record()
                extra = {}
                if op_kind == C.BROADCAST_OBJ and payload and isinstance(payload[0], (list, tuple)):
                    extra["length"] = len(payload[0])  # the receivers' list length must match the sender's
                guard.push(P.ENTER, seq=seq, op=op, op_kind=op_kind, site=call_site(),
                           prev_left=prev[1] if prev else None, prev_left_seq=prev[0] if prev else None,
                           args=describe(tensors), on_device=_on_cuda(tensors), **extra)
                result = fn(*args, **kwargs)
                event = _completion_event(tensors)
                if event is None:
                    guard.left(seq)
                else:
                    guard.left_on_device(seq, event)
                return result
            finally:
                guard._tls.depth = 0

        return recorded

    def local(self, fn: Callable, op: str) -> Callable:
        guard = self

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            if _distributed():  # with one process check_trigger() is not recorded either
                guard.push(P.LOCAL, op=op, seq=guard.seq, site=call_site())
            return fn(*args, **kwargs)

        return recorded

    # -- installing ------------------------------------------------------------------------
    def _patch(self, owner: Any, name: str, replacement: Callable) -> None:
        self._patched.append((owner, name, getattr(owner, name)))
        setattr(owner, name, replacement)

    def install(self) -> None:
        import accelerate.utils as autils
        import accelerate.utils.operations as ops
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
        from accelerate import Accelerator
        from accelerate.state import PartialState

        global _SKIP_DIRS
        _SKIP_DIRS = _library_dirs()
        for name, kind in C.TORCH_DISTRIBUTED_OPS.items():
            if kind == C.END or not hasattr(dist, name):
                continue
            wrapped = self.wrap(getattr(dist, name), f"torch.distributed.{name}", kind, method=False)
            self._patch(dist, name, wrapped)
            if getattr(c10d, name, None) is not None:
                self._patch(c10d, name, wrapped)
        for name, kind in C.ACCELERATE_FUNCTION_OPS.items():
            original = getattr(ops, name, None) or getattr(autils, name, None)
            if original is None:
                continue
            wrapped = self.wrap(original, f"accelerate.utils.{name}", kind, method=False)
            for module in (ops, autils):
                if hasattr(module, name):
                    self._patch(module, name, wrapped)
        for name, kind in C.ACCELERATOR_METHOD_OPS.items():
            if kind == C.END or not hasattr(Accelerator, name):
                continue
            self._patch(Accelerator, name, self.wrap(getattr(Accelerator, name), f"accelerator.{name}", kind,
                                                     method=True, checkpoint=kind == C.CKPT))
        self._patch(PartialState, "wait_for_everyone",
                    self.wrap(PartialState.wait_for_everyone, "state.wait_for_everyone", C.BARRIER, method=True))
        self._patch(Accelerator, "set_trigger", self.local(Accelerator.set_trigger, "accelerator.set_trigger"))
        original_init = PartialState.__init__
        guard = self

        @functools.wraps(original_init)
        def init(state, *args, **kwargs):
            original_init(state, *args, **kwargs)
            if not guard._state_sent and getattr(state, "initialized", True):
                guard._state_sent = True
                guard.push(P.STATE, num_processes=state.num_processes, distributed_type=str(state.distributed_type),
                           process_index=state.process_index, site=call_site())

        self._patch(PartialState, "__init__", init)
        self._install_ddp()
        self._install_loader()

    def _install_loader(self) -> None:
        """``loader.iter.rng_sync``: a prepared DataLoader broadcasts rank 0's RNG state each
        time it is iterated (``DataLoaderShard.__iter__`` / the dispatcher's, when ``rng_types``
        is set) through ``synchronize_rng_states``; recorded at the ``for`` line, as one op
        (the ``torch.distributed.broadcast`` inside is part of it)."""
        try:
            import accelerate.data_loader as data_loader
        except ImportError:
            return
        original = getattr(data_loader, "synchronize_rng_states", None)
        if original is not None:
            self._patch(data_loader, "synchronize_rng_states",
                        self.wrap(original, "loader.iter.rng_sync", C.BROADCAST, method=False, fingerprint_args=False))

    def _install_ddp(self) -> None:
        """The collectives DDP makes on the user's behalf, recorded where they really
        communicate (torch 2.13's own conditions, ``torch/nn/parallel/distributed.py``):

        * ``ddp.forward.broadcast_buffers``: ``_sync_buffers``, which DDP's forward calls only
          when ``_check_sync_bufs_pre_fwd()`` (or ``..._post_fwd()``) holds: buffers present,
          ``broadcast_buffers``, and the previous forward required gradient sync;
        * ``ddp.forward.rebuild_buckets``: the first forward with grad enabled after the first
          synchronized backward, where the reducer rebuilds its buckets (a broadcast), unless
          ``find_unused_parameters`` without ``static_graph``;
        * ``ddp.backward.allreduce``: the first ``torch.autograd.backward`` (so also a raw
          ``loss.backward()`` and ``accelerator.backward``) after a forward that ran with grad
          enabled and ``require_backward_grad_sync`` (not inside ``no_sync()``), which is when
          the reducer all-reduces the gradients. Comm hooks are left alone: they still run.

        Not under ``join()`` (``accelerator.join_uneven_inputs``): there the joined ranks
        shadow the others' collectives, which matches them by meaning, not one for one. The
        site is the user's line: the model call, the ``backward()``."""
        try:
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
        except ImportError:
            return
        guard = self

        def joining(ddp) -> bool:
            join = getattr(ddp, "_join_config", None)
            return bool(join is not None and join.enable)

        if hasattr(DDP, "_sync_buffers"):
            original_sync = DDP._sync_buffers
            recorded_sync = self.wrap(original_sync, "ddp.forward.broadcast_buffers", C.BROADCAST, method=True,
                                      fingerprint_args=False)

            @functools.wraps(original_sync)
            def sync_buffers(ddp, *args, **kwargs):
                return (original_sync if joining(ddp) else recorded_sync)(ddp, *args, **kwargs)

            self._patch(DDP, "_sync_buffers", sync_buffers)
        original_forward = DDP.forward
        recorded_rebuild = self.wrap(original_forward, "ddp.forward.rebuild_buckets", C.BROADCAST, method=True,
                                     fingerprint_args=False)

        @functools.wraps(original_forward)
        def forward(ddp, *args, **kwargs):
            plain = getattr(ddp, "_use_python_reducer", False) or getattr(ddp, "_delay_all_reduce_all_params", False) \
                or joining(ddp)
            syncs = torch.is_grad_enabled() and ddp.require_backward_grad_sync and not plain
            # the reducer rebuilds its buckets (a broadcast from rank 0) at the first forward with
            # grad enabled after the first synchronized backward, once
            rebuilds = (torch.is_grad_enabled() and not plain and not getattr(ddp, "_has_rebuilt_buckets", True)
                        and getattr(ddp, "_runtime_checks_synced_backward", False)
                        and (getattr(ddp, "static_graph", False) or not getattr(ddp, "find_unused_parameters", False)))
            output = (recorded_rebuild if rebuilds else original_forward)(ddp, *args, **kwargs)
            if syncs:
                guard._tls.ddp_backward_pending = ddp
            return output

        self._patch(DDP, "forward", forward)
        original_backward = torch.autograd.backward
        recorded_backward = self.wrap(original_backward, "ddp.backward.allreduce", C.ALLREDUCE, method=False,
                                      fingerprint_args=False)

        @functools.wraps(original_backward)
        def backward(*args, **kwargs):
            ddp = getattr(guard._tls, "ddp_backward_pending", None)
            if ddp is not None and not getattr(guard._tls, "depth", 0):
                guard._tls.ddp_backward_pending = None
                ddp._runtime_checks_synced_backward = True
                return recorded_backward(*args, **kwargs)
            return original_backward(*args, **kwargs)

        self._patch(torch.autograd, "backward", backward)


def _on_cuda(values: Any, depth: int = 0) -> bool:
    """Whether any tensor among the arguments lives on a GPU (metadata only)."""
    device = getattr(getattr(values, "device", None), "type", None)
    if device is not None:
        return device == "cuda"
    if depth < 2 and isinstance(values, (list, tuple)):
        return any(_on_cuda(v, depth + 1) for v in list(values)[:8])
    if depth < 2 and isinstance(values, dict):
        return any(_on_cuda(v, depth + 1) for v in list(values.values())[:8])
    return False


def _completion_event(tensors: Any):
    """A CUDA event recorded on the current stream right after an NCCL collective: the
    collective's work is ordered before it, so the event completes when the collective has.
    ``None`` for CPU tensors (gloo returns after the collective completed)."""
    if not _on_cuda(tensors):
        return None
    import torch

    event = torch.cuda.Event()
    event.record()
    return event


def _open_ring(rank: int):
    """This rank's shared-memory ring, when a store address says where (``None`` otherwise)."""
    address = os.environ.get(P.ENV_STORE)
    if not address:
        return None
    from .ring import Ring, ring_dir, ring_path

    try:
        return Ring(ring_path(ring_dir(address), rank))
    except OSError:
        return None


def _distributed() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized()


def _checkpoint_is_collective(accelerator: Any) -> bool:
    """save_state & co. are collectives under FSDP, DeepSpeed and Megatron (facts §1.1)."""
    try:
        dtype = str(accelerator.state.distributed_type).split(".")[-1]
    except Exception:
        return True
    return dtype in _CKPT_COLLECTIVE_TYPES


class Watchdog(threading.Thread):
    """The rank's background thread: stack dumps on request, abort, launcher death."""

    def __init__(self, store, rank: int, main_thread: int, parent_pid: int, guard: Guard | None = None) -> None:
        super().__init__(name="runtime_checks-watchdog", daemon=True)
        self.guard = guard
        self.store = store
        self.rank = rank
        self.main_thread = main_thread
        self.parent_pid = parent_pid
        self._dumped: bytes | None = None

    def run(self) -> None:
        while True:
            time.sleep(FLUSH_S)
            if os.getppid() != self.parent_pid:
                os._exit(P.EXIT_CODES["rank_died"])  # the launcher is gone: do not hang on, holding the port
            if self.guard is not None:
                self.guard.poll_device()
                self.guard.flush_leave(0.1, self.store)
                self.guard.flush(self.store)
            try:
                if self.store.check([P.ABORT]):
                    os._exit(int(self.store.get(P.ABORT)))
                if self.store.check([P.DUMP_REQUEST]):
                    request = self.store.get(P.DUMP_REQUEST)
                    if request != self._dumped:
                        self._dumped = request
                        self.store.set(P.STACK_KEY.format(rank=self.rank), P.encode(self.stack()))
            except Exception:
                if os.getppid() != self.parent_pid:
                    os._exit(P.EXIT_CODES["rank_died"])

    def stack(self) -> dict[str, Any]:
        frame = sys._current_frames().get(self.main_thread)
        if frame is None:
            return {"stack": [], "site": None}
        entries = traceback.extract_stack(frame)
        user = [e for e in entries if is_user_file(e.filename)]
        site = user[-1] if user else entries[-1]
        return {
            "stack": [f"{e.filename}:{e.lineno} in {e.name}: {e.line or ''}" for e in entries[-25:]],
            "site": {"file": os.path.abspath(site.filename), "line": site.lineno, "function": site.name,
                     "code": (site.line or "").strip()},
        }


def die_with_parent() -> None:
    """Linux: the kernel kills this rank when its launcher dies, even by SIGKILL."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass  # the watchdog's getppid check is the fallback


def connect(address: str, timeout: float = 30.0):
    from torch.distributed import TCPStore

    host, _, port = address.rpartition(":")
    return TCPStore(host, int(port), is_master=False, wait_for_workers=False, timeout=timedelta(seconds=timeout))
