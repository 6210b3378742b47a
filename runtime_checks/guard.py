"""In-rank recording of collectives: fingerprints, call sites, and the rank's own watchdog.

``install()`` wraps the ``torch.distributed`` collectives and Accelerate's collectives (the
table in :mod:`accel_lint.collectives`), and the places where DDP, FSDP (1 and 2) and DeepSpeed
communicate on the user's behalf, so that every collective a rank enters and leaves is
recorded as a small fingerprint and sent, in batches, to the out-of-band store queue. Only the outermost
call is recorded: Accelerate's ``gather`` calling ``all_gather_into_tensor`` is one record,
placed at the user's line. A background thread answers stack-dump requests, obeys an abort,
and exits the rank when its launcher is gone.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.abc
import importlib.util
import inspect
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from types import ModuleType
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
    deepspeed = _package_dir("deepspeed")
    if deepspeed is not None:  # its engine and ZeRO hooks call collectives for the user too
        dirs.append(deepspeed)
    for mod in ("runpy", "contextlib", "functools", "threading"):
        m = sys.modules.get(mod)
        if m is not None and getattr(m, "__file__", None):
            dirs.append(os.path.abspath(m.__file__))
    return tuple(dirs)


def _package_dir(name: str) -> str | None:
    """Where an installed package lives, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(list(spec.submodule_search_locations)[0])


def _module_call_codes() -> frozenset:
    from torch import nn

    calls = (getattr(nn.Module, "_wrapped_call_impl", None), getattr(nn.Module, "_call_impl", None))
    return frozenset(f.__code__ for f in calls if f is not None and hasattr(f, "__code__"))


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
    return site_of(_first_user_frame(sys._getframe(skip)))


class _Site(dict):
    """A call site (``file``, ``line``, ``function``), made once per code object and line and
    shared by every event from that line (nothing changes it), with its JSON made once too."""

    __slots__ = ("wire",)


_SITES: dict[tuple[Any, int], _Site] = {}  # (code object, line) -> its site
_CACHE_LIMIT = 65536  # entries per cache; past it the cache starts again (a generated-code pathology)


def site_of(frame) -> dict[str, Any]:
    if frame is None:
        return {"file": "?", "line": 0, "function": "?"}
    code = frame.f_code
    key = (code, frame.f_lineno)
    site = _SITES.get(key)
    if site is None:
        site = _Site(file=_user_file(code), line=frame.f_lineno, function=code.co_name)
        site.wire = P.encode_event(site)
        if len(_SITES) >= _CACHE_LIMIT:
            _SITES.clear()
        _SITES[key] = site
    return site


def _first_user_frame(frame):
    while frame is not None and _user_file(frame.f_code) is None:
        frame = frame.f_back
    return frame


_MODULE_CALL_CODES: frozenset = frozenset()  # the code of nn.Module.__call__ (set at install)


def model_call_frame(frame):
    """The user's frame that called the outermost ``nn.Module`` on the stack, else the innermost
    user frame, else ``None`` (a thread with no user frame: the autograd engine's own).

    A sharded model communicates in hooks of its inner modules; the line the user can act on is
    the model call in the training loop, not a line inside a model's own forward (a
    transformers decoder loop, which is no library file here)."""
    innermost = beyond_call = None
    while frame is not None:
        if frame.f_code in _MODULE_CALL_CODES:
            beyond_call = _first_user_frame(frame)  # refined by any module call further out
        elif innermost is None and _user_file(frame.f_code) is not None:
            innermost = frame
        frame = frame.f_back
    return beyond_call or innermost


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


_ARGS: dict[tuple, tuple[Any, bytes, bool]] = {}  # the tensors' metadata -> describe(), its JSON, on a GPU
_TENSOR: Any = None  # torch.Tensor, once torch is imported


def _tensors_key(tensors: list[Any]) -> tuple | None:
    """What ``describe`` and ``_on_cuda`` read of a list of tensors, as a key (``None``: not
    all of them plain tensors, or metadata that does not hash)."""
    global _TENSOR
    if _TENSOR is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        _TENSOR = torch.Tensor
    try:
        key = []
        for value in tensors:
            if not isinstance(value, _TENSOR):
                return None
            key.append((value.shape, value.dtype, value.device))
        return tuple(key)
    except Exception:  # symbolic shapes and the like: described each time, as before
        return None


