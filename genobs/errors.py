"""Problems found while loading or planning a spec: values with a level and a
location, collected so one run reports all of them; only the CLI picks the exit code."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
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
        return f"{where}: {self.level}:{field} {self.message}"


class SpecError(Exception):
    """One or more problems that stop a build."""

    def __init__(self, problems: list[Problem]):
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = problems
        # what is left of the spec without the values that have problems (a loader
        # SpecDocument), so later stages can still check it; None when nothing is usable
        self.partial: object | None = None
