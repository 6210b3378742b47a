"""``[tool.accel-lint]`` in the nearest ``pyproject.toml``, merged with CLI flags into one frozen Config."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from .config_keys import KEYS

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

DEFAULT_EXCLUDES = (
    ".git", ".hg", ".svn", ".venv", "venv", ".env", "env", "build", "dist", "__pycache__", ".tox", ".nox",
    "node_modules", ".mypy_cache", ".pytest_cache", ".ruff_cache", ".accel_lint_cache", "*.egg-info", "site-packages",
)
KNOWN_KEYS = frozenset(KEYS)  # one list of keys, documented there (docs/configuration.md is made from it)
DEFAULT_MAX_FILE_SIZE = 2 * 1024 * 1024  # libcst needs about 1 GB for one huge generated file
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]i?[bB]?|[bB])?\s*$")


from .library import parse_extension  # noqa: E402  (after the constants it does not need)


class ConfigError(Exception):
    """A configuration file or flag the linter cannot use (exit code 2)."""


def load_accelerate_configs(paths: list[Path]) -> tuple:
    from .accelerate_config import AccelerateConfigError, load

    try:
        return tuple(load(Path(p)) for p in paths)
    except AccelerateConfigError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class Config:
    select: tuple[str, ...] = ("AL",)
    ignore: tuple[str, ...] = ()
    exclude: tuple[str, ...] = DEFAULT_EXCLUDES
    include: tuple[str, ...] = ("*.py", "*.ipynb")  # what a directory walk picks up (as ruff's `include`)
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    accelerator_names: tuple[str, ...] = ()
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    cache_dir: Path | None = None  # None: no cache
    accelerate_configs: tuple = ()  # accelerate_config.Backend per --accelerate-config file
    library_extension: tuple = ()  # the project's rows for the library table (extend-writes, ...)
    docs_url: str | None = None  # base URL of the docs site; None: ACCEL_LINT_DOCS_URL or the local build
    root: Path = field(default_factory=Path.cwd)
    # files the project runs only as one process (``launches.single_process_scripts``): the
    # rules whose harm needs several processes do not report there (applied after the cache)
    single_process_files: frozenset = frozenset()
    # of those, the files of a project that shows only plain `python` runs of them and no
    # launch of several processes anywhere (``launches.one_process_project_scripts``): one
    # process even when written for several
    one_process_project_files: frozenset = frozenset()
    # files every launch of which the project runs under DeepSpeed (``launches.deepspeed_scripts``):
    # attribute reads on the prepared model are forwarded by DeepSpeed's engine there
    deepspeed_files: frozenset = frozenset()
    # whether the project names FSDP, DeepSpeed ZeRO-3 or XLA anywhere (``launches.names_sharding_backend``);
    # unknown (a file given alone, no project read) counts as naming one
    names_sharding_backend: bool = True
    # files every launch of which runs without fp16 (``launches.fp16_free_scripts``)
    fp16_free_files: frozenset = frozenset()
    # whether the linted code drops DDP's `module.` prefix when it loads state dicts
    # (``launches.strips_module_prefix`` over the linted folders); unknown counts as not
    strips_module_prefix: bool = False

    def is_enabled(self, code: str, path: str | None = None) -> bool:
        """ruff's precedence: the longest matching prefix of select vs ignore wins; ties ignore."""
        ignores = list(self.ignore)
        if path is not None:
            rel = _relative(path, self.root)
            for pattern, codes in self.per_file_ignores:
                if fnmatch.fnmatch(rel, pattern) or fnmatch.fnmatch(Path(rel).name, pattern):
                    ignores.extend(codes)
        sel = max((len(p) for p in self.select if code.startswith(p)), default=-1)
        ign = max((len(p) for p in ignores if code.startswith(p)), default=-1)
        return sel > ign

    def settings_fingerprint(self) -> str:
        """What, besides the enabled rules, changes a file's result (part of the cache key)."""
        return f"{self.accelerator_names}|{self.max_file_size}|{self.library_extension}"

    def is_excluded(self, path: Path) -> bool:
        """A glob of ``exclude`` matches the name, the root-relative path, or a folder above it."""
        name_or_path, folder = _exclude_matchers(self.exclude)
        if name_or_path.match(path.name):
            return True
        rel = _relative(str(path), self.root)
        return bool(name_or_path.match(rel) or folder.match(rel))


