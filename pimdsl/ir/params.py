"""A mapping param's declaration: what a run loop reads under `mapping.params`, and of what kind.

Each loop (and pass) that reads mapping params declares them, `PARAMS = {"agent_load_bandwidth":
Param(BANDWIDTH, "> 0", "one agent's load rate"), ...}`: a dimension of `units.py` (a bandwidth, a
size, a time; `NONE` for a plain number), `WHOLE` (a whole number), `NAME` (a block or a word) or
`FILE` (a data file); a range (`> 0`, `>= 0`, `>= 1`, `LO..HI` inclusive); and words accepted beside a
number (`auto`) or, for a NAME, the only words allowed. `pimc check` and every run check each given
param against its declaration (params.py at the package root), so `agent_load_bandwidth = 1.2 s` or
`ilp_groups = inf` is a located error, never a run with a meaningless number.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import units as U

WHOLE = "a whole number"
NAME = "a name"
FILE = "a file name in quotes"


@dataclass(frozen=True)
class Param:
    kind: object                  # a dimension (units.BANDWIDTH, ...), WHOLE, NAME or FILE
    range: str = ""               # "> 0", ">= 0", ">= 1" or "LO..HI" (inclusive); "" for any
    meaning: str = ""
    words: tuple[str, ...] = ()   # words allowed beside a number (`auto`); for a NAME, the only ones

    def __str__(self) -> str:
        return self.meaning

    def expected(self) -> str:
        what = U.dimension_name(self.kind) if isinstance(self.kind, tuple) else self.kind
        if self.kind == U.NONE:
            what = "a plain number"
        if self.range:
            what += f" {self.range}"
        if self.words and self.kind != NAME:
            what += " or " + " or ".join(self.words)
        return what

    def problem(self, value, dims) -> str | None:
        """Why `value` (SI, with dimension `dims`; a str for a word or name) does not fit, or None."""
        if isinstance(value, str):
            if self.kind in (NAME, FILE):
                if self.words and value not in self.words:
                    return f"'{value}' is not one of " + ", ".join(self.words)
                return None
            if value in self.words:
                return None
            return f"{self.expected()} was expected, not the name '{value}'"
        if self.kind in (NAME, FILE) or isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{self.expected()} was expected, not {value!r}"
        want = U.NONE if self.kind == WHOLE else self.kind
        if (dims or U.NONE) != want:
            return f"{self.expected()} was expected, this is {U.dimension_name(dims or U.NONE)}"
        if not math.isfinite(value):
            return f"{self.expected()} was expected, not {value}"
        if self.kind == WHOLE and not float(value).is_integer():
            return f"{self.expected()} was expected, not {value:g}"
        return None if _within(self.range, value) else f"{self.expected()} was expected, not {value:g}"


def _within(range_: str, value: float) -> bool:
    if not range_:
        return True
    if ".." in range_:
        low, high = (float(x) for x in range_.split(".."))
        return low <= value <= high
    op, bound = range_.split()
    return value > float(bound) if op == ">" else value >= float(bound)
