"""Records every stage shares for what goes wrong: where in a spec (`Span`), and `PimdslError`, the
one root of every error pimdsl reports to a user (STYLE.md 16, 18).

An error is a problem of the input (a spec, a trace, a requests file, the machine it runs on), never
a bug: `pimc` prints it as `path:line:col: error: message` with the source line and the hint, and
exits 1. A mistake found late (a zero rate seen only when an op is timed) still carries the span of
the spec text that caused it where the stage knows it; without one it names the file.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Span:
    """A place in a source file (1-based line and column)."""
    path: str
    line: int
    col: int
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


NOWHERE = Span("<command line>", 0, 0)


class PimdslError(Exception):
    """Root of pimdsl's errors: `message`, `span` (None: the whole input), `hint`, and `others`,
    further problems found in the same run and reported with this one (all errors at once)."""

    def __init__(self, message: str = "", span: Span | None = None, hint: str | None = None, others=()):
        super().__init__(message)
        self.message, self.span, self.hint, self.others = message, span, hint, tuple(others)

    def all(self) -> tuple["PimdslError", ...]:
        return (self, *self.others)


class CompileError(PimdslError):
    """A problem of the spec found while compiling a step; `others`: further problems found in the
    same pass, reported with this one (all in one run)."""
