"""Cross-rank comparison of fingerprints: divergence, shape mismatch, hang, crash, trigger misuse.

The watcher drains the store's event queue, keeps each rank's state (which collective it is
in, or since when it computes), and decides. It never joins a collective itself, so it keeps
working while the process group is stuck.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from typing import Any

from accel_lint import collectives as C

from . import protocol as P
from .groups import grouped_phrases, order_groups, ranks_label
from .report import Finding, _args_text, describe_site

POLL_S = 0.05
SETTLE_S = 0.25  # ranks send events in batches every 0.05 s: wait this long before describing a crash
REMOTE_DEATH_S = 3.0  # peers raised "connection closed": how long a node reader's death notice may take
KEEP_PER_RANK = 256
TIMEOUT_CEILING_S = 540.0  # 90% of torch's default NCCL process-group timeout (600 s)
TIMEOUT_FLOOR_S = 30.0
# ops whose input tensors must have the same shape and dtype on every rank
SHAPE_CHECKED = {C.ALLGATHER, C.ALLREDUCE, C.BROADCAST, "REDUCE", "REDUCE_SCATTER"}
SHAPE_FREE_OPS = {"accelerator.pad_across_processes", "accelerate.utils.pad_across_processes"}


@dataclass
class RankState:
    rank: int
    pid: int | None = None
    host: str = ""
    world_size: int = 0
    started: float = 0.0
    collectives: dict[int, dict] = field(default_factory=dict)
    # collectives entered and not yet completed. On gloo at most one (the call returns when the
    # collective is done); under NCCL the CPU call returns at once and several can be queued on
    # the GPU: the guard reports completion from a CUDA event, so the oldest entry is where
    # the rank really waits, even while its Python code has moved on.
    in_flight: dict[int, dict] = field(default_factory=dict)
    last_leave: float | None = None
    finished: bool = False
    exception: dict | None = None
    died: bool = False
    died_at: float | None = None
    state: dict | None = None
    triggers: list[dict] = field(default_factory=list)
    last_check_seq: int = -1
    stack: dict | None = None
    # alive and did not answer the last stack request: native code holding the GIL, or a process
    # whose threads do not get to run
    unresponsive: bool = False

    @property
    def current(self) -> dict | None:
        """The collective the rank is inside: the oldest one not completed."""
        return self.in_flight[min(self.in_flight)] if self.in_flight else None

    def complete(self, seq: int | None, t: float) -> None:
        """Mark a collective (by default the newest in flight) completed at ``t``."""
        if seq is None:
            if not self.in_flight:
                return
            seq = max(self.in_flight)
        record = self.in_flight.pop(seq, None) or self.collectives.get(seq)
        if record is not None:
            record["left"] = t
        self.last_leave = t

    @property
    def count(self) -> int:
        """How many collectives the rank entered (sequence numbers start at 0)."""
        return max(self.collectives) + 1 if self.collectives else 0

    def last_completed(self) -> dict | None:
        done = [c for c in self.collectives.values() if "left" in c]
        return max(done, key=lambda c: c["seq"]) if done else None


class Watcher:
    """The decision logic, independent of where it runs (the launcher, the watcher process, a notebook)."""

    def __init__(self, store, world_size: int, timeout: float | None) -> None:
        self.store = store
        self.world_size = world_size
        self.user_timeout = timeout
        self.ranks: dict[int, RankState] = {r: RankState(r) for r in range(world_size)}
        self.finding: Finding | None = None
        self.started = time.time()
        self._checked: set[int] = set()
        self._unchecked: set[int] = set()  # sequence numbers some rank reached and not every rank has
        self.settle = SETTLE_S  # 0 once every rank has ended: no event is still on its way
        # the slowest interval seen between a rank's consecutive collectives, as a list of at most
        # one (it was every interval: a list that grew by one per collective per rank, and that
        # every check took the max of, O(events so far) each 50 ms)
        self._gaps: list[float] = []
        self._disagreed: dict[int, float] = {}  # seq -> when the watcher first saw ranks disagree there
        self._awaiting = False  # a mismatch is known and waits for the ranks still on their way
        # where the ranks' shared-memory rings are (same host only): read after a rank dies
        self.ring_dir: str | None = None
        self.host = os.uname().nodename
        self._stacks_requested = 0.0

    # -- input ------------------------------------------------------------------------------
    def drain(self) -> int:
        """Apply every batch of events waiting in the store; how many there were."""
        try:
            pending = self.store.queue_len(P.EVENTS_QUEUE)
        except Exception:
            return 0
        for done in range(pending):
            try:
                events = P.decode(self.store.queue_pop(P.EVENTS_QUEUE, False))
            except Exception:
                return done
            for event in events:
                self._apply(event)
        return pending

    def _apply(self, e: dict[str, Any]) -> None:
        r = self.ranks.setdefault(e["rank"], RankState(e["rank"]))
        kind = e["kind"]
        if e.get("prev_left") is not None:  # the deferred LEAVE of the last collective
            r.complete(e.get("prev_left_seq"), e["prev_left"])
        if kind == P.START:
            r.pid, r.host, r.world_size, r.started = e["pid"], e["host"], e["world_size"], e["t"]
        elif kind == P.ENTER:
            if e["seq"] in r.collectives:  # already read from the rank's ring (a rank whose sends were late)
                return
            record = {"seq": e["seq"], "op": e["op"], "op_kind": e["op_kind"], "site": e["site"], "args": e["args"],
                      "entered": e["t"], "on_device": bool(e.get("on_device"))}
            if "length" in e:
                record["length"] = e["length"]
            previous = r.collectives.get(e["seq"] - 1)
            if previous is not None:
                gap = e["t"] - previous["entered"]
                if not self._gaps or gap > self._gaps[0]:
                    self._gaps = [gap]
            r.collectives[e["seq"]] = record
            r.in_flight[e["seq"]] = record
            self._unchecked.add(e["seq"])
            if len(r.collectives) > 2 * KEEP_PER_RANK:  # long runs: keep a tail, bounded memory
                for old in [s for s in r.collectives if s < e["seq"] - KEEP_PER_RANK and s in self._checked]:
                    del r.collectives[old]
            if e["op"] == "accelerator.check_trigger":
                r.last_check_seq = e["seq"]
        elif kind == P.LEAVE:
            r.complete(e["seq"], e["t"])
        elif kind == P.LOCAL:
            if e["op"] == "accelerator.set_trigger":
                r.triggers.append(e)
        elif kind == P.STATE:
            r.state = e
        elif kind == P.FINISH:
            r.finished = True
            r.died = False  # its last events can arrive after the watcher saw the process gone
            r.in_flight.clear()
        elif kind == P.EXCEPTION:
            r.exception = e
            r.died = False
        elif kind == P.DIED:
            self._died_elsewhere(r, e)

    def timeout(self) -> float:
        """The user's, or 20x the slowest observed interval between collectives, at least 30 s
        and at most 540 s: under NCCL the process group's own watchdog aborts the ranks after
        its timeout (600 s by default), and the guard must speak first to name the culprit."""
        if self.user_timeout is not None:
            return self.user_timeout
        slowest = max(self._gaps) if self._gaps else 0.0
        return min(TIMEOUT_CEILING_S, max(TIMEOUT_FLOOR_S, 20 * slowest))

    def note_deaths(self) -> None:
        for r in self.ranks.values():
            if r.host and r.host != self.host:
                continue  # another host's pid means nothing here
            if r.pid and not (r.finished or r.exception or r.died) and not process_alive(r.pid):
                r.died, r.died_at = True, time.time()
                self.recover_from_ring(r)
                self.settle_dead(r)

    def _died_elsewhere(self, r: RankState, e: dict[str, Any]) -> None:
        """A node reader saw a rank of its host die (this watcher cannot see a pid of another
        host). Only for the process the rank announced at its start: a ring an earlier run left
        on that host names another pid."""
        if r.pid is None or e.get("pid") != r.pid or r.finished or r.exception or r.died:
            return
        r.died, r.died_at = True, e["t"]
        self.recover_from_ring(r, e.get("ring") or [])
        self.settle_dead(r)

    def recover_from_ring(self, dead: RankState, records: list[dict[str, Any]] | None = None) -> None:
        """The events a dead rank wrote to its ring and never sent (the batch a native crash
        cut off): the collective it died in, with its shapes and line. ``records``: the ring of a
        rank of another host, forwarded by its node reader; else this host's ring is read."""
        if records is None:
            if self.ring_dir is None:
                return
            from .ring import read_ring, ring_path

            records = read_ring(ring_path(self.ring_dir, dead.rank))
        for event in records:
            kind = event.get("kind")
            if kind == P.ENTER and event.get("seq") not in dead.collectives:
                self._apply(event)
            elif kind == P.LEAVE and event.get("seq") in dead.in_flight:
                dead.complete(event["seq"], event["t"])

    def settle_dead(self, dead: RankState) -> None:
        """A dead rank cannot send the LEAVE it still owed. A collective that another rank has
        completed was completed by every rank (it needs them all), so it is no longer where the
        dead rank is; what no rank completed stays its last collective."""
        for seq in list(dead.in_flight):
            completed = [x.collectives[seq]["left"] for x in self.ranks.values()
                         if x is not dead and "left" in x.collectives.get(seq, {})]
            if completed:
                dead.complete(seq, min(completed))

    # -- decisions ------------------------------------------------------------------------------
    def check(self) -> Finding | None:
        """One look at every rank; the first anomaly found, if any."""
        if self.finding is not None:
            return self.finding
        self.note_deaths()  # a dead rank's ring may hold the collective it died in: read it first
        self._awaiting = False
        # earliest anomaly first: a mismatch at collective #k precedes the exceptions it causes
        # a rank that left early makes its peers raise "connection reset": blame the leaver
        for find in (self._not_distributed, self._mismatch, self._left_early, self._exception, self._death,
                     self._hang):
            finding = find()
            if finding is not None:
                self.finding = finding
                return finding
            if self._awaiting:  # a mismatch waits for its latecomers: it precedes whatever comes next
                return None
        return None

    def check_at_end(self) -> Finding | None:
        """After every rank finished normally: a trigger set and never checked."""
        finding = self.check()
        if finding is not None:
            return finding
        for r in self.ranks.values():
            dangling = [t for t in r.triggers if t["seq"] > r.last_check_seq]
            if dangling:
                t = dangling[-1]
                self.finding = Finding(
                    kind="trigger_misuse",
                    title=f"set_trigger() on rank {r.rank} was never followed by check_trigger()",
                    seq=t["seq"],
                    rows=[self._row(x) for x in self.ranks.values()],
                    culprit=r.rank,
                    why=f"rank {r.rank} called `accelerator.set_trigger()` at {describe_site(t['site'])} and no "
                        f"`check_trigger()` ran afterwards: the flag stays set and fires at the next check, or never",
                    hint="call `if accelerator.check_trigger(): break` on every rank at the same point of the loop",
                )
                return self.finding
        return None

    def _not_distributed(self) -> Finding | None:
        alone = [r for r in self.ranks.values() if r.state and r.state["num_processes"] == 1 and self.world_size > 1]
        if not alone:
            return None
        r = alone[0]
        return Finding(
            kind="not_distributed",
            title=f"{self.world_size} processes were started but each believes it is alone",
            seq=None,
            rows=[self._row(x) for x in self.ranks.values()],
            culprit=None,
            why=f"rank {r.rank} built its state at {describe_site(r.state['site'])} with num_processes=1 "
                f"({r.state['distributed_type']}) although WORLD_SIZE={self.world_size}: every process trains "
                f"alone on the whole dataset",
            hint="on CPU, use `PartialState(cpu=True)` / `Accelerator(cpu=True)` or build the Accelerator before any "
                 "PartialState (ACCELERATE_USE_CPU is read by AcceleratorState only)",
        )

    def _exception(self) -> Finding | None:
        raised = [r for r in self.ranks.values() if r.exception]
        if not raised:
            return None
        causes = [r for r in raised if not _is_victim(r.exception)]
        if not causes:
            # every exception says "the peer went away": look for the rank that did, and give
            # a dying peer a moment to show up before blaming a victim
            self.note_deaths()
            # a rank of another host is seen dead only when its node reader says so: longer on its way
            wait = REMOTE_DEATH_S if self._alive_elsewhere() else 4 * self.settle
            if any(r.died for r in self.ranks.values()) or time.time() - min(r.exception["t"] for r in raised) < wait:
                return None
            causes = raised
        first = min(causes, key=lambda r: r.exception["t"])
        exc = first.exception
        if time.time() - exc["t"] < self.settle:
            return None  # let the peers' buffered events arrive, to say where they wait
        text = exc["message"] + " " + exc.get("cause", "")
        if "DistributedOperationException" in exc["type"] or "shape mismatch" in text:
            return self._shape_finding_from_exception(first)
        waiting = [x for x in self.ranks.values() if x.current is not None and x is not first]
        blocked = _waiting_text(waiting) or "the other ranks stop at their next collective"
        return Finding(
            kind="rank_exception",
            title=f"rank {first.rank} raised {exc['type'].split('.')[-1]}: {exc['message'][:200]}",
            seq=exc.get("seq"),
            rows=[self._row(x) for x in self.ranks.values()],
            culprit=first.rank,
            why=f"rank {first.rank} raised at {describe_site(exc.get('site'))} before its next collective; {blocked}",
            hint="fix the exception; the other ranks are victims, not causes",
            extra={"traceback": exc.get("traceback", "")},
            detected_after=time.time() - exc["t"],
        )

    def _alive_elsewhere(self) -> bool:
        """Some rank of another host has not ended, as far as this watcher knows."""
        return any(r.host and r.host != self.host and not (r.finished or r.exception or r.died)
                   for r in self.ranks.values())

    def _shape_finding_from_exception(self, first: RankState) -> Finding:
        seqs = [r.current["seq"] for r in self.ranks.values() if r.current]
        seq = min(seqs) if seqs else None
        return Finding(
            kind="shape_mismatch",
            title="tensors of different shapes across ranks (Accelerate debug mode)",
            seq=seq,
            rows=[self._row(x, seq) for x in self.ranks.values()],
            culprit=None,
            why=(first.exception.get("cause") or first.exception["message"]).strip()[:600],
            hint="pad first (`accelerator.pad_across_processes`) or make every rank produce the same shape",
        )

    def _death(self) -> Finding | None:
        self.note_deaths()
        dead = [r for r in self.ranks.values() if r.died]
        if not dead:
            return None
        first = min(dead, key=lambda r: r.died_at or 0)
        if time.time() - (first.died_at or 0) < self.settle:
            return None
        for r in dead:  # the peers' events that show a collective completed may arrive after the death
            self.settle_dead(r)
        waiting = [x for x in self.ranks.values() if x.current is not None and not x.died]
        blocked = _waiting_text(waiting) or "no peer was inside a collective yet"
        last = first.last_completed()
        inside = first.current  # from its ring when the crash cut off its last batch
        if inside is not None:
            shapes = _args_text(inside.get("args")) or (f"a list of {inside['length']}" if "length" in inside else "")
            where = f"inside `{inside['op']}({shapes})` at {describe_site(inside['site'])} (collective #{inside['seq']})"
        else:
            where = f"after {first.count} collectives" + (
                f", the last `{last['op']}` at {describe_site(last['site'])}" if last else "")
        return Finding(
            kind="rank_died",
            title=f"rank {first.rank} (pid {first.pid}{self._on_host(first)}) died without an exception"
                  + (f" inside `{inside['op']}`" if inside is not None else ""),
            seq=inside["seq"] if inside is not None else first.count,
            rows=[self._row(x) for x in self.ranks.values()],
            culprit=first.rank,
            why=f"rank {first.rank} exited abruptly (killed, os._exit, or a crash in native code) {where}; {blocked}",
            hint="look for the OOM killer (dmesg), os._exit/sys.exit on one rank, or a native crash",
        )

    def _on_host(self, r: RankState) -> str:
        """``" on node1"`` where the ranks span several hosts (there, a pid alone names no process)."""
        hosts = {x.host for x in self.ranks.values() if x.host}
        return f" on {r.host}" if r.host and len(hosts) > 1 else ""

    def _mismatch(self) -> Finding | None:
        for seq in sorted(self._unchecked):
            present = [r for r in self.ranks.values() if seq in r.collectives]
            if len(present) < 2:
                continue
            finding = self._mismatch_at(seq, present)
            if finding is not None:
                if self._still_coming(seq, present):
                    self._awaiting = True
                    return None
                return finding
            if len(present) == self.world_size:
                self._checked.add(seq)
                self._unchecked.discard(seq)
        return None

    def _still_coming(self, seq: int, present: list[RankState]) -> bool:
        """Whether to wait for ranks that have not reached ``seq`` yet before reporting a mismatch
        there. Two ranks that disagree are enough to know; the report waits up to ``settle``
        seconds (from when the watcher first saw them disagree) for the others, which arrive in
        the next batches, so that it groups every rank by where it really is instead of showing
        the latecomers at their previous collective."""
        seen = self._disagreed.setdefault(seq, time.time())
        if time.time() - seen >= self.settle:
            return False
        return any(seq not in r.collectives and not (r.finished or r.died or r.exception)
                   for r in self.ranks.values())

    def _mismatch_at(self, seq: int, present: list[RankState]) -> Finding | None:
        """A divergence, length or shape mismatch among the ranks ``present`` at ``seq``."""
        kinds = {r.collectives[seq]["op_kind"] for r in present}
        if len(kinds) > 1:
            return self._divergence(seq, present)
        kind = kinds.pop()
        ops = {r.collectives[seq]["op"] for r in present}
        lengths = {r.collectives[seq].get("length") for r in present}
        if kind == C.BROADCAST_OBJ and len(lengths) > 1:
            return self._length_mismatch(seq, present)
        if kind in SHAPE_CHECKED and not ops & SHAPE_FREE_OPS:
            shapes = {repr(_tensors(r.collectives[seq]["args"])) for r in present}
            if len(shapes) > 1:
                return Finding(
                    kind="shape_mismatch",
                    title=f"`{present[0].collectives[seq]['op']}` with different shapes, dtypes or devices across "
                          f"ranks",
                    seq=seq,
                    rows=[self._row(x, seq) for x in self.ranks.values()],
                    culprit=None,
                    why="a collective needs the same shape and dtype on every rank (and, under NCCL, every "
                        "tensor on the rank's GPU); gloo aborts, NCCL may return truncated or uninitialised data",
                    hint="pad first with `accelerator.pad_across_processes(...)`, or use `gather_object` for "
                         "ragged data",
                    detected_after=time.time() - min(r.collectives[seq]["entered"] for r in present),
                )
        return None

    def _length_mismatch(self, seq: int, present: list[RankState]) -> Finding:
        op = present[0].collectives[seq]["op"]
        lengths = grouped_phrases(((r.rank, f"{r.collectives[seq].get('length')} at "
                                            f"{describe_site(r.collectives[seq]['site'])}") for r in present),
                                  between=": ", joiner=", ")
        died = [r.rank for r in present if r.died]
        return Finding(
            kind="shape_mismatch",
            title=f"`{op}` with object lists of different lengths across ranks",
            seq=seq,
            rows=[self._row(x, seq) for x in self.ranks.values()],
            culprit=None,
            why=f"every rank must pass a list of the same length (the receivers' length is how many objects "
                f"they expect); lengths: {lengths}"
                + (f"; {ranks_label(died)} then died inside it "
                   f"(gloo aborts the process on the size mismatch)" if died else ""),
            hint="give every rank a list of the same length (e.g. `[None] * n` on the receivers)",
            detected_after=time.time() - min(r.collectives[seq]["entered"] for r in present),
        )

    def _divergence(self, seq: int, present: list[RankState]) -> Finding:
        ops = {r.rank: r.collectives[seq] for r in present}
        trigger = any(op["op"] == "accelerator.check_trigger" for op in ops.values())
        arrival = min(op["entered"] for op in ops.values())
        classification = _classify(seq, present)
        return Finding(
            kind="trigger_misuse" if trigger else "divergence",
            title=f"{'check_trigger() reached by some ranks only' if trigger else 'ranks called different collectives'}"
                  f" at collective #{seq}",
            seq=seq,
            rows=[self._row(x, seq) for x in self.ranks.values()],
            culprit=None,
            why="ranks must call the same collectives in the same order; " + classification,
            hint="call `check_trigger()` on every rank at the same point" if trigger else
                 "move the collective out of the rank-dependent branch (compute on every rank, use the result under "
                 "the guard)",
            detected_after=time.time() - arrival,
        )

    def _left_early(self) -> Finding | None:
        for done in (r for r in self.ranks.values() if r.finished):
            for other in self.ranks.values():
                if other.current is not None and other.current["seq"] >= done.count:
                    last = done.last_completed()
                    return Finding(
                        kind="trigger_misuse",
                        title=f"rank {done.rank} left after {done.count} collectives while rank {other.rank} "
                              f"continues",
                        seq=other.current["seq"],
                        rows=[self._row(x) for x in self.ranks.values()],
                        culprit=done.rank,
                        why=f"rank {done.rank} finished"
                            + (f" (its last collective: `{last['op']}` at {describe_site(last['site'])})" if last else "")
                            + f"; rank {other.rank} waits in `{other.current['op']}` at "
                              f"{describe_site(other.current['site'])}, which rank {done.rank} will never call. A "
                              f"rank-local `break`/`return` left the loop on one rank only",
                        hint="stop every rank together: `accelerator.set_trigger()` where the condition holds, then "
                             "`if accelerator.check_trigger(): break` on every rank",
                        detected_after=time.time() - other.current["entered"],
                    )
        return None

    def _hang(self) -> Finding | None:
        limit = self.timeout()
        now = time.time()
        if any(r.current is not None and now - r.current["entered"] >= limit for r in self.ranks.values()):
            # before blaming: a rank whose watchdog thread cannot run (one holding the GIL) never
            # sent the LEAVE of its last collective, which its ring (same host) holds
            for r in self.ranks.values():
                if not (r.finished or r.exception or r.died):
                    self.recover_from_ring(r)
        for r in self.ranks.values():
            if r.current is None or now - r.current["entered"] < limit:
                continue
            seq = r.current["seq"]
            outliers = [x for x in self.ranks.values() if x.current is None or x.current["seq"] != seq]
            self.request_stacks()
            culprit = outliers[0].rank if len(outliers) == 1 else None
            if outliers:
                doing = grouped_phrases((x.rank, *self._activity(x)) for x in outliers)
                why = (f"rank {r.rank} has waited {now - r.current['entered']:.1f} s in `{r.current['op']}` at "
                       f"{describe_site(r.current['site'])}; {doing}")
            else:
                why = f"every rank has waited {now - r.current['entered']:.1f} s inside collective #{seq}"
            return Finding(
                kind="hang",
                title=f"collective #{seq} `{r.current['op']}` has not completed in {limit:.0f} s",
                seq=seq,
                rows=[self._row(x, seq) for x in self.ranks.values()],
                culprit=culprit,
                why=why,
                hint="the outlier rank is the cause: make it reach the same collective, or move the collective out of "
                     "the branch that skips it",
                detected_after=now - r.current["entered"],
            )
        return None

    # -- presentation ---------------------------------------------------------------------------------
    def _activity(self, r: RankState) -> tuple[str, str]:
        """What the rank is doing, said of one rank and of several."""
        if r.finished:
            return "has finished", "have finished"
        if r.current is not None:
            where = (" (queued on its GPU: the Python code has moved on)", " (queued on their GPUs: the Python code "
                     "has moved on)") if r.current.get("on_device") else ("", "")
            at = f"in `{r.current['op']}` at {describe_site(r.current['site'])}"
            return f"is {at}{where[0]}", f"are {at}{where[1]}"
        site = (r.stack or {}).get("site")
        at = f" at {describe_site(site)}" if site else ""
        if not site and r.unresponsive:
            last = r.last_completed()
            since = f" since `{last['op']}` at {describe_site(last['site'])}" if last else ""
            at = f"{since} (its Python stack did not answer: native code holding the GIL, or a starved process)"
        return f"is computing{at}", f"are computing{at}"

    def _row(self, r: RankState, seq: int | None = None) -> dict[str, Any]:
        op = r.collectives.get(seq) if seq is not None else None
        op = op or r.current
        state = ("finished" if r.finished else "raised" if r.exception else "died" if r.died else
                 "in collective" if r.current is not None else "computing")
        site = op["site"] if op else None
        if site is None and r.exception:
            site = r.exception.get("site")
        if site is None:
            site = (r.stack or {}).get("site")
        last = r.last_completed()
        return {
            "rank": r.rank,
            "pid": r.pid,
            "host": r.host,
            "state": state,
            # NCCL: the rank's GPU is still in the collective although its Python code has moved on
            "on_device": bool(r.current is not None and r.current.get("on_device")),
            "seq": op["seq"] if op else None,
            "op": op["op"] if op else None,
            "args": op["args"] if op else None,
            "site": site,
            "last_completed": {"seq": last["seq"], "op": last["op"], "site": last["site"]} if last else None,
            "tail": [{k: c[k] for k in ("seq", "op", "site", "args")} for _, c in sorted(r.collectives.items())[-8:]],
            "stack": (r.stack or {}).get("stack"),
        }

    def request_stacks(self, wait: float = 1.0) -> None:
        """Ask every live rank for its Python stack (answered by the rank's watchdog thread)."""
        try:
            self.store.set(P.DUMP_REQUEST, str(time.time()))
            self.store.set(P.SIGNAL, "1")  # after the request: the ranks' watchdogs look for it now
        except Exception:
            return
        self._stacks_requested = time.time()
        deadline = time.time() + wait
        missing = {r for r, s in self.ranks.items() if not (s.finished or s.died)}
        while missing and time.time() < deadline:
            for rank in list(missing):
                key = P.STACK_KEY.format(rank=rank)
                try:
                    if self.store.check([key]):
                        self.ranks[rank].stack = P.decode(self.store.get(key))[0]
                        missing.discard(rank)
                except Exception:
                    missing.discard(rank)
            time.sleep(0.05)
        for rank in missing:
            r = self.ranks[rank]
            r.unresponsive = bool(r.pid) and not (r.exception or r.died)

    def fill_rows_with_stacks(self) -> None:
        if self.finding is None:
            return
        if time.time() - self._stacks_requested > 1.0:  # a hang asked just now: a rank that did not answer will not
            self.request_stacks()
        self.finding.rows = [self._refresh(row) for row in self.finding.rows]
        self.finding.extra["stack_groups"] = self.stack_groups()

    def collect_flight_recorder(self, report_path: str) -> None:
        """At a verdict that leaves live ranks inside a collective: where NCCL itself says each rank
        is, from its flight recorder (:mod:`runtime_checks.flight_recorder`), into the finding's
        ``extra["flight_recorder"]``; the raw dumps next to the report. Call after the stacks were
        asked for (their answers say which ranks can dump). Nothing under gloo."""
        if self.finding is None or not any(r.current is not None and not (r.died or r.finished)
                                           for r in self.ranks.values()):
            return
        from . import flight_recorder

        section = flight_recorder.section(self, report_path)
        if section is not None:
            self.finding.extra["flight_recorder"] = section

    def stack_groups(self) -> list[dict[str, Any]]:
        """Ranks grouped by where their Python stack stands, in the order of the report's groups
        (:mod:`runtime_checks.groups`): the culprit's group, then the smaller groups first (in a
        hang the majority are the victims, a rank alone in its group is the outlier)."""
        groups: dict[tuple, list[int]] = {}
        for rank, r in sorted(self.ranks.items()):
            site = (r.stack or {}).get("site")
            key = (site["file"], site["line"]) if site else ("?", 0)
            groups.setdefault(key, []).append(rank)
        items = list(groups.items())
        order, _ = order_groups([ranks for _, ranks in items], self.finding.culprit if self.finding else None)
        return [{"ranks": ranks, "site": {"file": f, "line": line} if f != "?" else None}
                for (f, line), ranks in (items[i] for i in order)]

    def _refresh(self, row: dict) -> dict:
        r = self.ranks[row["rank"]]
        row["stack"] = (r.stack or {}).get("stack")
        if row["site"] is None and r.stack:
            row["site"] = r.stack.get("site")
        return row


