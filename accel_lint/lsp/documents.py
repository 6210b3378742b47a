"""What the editor has open, as the engine sees it: a file's text or a notebook's cells, and the
bytes that are linted for each. Immutable snapshots: a lint runs on one while edits go on."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import unquote, urlparse

# PEP 263: a coding declaration in a comment on one of the first two lines
_CODING = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.MULTILINE)
# the line ends of Python and LSP alike (str.splitlines also splits at form feeds and others)
LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    return LINE_END.split(text)


@dataclass(frozen=True)
class Cell:
    uri: str
    text: str
    code: bool  # a code cell (linted); markdown cells only keep the numbering


@dataclass(frozen=True)
class Document:
    """An open file (``cells is None``) or notebook, at one version."""

    uri: str
    version: int | None
    text: str = ""
    cells: tuple[Cell, ...] | None = None
    path: str = field(init=False, default="")

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", uri_to_path(self.uri))

    @property
    def is_notebook(self) -> bool:
        return self.cells is not None

    @cached_property
    def encoded(self) -> tuple[bytes, str | None]:
        """(bytes to lint, why they could not be produced). A file is written in the encoding its
        coding cookie declares, so that the engine decodes the editor's text back exactly; a
        notebook is nbformat JSON of its cells (code cells joined into one program as on the
        command line, markdown cells keeping Jupyter's cell numbers)."""
        if self.cells is not None:
            cells = [{"cell_type": "code" if c.code else "markdown", "metadata": {}, "source": c.text.splitlines(True),
                      **({"execution_count": None, "outputs": []} if c.code else {})} for c in self.cells]
            data = {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4,
                    "nbformat_minor": 5}
            return json.dumps(data, indent=1, ensure_ascii=False).encode("utf-8", "surrogatepass"), None
        head = "\n".join(self.text.split("\n", 2)[:2])
        m = _CODING.search(head)
        encoding = m.group(1) if m else "utf-8"
        try:
            return self.text.encode(encoding), None
        except LookupError:
            return self.text.encode("utf-8", "surrogatepass"), None  # the engine names the unknown encoding
        except UnicodeEncodeError as exc:
            bad = self.text[exc.start:exc.end]
            line = self.text.count("\n", 0, exc.start) + 1
            return b"", f"cannot encode {bad!r} on line {line} as {encoding} (the file's declared encoding); not checked"

    @cached_property
    def digest(self) -> str:
        data, problem = self.encoded
        return hashlib.blake2b(data + (problem or "").encode(), digest_size=16).hexdigest()

    def lines(self, cell: int | None = None) -> list[str]:
        """The text's lines (of the 1-based ``cell`` in a notebook), without line ends."""
        if self.cells is None:
            return split_lines(self.text)
        if cell is None or not 1 <= cell <= len(self.cells):
            return []
        return split_lines(self.cells[cell - 1].text)

    def cell_uri(self, cell: int | None) -> str:
        if self.cells is None or cell is None or not 1 <= cell <= len(self.cells):
            return self.uri
        return self.cells[cell - 1].uri

    def cell_index(self, uri: str) -> int | None:
        """The 1-based number of the cell with this URI."""
        for number, cell in enumerate(self.cells or (), 1):
            if cell.uri == uri:
                return number
        return None


def uri_to_path(uri: str) -> str:
    """The file system path of a ``file:`` URI; ``""`` for anything else (an unsaved buffer)."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return ""
    path = unquote(parsed.path)
    if re.match(r"^/[A-Za-z]:", path):  # file:///C:/x.py
        path = path[1:]
    return path
