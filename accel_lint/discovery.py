"""Paths on the command line -> the Python files to lint."""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from collections.abc import Iterator

from .config import Config


def discover(paths: list[str], config: Config, force_exclude: bool = False) -> tuple[list[Path], list[str]]:
    """Files to lint (sorted, unique) and a message for each path that does not exist.

    Directories are walked without following symlinks (no loops); excluded names are
    pruned. A file named explicitly is linted even if it would be excluded in a walk,
    unless ``force_exclude`` (what pre-commit hooks want: they pass every changed file).
    """
    files: dict[str, Path] = {}
    missing: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            for found in _walk(path, config):
                files.setdefault(os.path.normpath(found), found)
        elif path.exists() or path.is_symlink():
            if force_exclude and _excluded_with_parents(path, config):
                continue
            files.setdefault(os.path.normpath(path), path)
        else:
            missing.append(f"{raw}: no such file or directory")
    return sorted(files.values(), key=lambda p: p.as_posix()), missing


def _walk(root: Path, config: Config) -> Iterator[Path]:
    for folder, dirs, names in os.walk(root):
        base = Path(folder)
        dirs[:] = sorted(d for d in dirs if not config.is_excluded(base / d))
        for name in sorted(names):
            if any(fnmatch.fnmatch(name, pattern) for pattern in config.include):
                path = base / name
                if not config.is_excluded(path):
                    yield path


def _excluded_with_parents(path: Path, config: Config) -> bool:
    return any(config.is_excluded(p) for p in (path, *path.parents) if p.name)