@functools.lru_cache(maxsize=16)
def _exclude_matchers(patterns: tuple[str, ...]):
    """One compiled regex per question instead of three fnmatch calls per pattern (the walk
    asks for every file and folder of the tree). fnmatch's own translation, so the semantics
    are fnmatch's."""
    whole = "|".join(f"(?:{fnmatch.translate(p)})" for p in patterns) or "(?!)"
    below = "|".join(f"(?:{fnmatch.translate(p.rstrip('/') + '/*')})" for p in patterns) or "(?!)"
    return re.compile(whole), re.compile(below)


def _relative(path: str, root: Path) -> str:
    """``path`` relative to the configuration root, as a posix string. String operations only:
    this runs for every file of the walk, and resolving symlinks costs syscalls per component."""
    absolute = os.path.abspath(path)
    base = os.path.abspath(root)
    if absolute == base or absolute.startswith(base.rstrip(os.sep) + os.sep):
        return Path(os.path.relpath(absolute, base)).as_posix()
    return Path(path).as_posix()


def parse_size(value: int | str) -> int:
    """Bytes from ``2097152``, ``"2MB"``, ``"500kB"`` or ``"1.5M"`` (k/M/G are powers of 1024)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = _SIZE.match(str(value))
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"max-file-size: expected a size such as 2MB or 500kB, got {value!r}")
    unit = (m.group(2) or "b")[0].lower()
    return int(float(m.group(1)) * {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit])


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` at or above ``start`` that has a ``[tool.accel-lint]`` table."""
    start = start.resolve()
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            try:
                data = tomllib.loads(candidate.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
                raise ConfigError(f"{candidate}: cannot read: {exc}") from exc
            if "accel-lint" in data.get("tool", {}):
                return candidate
    return None


def _codes(value, key: str, source: Path) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{source}: [tool.accel-lint] {key} must be a list of strings")
    return tuple(v.strip().upper() for v in value)


def load_config(pyproject: Path | None) -> Config:
    """Config from a pyproject file (or the defaults when there is none)."""
    if pyproject is None:
        return Config()
    data = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("accel-lint", {})
    unknown = set(data) - KNOWN_KEYS
    if unknown:
        raise ConfigError(f"{pyproject}: unknown [tool.accel-lint] keys: {', '.join(sorted(unknown))}")
    cfg = Config(root=pyproject.parent)
    if "select" in data:
        cfg = replace(cfg, select=_codes(data["select"], "select", pyproject))
    if "extend-select" in data:
        cfg = replace(cfg, select=cfg.select + _codes(data["extend-select"], "extend-select", pyproject))
    if "ignore" in data:
        cfg = replace(cfg, ignore=_codes(data["ignore"], "ignore", pyproject))
    if "exclude" in data:
        cfg = replace(cfg, exclude=tuple(data["exclude"]))
    if "extend-exclude" in data:
        cfg = replace(cfg, exclude=cfg.exclude + tuple(data["extend-exclude"]))
    if "include" in data:
        cfg = replace(cfg, include=tuple(data["include"]))
    if "extend-include" in data:
        cfg = replace(cfg, include=cfg.include + tuple(data["extend-include"]))
    if "per-file-ignores" in data:
        table = data["per-file-ignores"]
        if not isinstance(table, dict):
            raise ConfigError(f"{pyproject}: [tool.accel-lint] per-file-ignores must be a table of glob = [codes]")
        cfg = replace(cfg, per_file_ignores=tuple((k, _codes(v, "per-file-ignores", pyproject)) for k, v in table.items()))
    if "max-file-size" in data:
        cfg = replace(cfg, max_file_size=parse_size(data["max-file-size"]))
    paths = list(data.get("accelerate-configs", [])) + ([data["accelerate-config"]] if "accelerate-config" in data else [])
    if paths:
        cfg = replace(cfg, accelerate_configs=load_accelerate_configs([pyproject.parent / p for p in paths]))
    if "docs-url" in data:
        if not isinstance(data["docs-url"], str) or not data["docs-url"].strip():
            raise ConfigError(f"{pyproject}: [tool.accel-lint] docs-url must be a URL string")
        cfg = replace(cfg, docs_url=data["docs-url"].strip())
    if "accelerator-names" in data:
        cfg = replace(cfg, accelerator_names=tuple(data["accelerator-names"]))
    try:
        cfg = replace(cfg, library_extension=parse_extension(data, f"{pyproject}: [tool.accel-lint]"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return cfg
