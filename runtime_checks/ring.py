"""Each rank's last fingerprints in a file-backed shared-memory ring, so that they outlive it.

Events reach the watcher in 50 ms batches through the store. A rank that gloo aborts
(``SIGABRT``), that segfaults, or that the OOM killer takes never sends its last batch, and the
verdict then lacked the very collective the rank died in. So every rank also writes each
event, synchronously and without any round trip, into a ring of fixed-size slots in a
``MAP_SHARED`` mapping of ``<dir>/rank<N>.ring`` (``/dev/shm`` where it exists): the kernel
keeps the pages when the process dies, and the watcher on the same host reads them after it
sees the death.

Layout: a 20-byte header (magic ``RCR1``, slot count, events written so far, the writer's pid),
then the slots,
each a 4-byte length and the event as compact JSON (truncated events are dropped by the reader).
The counter is written after the slot, so a reader never takes a half-written slot for a
complete one.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
from typing import Any

from .protocol import encode_event

MAGIC = b"RCR1"
SLOTS = 64
SLOT_BYTES = 2048
_HEADER = struct.Struct("<4sIQI")  # magic, slots, events written, the writer's pid
_LENGTH = struct.Struct("<I")
_COUNT = struct.Struct("<Q")  # the header's events-written field, at offset 8


def ring_dir(store_address: str) -> str:
    """The folder every rank and the watcher agree on: per store, in shared memory if possible."""
    base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
    return os.path.join(base, f"runtime_checks-{os.getuid()}-{store_address.replace(':', '-')}")


def ring_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"rank{rank}.ring")


def sweep_stale(min_age_s: float = 60.0) -> None:
    """Remove the ring folders of runs whose watcher could not clean up (a launcher killed with
    SIGKILL): every writer gone, nothing written for a minute."""
    import glob
    import shutil
    import time

    base = os.path.dirname(ring_dir("x:0"))
    for folder in glob.glob(os.path.join(base, f"runtime_checks-{os.getuid()}-*")):
        try:
            if time.time() - os.path.getmtime(folder) < min_age_s:
                continue
            rings = glob.glob(os.path.join(folder, "rank*.ring"))
            if any(_writer_alive(path) for path in rings):
                continue
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            continue


def rings_in(folder: str) -> dict[int, str]:
    """The ring files in ``folder``, by rank."""
    import glob

    found = {}
    for path in glob.glob(os.path.join(folder, "rank*.ring")):
        name = os.path.basename(path)[len("rank"):-len(".ring")]
        if name.isdigit():
            found[int(name)] = path
    return found


def writer_pid(path: str) -> int | None:
    """The pid of the process that wrote the ring (``None``: no ring there, or not one yet)."""
    try:
        with open(path, "rb") as f:
            magic, _, _, pid = _HEADER.unpack(f.read(_HEADER.size))
    except (OSError, struct.error):
        return None
    return pid if magic == MAGIC and pid > 0 else None


def _writer_alive(path: str) -> bool:
    pid = writer_pid(path)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Ring:
    """The writer, one per rank."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        size = _HEADER.size + SLOTS * SLOT_BYTES
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.ftruncate(fd, size)
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        self._count = 0
        self._map[: _HEADER.size] = _HEADER.pack(MAGIC, SLOTS, 0, os.getpid())

    def remove(self) -> None:
        """The rank ended normally: nothing to recover, leave nothing behind."""
        try:
            self._map.close()
            os.unlink(self.path)
            os.rmdir(os.path.dirname(self.path))  # the last rank to go removes the folder
        except OSError:
            pass

    def record(self, event: dict[str, Any]) -> None:
        self.record_encoded(encode_event(event), event)

    def record_encoded(self, data: bytes, event: dict[str, Any] | None = None) -> None:
        """Write an event already encoded (:func:`~runtime_checks.protocol.encode_event`); ``event``
        (else decoded from ``data``) serves only when the event is too large for its slot."""
        if len(data) > SLOT_BYTES - _LENGTH.size:
            event = event if event is not None else json.loads(data)
            event = {k: v for k, v in event.items() if k not in ("args", "traceback")}
            event["args"] = "(too large for the ring)"
            data = json.dumps(event, separators=(",", ":"), default=str).encode("utf-8")[: SLOT_BYTES - _LENGTH.size]
        start = _HEADER.size + (self._count % SLOTS) * SLOT_BYTES
        _LENGTH.pack_into(self._map, start, len(data))
        self._map[start + _LENGTH.size: start + _LENGTH.size + len(data)] = data
        self._count += 1
        _COUNT.pack_into(self._map, 8, self._count)  # after the slot: a reader never takes a half-written one


def read_ring(path: str) -> list[dict[str, Any]]:
    """The events still in a rank's ring, oldest first (empty when there is none)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return []
    if len(raw) < _HEADER.size:
        return []
    magic, slots, count, _ = _HEADER.unpack_from(raw)
    if magic != MAGIC:
        return []
    events = []
    for index in range(max(0, count - slots), count):
        start = _HEADER.size + (index % slots) * SLOT_BYTES
        (length,) = _LENGTH.unpack_from(raw, start)
        try:
            events.append(json.loads(raw[start + _LENGTH.size: start + _LENGTH.size + length]))
        except ValueError:
            continue
    return events
