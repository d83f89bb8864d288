"""What is wrong with a file or a request, one printable line each (standard library only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from meshctl.errors import InvalidInput

Loc = tuple[str | int, ...]  # where in a document: ("spec", "pools", 0, "region")


def dotted(loc: Loc) -> str:
    """``("spec", "pools", 0, "region")`` -> ``spec.pools[0].region``."""
    out = ""
    for seg in loc:
        out += f"[{seg}]" if isinstance(seg, int) else (f".{seg}" if out else str(seg))
    return out


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with one file: where, which field, what was expected."""

    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return (
            f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"
        )


class InvalidFileError(InvalidInput):
    """One or more problems with input files; nothing was written (exit 2, each problem on a
    line of its own)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("\n".join(str(p) for p in problems))
        self.problems = list(problems)
