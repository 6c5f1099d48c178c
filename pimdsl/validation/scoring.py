"""The sentence every validation doc states: how many of its rows are predictions (no number of
the spec fitted on that row) and how many of those are within 10% of the reference."""
from __future__ import annotations

WITHIN = 0.10          # the closeness every doc counts


def within(errors) -> int:
    """How many of `errors` (signed fractions, ours / reference - 1) are within 10%."""
    return sum(abs(e) <= WITHIN for e in errors)


def prediction_count(errors, against: str, rest: str = "") -> str:
    """'N rows are predictions; M of them are within 10% of `against`.' and `rest` (what the
    other rows are, or why every row is a prediction)."""
    errors = list(errors)
    line = f"{len(errors)} rows are predictions; {within(errors)} of them are within 10% of {against}."
    return f"{line} {rest}" if rest else line