VICTIM_MESSAGES = ("Connection closed by peer", "Connection reset by peer", "remote worker", "Broken pipe",
                   "NCCL communicator was aborted", "Socket Timeout")


def _is_victim(exception: dict) -> bool:
    """An error a rank gets because a peer died or left, not a cause of its own."""
    text = exception.get("message", "") + exception.get("cause", "")
    return any(m in text for m in VICTIM_MESSAGES)


def _tensors(args: Any) -> Any:
    if isinstance(args, dict) and "shape" in args:
        return args
    if isinstance(args, list):
        return [_tensors(a) for a in args if isinstance(a, (dict, list))]
    if isinstance(args, dict):
        return {k: _tensors(v) for k, v in args.items() if isinstance(v, (dict, list))}
    return None


def _classify(seq: int, present: list[RankState]) -> str:
    """Skipped, extra or reordered, by aligning what each group of ranks (same op at the same
    line) did around ``seq``; a rank stands for its group."""
    groups: dict[tuple, list[RankState]] = {}
    for r in sorted(present, key=lambda r: r.rank):
        op = r.collectives[seq]
        groups.setdefault((op["op"], describe_site(op["site"])), []).append(r)
    members = list(groups.values())
    label = {id(g[0]): ranks_label([r.rank for r in g]) for g in members}
    parts = []
    for group_a in members:
        for group_b in members:
            if group_a is group_b:
                continue
            a, b = group_a[0], group_b[0]
            op_a, nxt_b = a.collectives.get(seq), b.collectives.get(seq + 1)
            op_b, nxt_a = b.collectives.get(seq), a.collectives.get(seq + 1)
            if nxt_a and nxt_b and nxt_a["op_kind"] == op_b["op_kind"] and nxt_b["op_kind"] == op_a["op_kind"]:
                return f"{label[id(a)]} and {label[id(b)]} made the same two collectives in opposite order (reordered)"
            if nxt_b and nxt_b["op_kind"] == op_a["op_kind"]:
                parts.append(f"{label[id(b)]} made an extra `{op_b['op']}` (or {label[id(a)]} skipped it)")
    if parts:
        return parts[0]
    sites = grouped_phrases(((r.rank, f"in `{r.collectives[seq]['op']}` at "
                                      f"{describe_site(r.collectives[seq]['site'])}") for r in present), joiner=", ")
    return f"at the same point {sites}: one of them skipped a collective or made an extra one"


def _waiting_text(waiting: list[RankState]) -> str:
    """'rank 3 waits in `x` at f.py:9; ranks 0-2 (3) wait in `y` at f.py:12'."""
    return grouped_phrases((x.rank, f"waits in `{x.current['op']}` at {describe_site(x.current['site'])}",
                            f"wait in `{x.current['op']}` at {describe_site(x.current['site'])}") for x in waiting)


def process_alive(pid: int) -> bool:
    """Running and not a zombie (a dead rank stays a zombie until the launcher reaps it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True


def stop_processes(pids: list[int], grace: float = 2.0) -> None:
    """SIGTERM, up to ``grace`` seconds for them to go, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while wait and time.time() < deadline and any(process_alive(p) for p in pids):
            time.sleep(0.05)
