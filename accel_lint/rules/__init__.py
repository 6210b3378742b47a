"""The rule registry: every ``ALnnn_*.py`` module in this package defines one rule."""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import Rule


__all__ = ["Finding", "Rule", "all_rules", "rule_by_code", "rule_table"]


@lru_cache(maxsize=1)
def rule_table() -> tuple[tuple[str, str], ...]:
    """(code, name) of every rule, read from the module names (``AL301_rank_gated_collective``)
    without importing them: a warm run, all cache hits, never needs libcst. A test checks that
    the table matches the classes."""
    out = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("AL") and "_" in info.name:
            code, _, rest = info.name.partition("_")
            out.append((code, rest.replace("_", "-")))
    return tuple(sorted(out))


# Rule.sharding_only_variants and Rule.launch_precision_variants of every rule that has some,
# without importing the rules (the engine filters cached findings with them; a test checks them
# against the classes)
SHARDING_ONLY_VARIANTS: dict[str, frozenset[str]] = {
    "AL103": frozenset({"fixed-precision"}),
}
LAUNCH_PRECISION_VARIANTS: dict[str, frozenset[str]] = {
    "AL103": frozenset({"backend"}),
}


def __getattr__(name: str):
    if name in ("Finding", "Rule"):  # the base classes import libcst: only when asked for
        from . import base

        return getattr(base, name)
    raise AttributeError(name)


@lru_cache(maxsize=1)
def all_rules() -> tuple[type[Rule], ...]:
    """Every registered rule class, sorted by code."""
    found: list[type[Rule]] = []
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("AL"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        from .base import Rule

        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                found.append(obj)
    return tuple(sorted(found, key=lambda r: r.code))


def rule_by_code(code: str) -> type[Rule] | None:
    for rule in all_rules():
        if rule.code == code.upper() or rule.name == code:
            return rule
    return None
