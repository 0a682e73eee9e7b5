"""Problems found while loading or planning a spec: values with a level and a
location, collected so one run reports all of them; only the CLI picks the exit code."""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def printable(text: str) -> str:
    """`text` with control and format characters escaped (\\x1b, \\r, \\u202e): spec keys,
    file names and server answers are printed on terminals, where an escape sequence
    or a carriage return could erase or forge lines."""
    if text.isprintable():
        return text
    out = []
    for c in text:
        if c.isprintable():
            out.append(c)
        elif c in _NAMED:
            out.append(_NAMED[c])
        elif ord(c) < 0x100 and unicodedata.category(c) == "Cc":
            out.append(f"\\x{ord(c):02x}")
        elif unicodedata.category(c)[0] in "CZ":  # other controls, bidi overrides, line separators
            out.append(f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}")
        else:
            out.append(c)
    return "".join(out)


@dataclass(frozen=True)
class Problem:
    """One problem of a spec: its message and where (file, line, column, field)."""

    message: str
    file: str = "<spec>"
    line: int | None = None
    column: int | None = None
    field: str = ""
    level: str = "error"

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        field = f" {self.field}:" if self.field else ""
        return printable(f"{where}: {self.level}:{field} {self.message}")


class SpecError(Exception):
    """One or more problems that stop a build."""

    def __init__(self, problems: list[Problem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems
        # what is left of the spec without the values that have problems (a loader
        # SpecDocument), so later stages can still check it; None when nothing is usable
        self.partial: object | None = None
