"""What ranks and the watcher say to each other through the store, and the exit codes.

Events travel out of band through a ``torch.distributed.TCPStore`` queue (never through
a collective), so recording costs no synchronization and still works when the process
group is stuck. Each message pushed to ``EVENTS_QUEUE`` is a JSON list of events (a batch).
"""

from __future__ import annotations

import json
from typing import Any

ENV_STORE = "RUNTIME_CHECKS_STORE"  # host:port of the store the watcher reads
ENV_TIMEOUT = "RUNTIME_CHECKS_TIMEOUT"
ENV_REPORT = "RUNTIME_CHECKS_REPORT"
ENV_TRACE = "RUNTIME_CHECKS_TRACE"  # in-rank mode: write the run's Chrome trace here
ENV_PORT = "RUNTIME_CHECKS_PORT"  # in-rank mode: port the watcher process serves the store on
DEFAULT_REPORT = "runtime_checks_report.json"  # where a finding's report goes without --report

EVENTS_QUEUE = "rc/events"
DUMP_REQUEST = "rc/dump"  # the watcher asks every rank for its Python stack
ABORT = "rc/abort"  # in-rank mode: every rank exits with this code
FINAL = "rc/final"  # in-rank mode: the run's exit code after the end-of-run checks (read by rank 0)
STACK_KEY = "rc/stack/{rank}"
FR_REQUEST = "rc/fr"  # the watcher asks for each rank's NCCL flight recorder dump (after a stack request)
FR_KEY = "rc/fr/{rank}"  # the rank's dump: torch's pickle, or a JSON {"error": ...}
# set after each of ABORT, DUMP_REQUEST and FR_REQUEST: while the run is healthy a rank's watchdog
# thread asks the store for this key alone, one round trip per tick instead of two
SIGNAL = "rc/signal"

# event kinds
ENTER = "enter"  # a rank entered a collective
LEAVE = "leave"  # ... and left it
LOCAL = "local"  # a non-collective call worth tracking (set_trigger)
STATE = "state"  # accelerate state after construction: num_processes, distributed_type
START = "start"
FINISH = "finish"  # the script returned normally
EXCEPTION = "exception"  # the script raised
DIED = "died"  # a node reader saw a rank of its host die: the rank's ring records ride along

# finding kinds and exit codes (documented in the README)
EXIT_CODES = {
    "ok": 0,
    "usage": 2,
    "internal": 3,
    "divergence": 10,
    "shape_mismatch": 11,
    "hang": 12,
    "rank_exception": 13,
    "rank_died": 14,
    "trigger_misuse": 15,
    "not_distributed": 16,
}


def encode(message: dict[str, Any] | list[dict[str, Any]]) -> str:
    """One event, or a batch of events in the order they happened."""
    return json.dumps(message, separators=(",", ":"), default=str)


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str)  # what encode() writes, made once


def encode_event(event: dict[str, Any]) -> bytes:
    """One event as compact JSON bytes: a rank encodes each event once, for its ring and the store."""
    return _ENCODER.encode(event).encode("utf-8")


_STRINGS: dict[str, bytes] = {}  # op names and kinds, as JSON strings


def _json_string(text: str) -> bytes:
    made = _STRINGS.get(text)
    if made is None:
        made = _STRINGS[text] = encode_event(text)
    return made


def _finite(value: Any) -> bool:
    return type(value) is float and value - value == 0.0


_ENTER = (b'{"seq":%d,"op":%b,"op_kind":%b,"site":%b,"prev_left":%b,"prev_left_seq":%b,"args":%b,"on_device":%b,'
          b'"kind":"enter","rank":%d,"t":%b}')
_LEAVE = b'{"kind":"leave","rank":%d,"seq":%d,"t":%b}'


def encode_enter(seq: int, op: str, op_kind: str, site: bytes, prev_left: float | None, prev_left_seq: int | None,
                 args: bytes, on_device: bool, rank: int, t: float) -> bytes | None:
    """The bytes ``encode_event`` makes of a rank's ENTER without extra fields (in this order:
    seq, op, op_kind, site, prev_left, prev_left_seq, args, on_device, kind, rank, t), from
    ``site`` and ``args`` already encoded: the hot path's encoding, once per collective.
    ``None`` for values it does not write itself (then ``encode_event`` of the dict)."""
    if not (type(seq) is int and type(rank) is int and _finite(t) and type(on_device) is bool
            and (prev_left is None or _finite(prev_left)) and (prev_left_seq is None or type(prev_left_seq) is int)
            and type(op) is str and type(op_kind) is str):
        return None
    return _ENTER % (seq, _json_string(op), _json_string(op_kind), site,
                     b"null" if prev_left is None else float.__repr__(prev_left).encode(),
                     b"null" if prev_left_seq is None else b"%d" % prev_left_seq, args,
                     b"true" if on_device else b"false", rank, float.__repr__(t).encode())


def encode_leave(rank: int, seq: int, t: float) -> bytes:
    """``encode_event({"kind": LEAVE, "rank": rank, "seq": seq, "t": t})``, without the encoder."""
    if type(rank) is int and type(seq) is int and _finite(t):
        return _LEAVE % (rank, seq, float.__repr__(t).encode())
    return encode_event({"kind": LEAVE, "rank": rank, "seq": seq, "t": t})


def encode_batch(encoded: list[bytes]) -> bytes:
    """Events already encoded by :func:`encode_event` as one message (the same as ``encode`` of the list)."""
    return b"[" + b",".join(encoded) + b"]"


def decode(raw: bytes) -> list[dict[str, Any]]:
    message = json.loads(raw.decode("utf-8"))
    return message if isinstance(message, list) else [message]