def describe_args(tensors: list[Any]) -> tuple[Any, bytes, bool]:
    """``describe(tensors)``, its JSON and ``_on_cuda(tensors)``: made once per shapes, dtypes
    and devices, not at every collective."""
    key = _tensors_key(tensors)
    if key is not None:
        hit = _ARGS.get(key)
        if hit is not None:
            return hit
    args = describe(tensors)
    made = (args, P.encode_event(args), _on_cuda(tensors))
    if key is not None:
        if len(_ARGS) >= _CACHE_LIMIT:
            _ARGS.clear()
        _ARGS[key] = made
    return made


class Guard:
    """One per rank: pushes fingerprints, runs the watchdog thread."""

    active: Guard | None = None  # the guard installed in this process (read by bench/runtime_scale.py)

    def __init__(self, store, rank: int, world_size: int) -> None:
        self.store = store
        # what this rank sent to the store: events, batches (one queue_push each) and their bytes
        self.sent = {"events": 0, "batches": 0, "bytes": 0}
        self.rank = rank
        self.world_size = world_size
        self.seq = 0
        self._tls = threading.local()
        self._state_sent = False
        self._patched: list[tuple[Any, str, Any]] = []
        self._leave_lock = threading.Lock()
        self._buffer_lock = threading.Lock()
        self._flush_lock = threading.Lock()  # one flush at a time: batches reach the store in order
        self._buffer: list[dict[str, Any]] = []
        self._wire: list[bytes] = []  # the same events, each encoded once (for the ring and the store)
        self._pending_leave: tuple[int, float] | None = None
        # collectives on CUDA tensors whose CPU call returned but whose GPU work may still be
        # queued (NCCL is asynchronous): (seq, cuda event recorded after the call), in order
        self._on_device: list[tuple[int, Any]] = []
        self.ring = _open_ring(rank)
        # the torch.autograd.backward in flight (the sharded wrappers' hooks may run on the autograd
        # engine's thread, CUDA's): its caller's frame, and whether it runs inside a recorded collective
        self._backward_depth = 0
        self._backward_caller: Any = None
        self._backward_nested = False

    # -- recording -------------------------------------------------------------------------
    # Events are buffered and sent in batches by the watchdog thread (every FLUSH_S): a store
    # round trip on the training thread costs ~0.5 ms when the ranks keep every core busy.
    # START, FINISH and EXCEPTION flush the buffer and go out at once. Each event is encoded
    # once, on push: the ring keeps those bytes and the flush joins them into the batch (with
    # the GIL, the watchdog thread's encoding stalled the training thread as much as its own).
    def push(self, kind: str, **fields: Any) -> None:
        if kind not in (P.ENTER,):
            fields.setdefault("prev_left", self.take_leave())
        fields.update(kind=kind, rank=self.rank, t=time.time())
        self._send(kind, fields, P.encode_event(fields))

    def _send(self, kind: str, fields: dict[str, Any], data: bytes) -> None:
        """An event and its bytes (``P.encode_event(fields)``) to the ring and the next batch."""
        if self.ring is not None and kind not in (P.FINISH, P.EXCEPTION):
            self.ring.record_encoded(data, fields)  # survives the process: read by the watcher after a native crash
        with self._buffer_lock:
            self._buffer.append(fields)
            self._wire.append(data)
        if kind in (P.START, P.FINISH, P.EXCEPTION):
            self.flush(self.store)
        if kind in (P.FINISH, P.EXCEPTION) and self.ring is not None:
            ring, self.ring = self.ring, None  # its events reached the store: the ring has done its job
            ring.remove()

    def flush(self, store) -> None:
        # the round trip happens outside the buffer's lock: a push on the training thread never
        # waits for the store (it did, one round trip in every flush it met)
        with self._flush_lock:
            with self._buffer_lock:
                wire, self._wire, self._buffer = self._wire, [], []
            if not wire:
                return
            try:
                message = P.encode_batch(wire)
                store.queue_push(P.EVENTS_QUEUE, message)  # type: ignore[arg-type]
                self.sent["events"] += len(wire)
                self.sent["batches"] += 1
                self.sent["bytes"] += len(message)
            except Exception:  # the watcher is gone: never break the user's program for it
                pass

    def _buffer_event(self, event: dict[str, Any]) -> None:
        """Queue an event the watchdog thread made (a LEAVE) for the next flush."""
        data = P.encode_event(event)
        with self._buffer_lock:
            self._buffer.append(event)
            self._wire.append(data)

    # A LEAVE is not sent at once: the next ENTER carries it (``prev_left``), which halves
    # the messages; the watchdog thread flushes it when the rank computes for a while, so
    # the watcher still knows the rank has left the collective.
    def left(self, seq: int) -> None:
        with self._leave_lock:
            self._pending_leave = (seq, time.time())
            if self.ring is not None:
                self.ring.record_encoded(P.encode_leave(self.rank, seq, self._pending_leave[1]))

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
            for seq in done:
                self._buffer_event({"kind": P.LEAVE, "rank": self.rank, "seq": seq, "t": now})

    def flush_leave(self, older_than: float, store) -> None:
        with self._leave_lock:
            pending = self._pending_leave
            if pending is None or time.time() - pending[1] < older_than:
                return
            self._pending_leave = None
        self._buffer_event({"kind": P.LEAVE, "rank": self.rank, "seq": pending[0], "t": pending[1]})

    def wrap(self, fn: Callable, op: str, op_kind: str, method: bool, checkpoint: bool = False,
             fingerprint_args: bool = True) -> Callable:
        guard = self

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            if guard.nested() or not _distributed():
                return fn(*args, **kwargs)
            if checkpoint and not _checkpoint_is_collective(args[0] if method else None, op):
                return fn(*args, **kwargs)  # local under DDP: let the collectives inside count
            payload = args[1:] if method else args
            tensors = list(payload[:2]) + [v for k, v in kwargs.items() if k == "tensor"] if fingerprint_args else []
            extra = {}
            if op_kind == C.BROADCAST_OBJ and payload and isinstance(payload[0], (list, tuple)):
                extra["length"] = len(payload[0])  # the receivers' list length must match the sender's
            site = site_of(guard.or_backward_caller(_first_user_frame(sys._getframe(1))))
            return guard.run_recorded(fn, args, kwargs, op=op, op_kind=op_kind, site=site, tensors=tensors, extra=extra)

        return recorded

    def run_recorded(self, fn: Callable, args: tuple, kwargs: dict[str, Any], *, op: str, op_kind: str,
                     site: dict[str, Any], tensors: list[Any] | None = None,
                     extra: dict[str, Any] | None = None) -> Any:
        """``fn(*args, **kwargs)`` as one collective: ENTER (with the deferred LEAVE of the last
        one), the call, then its LEAVE. Collectives called inside it are part of it."""
        tensors = tensors if tensors is not None else []
        self._tls.depth = 1
        try:
            seq = self.seq
            self.seq += 1
            prev = self.take_leave_record()
            described, described_wire, on_device = describe_args(tensors)
            prev_left, prev_left_seq = (prev[1], prev[0]) if prev else (None, None)
            fields = {"seq": seq, "op": op, "op_kind": op_kind, "site": site, "prev_left": prev_left,
                      "prev_left_seq": prev_left_seq, "args": described, "on_device": on_device}
            if extra:
                fields.update(extra)
            fields.update(kind=P.ENTER, rank=self.rank, t=time.time())
            site_wire = getattr(site, "wire", None)
            data = None
            if not extra and site_wire is not None:  # the same bytes, from parts made once per site and metadata
                data = P.encode_enter(seq, op, op_kind, site_wire, prev_left, prev_left_seq, described_wire,
                                      on_device, self.rank, fields["t"])
            self._send(P.ENTER, fields, data if data is not None else P.encode_event(fields))
            result = fn(*args, **kwargs)
            event = _completion_event(tensors) if on_device else None
            if event is None:
                self.left(seq)
            else:
                self.left_on_device(seq, event)
            return result
        finally:
            self._tls.depth = 0

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

        global _SKIP_DIRS, _MODULE_CALL_CODES
        Guard.active = self
        _SKIP_DIRS = _library_dirs()
        _MODULE_CALL_CODES = _module_call_codes()
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
        self._install_backward()
        self._install_ddp()
        self._install_loader()
        self._install_sharded()

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

    # -- collectives a wrapper makes on the user's behalf ------------------------------------
    # An implicit collective is its own op kind: against an explicit collective of the same
    # primitive (FSDP's all-gather against the user's gather) it is a divergence, not a shape
    # mismatch of arguments that mean different things.
    def record_implicit(self, op: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, a collective a sharded wrapper makes on the user's behalf,
        recorded as ``op`` at the user's model call (forward) or ``backward()`` line. Inside a
        recorded collective (``accelerator.backward``, ``deepspeed.backward.reduce_gradients``)
        it is part of that one, also where the autograd engine runs it on another thread (CUDA)."""
        if self.nested() or not _distributed():
            return fn(*args, **kwargs)
        site = site_of(self.or_backward_caller(model_call_frame(sys._getframe(1))))
        return self.run_recorded(fn, args, kwargs, op=op, op_kind=op, site=site)

    def nested(self) -> bool:
        """Inside a recorded collective: on this thread, or, for the autograd engine's own thread
        (CUDA's), in the backward a recorded collective called (``accelerator.backward``)."""
        return bool(getattr(self._tls, "depth", 0) or (self._backward_depth and self._backward_nested))

    def or_backward_caller(self, frame):
        """``frame``, or on a thread without user frames (the autograd engine's, under CUDA) the
        user's frame that called the backward in flight."""
        if frame is None and self._backward_caller is not None:
            return _first_user_frame(self._backward_caller)
        return frame

    def _install_backward(self) -> None:
        """One wrapper of ``torch.autograd.backward`` (so also ``loss.backward()`` and
        ``accelerator.backward``) that remembers the user's ``backward()`` line and whether the
        backward runs inside a recorded collective, for the sharded wrappers' hooks, and records
        the backward itself where a wrapper's forward said it will communicate (``_tls.backward_pending``:
        DDP's gradient all-reduce, DeepSpeed's gradient reduction after a raw ``loss.backward()``)."""
        import torch

        original_backward = torch.autograd.backward
        guard = self

        @functools.wraps(original_backward)
        def backward(*args, **kwargs):
            if guard._backward_depth:  # a backward inside one (reentrant checkpointing): part of the outer one
                return original_backward(*args, **kwargs)
            pending, guard._tls.backward_pending = getattr(guard._tls, "backward_pending", None), None
            op = pending() if pending is not None else None  # its side effects happen even when nested
            nested = bool(getattr(guard._tls, "depth", 0))
            guard._backward_caller, guard._backward_nested, guard._backward_depth = sys._getframe(1), nested, 1
            try:
                if op is None or nested or not _distributed():
                    return original_backward(*args, **kwargs)
                guard._backward_nested = True
                return guard.run_recorded(original_backward, args, kwargs, op=op, op_kind=_PENDING_KINDS.get(op, op),
                                          site=call_site())
            finally:
                guard._backward_caller, guard._backward_nested, guard._backward_depth = None, False, 0

        self._patch(torch.autograd, "backward", backward)

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
                guard._tls.backward_pending = functools.partial(_ddp_synced_backward, ddp)
            return output

        self._patch(DDP, "forward", forward)

    def _install_sharded(self) -> None:
        """FSDP (1 and 2) and DeepSpeed, patched as their modules are imported: a DDP run neither
        imports FSDP (0.7 s) nor needs DeepSpeed installed."""
        _AFTER_IMPORT.on_import("torch.distributed.fsdp._fully_shard._fsdp_param_group", self._install_fsdp2)
        _AFTER_IMPORT.on_import("torch.distributed.fsdp._flat_param", self._install_fsdp1_all_gather)
        _AFTER_IMPORT.on_import("torch.distributed.fsdp._runtime_utils", self._install_fsdp1_reduce)
        _AFTER_IMPORT.on_import("deepspeed.runtime.engine", self._install_deepspeed_engine)
        _AFTER_IMPORT.on_import("deepspeed.runtime.zero.partitioned_param_coordinator",
                                self._install_deepspeed_zero3_fetch)

    def _install_fsdp2(self, param_group_module: ModuleType) -> None:
        """FSDP2 (``fully_shard``), torch 2.13 ``torch/distributed/fsdp/_fully_shard/``. Recorded
        by wrapping the two functions ``_fsdp_param_group.py`` calls only when it communicates:

        * ``foreach_all_gather``: ``FSDPParamGroup.unshard`` calls it unless the group's all-gather
          is already issued (``_all_gather_result``), its parameters are already unsharded
          (``is_unsharded``: ``reshard_after_forward=False``, a repeated forward), it is the
          pre-backward without ``unshard_in_backward``, or the shard group has one rank. Named
          after the group's ``_training_state``: ``fsdp.forward.all_gather`` (FORWARD, forward
          prefetch too), ``fsdp.backward.all_gather`` (PRE_/POST_BACKWARD, backward prefetch),
          ``fsdp.unshard.all_gather`` (IDLE: an explicit ``module.unshard()``).
        * ``foreach_reduce``: ``FSDPParamGroup.post_backward`` calls it unless
          ``reduce_grads`` is off (``set_requires_gradient_sync(False)``, Accelerate's
          ``no_sync``/``accumulate`` under FSDP2) or no parameter has a gradient; it
          communicates as ``_fsdp_collectives.py:foreach_reduce`` does, see ``_fsdp2_reduce_op``."""
        group_class = getattr(param_group_module, "FSDPParamGroup", None)
        all_gather = getattr(param_group_module, "foreach_all_gather", None)
        reduce = getattr(param_group_module, "foreach_reduce", None)
        if group_class is None or all_gather is None or reduce is None:
            return
        guard = self
        original_unshard = group_class.unshard

        @functools.wraps(original_unshard)
        def unshard(group, *args, **kwargs):
            guard._tls.fsdp2_group = group  # its training state names the all-gather below
            try:
                return original_unshard(group, *args, **kwargs)
            finally:
                guard._tls.fsdp2_group = None

        @functools.wraps(all_gather)
        def foreach_all_gather(*args, **kwargs):
            group = getattr(guard._tls, "fsdp2_group", None)
            phase = _FSDP2_PHASES.get(_state_name(group, "_training_state"), "unshard")
            return guard.record_implicit(f"fsdp.{phase}.all_gather", all_gather, *args, **kwargs)

        reduce_signature = inspect.signature(reduce)

        @functools.wraps(reduce)
        def foreach_reduce(*args, **kwargs):
            op = _fsdp2_reduce_op(reduce_signature.bind(*args, **kwargs).arguments)
            if op is None:
                return reduce(*args, **kwargs)
            return guard.record_implicit(op, reduce, *args, **kwargs)

        self._patch(group_class, "unshard", unshard)
        self._patch(param_group_module, "foreach_all_gather", foreach_all_gather)
        self._patch(param_group_module, "foreach_reduce", foreach_reduce)

    def _install_fsdp1_all_gather(self, flat_param_module: ModuleType) -> None:
        """FSDP1 (``FullyShardedDataParallel``), ``torch/distributed/fsdp/_flat_param.py``:
        ``FlatParamHandle.unshard`` calls ``_all_gather_flat_param`` only when
        ``needs_unshard()``: a sharded strategy (not ``NO_SHARD``, which FSDP1 also picks for a
        world of one) whose padded unsharded parameter is freed (the root and
        ``SHARD_GRAD_OP`` keep it after forward). Named after the handle's ``_training_state``:
        ``fsdp.forward.all_gather`` (FORWARD, forward prefetch too), ``fsdp.backward.all_gather``
        (BACKWARD_PRE/POST, backward prefetch), ``fsdp.summon_full_params.all_gather``
        (``summon_full_params``, full state dicts)."""
        handle_class = getattr(flat_param_module, "FlatParamHandle", None)
        original = getattr(handle_class, "_all_gather_flat_param", None)
        if original is None:
            return
        guard = self

        @functools.wraps(original)
        def all_gather_flat_param(handle, *args, **kwargs):
            fake = getattr(handle, "_use_fake_all_gather", False)  # a debugging process group: no communication
            if fake or _group_size(getattr(handle, "process_group", None)) < 2:
                return original(handle, *args, **kwargs)
            phase = _FSDP1_PHASES.get(_state_name(handle, "_training_state"), "unshard")
            return guard.record_implicit(f"fsdp.{phase}.all_gather", original, handle, *args, **kwargs)

        self._patch(handle_class, "_all_gather_flat_param", all_gather_flat_param)

    def _install_fsdp1_reduce(self, runtime_utils: ModuleType) -> None:
        """FSDP1, ``torch/distributed/fsdp/_runtime_utils.py``: ``_post_backward_hook`` reduces a
        gradient only when the flat parameter has one and ``state._sync_gradients`` (not inside
        ``no_sync()``); then ``_reduce_grad`` (sharded strategies: ``fsdp.backward.reduce_scatter``;
        ``HYBRID_SHARD`` adds an all-reduce across nodes: ``fsdp.backward.reduce_scatter_all_reduce``;
        a registered comm hook runs in its place and still runs) or ``_reduce_grad_no_shard``
        (``NO_SHARD``: ``fsdp.backward.all_reduce``). A process group of one rank communicates nothing."""
        reduce_grad = getattr(runtime_utils, "_reduce_grad", None)
        reduce_no_shard = getattr(runtime_utils, "_reduce_grad_no_shard", None)
        if reduce_grad is None or reduce_no_shard is None:
            return
        guard = self

        @functools.wraps(reduce_grad)
        def reduce_sharded(state, handle, *args, **kwargs):
            if getattr(handle, "_use_fake_reduce", False) or _group_size(getattr(state, "process_group", None)) < 2:
                return reduce_grad(state, handle, *args, **kwargs)
            hybrid = _state_name(handle, "_sharding_strategy") in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
            op = "fsdp.backward.reduce_scatter_all_reduce" if hybrid and state._comm_hook is None \
                else "fsdp.backward.reduce_scatter"
            return guard.record_implicit(op, reduce_grad, state, handle, *args, **kwargs)

        @functools.wraps(reduce_no_shard)
        def reduce_unsharded(state, handle, *args, **kwargs):
            if _group_size(getattr(state, "process_group", None)) < 2:
                return reduce_no_shard(state, handle, *args, **kwargs)
            return guard.record_implicit("fsdp.backward.all_reduce", reduce_no_shard, state, handle, *args, **kwargs)

        self._patch(runtime_utils, "_reduce_grad", reduce_sharded)
        self._patch(runtime_utils, "_reduce_grad_no_shard", reduce_unsharded)

    def _install_deepspeed_engine(self, engine_module: ModuleType) -> None:
        """DeepSpeed's engine (0.19.8 ``deepspeed/runtime/engine.py``), where it communicates:

        * ``deepspeed.backward.reduce_gradients``: ``DeepSpeedEngine.backward`` with ZeRO-2/3
          (``zero_optimization_partition_gradients``: gradients are reduced in hooks on every
          backward, and ZeRO-3 all-gathers parameters for it), else when ``_backward_epilogue``
          calls ``allreduce_gradients``: ``enable_backward_allreduce``, not inside ``no_sync()``,
          at a gradient accumulation boundary. A raw ``loss.backward()`` after the engine's
          forward with grad enabled runs the same epilogue (torch-style backward) and counts too.
        * ``deepspeed.step``: ``DeepSpeedEngine.step`` at a gradient accumulation boundary with
          ZeRO (stage >= 1: the ZeRO optimizer all-reduces the norm and overflow flag, stages 1/2
          all-gather the updated partitions), and every step without managed accumulation (it
          then reduces or finalizes the accumulated gradients itself).

        Under Accelerate, ``accelerator.backward`` (recorded itself) runs both."""
        engine_class = getattr(engine_module, "DeepSpeedEngine", None)
        if engine_class is None:
            return
        guard = self
        original_forward, original_backward = engine_class.forward, engine_class.backward
        original_step = engine_class.step

        @functools.wraps(original_forward)
        def forward(engine, *args, **kwargs):
            output = original_forward(engine, *args, **kwargs)
            if _grad_enabled():
                guard._tls.backward_pending = functools.partial(_deepspeed_raw_backward, engine)
            return output

        @functools.wraps(original_backward)
        def backward(engine, *args, **kwargs):
            guard._tls.backward_pending = None  # the engine's own backward, recorded here
            if not _safely(_deepspeed_backward_communicates, engine):
                return original_backward(engine, *args, **kwargs)
            return guard.record_implicit("deepspeed.backward.reduce_gradients", original_backward, engine, *args,
                                         **kwargs)

        @functools.wraps(original_step)
        def step(engine, *args, **kwargs):
            if not _safely(_deepspeed_step_communicates, engine):
                return original_step(engine, *args, **kwargs)
            return guard.record_implicit("deepspeed.step", original_step, engine, *args, **kwargs)

        self._patch(engine_class, "forward", forward)
        self._patch(engine_class, "backward", backward)
        self._patch(engine_class, "step", step)

    def _install_deepspeed_zero3_fetch(self, coordinator_module: ModuleType) -> None:
        """ZeRO-3's parameter fetch (``deepspeed/runtime/zero/partitioned_param_coordinator.py``):
        ``fetch_sub_module`` (a module's pre-forward / pre-backward hook) and its prefetch call
        ``__all_gather_params_``, which all-gathers only the parameters whose ``ds_status`` is
        NOT_AVAILABLE (persistent parameters, under ``stage3_param_persistence_threshold``, stay
        gathered after the first fetch; so do those inside ``GatheredParameters``):
        ``deepspeed.forward.all_gather`` or ``deepspeed.backward.all_gather`` (its ``forward`` flag)."""
        coordinator = getattr(coordinator_module, "PartitionedParameterCoordinator", None)
        name = "_PartitionedParameterCoordinator__all_gather_params_"
        original = getattr(coordinator, name, None)
        if original is None:
            return
        guard = self
        self._install_zero3_trace_check(coordinator)

        @functools.wraps(original)
        def all_gather_params(self_, params, forward, *args, **kwargs):
            if not _safely(_zero3_fetch_communicates, params):
                return original(self_, params, forward, *args, **kwargs)
            op = "deepspeed.forward.all_gather" if forward else "deepspeed.backward.all_gather"
            return guard.record_implicit(op, original, self_, params, forward, *args, **kwargs)

        self._patch(coordinator, name, all_gather_params)

    def _install_zero3_trace_check(self, coordinator: type) -> None:
        """``deepspeed.forward.trace_check``: ZeRO-3's root pre-forward hook calls
        ``reset_step``, which, until the coordinator holds a complete trace of the module order
        (the first forwards, and again after the order changed and invalidated it: a different
        path through the model), checks that order against rank 0's: broadcasts of its length and
        values (``assert_ints_same_as_other_ranks``). It comes before the forward's fetches."""
        original = getattr(coordinator, "reset_step", None)
        if original is None or not hasattr(coordinator, "is_complete_trace"):
            return
        guard = self

        @functools.wraps(original)
        def reset_step(coordinator_, *args, **kwargs):
            if not _safely(_zero3_trace_incomplete, coordinator_):
                return original(coordinator_, *args, **kwargs)
            return guard.record_implicit("deepspeed.forward.trace_check", original, coordinator_, *args, **kwargs)

        self._patch(coordinator, "reset_step", reset_step)


# the phase an FSDP all-gather belongs to, by the training state of the FSDP2 param group / FSDP1 handle
_FSDP2_PHASES = {"FORWARD": "forward", "PRE_BACKWARD": "backward", "POST_BACKWARD": "backward"}
_FSDP1_PHASES = {"FORWARD": "forward", "BACKWARD_PRE": "backward", "BACKWARD_POST": "backward",
                 "SUMMON_FULL_PARAMS": "summon_full_params"}
# the op kind of a backward recorded from a forward's promise (DDP's stays the all-reduce it was)
_PENDING_KINDS = {"ddp.backward.allreduce": C.ALLREDUCE}


def _state_name(owner: Any, attribute: str) -> str | None:
    state = getattr(owner, attribute, None)
    return getattr(state, "name", None)


def _group_size(group: Any) -> int:
    try:
        return group.size()
    except Exception:  # no group: FSDP uses the default one
        import torch.distributed as dist

        return dist.get_world_size() if dist.is_initialized() else 1


def _fsdp2_reduce_op(arguments: dict[str, Any]) -> str | None:
    """``_fsdp_collectives.py:foreach_reduce``: a reduce-scatter when the shard group has more
    than one rank; with an all-reduce group (HSDP, replicate) an all-reduce across replicas too,
    unless ``all_reduce_grads`` is off (``set_requires_all_reduce(False)``). ``None``: nothing
    communicates."""
    scatter_group, all_reduce_group = arguments.get("reduce_scatter_group"), arguments.get("all_reduce_group")
    scatters = scatter_group is not None and _group_size(scatter_group) > 1
    all_reduces = (all_reduce_group is not None and arguments.get("all_reduce_grads", True)
                   and _group_size(all_reduce_group) > 1)
    if scatters and all_reduces:
        return "fsdp.backward.reduce_scatter_all_reduce"
    if scatters:
        return "fsdp.backward.reduce_scatter"
    return "fsdp.backward.all_reduce" if all_reduces else None


def _ddp_synced_backward(ddp: Any) -> str:
    ddp._runtime_checks_synced_backward = True  # the reducer rebuilds its buckets at the next forward
    return "ddp.backward.allreduce"


def _deepspeed_backward_communicates(engine: Any) -> bool:
    if engine.zero_optimization_partition_gradients() or engine.zero_optimization_partition_weights():
        return True
    return bool(engine.enable_backward_allreduce and not engine.inside_no_sync_ctxt
                and engine.is_gradient_accumulation_boundary())


def _deepspeed_raw_backward(engine: Any) -> str | None:
    return "deepspeed.backward.reduce_gradients" if _safely(_deepspeed_backward_communicates, engine) else None


def _deepspeed_step_communicates(engine: Any) -> bool:
    managed = getattr(engine, "managed_gradient_accumulation", None)
    if managed is not None and not managed():
        return True
    return bool(engine.is_gradient_accumulation_boundary() and engine.zero_optimization())


def _zero3_trace_incomplete(coordinator: Any) -> bool:
    import torch

    if torch.compiler.is_compiling():  # reset_step returns at once
        return False
    return not coordinator.is_complete_trace()


def _zero3_fetch_communicates(params: Any) -> bool:
    return any(_state_name(p, "ds_status") == "NOT_AVAILABLE" for p in params)


def _safely(predicate: Callable[[Any], bool], value: Any) -> bool:
    """A predicate over another library's internals: if they changed, record nothing (no false
    alarm; at worst the old hang verdict) rather than break the user's step."""
    try:
        return bool(predicate(value))
    except Exception:
        return False


def _grad_enabled() -> bool:
    import torch

    return torch.is_grad_enabled()


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs callbacks right after a named module has been imported (at once if it already is)."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}
        self._looking_up = threading.local()

    def on_import(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        module = sys.modules.get(name)
        if module is not None:
            _run_quietly(callback, module)
            return
        self.callbacks.setdefault(name, []).append(callback)
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        if name not in self.callbacks or getattr(self._looking_up, "name", None) == name:
            return None
        self._looking_up.name = name  # the finders after this one find the real spec
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._looking_up.name = None
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        callbacks, original_exec = self.callbacks.pop(name), loader.exec_module

        def exec_module(module: ModuleType) -> None:
            original_exec(module)
            for callback in callbacks:
                _run_quietly(callback, module)

        loader.exec_module = exec_module  # this spec's own loader object
        return spec


def _run_quietly(callback: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        callback(module)
    except Exception:  # a hook that no longer fits the library: the user's import must still work
        pass


_AFTER_IMPORT = _AfterImport()


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


_DIST: Any = None  # torch.distributed, once it is available


def _distributed() -> bool:
    dist = _DIST
    if dist is None:
        import torch.distributed as dist

        if not dist.is_available():
            return False
        globals()["_DIST"] = dist
    return dist.is_initialized()


def _checkpoint_is_collective(accelerator: Any, op: str = "") -> bool:
    """save_state & co. are collectives under FSDP, DeepSpeed and Megatron (facts §1.1). Under
    DeepSpeed ZeRO-1/2 only ``save_state`` is (the engine's ``save_checkpoint``): measured on 2
    GPUs, a main-only ``save_model``, ``get_state_dict`` or ``load_state`` there completes."""
    try:
        dtype = str(accelerator.state.distributed_type).split(".")[-1]
    except Exception:
        return True
    if dtype == "DEEPSPEED" and not op.endswith("save_state"):
        plugin = getattr(accelerator.state, "deepspeed_plugin", None)
        stage = getattr(plugin, "zero_stage", None)
        return stage is None or stage == 3
    return dtype in _CKPT_COLLECTIVE_TYPES


class Watchdog(threading.Thread):
    """The rank's background thread: stack dumps and NCCL flight recorder dumps on request, abort,
    launcher death. It runs while the main thread waits in a collective (the wait releases the GIL)."""

    def __init__(self, store, rank: int, main_thread: int, parent_pid: int, guard: Guard | None = None) -> None:
        super().__init__(name="runtime_checks-watchdog", daemon=True)
        self.guard = guard
        self.store = store
        self.rank = rank
        self.main_thread = main_thread
        self.parent_pid = parent_pid
        self._dumped: bytes | None = None
        self._fr_dumped: bytes | None = None

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
                if not self.store.check([P.SIGNAL]):
                    continue  # no abort, no dump request: the one round trip of a healthy tick
                if self.store.check([P.ABORT]):
                    os._exit(int(self.store.get(P.ABORT)))
                if self.store.check([P.DUMP_REQUEST]):
                    request = self.store.get(P.DUMP_REQUEST)
                    if request != self._dumped:
                        self._dumped = request
                        self.store.set(P.STACK_KEY.format(rank=self.rank), P.encode(self.stack()))
                    # a flight recorder request comes after a stack request: no extra store round
                    # trip while the run is healthy
                    if self.store.check([P.FR_REQUEST]):
                        request = self.store.get(P.FR_REQUEST)
                        if request != self._fr_dumped:
                            self._fr_dumped = request
                            from . import flight_recorder

                            self.store.set(P.FR_KEY.format(rank=self.rank), flight_recorder.dump())
            except Exception:
                if os.getppid() != self.parent_pid:
                    os._exit(P.EXIT_CODES["rank_died"])

    def stack(self) -> dict[str, Any]:
        """The main thread's Python stack, and whether this rank has an NCCL flight recorder to dump."""
        from . import flight_recorder

        frame = sys._current_frames().get(self.main_thread)
        if frame is None:
            return {"stack": [], "site": None, "flight_recorder": flight_recorder.can_dump()}
        entries = traceback.extract_stack(frame)
        user = [e for e in entries if is_user_file(e.filename)]
        site = user[-1] if user else entries[-1]
        return {
            "stack": [f"{e.filename}:{e.lineno} in {e.name}: {e.line or ''}" for e in entries[-25:]],
            "site": {"file": os.path.abspath(site.filename), "line": site.lineno, "function": site.name,
                     "code": (site.line or "").strip()},
            "flight_recorder": flight_recorder.can_dump(),
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
