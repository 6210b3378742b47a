"""The records that flow from the engine to the reporters."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One finding, with 1-based line and column (as ruff and editors expect).

    ``scope`` (the enclosing function's qualified name) and ``statement`` (the statement's
    source on one line) identify the finding across line shifts, for baselines; ``fix`` is
    the applicability of the rule's fix ("safe"/"unsafe"), if it has one."""

    path: str
    line: int
    column: int
    end_line: int
    end_column: int
    code: str
    name: str
    severity: str
    message: str
    scope: str = field(default="", compare=False)
    statement: str = field(default="", compare=False)
    fix: str | None = field(default=None, compare=False)
    # notebooks: the cell (1-based, among all cells) that ``line``/``end_line`` count in, and the
    # line of the notebook file (its JSON text) that holds that source line
    tag: str = field(default="", compare=False)  # the rule's variant, e.g. AL302's "save_state"
    cell: int | None = field(default=None, compare=False)
    file_line: int | None = field(default=None, compare=False)
    # the facts the finding rests on, as (line, fact): where the object was made, which prepare
    # returned it, the guard and why it differs between ranks
    evidence: tuple[tuple[int, str], ...] = field(default=(), compare=False)

    def sort_key(self) -> tuple:
        return (self.path, self.cell or 0, self.line, self.column, self.code, self.message)

    def to_dict(self) -> dict:
        out = {
            "path": self.path, "line": self.line, "column": self.column, "end_line": self.end_line,
            "end_column": self.end_column, "code": self.code, "name": self.name, "severity": self.severity,
            "message": self.message, "fix": self.fix,
        }
        if self.cell is not None:
            out["cell"] = self.cell
            out["file_line"] = self.file_line
        out["evidence"] = [{"line": line, "fact": fact} for line, fact in self.evidence]
        return out


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
