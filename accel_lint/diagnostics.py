"""The records that flow from the engine to the reporters."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One finding, with 1-based line and column (as ruff and editors expect)."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    severity: str
    message: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FileError:
    """A file the linter could not check (unreadable, binary, undecodable) or an internal error."""

    path: str
    message: str
    internal: bool = False
    detail: str = ""  # the traceback of an internal error, printed with --verbose


@dataclass(frozen=True)
class Notice:
    """A file deliberately not checked (e.g. larger than max-file-size): printed, never silent,
    and not a failure."""

    path: str
    message: str
