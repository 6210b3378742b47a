"""Ranks in the same state, reported once: what keeps a verdict short at any scale.

On 64 ranks where 63 wait in the same collective at the same line, the report says so in one
line and puts the odd rank first. Two ranks are in the same state when they agree on state, op,
fingerprint (shapes and dtypes) and line (and, for a rank that has finished, its last
collective). The host is not part of the state: the same state on eight nodes is one group,
which names its nodes.

Order (the first group is the one to read first):

1. the group holding the rank the watcher named as the culprit (a hang's outlier, the rank
   that raised or died): its role is ``"culprit"``;
2. then fewer ranks before more: the minority is the likely culprit, the majority its victims;
3. at equal size, a group whose line sits inside a rank-dependent branch (the linter's model
   of the file) before one whose line does not;
4. then the group holding the lowest rank first (rank 0's `is_main_process` branches are the
   usual cause).

The first group's role is ``"likely culprit"`` when rule 2 or 3 set it apart from the second;
when neither does (two groups of one rank each, no branch) nobody is blamed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MAX_SHOWN = 5  # groups listed in full; beyond that, MAX_SHOWN - 1 and a line for the rest


def rank_ranges(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 5, 8, 9, 10, 11]`` -> ``"0-3,5,8-11"``; two neighbours stay ``"4,5"``."""
    ordered = sorted(set(ranks))
    runs: list[list[int]] = []
    for rank in ordered:
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ",".join(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)) for run in runs)


def ranks_label(ranks: Sequence[int]) -> str:
    """``"rank 5"``, ``"ranks 4,5"`` or ``"ranks 0-30 (31)"`` (the count once a range hides it)."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    text = rank_ranges(ranks)
    return f"ranks {text}" + (f" ({len(ranks)})" if "-" in text else "")


def ranks_cell(ranks: Sequence[int]) -> str:
    """A table cell under a "ranks" header: ``"5"``, ``"4,5"`` or ``"0-30 (31)"``."""
    return ranks_label(ranks).split(" ", 1)[1]


@dataclass(frozen=True)
class RankGroup:
    """Ranks in one state. ``row`` is the first rank's report row (the others' differ only in
    rank, pid, host and stack); ``hosts`` maps each host to its ranks in the group."""

    ranks: tuple[int, ...]
    row: dict[str, Any] = field(compare=False)
    guard: str = ""  # "inside `if ...:` at train.py:20", or "" outside any rank-dependent branch
    hosts: dict[str, list[int]] = field(default_factory=dict, compare=False)
    role: str | None = None  # "culprit", "likely culprit" or None

    @property
    def label(self) -> str:
        return ranks_label(self.ranks)

    def to_json(self) -> dict[str, Any]:
        row = self.row
        return {"ranks": list(self.ranks), "label": rank_ranges(self.ranks), "count": len(self.ranks),
                "role": self.role, "state": row.get("state"), "op": row.get("op"), "args": row.get("args"),
                "site": row.get("site"), "code": row.get("code"), "guard": self.guard or None, "hosts": self.hosts}


def state_key(row: dict[str, Any]) -> tuple:
    """What ranks must share to be one group: state, op, fingerprint, line (and last collective)."""
    site = row.get("site") or {}
    last = (row.get("last_completed") or {}).get("op") if not row.get("op") else None
    return (row.get("state"), row.get("op"), json.dumps(row.get("args"), sort_keys=True, default=str),
            site.get("file"), site.get("line"), last)


def order_groups(groups: list[list[int]], culprit: int | None,
                 guarded: Callable[[int], bool] = lambda index: False) -> tuple[list[int], str | None]:
    """The order of ``groups`` (lists of ranks) by the module's rules, as indices, and the first
    group's role. ``guarded(i)``: whether group ``i``'s line is inside a rank-dependent branch."""
    def rule(i: int) -> tuple:
        return (culprit not in groups[i], len(groups[i]), not guarded(i), min(groups[i]))

    order = sorted(range(len(groups)), key=rule)
    if not order:
        return order, None
    first = rule(order[0])
    if not first[0]:
        return order, "culprit"
    if len(order) > 1 and first[1:3] != rule(order[1])[1:3]:
        return order, "likely culprit"
    return order, None


def group_rows(rows: list[dict[str, Any]], culprit: int | None,
               guard_of: Callable[[dict[str, Any]], str] = lambda row: row.get("guard") or "") -> list[RankGroup]:
    """The report's rows as groups of ranks in the same state, in the module's order.
    ``guard_of(row)`` is asked once per group (it may parse the file)."""
    by_state: dict[tuple, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["rank"]):
        by_state.setdefault(state_key(row), []).append(row)
    members = list(by_state.values())
    guards = [guard_of(same[0]) or "" for same in members]
    order, role = order_groups([[r["rank"] for r in same] for same in members], culprit,
                               lambda i: bool(guards[i]))
    groups = []
    for position, i in enumerate(order):
        hosts: dict[str, list[int]] = {}
        for row in members[i]:
            hosts.setdefault(row.get("host") or "", []).append(row["rank"])
        groups.append(RankGroup(tuple(r["rank"] for r in members[i]), members[i][0], guards[i], hosts,
                                role if position == 0 else None))
    return groups


def hosts_text(group: RankGroup, all_hosts: set[str]) -> str:
    """``" on node3"`` or ``" on 7 nodes"`` where the ranks span several hosts; ``""`` on one."""
    known = {h for h in all_hosts if h}
    if len(known) < 2:
        return ""
    mine = [h for h in group.hosts if h]
    if len(mine) == 1:
        return f" on {mine[0]}"
    return f" on {len(mine)} nodes" if mine else ""


def shown(items: Sequence[Any], limit: int = MAX_SHOWN) -> tuple[Sequence[Any], Sequence[Any]]:
    """The items to list and the rest to summarize: all of them up to ``limit``, else ``limit - 1``
    (the last line then says how many more)."""
    if len(items) <= limit:
        return items, ()
    return items[:limit - 1], items[limit - 1:]


def grouped_phrases(items: Iterable[tuple[int, str] | tuple[int, str, str]], between: str = " ",
                    joiner: str = "; ", limit: int = MAX_SHOWN) -> str:
    """What several ranks do, one phrase per group: ``(rank, singular[, plural])`` items ->
    ``"rank 3 is computing; ranks 0-2,4-7 (7) are in `x` at f.py:9"``. Ranks with the same
    singular phrase form a group; the smaller group first (then the lower rank)."""
    phrases: dict[str, tuple[str, list[int]]] = {}
    for rank, singular, *plural in items:
        phrases.setdefault(singular, (plural[0] if plural else singular, []))[1].append(rank)
    keys = list(phrases)
    order, _ = order_groups([phrases[k][1] for k in keys], None)
    listed, rest = shown([keys[i] for i in order], limit)
    parts = [f"{ranks_label(phrases[k][1])}{between}{k if len(phrases[k][1]) == 1 else phrases[k][0]}"
             for k in listed]
    if rest:
        others = sorted(r for k in rest for r in phrases[k][1])
        parts.append(f"{ranks_label(others)} in {len(rest)} other states (see the report)")
    return joiner.join(parts)
